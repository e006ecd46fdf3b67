"""The arbitration's pure decisions (fsm/arbitration.py, docs/priority.md): the record on a
victim, which claims belong to whom, what a take leaves, what growth may take, and when
replicas come back. The scale-downs themselves run end to end in
tests/e2e/test_capacity_paths.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fsm.placement.arbitration import (
    TAKEN_ANNOTATION,
    GiveBack,
    Holding,
    OrderView,
    Ruling,
    Taker,
    Taking,
    Verdict,
    growth_snapshot,
    rule,
    take,
    taken_verdict,
    victims_of,
)
from fsm.placement.capacity import ORDER_UID_LABEL, Allocation, Snapshot
from fsm.placement.demand import Demand, with_demand
from fsm.reasons import Reason
from fsm.values import PlacementMode, Plan, SharingMode
from tests.support import planner_inputs as inputs
from tests.support.planner_inputs import (
    GPU_CLASS,
    device_class,
    gpu,
    resource_slice,
    snapshot,
)


def deployment(annotation: str | None) -> dict[str, Any]:
    annotations = {TAKEN_ANNOTATION: annotation} if annotation is not None else {}
    return {"metadata": {"name": "low", "namespace": "support", "annotations": annotations}}


def test_the_record_round_trips_through_the_annotation() -> None:
    record = Taking((Taker("support/high", "inference-high", 1),)).taken(
        "support/high2", "inference-high", 2
    )
    back = Taking.of(deployment(record.dump()))
    assert back == record
    assert (back.replicas, back.by) == (3, "support/high, support/high2")
    assert back.message("support").startswith("3 replica(s) taken by support/high, support/high2")


def test_a_victim_names_no_taker_of_another_namespace() -> None:
    """Its status and Events are its tenant's to read; the record and the log keep every
    name for the administrator."""
    record = Taking((Taker("support/high", "inference-high", 1),)).taken(
        "analytics/urgent", "inference-high", 2
    )
    assert record.message("support").startswith(
        "3 replica(s) taken by support/high, 1 in another namespace (inference-high)"
    )
    assert "analytics" not in record.message("support")
    assert record.message("shop").startswith("3 replica(s) taken by 2 in other namespaces")


@pytest.mark.parametrize(
    "annotation",
    [
        None,
        "",
        "not json",
        '{"takers": [{"order": "x"}]}',
        '{"takers": []}',
        # Written by whoever edits the victim's Deployments: each raised on every pass of
        # the victim and of any order that would take from it.
        '{"takers": [{"order": "x", "replicas": 1e400}]}',
        '{"takers": [{"order": "x", "replicas": Infinity}]}',
        '{"takers": [{"order": "x", "replicas": 1, "priorityClassName": ["high"]}]}',
        '{"takers": [{"order": ["x"], "replicas": 1}]}',
        '{"takers": [{"order": "x", "replicas": 1.5}]}',
        '{"takers": [{"order": "x", "replicas": true}]}',
        '{"takers": [{"order": "x", "replicas": 4294967296}]}',
        '{"takers": ["x"]}',
        '{"takers": {"order": "x", "replicas": 1}}',
        "[1, 2]",
        "[" * 100_000 + "]" * 100_000,
    ],
    ids=[
        "absent",
        "empty",
        "garbage",
        "no-replicas",
        "nothing-taken",
        "replicas-overflow",
        "replicas-infinite",
        "priority-not-text",
        "order-not-text",
        "replicas-fraction",
        "replicas-bool",
        "replicas-past-int32",
        "taker-not-a-mapping",
        "takers-not-a-list",
        "not-a-mapping",
        "nested-past-the-parser",
    ],
)
def test_no_record_or_an_unreadable_one_is_no_taking(annotation: str | None) -> None:
    assert Taking.of(deployment(annotation)) is None


def test_taking_again_adds_to_the_same_taker() -> None:
    record = (
        Taking(())
        .taken("support/high", "inference-high", 1)
        .taken("support/high", "inference-high", 1)
    )
    assert record.takers == (Taker("support/high", "inference-high", 2),)


@pytest.mark.parametrize(
    ("back", "gone", "left"),
    [
        (1, set(), {"support/old": 0, "support/new": 1}),
        (1, {"support/new"}, {"support/old": 1, "support/new": 0}),
        (2, set(), None),
        (5, set(), None),
    ],
    ids=["oldest-first", "gone-taker-first", "all-back", "more-than-taken"],
)
def test_replicas_come_back_from_gone_takers_first_then_the_oldest(
    back: int, gone: set[str], left: dict[str, int] | None
) -> None:
    record = Taking((Taker("support/old", "a", 1), Taker("support/new", "b", 1)))
    after = record.given_back(back, gone=lambda name: name in gone)
    if left is None:
        assert after is None
        return
    assert after is not None
    assert {t.order: t.replicas for t in after.takers} == {k: v for k, v in left.items() if v}


def claim(name: str, holder: str | None) -> dict[str, Any]:
    labels = {ORDER_UID_LABEL: holder} if holder else {}
    return {"metadata": {"namespace": "support", "name": name, "labels": labels}}


def test_victims_are_grouped_by_holder_and_gone_or_own_claims_free_nothing() -> None:
    claims = [claim("low-a", "low"), claim("low-b", "low"), claim("mid-a", "mid"),
              claim("mine", "me"), claim("foreign", None)]  # fmt: skip
    reclaims = ["support/low-a", "support/mid-a", "support/low-b", "support/gone",
                "support/mine", "support/foreign"]  # fmt: skip
    assert victims_of(reclaims, claims, taker_uid="me") == {
        "low": ["support/low-a", "support/low-b"],
        "mid": ["support/mid-a"],
    }


def alloc(name: str, holder: str | None, priority: int | None) -> Allocation:
    return Allocation("support", name, (f"gpu.nvidia.com/node/{name}",), 100, holder, priority)


@pytest.mark.parametrize(
    ("minimums", "reclaimable"),
    [
        ({"low": 1, "mid": 1}, {"support/low-1"}),
        ({"low": 0, "mid": 0}, {"support/low-0", "support/low-1", "support/mid-0"}),
        ({"low": 2, "mid": 1}, set()),
        ({}, set()),
    ],
    ids=["above-minimum-only", "minimum-zero", "all-at-minimum", "unknown-minimum"],
)
def test_growth_takes_only_replicas_above_the_holders_minimum(
    minimums: dict[str, int], reclaimable: set[str]
) -> None:
    snapshot = Snapshot(
        allocations=(
            alloc("low-0", "low", 100),
            alloc("low-1", "low", 100),
            alloc("mid-0", "mid", 500),
            alloc("other", None, None),
        )
    )
    grown = growth_snapshot(snapshot, minimums)
    assert {a.key for a in grown.allocations if a.priority is not None} == reclaimable
    assert [a.key for a in grown.allocations] == [a.key for a in snapshot.allocations]


# A generated claim's name is the pod's and the template's with random suffixes, so it may
# sort before or after the holder's demand placeholder ("low-planned-0"): both are tried.
_CLAIM_NAMES = ["low-6b9f7c8d5-x2kq9-gpu-7hxkz", "low-v6b9f7c8d-x2kq9-gpu-7hxkz"]


@pytest.mark.parametrize("name", _CLAIM_NAMES, ids=["claim-sorts-first", "claim-sorts-last"])
def test_growth_keeps_a_holders_claims_before_its_demand_placeholders(name: str) -> None:
    real = alloc(name, "low", 100)
    planned = replace(alloc("low-planned-0", "low", 100), planned=True)
    snapshot = Snapshot(allocations=tuple(sorted((real, planned), key=lambda a: a.key)))
    grown = growth_snapshot(snapshot, {"low": 1})
    assert {a.key for a in grown.allocations if a.priority is not None} == {planned.key}


# --- take and rule: tables over a small cluster ------------------------------------------


@pytest.mark.parametrize(
    ("desired", "held", "count", "expected"),
    [
        (2, 2, 1, (1, 1)),  # one of two replicas goes
        (2, 2, 5, (0, 2)),  # a minimum may take everything, down to zero
        (3, 2, 1, (1, 1)),  # a replica still waiting for devices frees nothing
        (1, 2, 1, None),  # a scale-down under way: nothing more is taken
        (2, 0, 1, None),  # nothing allocated: nothing to free
    ],
    ids=["one", "all", "waiting-replica", "scale-down-under-way", "nothing-held"],
)
def test_a_take_counts_from_what_holds_devices(
    desired: int, held: int, count: int, expected: tuple[int, int] | None
) -> None:
    victim = Holding("u-low", "support/low", desired=desired, held=held, resource_version="7")
    decided = take(victim, count, by="support/high", priority_class_name="inference-high")
    if expected is None:
        assert decided is None
        return
    assert decided is not None
    assert (decided.replicas, decided.taken) == expected
    assert decided.record.takers == (Taker("support/high", "inference-high", expected[1]),)
    assert decided.resource_version == "7"


L4_PLAN = Plan(
    device_class="gpu.nvidia.com",
    accelerator_product_name="NVIDIA L4",
    accelerator_memory_gib=24,
    accelerator_count=1,
    placement_mode=PlacementMode.WHOLE_DEVICE,
    sharing_mode=SharingMode.DEDICATED,
    recipe="vllm-nvidia",
    cpu="4",
    memory="16Gi",
    model_volume="10Gi",
)


def two_l4s(*holders: tuple[str, int]) -> Snapshot:
    """One node with two L4s; each (holder, priority) holds the next one."""
    claims = [
        inputs.claim(f"{holder}-{i}", "node", f"gpu-{i}", holder=holder, namespace="support")
        for i, (holder, _) in enumerate(holders)
    ]
    return snapshot(
        [device_class("gpu.nvidia.com", GPU_CLASS)],
        [
            resource_slice(
                "node", gpu("gpu-0", "NVIDIA L4", "24Gi"), gpu("gpu-1", "NVIDIA L4", "24Gi")
            )
        ],
        claims,
        priorities=dict(holders),
    )


def view(**overrides: Any) -> OrderView:
    base: dict[str, Any] = {
        "uid": "u-high",
        "plan": L4_PLAN,
        "min_replicas": 1,
        "max_replicas": 1,
        "priority_class_name": "inference-high",
        "available": 0,
        "desired": 1,
        "bound": 0,
        "waiting": True,
    }
    return OrderView(**{**base, **overrides})


def test_a_waiting_minimum_takes_the_lowest_priority_first() -> None:
    ruling = rule(view(), two_l4s(("u-low", 100), ("u-mid", 500)), {})
    assert ruling.reclaims == ("support/u-low-0",)
    assert ruling.verdict is None  # growth is judged only while the order serves


@pytest.mark.parametrize(
    "holders",
    [(("u-mid", 1000), ("u-top", 2000)), (("u-mid", 1000),), (("u-high", 1000),), ()],
    ids=["equal-and-higher", "equal", "own", "none"],
)
def test_a_waiting_order_with_nothing_lower_to_free_is_not_judged(
    holders: tuple[tuple[str, int], ...],
) -> None:
    """What the controller's arbiter answers without a snapshot (adapters/kubernetes/
    arbiter.py) when no other order has a lower priority and no replica is available."""
    assert rule(view(), two_l4s(*holders), {}) == Ruling(None)


def test_nothing_waits_nothing_is_taken() -> None:
    ruling = rule(view(waiting=False), two_l4s(("u-low", 100), ("u-mid", 500)), {})
    assert ruling == Ruling(Verdict(Reason.SCALING_WITHIN_BOUNDS))


def test_growth_past_the_victims_minimum_is_blocked() -> None:
    serving = view(available=1, bound=1, desired=2, max_replicas=2)
    snap = two_l4s(("u-high", 1000), ("u-low", 100))
    ruling = rule(serving, snap, {"u-low": 1, "u-high": 1})
    assert ruling.verdict is not None and ruling.verdict.reason is Reason.SCALE_UP_BLOCKED
    assert ruling.reclaims == ()
    grows = rule(serving, snap, {"u-low": 0, "u-high": 1})
    assert grows.reclaims == ("support/u-low-1",)
    assert grows.verdict == Verdict(Reason.SCALING_WITHIN_BOUNDS)


def _serving_victim(record: Taking, **overrides: Any) -> OrderView:
    """The low order, serving one replica on gpu-0 after `record` was taken from it."""
    fields: dict[str, Any] = {
        "uid": "u-low",
        "priority_class_name": "inference-low",
        "waiting": False,
        "available": 1,
        "desired": 1,
        "bound": 1,
        "held": 1,
        "taking": record,
        "resource_version": "9",
    }
    return view(**{**fields, **overrides})


def test_replicas_come_back_only_from_free_room_once_takers_are_placed() -> None:
    record = Taking((Taker("support/high", "inference-high", 1),))
    victim = _serving_victim(record, max_replicas=2)
    free = two_l4s(("u-low", 100))  # the second L4 is free
    back = rule(victim, free, {})
    assert back.give_back == GiveBack(2, None, "9")
    assert back.verdict == Verdict(Reason.SCALING_WITHIN_BOUNDS)
    waiting = rule(replace(victim, takers_satisfied=False), free, {})
    assert waiting.give_back is None
    assert waiting.verdict is not None
    assert waiting.verdict.reason is Reason.CAPACITY_TAKEN_BY_PRIORITY
    full = rule(victim, two_l4s(("u-low", 100), ("u-high", 1000)), {})
    assert full.give_back is None
    assert full.verdict == taken_verdict(record, "")


@pytest.mark.parametrize(
    ("maximum", "taken", "replicas", "left"),
    [(1, 100, 1, None), (2, 100, 2, None), (3, 100, 2, 1), (2, 1, 2, None)],
    ids=["none-owed", "up-to-the-maximum", "the-rest-still-owed", "a-true-record"],
)
def test_replicas_never_come_back_past_the_maximum(
    maximum: int, taken: int, replicas: int, left: int | None
) -> None:
    """The record is an annotation anyone who may edit the Deployment can write: one of
    100 replicas taken grew a fixed one-replica order onto every free device. What the
    maximum does not let come back (a maximum lowered since, a record nobody took) is
    owed no more."""
    record = Taking((Taker("nobody/x", "inference-high", taken),))
    victim = _serving_victim(record, max_replicas=maximum, gone_takers=frozenset({"nobody/x"}))
    back = rule(victim, two_l4s(("u-low", 100)), {})  # one L4 free
    assert back.give_back is not None
    assert back.give_back.replicas == replicas
    owed = back.give_back.record
    assert (owed.replicas if owed is not None else None) == left


@pytest.mark.parametrize("name", _CLAIM_NAMES, ids=["claim-sorts-first", "claim-sorts-last"])
def test_growth_never_takes_a_victims_last_running_replica_for_its_placeholder(
    name: str,
) -> None:
    """The low order (minimum 1, its HPA asks 2) runs one replica on gpu-0; the plan it
    waits on named gpu-2, which a workload that is no order holds now, so its demand
    placeholder sits there. The high order's growth may take only what is above low's
    minimum: the placeholder's room, which frees nothing. Its one running replica stays."""
    l4s = (gpu(f"gpu-{i}", "NVIDIA L4", "24Gi") for i in range(3))
    claims = [
        inputs.claim(name, "node", "gpu-0", holder="u-low", namespace="support"),
        inputs.claim("high-0", "node", "gpu-1", holder="u-high", namespace="support"),
        inputs.claim("not-an-order", "node", "gpu-2", namespace="support"),
    ]
    allocated = snapshot(
        [device_class("gpu.nvidia.com", GPU_CLASS)],
        [resource_slice("node", *l4s)],
        claims,
        priorities={"u-low": 100, "u-high": 1000},
    )
    waits = Demand(
        holder="u-low",
        namespace="support",
        name="low",
        plan=L4_PLAN.model_copy(update={"devices": ("gpu.nvidia.com/node/gpu-2",)}),
        replicas=1,
        priority=100,
    )
    snap = with_demand(allocated, [waits])
    serving = view(available=1, bound=1, desired=2, max_replicas=2)
    ruling = rule(serving, snap, {"u-low": 1, "u-high": 1})
    assert ruling.reclaims == ()
    assert ruling.verdict is not None and ruling.verdict.reason is Reason.SCALE_UP_BLOCKED


