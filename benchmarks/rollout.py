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

`--lag K` lands each order's allocation K orders late, as a real rollout does: its
scheduler and kubelets trail the plans, so each plan sees up to K other plans waiting
for their claims (demand) and the capacity snapshot changes between plans. `--per-node M`
spreads the devices over nodes of M (the bench's nodes hold 16) instead of one node.

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
from tests.support import fakes
from tests.support.planner_inputs import A100, gpu, resource_slice


def _devices(bed: Bed, count: int, per_node: int) -> list[tuple[str, str]]:
    """`count` A100s on nodes of `per_node` (0: all on one node), as (node, device)."""
    per_node = per_node or count
    placed = [(f"node-{i // per_node:03d}", f"gpu-{i}") for i in range(count)]
    for node in dict.fromkeys(n for n, _ in placed):
        devices = [gpu(name, A100, "80Gi") for n, name in placed if n == node]
        fakes.put(bed.world, resource_slice(node, *devices))
    return placed


def rollout(
    n: int, profile: cProfile.Profile | None, *, quiet: bool, lag: int = 0, per_node: int = 0
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        bed = Bed(Path(tmp), a100s=0)
        places = _devices(bed, n + n // 10, per_node)
        uids = [bed.order(f"llm-{i}") for i in range(n)]
        first = later = 0.0

        def serve(i: int) -> float:
            node, device = places[i]
            _serving(bed, uids[i], f"llm-{i}", device, node=node)
            started = time.process_time()
            bed.settle(uids[i])
            return time.process_time() - started

        if profile is not None and not quiet:
            profile.enable()
        for i, uid in enumerate(uids):
            started = time.process_time()
            bed.settle(uid)
            first += time.process_time() - started
            if i >= lag:
                later += serve(i - lag)
        for i in range(max(n - lag, 0), n):
            later += serve(i)
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
        "lag": lag,
        "per_node": per_node,
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
    parser.add_argument("--lag", type=int, default=0, help="allocations trail plans by K orders")
    parser.add_argument("--per-node", type=int, default=0, help="devices a node (0: one node)")
    args = parser.parse_args()
    sizes = sorted(args.n or [100, 400])
    for n in sizes:
        profile = cProfile.Profile() if args.profile and n == sizes[-1] else None
        result = rollout(
            n, profile, quiet=args.profile == "quiet", lag=args.lag, per_node=args.per_node
        )
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
        if profile is not None:
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(45)
            sys.stdout.write(out.getvalue())


if __name__ == "__main__":
    main()
