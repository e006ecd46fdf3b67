"""The controller's own CPU per order in a rollout of N orders, without a cluster.

`ai-inference bench` showed the controller's CPU per order growing with N (133 ms at
N=300, 230 ms at N=500: a term in N²) and its passes waiting on the planning lock. This
drives the pass itself (the tests' fake seams: cache, writer, hub; a real SQLite log)
through what a rollout of N orders does to each order — its first passes (spec, class,
model, plan, children), then its claim allocated, its pod on a node and its Deployment
available — one order after another, as a rollout lands, and prints CPU per order, how
it splits between the first and the later passes, and with `--profile` where it goes.
Then one more pass of every order with nothing changed, as the orders' periodic resync
makes (`quiet_pass_ms`: with 500 orders resynced every 300 s, 3 ms a pass would be 0.5 %
of a core while idle); `--profile quiet` profiles those instead.

    PYTHONPATH=. .venv/bin/python benchmarks/rollout.py -n 100 -n 400 [--profile [quiet]]

Per-order CPU that grows with N is work that scales with the cluster, not the order.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.adapters.kubernetes.test_capacity_routing import _serving
from tests.adapters.kubernetes.test_pass import Bed

PER_NODE = 16


def rollout(n: int, profile: cProfile.Profile | None, *, quiet: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        bed = Bed(Path(tmp), a100s=n + n // 10)
        uids = [bed.order(f"llm-{i}") for i in range(n)]
        first = later = 0.0
        if profile is not None and not quiet:
            profile.enable()
        for i, uid in enumerate(uids):
            started = time.process_time()
            bed.settle(uid)
            first += time.process_time() - started
            _serving(bed, uid, f"llm-{i}", f"gpu-{i}")
            started = time.process_time()
            bed.settle(uid)
            later += time.process_time() - started
        if profile is not None:
            profile.disable()
        if profile is not None and quiet:
            profile.enable()
        started = time.process_time()
        for uid in uids:
            bed.reconciler.reconcile(uid)
        resync = time.process_time() - started
        if profile is not None:
            profile.disable()
        bed.log.close()
    return {
        "orders": n,
        "cpu_ms_per_order": round((first + later) * 1000 / n, 2),
        "first_passes_ms": round(first * 1000 / n, 2),
        "later_passes_ms": round(later * 1000 / n, 2),
        "quiet_pass_ms": round(resync * 1000 / n, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, action="append", help="orders (repeat: several runs)")
    parser.add_argument(
        "--profile",
        nargs="?",
        const="rollout",
        choices=["rollout", "quiet"],
        help="cProfile of the largest run's rollout (or of its quiet passes)",
    )
    args = parser.parse_args()
    sizes = sorted(args.n or [100, 400])
    for n in sizes:
        profile = cProfile.Profile() if args.profile and n == sizes[-1] else None
        result = rollout(n, profile, quiet=args.profile == "quiet")
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
        if profile is not None:
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(45)
            sys.stdout.write(out.getvalue())


if __name__ == "__main__":
    main()
