"""Capacity promised once: other orders' planned-but-unallocated places, as demand.

Between a plan and its allocated claims lies the scheduler, which may give the order any
device its claim selects — not necessarily the one the planner named. So a plan that no
allocated claim covers yet is counted as *demand on the devices its class selects*: each
such order takes, in a stable order, room of its plan's shape from what is still free
(and what the lower-priority claims its plan frees hold), and the planner sees that room
as taken. Two orders planned in the same moment are thus never both given the last
device, nor two takers the device one victim is giving up; the controller serialises
planning so each plan is seen by the next (adapters/kubernetes/planning.py).

Pure: the controller passes the snapshot and the demands; this returns a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from fsm.placement import cel
from fsm.placement.capacity import (
    FULL_SHARE,
    Allocation,
    Device,
    FullNodes,
    Snapshot,
    claim_freed,
    claim_taken,
    find_place,
    free_on,
    has_room,
    take_units,
    uncovered_held,
    usage_of,
    with_counted,
)
from fsm.placement.planner import plan_devices
from fsm.values import Plan

__all__ = ["Demand", "free_units", "with_demand"]


@dataclass(frozen=True, slots=True)
class Demand:
    """Replicas of `plan` that order `holder` waits to be allocated."""

    holder: str  # the order's UID
    namespace: str
    name: str
    plan: Plan
    replicas: int
    priority: int | None = None  # the holder's priority value (what may reclaim it)
    # Claims (namespace/name) of lower priority the plan's place frees (its
    # `PlanComputed.reclaims`): the devices it is freeing are its own.
    reclaims: tuple[str, ...] = ()


def with_demand(
    snapshot: Snapshot,
    demands: Iterable[Demand],
    *,
    for_uid: str | None = None,
    held: Plan | None = None,
) -> Snapshot:
    """`snapshot` with each demand's room taken, as claim-shaped allocations.

    `held`: the place order `for_uid`, the one planning now, holds (its plan in force),
    for what its claims do not cover yet: no demand is placed there. Left free, another
    order's waiting replica was put on it, and the replan, which counts the held place
    on top (capacity.uncovered_held), was given the device that replica would need.

    Each replica takes the devices its plan named while they have room, and searches
    only when they do not: placed from scratch in name order, an earlier-named order
    took room a later plan had been made around (replicas of other shapes, or classes
    selecting the same devices), its own search then failed, and the room it had been
    planned onto was promised again. A replica that no free room can hold any more (the
    cluster shrank, or the scheduler put another order's pod on part of its place)
    takes nothing: its pod cannot use what is left either (a free device beside a taken
    one is no room for a replica of two, a quarter is no room for a half). Kept on its
    named devices, it made that leftover look taken, so another order was told there is
    no room, or reclaimed a running replica, beside an idle device.

    A demand whose plan frees lower-priority claims (`reclaims`) holds what they hold:
    those still allocated (the victim's pod in its grace period) are freed for it, as
    its take frees them, before it is placed. Placed on free room only, a taker waiting
    for them held nothing, and the next plan of a priority above the victim's freed the
    same claims: one device promised to two takers, the second's take taking nothing.
    Only claims of a lower priority than the demand's are freed, as `find_place` and
    the take judge them (a victim risen to the taker's priority is not taken from).

    The units in use are counted once and each demand's place taken from them in turn:
    counted anew for each demand, a rollout of N orders with D plans not yet allocated
    cost O(D x N) a plan. A demand searches only free room, so a place needs no claim
    lists."""
    allocations = list(snapshot.allocations)
    usage = usage_of(snapshot)
    by_id = {device.id: device for device in snapshot.devices}
    # Taken while the demand is placed, given back after: the planner counts it itself.
    held_share = (held.share_percent or FULL_SHARE) if held is not None else FULL_SHARE
    kept = uncovered_held(snapshot, for_uid, held.devices) if held is not None else []
    take_units(usage, by_id, kept, held_share)
    full = FullNodes()  # usage only grows here: a node without room stays so
    # Plans of one shape select the same devices: looked up once a call, not per demand.
    groups: dict[tuple[str, str, int], tuple[Device, ...] | None] = {}
    for demand in sorted(demands, key=lambda d: (d.namespace, d.name, d.holder)):
        if demand.replicas <= 0:
            continue
        if demand.reclaims:
            freed = _freed_for(allocations, demand)
            if freed:
                for alloc in freed:
                    claim_freed(usage, alloc)
                gone = {id(a) for a in freed}
                allocations = [a for a in allocations if id(a) not in gone]
                full = FullNodes()  # usage shrank: a node passed as full may have room now
        share = demand.plan.share_percent or FULL_SHARE
        plan = demand.plan
        shape = (plan.device_class, plan.accelerator_product_name, plan.accelerator_memory_gib)
        if shape not in groups:
            groups[shape] = plan_devices(snapshot, plan)
        group = groups[shape]
        # Replica by replica, as the scheduler will place the pods: on the devices the
        # plan named while they have room, then as many as fit where there is room. All
        # or nothing, a demand of two with room for one left the free device to another
        # order, which its waiting pod would then compete for.
        replicas: list[tuple[str, ...]] = []
        for devices in _named(demand):
            fits = len(replicas) < demand.replicas and all(
                d in by_id and has_room(usage, by_id[d], share) for d in devices
            )
            if fits:
                take_units(usage, by_id, devices, share)
                replicas.append(devices)
        while group is not None and len(replicas) < demand.replicas:
            # One replica's search changes the usage only when it finds a place.
            place = find_place(
                snapshot,
                group,
                count=demand.plan.accelerator_count,
                share_percent=share,
                priority=None,  # demand never reclaims: it only marks room as spoken for
                own_uid=demand.holder,
                usage=usage,
                full=full,
            )
            if place is None:
                break
            replicas.extend(place.replicas)
        for index, devices in enumerate(replicas):
            planned = Allocation(
                namespace=demand.namespace,
                name=f"{demand.name}-planned-{index}",
                devices=devices,
                share_percent=share,
                holder=demand.holder,
                priority=demand.priority,
                planned=True,
            )
            allocations.append(planned)
            claim_taken(usage, by_id, planned)
    take_units(usage, by_id, kept, held_share, sign=-1)
    placed = replace(snapshot, allocations=tuple(sorted(allocations, key=lambda a: a.key)))
    # The plan this snapshot is for counts from here, not from every claim again.
    return with_counted(placed, usage)


def _freed_for(allocations: Iterable[Allocation], demand: Demand) -> list[Allocation]:
    """The allocations among `allocations` that `demand`'s plan frees: named in its
    `reclaims`, another holder's, of a known priority lower than the demand's."""
    if demand.priority is None:
        return []  # its class fails: the arbiter takes nothing for it
    keys = set(demand.reclaims)
    return [
        a
        for a in allocations
        if a.key in keys
        and a.holder != demand.holder
        and a.priority is not None
        and a.priority < demand.priority
    ]


def _named(demand: Demand) -> tuple[tuple[str, ...], ...]:
    """The devices the demand's plan named, replica by replica: all of them, the places
    of its allocated replicas too (those have no room, and are passed over)."""
    count = max(demand.plan.accelerator_count, 1)
    devices = demand.plan.devices
    return tuple(tuple(devices[i : i + count]) for i in range(0, len(devices), count))


def free_units(snapshot: Snapshot, device_class: str, *, besides: str | None = None) -> int:
    """Free share units (100 a whole device) on the devices `device_class` selects.

    `besides`: an order's UID, whose own allocated claims count as free. A device class
    is marked tried, and tried again, on what it offers the order: what the order holds
    itself is none of that, and its claims going with its released workload
    (effects.ReleaseWorkload) are no new capacity. Counted as used, they were: the class
    was tried again at once, the workload made again and released again, for ever."""
    info = snapshot.device_class(device_class)
    if info is None:
        return 0
    try:
        devices = cel.selected_devices(info, snapshot.devices)
    except cel.SelectorError:
        return 0
    usage = usage_of(snapshot)
    if besides is not None:
        for alloc in snapshot.allocations:
            if alloc.holder == besides:
                claim_freed(usage, alloc)
    return sum(free_on(usage, d) for d in devices)
