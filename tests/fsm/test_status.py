"""render_status: SPEC §2.1's field names, what is present when, and nothing null."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm import events as ev
from fsm import observations as ob
from fsm import status
from fsm.fold import evolve
from fsm.reasons import ORDER_CONDITIONS, Reason
from fsm.state import OrderState
from fsm.status import judge, render_status, rfc3339
from fsm.values import ClassOutcome, ModelOutcome, PlanOutcome
from tests.support.strategies import (
    PLANNED,
    REPLANNED_AND_FAILED,
    RESOLVED,
    SERVING,
    at,
    facts,
    klass,
    model,
    observation_runs,
    order_streams,
    plan,
    planned,
    policy,
    raw_event_streams,
    run,
    spec,
    workload,
)

R = Reason
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
STATUS_KEYS = {
    "phase",
    "observedGeneration",
    "conditions",
    "model",
    "endpoint",
    "authSecretName",
    "constraints",
    "resolved",
}
CONDITION_KEYS = ["type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"]
RESOLVED_KEYS = [
    "deviceClass",
    "acceleratorProductName",
    "acceleratorMemoryGiB",
    "acceleratorCount",
    "placementMode",
    "sharingMode",
    "sharePercent",
    "recipe",
    "cpu",
    "memory",
    "modelVolume",
    "replanCount",
]


def _nulls(value: Any, path: str = "status") -> list[str]:
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nulls(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nulls(v, f"{path}[{i}]")]
    return []


def test_a_serving_order_reports_everything_with_kubernetes_names() -> None:
    status = render_status(run(*SERVING))
    assert set(status) == STATUS_KEYS
    assert status["phase"] == "Ready" and status["observedGeneration"] == 1
    assert [c["type"] for c in status["conditions"]] == [str(t) for t in ORDER_CONDITIONS]
    assert all(list(c) == CONDITION_KEYS for c in status["conditions"])
    assert status["model"] == {"endpointType": "Chat"}
    assert status["endpoint"] == {
        "url": "https://x.example.com",
        "type": "External",
        "toolCallingSupported": True,
    }
    assert status["authSecretName"] == "support-llm-auth"
    assert status["constraints"] == {
        "minReplicas": 1,
        "maxReplicas": 2,
        "priorityClassName": "inference-normal",
    }
    assert list(status["resolved"]) == [k for k in RESOLVED_KEYS if k != "sharePercent"]
    assert status["resolved"]["deviceClass"] == plan().device_class
    assert status["resolved"]["replanCount"] == 0


def test_a_shared_device_reports_its_share() -> None:
    shared = ob.PlanJudged(
        at=at(3), outcome=PlanOutcome(reason=R.PLAN_COMPUTED, plan=plan("nvidia-t4-mps", share=50))
    )
    resolved = render_status(run(*RESOLVED, shared))["resolved"]
    assert list(resolved) == RESOLVED_KEYS
    assert (resolved["sharingMode"], resolved["sharePercent"]) == ("Shared", 50)


def test_a_new_order_reports_only_what_it_knows() -> None:
    assert render_status(OrderState()) == {"phase": "Pending", "conditions": []}
    status = render_status(run(spec(0)))
    assert set(status) == {"phase", "observedGeneration", "conditions"}


PRESENCE = [
    # (id, steps, field path, present)
    ("tool-calling-absent-before-a-plan", RESOLVED, ("endpoint", "toolCallingSupported"), False),
    ("tool-calling-present-once-planned", PLANNED, ("endpoint", "toolCallingSupported"), True),
    ("endpoint-type-known-from-the-class", RESOLVED, ("endpoint", "type"), True),
    ("url-absent-before-published", PLANNED, ("endpoint", "url"), False),
    ("resolved-absent-before-a-plan", RESOLVED, ("resolved",), False),
    ("constraints-absent-before-the-class", (spec(0),), ("constraints",), False),
    ("auth-secret-absent-until-issued", PLANNED, ("authSecretName",), False),
    (
        "classless-has-no-endpoint-type",
        (spec(0, class_name=None), klass(1, R.CLASSLESS_DEFAULTS, None), model(2)),
        ("model",),
        False,
    ),
    ("resolved-kept-on-the-plan-in-force", REPLANNED_AND_FAILED, ("resolved",), True),
]


def _has(status: dict[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = status
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


@pytest.mark.parametrize(
    ("steps", "path", "present"), [r[1:] for r in PRESENCE], ids=[r[0] for r in PRESENCE]
)
def test_fields_appear_when_they_are_known(
    steps: tuple[ob.Observation, ...], path: tuple[str, ...], present: bool
) -> None:
    assert _has(render_status(run(*steps)), path) is present


def test_a_class_without_token_publishes_no_secret_name() -> None:
    no_token = ob.ClassJudged(
        at=at(1), outcome=ClassOutcome(reason=R.CLASS_ADMITTED, policy=policy(token=False))
    )
    state = run(spec(0), no_token, model(2), ob.AuthSecretSeen(at=at(3), name="stale-auth"))
    assert "authSecretName" not in render_status(state)


def test_the_plan_in_force_is_reported_with_the_recalculation_counted() -> None:
    resolved = render_status(run(*REPLANNED_AND_FAILED))["resolved"]
    assert (resolved["deviceClass"], resolved["replanCount"]) == (plan().device_class, 1)


def test_times_are_rfc3339_in_utc() -> None:
    moscow = datetime(2025, 3, 1, 15, 0, 7, 900_000, tzinfo=timezone(timedelta(hours=3)))
    assert rfc3339(moscow) == "2025-03-01T12:00:07Z"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(observation_runs(30))
def test_every_status_is_well_formed(runs: list[ob.Observation]) -> None:
    state = run(*runs)
    status = render_status(state)
    assert _nulls(status) == []
    assert set(status) <= STATUS_KEYS
    for cond in status["conditions"]:
        assert list(cond) == CONDITION_KEYS and RFC3339.match(cond["lastTransitionTime"])
    if "resolved" in status:
        assert set(status["resolved"]) <= set(RESOLVED_KEYS)
        # The fold's count, rendered; verdicts before the first plan are no recalculation.
        assert status["resolved"]["replanCount"] == state.replan_count
        assert status["resolved"]["replanCount"] <= max(state.plan_attempts - 1, 0)
    # What the fold stamped is what judge says now.
    assert [(c.status, c.reason, c.message) for c in state.conditions] in (
        [],
        [(v.status, v.reason, v.message) for v in judge(state)],
    )


def test_a_retried_identical_failure_is_not_a_recalculation() -> None:
    failed = run(
        *RESOLVED, planned(3, R.NO_CAPACITY), planned(40, R.NO_CAPACITY), planned(80, R.NO_CAPACITY)
    )
    assert failed.plan_attempts == 1


# --- what each judge reads (rejudge skips a judge when none of it moved) ----------------


class _Reading:
    """An OrderState that notes every attribute a judge reads of it."""

    def __init__(self, state: OrderState) -> None:
        self._state, self.read = state, set[str]()

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self._state, name)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order_streams() | raw_event_streams())
def test_each_judge_reads_only_what_rejudge_watches(events: list[ev.Event]) -> None:
    state = OrderState()
    for event in events:
        state = evolve(state, event)
        for type_, judge_one in status._JUDGES:  # the judges themselves, one by one
            reading = _Reading(state)
            judge_one(reading)  # type: ignore[arg-type]
            assert reading.read <= status.READS[type_], type_


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order_streams() | raw_event_streams(), st.data())
def test_rejudge_after_any_change_is_judge(events: list[ev.Event], data: st.DataObject) -> None:
    # Whatever moved between two states, rejudge told what moved gives judge's verdicts.
    states = [OrderState()]
    for event in events:
        states.append(evolve(states[-1], event))
    before = data.draw(st.sampled_from(states))
    after = data.draw(st.sampled_from(states))
    changed = {k for k in OrderState.model_fields if getattr(before, k) != getattr(after, k)}
    changed.add("ever_ready")  # set after `before`'s conditions were judged (as fold says)
    rejudged = status.rejudge(after, changed, before.conditions)
    summary = [(v.type, v.status, v.reason, v.message, v.observed_generation) for v in rejudged]
    assert summary == [tuple(v) for v in judge(after)]


def test_a_failed_replan_shows_the_contract_and_bounds_of_the_workload_in_force() -> None:
    """A classless order serving, edited to name a class, and no room for the new plan
    (LaunchPlanInForce): what runs is still classless — no API contract (SPEC §4), its
    own replica bounds — so the status says so, not what the waiting edit asks."""
    classless = (spec(0, class_name=None), klass(1, R.CLASSLESS_DEFAULTS, None), model(2))
    serving = run(
        *classless,
        planned(3),
        ob.AuthSecretSeen(at=at(4), name="support-llm-auth"),
        ob.ApplySucceeded(at=at(5), plan=plan()),
    )
    before = render_status(serving)
    assert "model" not in before
    held = run(
        spec(20, 2, class_name="default-llm"),
        ob.ClassJudged(
            at=at(21),
            outcome=ClassOutcome(
                # Another priority: a question for the planner, not only a new ceiling.
                reason=R.CLASS_ADMITTED,
                policy=policy("default-llm", max_replicas=4, priority="inference-high"),
            ),
        ),
        model(22),
        planned(23, R.NO_CAPACITY, "no A100 free"),
        state=serving,
    )
    after = render_status(held)
    planned_cond = next(c for c in after["conditions"] if c["type"] == "Planned")
    assert planned_cond["reason"] == "LaunchPlanInForce"
    assert "model" not in after
    assert after["constraints"] == before["constraints"]
    assert after["constraints"]["maxReplicas"] == 2  # not the new class's 4


def test_a_failed_replan_to_classless_keeps_the_contract_of_the_class_workload_in_force() -> None:
    """The other way: a class's order serving Chat, edited to classless, no room for the
    new plan. The classless judgement carries no contract of its own, and the Chat one
    vanished, though the class's workload still serves it."""
    serving = run(*SERVING)
    assert render_status(serving)["model"] == {"endpointType": "Chat"}
    held = run(
        spec(20, 2, class_name=None),
        klass(21, R.CLASSLESS_DEFAULTS, None),
        ob.ModelJudged(
            at=at(22),
            outcome=ModelOutcome(reason=R.MODEL_RESOLVED, facts=facts(), endpoint_type=None),
        ),
        planned(23, R.NO_CAPACITY, "no A100 free"),
        state=serving,
    )
    after = render_status(held)
    planned_cond = next(c for c in after["conditions"] if c["type"] == "Planned")
    assert planned_cond["reason"] == "LaunchPlanInForce"
    assert after["model"] == {"endpointType": "Chat"}


def test_a_runtime_lost_after_serving_is_not_said_to_be_not_starting() -> None:
    """A container that does not start is the rollout's stall while it rolls out; once
    the order served, a crash loop is the runtime failing (SPEC §5: Failed when its API
    keeps failing), which the probes and the rollout already say."""
    crash = 'container "runtime": CrashLoopBackOff (last exit: OOMKilled)'
    served = run(
        *SERVING,
        workload(9, rolled_out=True),
        ob.WorkloadSeen(
            at=at(10), desired=1, ready=0, available=0, rollout="d/1", not_starting=crash
        ),
    )
    cond = served.condition(ORDER_CONDITIONS[3])
    assert cond is not None and cond.reason is Reason.ROLLED_OUT
