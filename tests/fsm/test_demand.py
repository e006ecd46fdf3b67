"""Other orders' plans not yet allocated, counted as demand: the same room as counting
the units in use anew for every demand (tests/support/reference_demand.py), on random
clusters — whole and shareable devices on several nodes (some holding one or two claims
at most: a second capacity), claims already allocated (of holders of several
priorities), and plans of one or two devices, whole or shared, for one or more
replicas, some freeing claims of lower priority."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm.placement import capacity, demand
from fsm.placement.capacity import Snapshot
from fsm.placement.planner import PlanRequest, plan
from fsm.reasons import Reason
from fsm.values import AcceleratorPolicy, Plan
from tests.support import reference_demand, strategies
from tests.support.planner_inputs import (
    A100,
    GPU_CLASS,
    QWEN_05B,
    QWEN_7B,
    claim,
    default_recipes,
    device_class,
    gpu,
    snapshot,
)
from tests.support.planner_inputs import resource_slice as slice_of

NODES = ("node-a", "node-b", "node-c")
RECIPES = default_recipes()


def _plan(count: int, share: int | None, named: tuple[str, ...]) -> Plan:
    return strategies.plan("gpus", share=share, count=count, devices=named)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Snapshot, list[demand.Demand]]:
    per_node = draw(st.lists(st.integers(1, 4), min_size=1, max_size=len(NODES)))
    shareable = draw(st.booleans())
    # A second capacity bounds how many claims a shared device holds (one, two, any).
    cores = draw(
        st.sampled_from([None, {"value": "8"}, {"value": "8", "requestPolicy": {"default": "4"}}])
    )
    slices, ids = [], []
    for node, count in zip(NODES, per_node, strict=False):
        names = [f"{node}-gpu-{i}" for i in range(count)]
        devices = [gpu(n, A100, "80Gi", shareable=shareable) for n in names]
        for device in devices if cores is not None else ():
            device["capacity"]["cores"] = cores
        slices.append(slice_of(node, *devices))
        ids += [(node, n) for n in names]
    taken = draw(st.lists(st.sampled_from(ids), max_size=len(ids), unique=True))
    shares = st.sampled_from([None, 50])
    claims = [
        claim(f"c-{i}", node, name, holder=f"held-{i}", mps_percent=draw(shares))
        for i, (node, name) in enumerate(taken)
    ]
    levels = st.sampled_from([None, 50, 100, 200])  # None: the holder's priority unknown
    priorities = {f"held-{i}": p for i in range(len(claims)) if (p := draw(levels)) is not None}
    snap = snapshot([device_class("gpus", GPU_CLASS)], slices, claims, priorities=priorities)
    keys = [f"team/c-{i}" for i in range(len(claims))]
    demands = []
    for i in range(draw(st.integers(0, 8))):
        node, name = draw(st.sampled_from(ids))
        plan = _plan(
            draw(st.integers(1, 2)),
            draw(st.sampled_from([None, 25, 50])),
            (f"gpu.nvidia.com/{node}/{name}",),
        )
        demands.append(
            demand.Demand(
                holder=f"order-{i}",
                namespace="team",
                name=f"order-{i}",
                plan=plan,
                replicas=draw(st.integers(0, 2)),
                priority=draw(st.sampled_from([None, 100])),
                reclaims=tuple(draw(st.lists(st.sampled_from(keys), max_size=2)) if keys else ()),
            )
        )
    return snap, demands


@settings(max_examples=500, deadline=None)
@given(clusters())
def test_demand_takes_the_same_room_as_counting_anew_for_each(
    cluster: tuple[Snapshot, list[demand.Demand]],
) -> None:
    snap, demands = cluster
    after = demand.with_demand(snap, demands)
    assert after == reference_demand.with_demand(snap, demands)
    # Each placeholder says it is one, and no claim does (growth keeps a holder's claims
    # before its placeholders: fsm/placement/arbitration.py).
    claims = {a.key for a in snap.allocations}
    assert all(a.planned is (a.key not in claims) for a in after.allocations)


@settings(max_examples=500, deadline=None)
@given(clusters())
def test_the_demand_snapshot_carries_the_count_a_recount_of_it_gives(
    cluster: tuple[Snapshot, list[demand.Demand]],
) -> None:
    snap, demands = cluster
    after = demand.with_demand(snap, demands)
    recounted = replace(after)  # `counted` is not carried over: this one counts anew
    assert recounted.counted is None
    assert after.counted == capacity.usage_of(recounted)


@settings(max_examples=300, deadline=None)
@given(clusters(), st.data())
def test_a_plan_from_the_counted_snapshot_finds_what_a_recount_finds(
    cluster: tuple[Snapshot, list[demand.Demand]], data: st.DataObject
) -> None:
    """The order's own claims, its held place and reclaims read the count as they read a
    recount: the same place, the same claims to free."""
    snap, demands = cluster
    after = demand.with_demand(snap, demands)
    ids = [device.id for device in snap.devices]
    own = data.draw(st.sampled_from([None, "order-0", "held-0"]))
    held = data.draw(st.lists(st.sampled_from(ids), max_size=2, unique=True))
    count, replicas = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    share = data.draw(st.sampled_from([100, 50, 25]))
    held_share = data.draw(st.sampled_from([100, 50]))
    priority = data.draw(st.sampled_from([None, 0, 200]))

    def search(of: Snapshot) -> capacity.Place | None:
        return capacity.find_place(
            of, of.devices, count=count, share_percent=share, replicas=replicas,
            priority=priority, own_uid=own, held=held, held_share=held_share,
        )  # fmt: skip

    assert search(after) == search(replace(after))


def test_two_plans_for_the_last_device_are_not_both_given_it() -> None:
    snap = snapshot(
        [device_class("gpus", GPU_CLASS)],
        [slice_of("node-a", gpu("gpu-0", A100, "80Gi"), gpu("gpu-1", A100, "80Gi"))],
        [claim("c-0", "node-a", "gpu-0", holder="someone")],
    )
    named = ("gpu.nvidia.com/node-a/gpu-1",)
    first, second = (
        demand.Demand(holder=n, namespace="team", name=n, plan=_plan(1, None, named), replicas=1)
        for n in ("first", "second")
    )
    after = demand.with_demand(snap, [first, second])
    held = {a.holder: a.devices for a in after.allocations}
    # The first takes the free device; the second, with no room left, takes nothing.
    assert held["first"] == named and "second" not in held
    assert demand.free_units(after, "gpus") == 0


@pytest.mark.parametrize(("cores", "free"), [(None, 50), ({"value": "8"}, 0)])
def test_a_device_holding_as_many_claims_as_it_can_has_no_free_units(
    cores: dict[str, str] | None, free: int
) -> None:
    """Half its units are free, but a second capacity taken whole by the first claim
    keeps every other off: a tried class is tried again when free units grow."""
    device = gpu("gpu-0", A100, "80Gi", shareable=True)
    if cores is not None:
        device["capacity"]["cores"] = cores
    snap = snapshot(
        [device_class("gpus", GPU_CLASS)],
        [slice_of("node-a", device)],
        [claim("c", "node-a", "gpu-0", holder="x", mps_percent=50)],
    )
    assert demand.free_units(snap, "gpus") == free


def test_a_replica_that_fits_nowhere_does_not_hold_room_its_pod_cannot_use() -> None:
    """A replica of two devices planned on node-b, where the scheduler then put another
    order's pod on gpu-1: it fits nowhere now, and its pod cannot use gpu-2 alone. Kept
    on its named devices, it made gpu-2 look taken: a one-device order was told there
    is no room, or reclaimed a running replica, beside an idle device (found with the
    bed's scheduler placing pods where no plan said)."""
    snap = snapshot(
        [device_class("gpus", GPU_CLASS)],
        [
            slice_of("node-a", gpu("gpu-0", A100, "80Gi")),
            slice_of("node-b", gpu("gpu-1", A100, "80Gi"), gpu("gpu-2", A100, "80Gi")),
        ],
        [
            claim("c-0", "node-a", "gpu-0", holder="someone"),
            claim("c-1", "node-b", "gpu-1", holder="moved"),
        ],
    )
    big = demand.Demand(
        holder="big",
        namespace="team",
        name="big",
        plan=_plan(2, None, ("gpu.nvidia.com/node-b/gpu-1", "gpu.nvidia.com/node-b/gpu-2")),
        replicas=1,
        priority=100,
    )
    after = demand.with_demand(snap, [big])
    assert after == reference_demand.with_demand(snap, [big])
    assert all(a.holder != "big" for a in after.allocations)
    assert demand.free_units(after, "gpus") == 100
    # A one-device order is placed on gpu-2, the device the waiting replica cannot use.
    place = capacity.find_place(after, after.devices, count=1, own_uid="new")
    assert place is not None and place.replicas == (("gpu.nvidia.com/node-b/gpu-2",),)


def test_no_demand_is_placed_on_the_place_the_replanning_order_holds() -> None:
    """Order A replans while its plan in force (gpu-0) waits for its pod; order B waits
    on gpu-1. B's demand once went on the first free device, A's gpu-0, and the replan,
    which counts its held place on top, was given gpu-1: promised to A and B both. With
    A's place kept out of the demand, B stays on gpu-1 and the replan finds no room
    (SPEC §3.1: LaunchPlanInForce), as it should on a full cluster."""
    snap = snapshot(
        [device_class("gpus", GPU_CLASS)],
        [slice_of("node-a", gpu("gpu-0", A100, "80Gi"), gpu("gpu-1", A100, "80Gi"))],
        [],
    )
    held = _plan(1, None, ("gpu.nvidia.com/node-a/gpu-0",))
    b = demand.Demand(
        holder="b", namespace="team", name="b",
        plan=_plan(1, None, ("gpu.nvidia.com/node-a/gpu-1",)), replicas=1,
    )  # fmt: skip
    after = demand.with_demand(snap, [b], for_uid="a", held=held)
    assert {a.holder: a.devices for a in after.allocations} == {"b": b.plan.devices}
    replan = capacity.find_place(after, after.devices, count=1, own_uid="a", held=held.devices)
    assert replan is None
    # What the snapshot counts is the demand's, not A's place: the planner adds that.
    assert after.counted == capacity.usage_of(replace(after))


def test_a_demand_with_room_for_some_replicas_takes_it_and_names_the_rest() -> None:
    """The first of two replicas fits on node-a's last free device, the second fits
    nowhere: the first takes that device, as its waiting pod will, and the second takes
    nothing. Left to the next demand (all or nothing, as before), the free device was
    promised to an order whose pod would compete with the first's."""
    snap = snapshot(
        [device_class("gpus", GPU_CLASS)],
        [
            slice_of("node-a", gpu("gpu-0", A100, "80Gi")),
            slice_of("node-b", gpu("gpu-1", A100, "80Gi")),
        ],
        [claim("c-1", "node-b", "gpu-1", holder="someone")],
    )
    both = demand.Demand(
        holder="a",
        namespace="team",
        name="a-two",
        plan=_plan(1, None, ("gpu.nvidia.com/node-b/gpu-1",)),
        replicas=2,
    )
    one = demand.Demand(
        holder="b", namespace="team", name="b-one", plan=_plan(1, None, ()), replicas=1
    )
    after = demand.with_demand(snap, [both, one])
    assert after == reference_demand.with_demand(snap, [both, one])
    held = sorted((a.holder, a.devices) for a in after.allocations if a.holder in ("a", "b"))
    assert held == [("a", ("gpu.nvidia.com/node-a/gpu-0",))]  # nothing left for b
    assert demand.free_units(after, "gpus") == 0


def test_a_waiting_taker_holds_the_device_it_frees() -> None:
    """h1's plan frees low's claim on the one A100; its take is made, but low's pod is in
    its grace period and the claim still allocated. As demand on free room only, h1 held
    nothing, and h2, planned next at h1's priority, freed the same claim: two takers
    promised one device, the second's take taking nothing. h1's demand now frees the
    claims its plan frees and holds their device; h2 is told there is no room."""
    base = snapshot(
        [device_class("gpu.nvidia.com", GPU_CLASS)],
        [slice_of("node-a", gpu("gpu-0", A100, "80Gi"))],
        [claim("low-gpu", "node-a", "gpu-0", holder="low")],
        priorities={"low": 100, "h1": 1000, "h2": 1000},
    )
    ask = {"facts": QWEN_7B, "priority_class_name": "inference-high", "namespace": "team"}
    first = plan(PlanRequest(order_uid="h1", **ask), demand.with_demand(base, []), RECIPES)
    assert first.plan is not None and first.reclaims == ("team/low-gpu",)
    h1 = demand.Demand(
        holder="h1", namespace="team", name="h1", plan=first.plan, replicas=1,
        priority=1000, reclaims=first.reclaims,
    )  # fmt: skip
    seen = demand.with_demand(base, [h1], for_uid="h2")
    assert seen == reference_demand.with_demand(base, [h1])
    assert [(a.holder, a.devices, a.planned) for a in seen.allocations] == [
        ("h1", first.plan.devices, True)
    ]
    second = plan(PlanRequest(order_uid="h2", **ask), seen, RECIPES)
    assert second.reason is Reason.NO_CAPACITY
    # A claim of no lower priority than the taker's is not its to free (the take would
    # not be made): its demand holds nothing there.
    equal = replace(h1, priority=100)
    assert demand.with_demand(base, [equal]).allocations == base.allocations


# Below every priority a claim can have: the weighing then finds nothing to reclaim, and
# chooses among free devices alone, as a demand's search does.
_RECLAIMS_NOTHING = -(2**63)


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 3), st.sampled_from([100, 50, 25]))
def test_a_search_with_nothing_to_reclaim_takes_what_the_weighing_takes(
    cluster: tuple[Snapshot, list[demand.Demand]], count: int, share: int
) -> None:
    snap, _ = cluster
    usage = capacity.usage_of(snap)
    for _node, on_node in capacity._by_node(snap.devices):
        weighed = capacity._take(
            usage, on_node, count, share, priority=_RECLAIMS_NOTHING, own_uid=None
        )
        assert capacity._take_free(usage, on_node, count, share) == weighed