def test_the_room_the_minimum_found_is_not_found_again_for_growth() -> None:
    """min 2, 3 wanted, 1 placed, one device free: the minimum's second replica takes
    the free device, so growth must take a lower-priority replica above its minimum
    (or be blocked). Both searches once found the same free device, and nothing was
    taken for the third replica until a later pass."""
    holders = [("u-high", 0), ("u-low", 2), ("u-low", 3)]
    claims = [
        inputs.claim(f"{holder}-{i}", "node", f"gpu-{i}", holder=holder, namespace="support")
        for holder, i in holders
    ]
    snap = snapshot(
        [device_class("gpu.nvidia.com", GPU_CLASS)],
        [resource_slice("node", *(gpu(f"gpu-{i}", "NVIDIA L4", "24Gi") for i in range(4)))],
        claims,
        priorities={"u-high": 1000, "u-low": 100},
    )
    serving = view(available=1, bound=1, desired=3, min_replicas=2, max_replicas=3)
    ruling = rule(serving, snap, {"u-high": 2, "u-low": 1})
    assert ruling.verdict == Verdict(Reason.SCALING_WITHIN_BOUNDS)
    assert len(ruling.reclaims) == 1 and ruling.reclaims[0].startswith("support/u-low-")
    # With the low order at its minimum, growth is blocked: said, not passed over.
    blocked = rule(serving, snap, {"u-high": 2, "u-low": 2})
    assert blocked.verdict is not None and blocked.verdict.reason is Reason.SCALE_UP_BLOCKED
