"""`fsm.placement.demand.with_demand` as first written: the units in use counted anew for
every demand (O(demands x devices) a plan). Kept as the reference the faster one is
property-tested against (tests/fsm/test_demand.py), as reference_fold.py is for the fold."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from fsm.placement.capacity import (
    FULL_SHARE,
    Allocation,
    Snapshot,
    find_place,
    has_room,
    usage_of,
)
from fsm.placement.demand import Demand, _named
from fsm.placement.planner import plan_devices


def with_demand(snapshot: Snapshot, demands: Iterable[Demand]) -> Snapshot:
    allocations = list(snapshot.allocations)
    for demand in sorted(demands, key=lambda d: (d.namespace, d.name, d.holder)):
        if demand.replicas <= 0:
            continue
        if demand.priority is not None:  # the lower-priority claims its plan frees go
            allocations = [
                a
                for a in allocations
                if not (
                    a.key in demand.reclaims
                    and a.holder != demand.holder
                    and a.priority is not None
                    and a.priority < demand.priority
                )
            ]
        replicas: list[tuple[str, ...]] = []
        share = demand.plan.share_percent or FULL_SHARE
        for devices in _named(demand):  # the named places first
            current = replace(
                snapshot, allocations=(*allocations, *_placeholders(demand, replicas))
            )
            usage = usage_of(current)
            by_id = {d.id: d for d in current.devices}
            fits = len(replicas) < demand.replicas and all(
                d in by_id and has_room(usage, by_id[d], share) for d in devices
            )
            if fits:
                replicas.append(devices)
        while len(replicas) < demand.replicas:
            current = replace(
                snapshot, allocations=(*allocations, *_placeholders(demand, replicas))
            )
            group = plan_devices(current, demand.plan)
            place = None
            if group is not None:
                place = find_place(
                    current,
                    group,
                    count=demand.plan.accelerator_count,
                    share_percent=demand.plan.share_percent or FULL_SHARE,
                    priority=None,
                    own_uid=demand.holder,
                )
            if place is None:
                break
            replicas.extend(place.replicas)
        allocations.extend(_placeholders(demand, replicas))
    return replace(snapshot, allocations=tuple(sorted(allocations, key=lambda a: a.key)))


def _placeholders(demand: Demand, replicas: list[tuple[str, ...]]) -> list[Allocation]:
    """The replicas of `demand` placed so far, as the allocations they will be."""
    return [
        Allocation(
            namespace=demand.namespace,
            name=f"{demand.name}-planned-{index}",
            devices=devices,
            share_percent=demand.plan.share_percent or FULL_SHARE,
            holder=demand.holder,
            priority=demand.priority,
            planned=True,
        )
        for index, devices in enumerate(replicas)
    ]
