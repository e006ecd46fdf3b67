"""Benchmark: what finding the orders a capacity event may affect costs, at N orders.

Every ResourceClaim and ResourceSlice event asks the reconciler which orders a capacity
change may concern (`Reconciler.waiting_for_capacity`); a rollout of N orders makes
about 3N claim events, most while the rollout's orders have pods waiting. This builds
that moment on the pass's fake seams — N orders planned and applied, each with a pod
the scheduler has not placed, at one priority — and prints, as one JSON line, the CPU
milliseconds of one answer beside a look at each order's state for the same answer
(`tests/adapters/kubernetes/test_capacity_routing.py`'s reference), best of `--repeat`.

    PYTHONPATH=. .venv/bin/python benchmarks/routing.py -n 300 -n 1000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.kubernetes.world import BY_UNBOUND
from tests.adapters.kubernetes.test_capacity_routing import _looking_at_each_state, _pod
from tests.adapters.kubernetes.test_pass import Bed
from tests.support import fakes


def _best_ms(call: Callable[[], object], repeat: int, calls: int = 50) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(calls):
            call()
        best = min(best, (time.process_time() - started) / calls)
    return round(best * 1000, 4)


def measure(n: int, repeat: int) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory() as tmp:
        bed = Bed(Path(tmp), a100s=n)
        try:
            uids = [bed.order(f"llm-{i}") for i in range(n)]
            for i, uid in enumerate(uids):
                bed.settle(uid, passes=2)
                fakes.put(bed.world, _pod(uid, f"llm-{i}", node=None))
            for uid in uids:
                bed.settle(uid, passes=1)
            reconciler = bed.reconciler

            def routed() -> set[str]:
                return reconciler.waiting_for_capacity(bed.world.pods.index_values(BY_UNBOUND))

            if routed() != _looking_at_each_state(bed):
                raise SystemExit("the two ways disagree")
            by_sets = _best_ms(routed, repeat)
            each = _best_ms(lambda: _looking_at_each_state(bed), repeat)
        finally:
            bed.log.close()
    return {
        "orders": n,
        "routing_ms": by_sets,
        "looking_at_each_state_ms": each,
        "ratio": round(by_sets / each, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, action="append", help="orders (repeatable; 300, 1000)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for n in args.n or [300, 1000]:
        sys.stdout.write(json.dumps(measure(n, args.repeat)) + "\n")


if __name__ == "__main__":
    main()
