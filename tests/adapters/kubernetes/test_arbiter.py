"""The arbiter's pure decisions: the record on a victim, which claims belong to whom, and
what growth may take (docs/priority.md). The scale-downs themselves run end to end in
tests/e2e/test_capacity_paths.py."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.kubernetes.arbiter import (
    TAKEN_ANNOTATION,
    Taker,
    Taking,
    growth_snapshot,
    victims_of,
)
from fsm.capacity import ORDER_UID_LABEL, Allocation, Snapshot


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
    assert back.message().startswith("3 replica(s) taken by support/high, support/high2")


@pytest.mark.parametrize(
    "annotation",
    [None, "", "not json", '{"takers": [{"order": "x"}]}', '{"takers": []}'],
    ids=["absent", "empty", "garbage", "no-replicas", "nothing-taken"],
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
