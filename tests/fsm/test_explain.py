"""`why` text and history rows: what an administrator reads about one order."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from fsm import events as ev
from fsm import observations as ob
from fsm.decide import decide
from fsm.explain import WHO_CAN_ACT, blocking_condition, explain, history_rows, who_can_act
from fsm.fold import evolve, fold
from fsm.reasons import CATALOGUE, ConditionType, Phase, Reason, Who
from fsm.state import OrderState
from fsm.values import Candidate, PlanOutcome
from tests.support.strategies import (
    AVAILABLE,
    RESOLVED,
    SERVING,
    at,
    klass,
    model,
    observation_runs,
    plan,
    planned,
    probe,
    run,
    scaling,
    spec,
)

R = Reason


def record(*observations: ob.Observation) -> list[ev.Event]:
    state, events = OrderState(), []
    for o in observations:
        for e in decide(state, o):
            events.append(e)
            state = evolve(state, e)
    return events


CANDIDATES = (
    Candidate(
        device_class="nvidia-a100",
        product_name="NVIDIA A100",
        accelerator_count=1,
        lost_because=R.NO_CAPACITY,
        detail="2 of 2 taken",
    ),
    Candidate(
        device_class="nvidia-t4",
        product_name="Tesla T4",
        lost_because=R.NO_ACCELERATOR_WITH_ENOUGH_MEMORY,
        detail="16 GiB",
    ),
)
NO_ROOM = ob.PlanJudged(
    at=at(3),
    outcome=PlanOutcome(reason=R.NO_CAPACITY, message="no A100 free", candidates=CANDIDATES),
)


def test_a_stuck_order_says_where_why_who_and_what_was_tried() -> None:
    events = record(*RESOLVED, NO_ROOM)
    text = explain(fold(events), events)
    # Held at Planned since the model resolved, not since the plan failed.
    assert "support/support-llm: Pending (Pending_Plan) since 2025-03-01T12:00:02Z" in text
    assert "Held at Planned=False, reason NoCapacity: no A100 free" in text
    assert WHO_CAN_ACT[CATALOGUE[R.NO_CAPACITY].who] in text
    assert "nvidia-a100 (NVIDIA A100, x1): lost, NoCapacity - 2 of 2 taken" in text
    assert "nvidia-t4 (Tesla T4): lost, NoAcceleratorWithEnoughMemory - 16 GiB" in text
    assert "2025-03-01T12:00:03Z PlanFailed (NoCapacity)" in text


def test_a_user_problem_names_the_user() -> None:
    events = record(spec(0), klass(1), model(2, R.MODEL_NOT_FOUND))
    text = explain(fold(events), events)
    assert "reason ModelNotFound" in text and WHO_CAN_ACT[CATALOGUE[R.MODEL_NOT_FOUND].who] in text


@pytest.mark.parametrize(
    ("failed", "who"),
    [(R.PLACEMENT_UNDECIDABLE, Who.ADMIN), (R.NO_CAPACITY, Who.WAIT)],
)
def test_a_plan_held_in_force_names_who_can_move_its_failed_recalculation(
    failed: Reason, who: Who
) -> None:
    """Serving on its plan in force, the recalculation failed: who can act is the
    failure's, not LaunchPlanInForce's "waiting" (the seeds: for PlacementUndecidable,
    waiting is not the answer, the class's selection needs the administrator)."""
    edited = (
        spec(20, 2, name="meta-llama/Llama-3.1-8B"),
        klass(21),
        model(22, name="meta-llama/Llama-3.1-8B"),
    )
    events = record(*SERVING, *edited, planned(23, failed, "recalculation failed"))
    state = fold(events)
    block = blocking_condition(state)
    assert block is not None and block.reason is R.LAUNCH_PLAN_IN_FORCE
    assert who_can_act(state, block) is who
    assert f"Who can unblock it: {WHO_CAN_ACT[who]}." in explain(state, events)


def test_a_healthy_order_is_not_blocked() -> None:
    state = run(*SERVING)
    assert blocking_condition(state) is None
    assert "Nothing blocks it" in explain(state)


def test_a_degraded_order_is_held_by_its_growth() -> None:
    block = blocking_condition(run(*SERVING, scaling(9, R.SCALE_UP_BLOCKED)))
    assert block is not None and (block.type, block.reason) == (
        ConditionType.SCALING_HEALTHY,
        R.SCALE_UP_BLOCKED,
    )


def test_history_has_a_row_per_event_with_what_it_changed() -> None:
    events = record(*SERVING)
    rows = history_rows(events)
    assert [r.type for r in rows] == [e.TYPE for e in events]
    assert [r.version for r in rows] == list(range(1, len(events) + 1))
    last = rows[-1]
    assert (last.type, last.phase_before, last.phase_after) == (
        "ProbeSucceeded",
        Phase.PENDING,
        Phase.READY,
    )
    assert "Ready: False (AwaitingFirstProbe) -> True (EndpointServing)" in last.changes
    assert last.reason == str(R.ENDPOINT_SERVING)


def test_a_row_takes_the_reason_the_event_carries() -> None:
    (row,) = history_rows(record(spec(0), klass(1, R.CLASS_NOT_FOUND)))[1:]
    assert row.reason == str(R.CLASS_NOT_FOUND)


def test_history_continues_from_a_snapshot() -> None:
    events = record(*AVAILABLE, probe(8))
    head, tail = events[:4], events[4:]
    assert history_rows(tail, start=fold(head)) == history_rows(events)[4:]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(observation_runs(30))
def test_every_history_is_json_and_every_state_explains_itself(runs: list[ob.Observation]) -> None:
    events = record(*runs)
    rows = [r.as_dict() for r in history_rows(events)]
    assert json.loads(json.dumps(rows)) == rows
    state = fold(events)
    text = explain(state, events)
    assert text.splitlines()[0].startswith("support/support-llm:")
    block = blocking_condition(state)
    if block is not None and not state.deleted:
        assert f"reason {block.reason}" in text


def test_a_deleted_order_says_so() -> None:
    text = explain(run(*SERVING, ob.Deleted(at=at(9))))
    assert "deleted" in text and plan().device_class not in text