def test_orders_planned_in_turn_are_never_promised_more_devices_than_there_are() -> None:
    """Three T4s (two on n1, one on n2), planned in turn: beta's replica of two devices,
    then alpha's of one, then gamma's of one. Re-placed from scratch in name order,
    alpha's demand took n1 (first free), beta's search then failed and fell on its named
    n1 devices too, n2 looked free, and gamma was promised it: four devices promised on
    three. Each demand now takes its named place while it has room."""
    t4 = "Tesla T4"
    base = snapshot(
        [device_class("gpu.nvidia.com", GPU_CLASS)],
        [
            slice_of("n1", gpu("d0", t4, "16Gi"), gpu("d1", t4, "16Gi")),
            slice_of("n2", gpu("d2", t4, "16Gi")),
        ],
        [],
    )
    accelerator = AcceleratorPolicy(max_accelerator_count=2)
    plans: dict[str, Plan] = {}
    for name, facts in (("beta", QWEN_7B), ("alpha", QWEN_05B), ("gamma", QWEN_05B)):
        demands = [
            demand.Demand(holder=u, namespace="team", name=u, plan=p, replicas=1, priority=0)
            for u, p in plans.items()
        ]
        seen = demand.with_demand(base, demands, for_uid=name)
        assert seen == reference_demand.with_demand(base, demands)
        request = PlanRequest(facts=facts, accelerator=accelerator, order_uid=name)
        outcome = plan(request, seen, default_recipes())
        if outcome.plan is not None:
            plans[name] = outcome.plan
    assert sorted(plans) == ["alpha", "beta"]  # gamma waits: no room
    assert sum(p.accelerator_count for p in plans.values()) <= len(base.devices)
