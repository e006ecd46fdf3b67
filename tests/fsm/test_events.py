"""Events: registry, payload round trips, reason checks, upcasting and a frozen v1 stream."""

from __future__ import annotations

import json
import typing
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError

from fsm import events as ev
from fsm.fold import fold
from fsm.reasons import Reason
from fsm.status import render_status
from tests.support.strategies import T0, order_streams, plan, policy, raw_event_streams

FIXTURES = Path(__file__).parent / "fixtures"
ORDER_EVENTS: tuple[type[ev.Event], ...] = typing.get_args(ev.OrderEvent)
PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_every_order_event_is_registered_under_its_stable_name() -> None:
    registered = ev.registered_types()
    assert all(registered[cls.TYPE] is cls for cls in ORDER_EVENTS)
    assert len({cls.TYPE for cls in ORDER_EVENTS}) == len(ORDER_EVENTS)


@pytest.mark.parametrize("cls", ORDER_EVENTS, ids=lambda c: c.TYPE)
def test_events_are_frozen_and_carry_their_time(cls: type[ev.Event]) -> None:
    assert cls.model_config.get("frozen") is True
    assert "observed_at" in cls.model_fields


@pytest.mark.parametrize("cls", ORDER_EVENTS, ids=lambda c: c.TYPE)
def test_no_event_has_a_field_for_secret_material(cls: type[ev.Event]) -> None:
    suspicious = [
        f for f in cls.model_fields if any(w in f for w in ("token", "password", "secret_value"))
    ]
    assert suspicious == []


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValidationError):
        ev.OrderDeleted(observed_at=datetime(2025, 1, 1))  # naive: the point of the test


WRONG_REASONS: list[tuple[type[ev.Event], dict[str, Any], Reason]] = [
    (ev.ClassResolved, {"class_name": "c", "policy": policy()}, Reason.CLASS_NOT_FOUND),
    (ev.ClassFailed, {"class_name": "c"}, Reason.NO_CAPACITY),
    (ev.ClassFailed, {"class_name": "c"}, Reason.CLASS_ADMITTED),
    (ev.ModelFailed, {}, Reason.MODEL_RESOLVED),
    (ev.ModelFailed, {}, Reason.CLASS_NOT_FOUND),
    (ev.PlanFailed, {}, Reason.PLAN_COMPUTED),
    (ev.PlanFailed, {}, Reason.LAUNCH_PLAN_IN_FORCE),
    (ev.PlanFailed, {}, Reason.HEALTH_CHECK_FAILED),
]


@pytest.mark.parametrize(
    ("cls", "fields", "reason"), WRONG_REASONS, ids=[f"{c.TYPE}-{r}" for c, _, r in WRONG_REASONS]
)
def test_an_event_refuses_a_reason_of_another_condition_or_status(
    cls: type[ev.Event], fields: dict[str, Any], reason: Reason
) -> None:
    with pytest.raises(ValidationError):
        cls.model_validate({"observed_at": T0, "reason": reason, **fields})


@PROPERTY
@given(order_streams() | raw_event_streams())
def test_every_event_round_trips_through_its_json_payload(events: list[ev.Event]) -> None:
    for e in events:
        payload = json.loads(json.dumps(ev.to_payload(e)))
        assert ev.from_payload(e.TYPE, e.VERSION, payload) == e


def test_spec_observed_v1_is_lifted_to_v2() -> None:
    v1 = {
        "observed_at": "2025-03-01T12:00:00Z",
        "generation": 4,
        "model_ref": {"src": "HuggingFace", "name": "Qwen/Qwen2.5-7B-Instruct"},
        "inference_service_class_name": "default-llm",
    }
    lifted = ev.from_payload("SpecObserved", 1, v1)
    assert isinstance(lifted, ev.SpecObserved)
    assert (ev.SpecObserved.VERSION, lifted.class_name, lifted.generation) == (2, "default-llm", 4)


def test_a_classless_v1_spec_stays_classless() -> None:
    v1 = {
        "observed_at": "2025-03-01T12:00:00Z",
        "generation": 1,
        "model_ref": {"src": "HuggingFace", "name": "a/b"},
    }
    lifted = ev.from_payload("SpecObserved", 1, v1)
    assert isinstance(lifted, ev.SpecObserved) and lifted.class_name is None


def test_a_version_newer_than_the_code_is_refused() -> None:
    with pytest.raises(ev.UnknownEventType):
        ev.from_payload(
            "WorkloadApplied",
            2,
            {"observed_at": "2025-03-01T12:00:00Z", "plan": plan().model_dump()},
        )


def test_workload_observed_v1_is_lifted_to_v2_saying_nothing_of_containers() -> None:
    v1 = {
        "observed_at": "2026-12-01T10:00:00Z",
        "desired_replicas": 1,
        "ready_replicas": 0,
        "available_replicas": 0,
        "rollout": "d/1",
    }
    lifted = ev.from_payload("WorkloadObserved", 1, v1)
    assert isinstance(lifted, ev.WorkloadObserved)
    assert lifted.not_starting is None and lifted.rollout == "d/1"
    assert ev.cannot_read("WorkloadObserved", 1) is None


def test_the_frozen_v1_stream_replays_to_the_status_it_had() -> None:
    recorded = json.loads((FIXTURES / "order_stream_v1.json").read_text(encoding="utf-8"))
    events = [ev.from_payload(r["type"], r["version"], r["payload"]) for r in recorded["events"]]
    assert any(
        r["type"] == "SpecObserved" and r["version"] < ev.SpecObserved.VERSION
        for r in recorded["events"]
    )
    assert render_status(fold(events)) == recorded["status"]
