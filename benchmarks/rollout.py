"""The controller's own CPU per order in a rollout of N orders, without a cluster.

`ai-inference bench` showed the controller's CPU per order growing with N (133 ms at
N=300, 230 ms at N=500: a term in N²) and its passes waiting on the planning lock. This
drives the pass itself (the tests' fake seams: cache, writer, hub; a real SQLite log)
through what a rollout of N orders does to each order — its first passes (spec, class,
model, plan, children), then its claim allocated, its pod on a node and its Deployment
available — one order after another, as a rollout lands, and prints CPU per order, how
it splits between the first and the later passes, and with `--profile` where it goes.

    PYTHONPATH=. .venv/bin/python benchmarks/rollout.py -n 100 -n 400 [--profile]

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


def rollout(n: int, profile: cProfile.Profile | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        bed = Bed(Path(tmp), a100s=n + n // 10)
        uids = [bed.order(f"llm-{i}") for i in range(n)]
        first = later = 0.0
        if profile is not None:
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
        bed.log.close()
    return {
        "orders": n,
        "cpu_ms_per_order": round((first + later) * 1000 / n, 2),
        "first_passes_ms": round(first * 1000 / n, 2),
        "later_passes_ms": round(later * 1000 / n, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, action="append", help="orders (repeat: several runs)")
    parser.add_argument("--profile", action="store_true", help="cProfile of the largest run")
    args = parser.parse_args()
    sizes = sorted(args.n or [100, 400])
    for n in sizes:
        profile = cProfile.Profile() if args.profile and n == sizes[-1] else None
        sys.stdout.write(json.dumps(rollout(n, profile)) + "\n")
        sys.stdout.flush()
        if profile is not None:
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(45)
            sys.stdout.write(out.getvalue())


if __name__ == "__main__":
    main()
