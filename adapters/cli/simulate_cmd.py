"""`ai-inference simulate` — GPUs, kubelets, a scheduler and model servers for a local cluster.

Runs the simulator (adapters/simulator, docs/simulator.md) against the API server of a
kubeconfig until interrupted, together with the stand-in HuggingFace hub, whose URL it
prints so the controller can be pointed at it. Used by the demo and by people trying
the project on a machine without GPUs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="stand in for nodes, GPUs, scheduler, kubelets and model servers",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--kubeconfig", type=Path, required=True, help="whom to talk to")
    parser.add_argument(
        "--capacity",
        type=Path,
        default=None,
        help="capacity file, re-read when it changes (default: the shipped capacity-default.yaml)",
    )
    parser.add_argument(
        "--hub-port", type=int, default=0, help="port of the stand-in hub (default: a free one)"
    )
    parser.add_argument("--no-hub", action="store_true", help="do not start the stand-in hub")
    parser.add_argument(
        "--no-catalog", action="store_true", help="do not create the ai-models catalog objects"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        help="seconds between looks at the capacity file and for a missing Secret",
    )
    parser.add_argument(
        "--node-seed",
        type=int,
        default=None,
        help="place each pod on a node drawn with this seed among those where it fits, as a "
        "real scheduler may (default: the first by name, where the planner placed it)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every action")
    parser.set_defaults(run=_run)


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _run(args: argparse.Namespace) -> int:
    # Every `ai-inference` call imports every command module; the simulator pulls in the
    # CEL engine (seconds on a busy machine), so only `simulate` itself pays for it.
    from adapters.cli import waiting
    from adapters.kubernetes import credentials
    from adapters.simulator import capacity
    from adapters.simulator.catalog import CATALOG
    from adapters.simulator.hub import StandInHub
    from adapters.simulator.simulator import Simulator

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        spec_source = args.capacity or capacity.DEFAULT_CAPACITY
        spec = capacity.load_capacity(spec_source)
    except capacity.CapacityError as err:
        sys.stderr.write(f"simulate: {err}\n")
        return 2
    try:
        api = credentials.from_kubeconfig(args.kubeconfig)
    except credentials.CredentialsError as err:
        sys.stderr.write(f"simulate: {err}\n")
        return 2
    hub = None
    if not args.no_hub:
        hub = StandInHub(port=args.hub_port)
        _say(f"stand-in hub: {hub.url}")
    simulator = Simulator(
        api,
        args.capacity if args.capacity is not None else spec,
        catalog=None if args.no_catalog else CATALOG,
        interval=args.interval,
        node_seed=args.node_seed,
    )
    try:
        simulator.start()
        gpus = sum(len(node.gpus) for node in spec.nodes)
        _say(
            f"simulating {len(spec.nodes)} node(s) with {gpus} GPU(s) and "
            f"{len(spec.device_classes)} DeviceClass(es); Ctrl-C stops"
        )
        waiting.until_set()
    except KeyboardInterrupt:
        pass
    finally:
        simulator.stop()
        if hub is not None:
            hub.close()
        api.close()
    return 0
