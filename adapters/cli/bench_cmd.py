"""`ai-inference bench` — the controller beside the floor, in one run (adapters/bench/).

Brings up a local control plane (or reuses the one in `--dir`), runs the simulator and
the controller as processes, and prints one JSON line: floor, project, idle, restart
and replay figures. docs/performance.md records what it printed here and how to rerun it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from adapters.cli import options

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench", help="what the controller costs beside the floor, on a local control plane"
    )
    parser.add_argument(
        "--orders", "-n", type=options.positive_int, default=20, help="orders per phase"
    )
    parser.add_argument(
        "--dir", type=Path, default=Path(".ai-inference/bench"), help="state and logs"
    )
    parser.add_argument(
        "--idle", type=float, default=300.0, help="seconds of the idle window (default 300)"
    )
    parser.add_argument("--no-floor", action="store_true", help="skip the bare client's run")
    parser.add_argument("--no-restart", action="store_true", help="skip the restart")
    parser.add_argument("--no-replay", action="store_true", help="skip the replay figures")
    parser.add_argument(
        "--simulator-only",
        action="store_true",
        help="only the bed: N bare pods with a claim each, no controller",
    )
    parser.add_argument(
        "--large-log",
        type=int,
        default=0,
        metavar="EVENTS",
        help="also read one order's history among this many events (SQLite, PostgreSQL)",
    )
    parser.add_argument(
        "--workers",
        type=options.positive_int,
        default=4,
        help="the controller's workers (default 4)",
    )
    parser.add_argument(
        "--rounds",
        type=options.positive_int,
        default=1,
        help="floor and project in turn this many times; the ratios are the medians",
    )
    parser.add_argument("--keep", action="store_true", help="leave the control plane up")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from adapters.bench import BenchOptions, plane_folder, run_bench
    from adapters.cluster.local import ClusterError

    options = BenchOptions(
        orders=args.orders,
        idle_seconds=args.idle,
        floor=not args.no_floor,
        restart=not args.no_restart,
        replay=not args.no_replay,
        workers=args.workers,
        simulator_only=args.simulator_only,
        large_log=args.large_log,
        rounds=args.rounds,
    )
    args.dir.mkdir(parents=True, exist_ok=True)
    folder = args.dir.resolve()
    try:
        result = run_bench(folder, options, keep=args.keep)
    except ClusterError as exc:
        sys.stderr.write(f"bench: {exc}\n")
        return 1
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    if args.keep:  # the plane is in a folder of its own inside --dir
        stop = f"ai-inference cluster down --dir {plane_folder(folder)}"
        sys.stderr.write(f"control plane left up; to stop it: {stop}\n")
    return 0
