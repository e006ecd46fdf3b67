"""Benchmark: the demand snapshot alone, as one plan of a rollout builds it.

Every plan counts the other orders' plans not yet allocated as demand
(`fsm.placement.demand.with_demand`), so in a rollout of N orders whose allocations trail
the plans, each plan places hundreds of demands: the planner's largest share of the
controller's CPU in `ai-inference bench -n 500`. This builds the bench's shape without a
cluster — nodes of 16 whole A100s, some claims allocated, the rest of the orders
waiting with a plan of one device each — and prints the best of `--repeat` calls, CPU
milliseconds, as one JSON line; `cpu_ms_per_plan` adds the search of one more order on
that snapshot, as the planner makes it.

    PYTHONPATH=. .venv/bin/python benchmarks/demand.py                 # 35 nodes, 250 + 300
    PYTHONPATH=. .venv/bin/python benchmarks/demand.py --allocated 100 --waiting 450
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fsm.placement import capacity, demand, planner
from fsm.placement.capacity import Snapshot
from tests.support import strategies
from tests.support.planner_inputs import A100, GPU_CLASS, claim, device_class, gpu, snapshot
from tests.support.planner_inputs import resource_slice as slice_of

PER_NODE = 16  # the bench's nodes


def rollout(nodes: int, allocated: int, waiting: int) -> tuple[Snapshot, list[demand.Demand]]:
    """`allocated` devices held by claims, and `waiting` plans for the devices after them."""
    names = [f"node-{i:03d}" for i in range(nodes)]
    ids = [(n, f"{n}-gpu-{j}") for n in names for j in range(PER_NODE)]
    if allocated + waiting > len(ids):
        raise SystemExit(f"{allocated + waiting} orders do not fit {len(ids)} devices")
    slices = [
        slice_of(n, *(gpu(f"{n}-gpu-{j}", A100, "80Gi") for j in range(PER_NODE))) for n in names
    ]
    claims = [claim(f"c-{i}", n, d, holder=f"held-{i}") for i, (n, d) in enumerate(ids[:allocated])]
    snap = snapshot([device_class("gpus", GPU_CLASS)], slices, claims)
    demands = [
        demand.Demand(
            holder=f"order-{i}",
            namespace="bench",
            name=f"order-{i:04d}",
            plan=strategies.plan("gpus", devices=(f"gpu.nvidia.com/{node}/{device}",)),
            replicas=1,
        )
        for i, (node, device) in enumerate(ids[allocated : allocated + waiting])
    ]
    return snap, demands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=35)
    parser.add_argument("--allocated", type=int, default=250)
    parser.add_argument("--waiting", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    snap, demands = rollout(args.nodes, args.allocated, args.waiting)
    placed = demand.with_demand(snap, demands)  # warm: the kept selections and groups
    took = _best(args.repeat, lambda: demand.with_demand(snap, demands))
    # One more order's search on that snapshot, as the planner makes it: with its
    # priority, so reclaim options are weighed where there is no free room.
    group = planner.plan_devices(snap, demands[0].plan) if demands else ()
    planned = _best(
        args.repeat,
        lambda: capacity.find_place(
            demand.with_demand(snap, demands), group or (), count=1, priority=0, own_uid="new"
        ),
    )
    figures = {
        "nodes": args.nodes,
        "allocated": args.allocated,
        "waiting": args.waiting,
        "allocations_after": len(placed.allocations),
        "cpu_ms_per_snapshot": round(took * 1000, 2),
        "cpu_us_per_demand": round(took * 1e6 / max(args.waiting, 1), 1),
        "cpu_ms_per_plan": round(planned * 1000, 2),  # the snapshot and the search on it
    }
    sys.stdout.write(json.dumps(figures) + "\n")


def _best(repeat: int, call: Callable[[], object]) -> float:
    """The least CPU seconds of `repeat` calls: the figure the machine's noise adds least to."""
    took = []
    for _ in range(repeat):
        started = time.process_time()
        call()
        took.append(time.process_time() - started)
    return min(took)


if __name__ == "__main__":
    main()
