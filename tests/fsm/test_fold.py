"""The fold: every reason it can produce, the order's life story, and its properties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from fsm import events as ev
from fsm import machine
from fsm import observations as ob
from fsm.decide import decide
from fsm.fold import evolve, fold
from fsm.reasons import CATALOGUE, ConditionStatus, ConditionType, Phase, Reason
from fsm.state import PROBE_FAILURE_THRESHOLD, OrderState
from tests.support import reference_fold
from tests.support.strategies import (
    AVAILABLE,
    PLANNED,
    REPLANNED_AND_FAILED,
    RESOLVED,
    ROLLING,
    SERVING,
    applied,
    at,
    expected_leaf,
    klass,
    model,
    order_streams,
    plan,
    planned,
    probe,
    raw_event_streams,
    reasons_of,
    run,
    scaling,
    spec,
    workload,
)

C, R = ConditionType, Reason
T, F, U = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN
FIXTURES = Path(__file__).parent / "fixtures"
PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- every reason the fold can produce ----------------------------------------------------

SCENARIOS: list[tuple[Reason, ConditionType, tuple[ob.Observation, ...]]] = [
    (R.EVALUATING, C.CLASS_RESOLVED, (spec(0),)),
    (R.NOT_SERVING, C.SCALING_HEALTHY, (spec(0),)),
    (R.CLASS_ADMITTED, C.CLASS_RESOLVED, (spec(0), klass(1))),
    (
        R.CLASSLESS_DEFAULTS,
        C.CLASS_RESOLVED,
        (spec(0, class_name=None), klass(1, R.CLASSLESS_DEFAULTS, None)),
    ),
    *[(r, C.CLASS_RESOLVED, (spec(0), klass(1, r))) for r in reasons_of(C.CLASS_RESOLVED, F)],
    (R.AWAITING_CLASS, C.MODEL_RESOLVED, (spec(0), klass(1, R.CLASS_NOT_FOUND))),
    (R.MODEL_RESOLVED, C.MODEL_RESOLVED, RESOLVED),
    *[
        (r, C.MODEL_RESOLVED, (spec(0), klass(1), model(2, r)))
        for r in reasons_of(C.MODEL_RESOLVED, F)
    ],
    (R.AWAITING_MODEL, C.PLANNED, (spec(0), klass(1), model(2, R.MODEL_NOT_FOUND))),
    (R.PLAN_COMPUTED, C.PLANNED, PLANNED),
    (R.LAUNCH_PLAN_IN_FORCE, C.PLANNED, REPLANNED_AND_FAILED),
    *[(r, C.PLANNED, (*RESOLVED, planned(3, r))) for r in reasons_of(C.PLANNED, F)],
    (R.AWAITING_PLAN, C.WORKLOAD_READY, (*RESOLVED, planned(3, R.NO_CAPACITY))),
    (R.ROLLOUT_IN_PROGRESS, C.WORKLOAD_READY, ROLLING),
    (R.WORKLOAD_AVAILABLE, C.WORKLOAD_READY, AVAILABLE),
    (R.ROLLED_OUT, C.WORKLOAD_READY, (*SERVING, workload(9, rolled_out=True), workload(10, 0))),
    (R.DEVICES_NOT_ALLOCATED, C.WORKLOAD_READY, (*ROLLING, workload(6, 0, unallocated_since=5))),
    (
        R.PODS_UNSCHEDULABLE,
        C.WORKLOAD_READY,
        (
            *ROLLING,
            ob.WorkloadSeen(
                at=at(6), desired=1, ready=0, available=0, unschedulable="Insufficient cpu."
            ),
        ),
    ),
    (
        R.RUNTIME_NOT_STARTING,
        C.WORKLOAD_READY,
        (
            *ROLLING,
            ob.WorkloadSeen(
                at=at(6),
                desired=1,
                ready=0,
                available=0,
                not_starting='container "runtime": CrashLoopBackOff (last exit: OOMKilled)',
            ),
        ),
    ),
    (
        R.PREEMPTED_BY_PRIORITY,
        C.WORKLOAD_READY,
        (
            *SERVING,
            scaling(9, R.CAPACITY_TAKEN_BY_PRIORITY),
            ob.WorkloadSeen(at=at(10), desired=0, ready=0, available=0),
        ),
    ),
    (
        R.WORKLOAD_APPLY_FAILED,
        C.WORKLOAD_READY,
        (*PLANNED, ob.ApplyFailed(at=at(4), message="quota exceeded")),
    ),
    (
        R.CERTIFICATE_SECRET_MISSING,
        C.WORKLOAD_READY,
        (
            *PLANNED,
            ob.ApplyFailed(
                at=at(4),
                message="Secret 'wild' does not exist",
                reason=R.CERTIFICATE_SECRET_MISSING,
            ),
        ),
    ),
    (
        R.AUTH_SECRET_CONFLICT,
        C.WORKLOAD_READY,
        (
            *PLANNED,
            ob.ApplyFailed(
                at=at(4),
                message="Secret support/llm-auth exists and is not owned by this order",
                reason=R.AUTH_SECRET_CONFLICT,
            ),
        ),
    ),
    (R.AWAITING_WORKLOAD, C.READY, ROLLING),
    (R.AWAITING_FIRST_PROBE, C.READY, AVAILABLE),
    (R.HEALTH_CHECK_FAILED, C.READY, (*AVAILABLE, probe(8, ok=False))),
    (R.ENDPOINT_SERVING, C.READY, SERVING),
    (
        R.SERVICE_UNHEALTHY,
        C.READY,
        (*SERVING, *(probe(10 + i, ok=False) for i in range(PROBE_FAILURE_THRESHOLD))),
    ),
    (R.SCALING_WITHIN_BOUNDS, C.SCALING_HEALTHY, SERVING),
    (R.SCALE_UP_BLOCKED, C.SCALING_HEALTHY, (*SERVING, scaling(9, R.SCALE_UP_BLOCKED))),
    (
        R.CAPACITY_TAKEN_BY_PRIORITY,
        C.SCALING_HEALTHY,
        (*SERVING, scaling(9, R.CAPACITY_TAKEN_BY_PRIORITY)),
    ),
]


@pytest.mark.parametrize(
    ("reason", "type_", "steps"), SCENARIOS, ids=[str(r) for r, _, _ in SCENARIOS]
)
def test_the_fold_produces_every_reason(
    reason: Reason, type_: ConditionType, steps: tuple[ob.Observation, ...]
) -> None:
    cond = run(*steps).condition(type_)
    assert cond is not None
    assert (cond.reason, cond.status) == (reason, CATALOGUE[reason].status)


def test_the_scenarios_cover_the_whole_catalogue() -> None:
    assert {r for r, _, _ in SCENARIOS} == set(CATALOGUE)


# --- the order's life -------------------------------------------------------------------

LIFE = [
    ("spec seen", (spec(0),), Phase.PENDING, machine.Leaf.PENDING_CLASS),
    (
        "class refused",
        (spec(0), klass(1, R.CLASS_NOT_READY)),
        Phase.PENDING,
        machine.Leaf.PENDING_CLASS,
    ),
    (
        "model refused",
        (spec(0), klass(1), model(2, R.MODEL_NOT_FOUND)),
        Phase.PENDING,
        machine.Leaf.PENDING_MODEL,
    ),
    ("no plan", (*RESOLVED, planned(3, R.NO_CAPACITY)), Phase.PENDING, machine.Leaf.PENDING_PLAN),
    ("rolling out", ROLLING, Phase.PENDING, machine.Leaf.PENDING_WORKLOAD),
    ("awaiting probe", AVAILABLE, Phase.PENDING, machine.Leaf.PENDING_PROBE),
    ("probe fails first", (*AVAILABLE, probe(8, False)), Phase.PENDING, machine.Leaf.PENDING_PROBE),
    ("serving", SERVING, Phase.READY, machine.Leaf.READY_SERVING),
    ("plan in force", REPLANNED_AND_FAILED, Phase.READY, machine.Leaf.READY_PLAN_IN_FORCE),
    (
        "scale-up blocked",
        (*SERVING, scaling(9, R.SCALE_UP_BLOCKED)),
        Phase.DEGRADED,
        machine.Leaf.DEGRADED_SCALE_UP_BLOCKED,
    ),
    (
        "capacity taken",
        (*SERVING, scaling(9, R.CAPACITY_TAKEN_BY_PRIORITY)),
        Phase.DEGRADED,
        machine.Leaf.DEGRADED_CAPACITY_TAKEN,
    ),
    (
        "growth back",
        (*SERVING, scaling(9, R.SCALE_UP_BLOCKED), scaling(10, R.SCALING_WITHIN_BOUNDS)),
        Phase.READY,
        machine.Leaf.READY_SERVING,
    ),
    (
        "class breaks after ready",
        (*SERVING, klass(9, R.CLASS_NOT_FOUND)),
        Phase.PENDING,
        machine.Leaf.PENDING_CLASS,
    ),
    (
        "class comes back",
        (*SERVING, klass(9, R.CLASS_NOT_FOUND), klass(10)),
        Phase.READY,
        machine.Leaf.READY_SERVING,
    ),
    ("deleted", (*SERVING, ob.Deleted(at=at(9))), Phase.READY, machine.Leaf.DELETED),
]

# After the first Ready, a Deployment that finished its rollout and then lost every
# replica is the service failing (the probe judges it); another rollout (any change of
# the Deployment's spec, a Deployment made anew) or the first one keeps the order Pending.
SERVED = (*SERVING, workload(9, rolled_out=True))  # at rollout "d/1"

LOST = {
    "runtime down after its rollout": ((*SERVED, workload(10, 0)), R.ROLLED_OUT),
    "runtime down before the first Ready": (
        (*AVAILABLE, workload(7.5, rolled_out=True), workload(8, 0)),
        R.ROLLOUT_IN_PROGRESS,
    ),
    "a new plan rolling out": (
        (*SERVED, applied(10, "nvidia-t4"), workload(11, 0, rollout="d/2")),
        R.ROLLOUT_IN_PROGRESS,
    ),
    "a restart (a token rotated, kubectl rollout restart)": (
        (*SERVED, workload(10, 0, rollout="d/2")),
        R.ROLLOUT_IN_PROGRESS,
    ),
    "a Deployment made anew": ((*SERVED, workload(10, 0, rollout="e/1")), R.ROLLOUT_IN_PROGRESS),
    "a start from zero": (
        (*SERVED, workload(10, 0, desired=0, rollout="d/2"), workload(11, 0, rollout="d/3")),
        R.ROLLOUT_IN_PROGRESS,
    ),
    "a first rollout that never completed": ((*SERVING, workload(10, 0)), R.ROLLOUT_IN_PROGRESS),
    "pods that cannot be placed": (
        (*SERVED, workload(10, 0, unallocated_since=10)),
        R.DEVICES_NOT_ALLOCATED,
    ),
}


@pytest.mark.parametrize(("steps", "reason"), LOST.values(), ids=LOST.keys())
def test_a_workload_with_no_replica_left(steps: tuple[ob.Observation, ...], reason: Reason) -> None:
    state = run(*steps)
    workload_ready = state.condition(C.WORKLOAD_READY)
    assert workload_ready is not None and workload_ready.reason is reason
    serving = reason is R.ROLLED_OUT
    assert state.phase is (Phase.READY if serving else Phase.PENDING)


def test_a_runtime_down_after_ready_fails_the_order_and_recovers() -> None:
    down = run(*SERVED, workload(10, 0))
    failing = [probe(11 + i, ok=False) for i in range(PROBE_FAILURE_THRESHOLD)]
    failed = run(*failing, state=down)
    back = run(workload(20), probe(21), state=failed)
    assert [s.phase for s in (down, failed, back)] == [Phase.READY, Phase.FAILED, Phase.READY]
    assert [(c.type, c.status, c.reason) for c in failed.conditions[3:5]] == [
        (C.WORKLOAD_READY, T, R.ROLLED_OUT),
        (C.READY, F, R.SERVICE_UNHEALTHY),
    ]
    workload_ready = back.condition(C.WORKLOAD_READY)
    assert workload_ready is not None and workload_ready.reason is R.WORKLOAD_AVAILABLE


def test_a_rollout_is_recorded_once() -> None:
    served = run(*SERVED)
    assert decide(served, workload(10, rolled_out=True)) == []
    another = decide(served, workload(11, rolled_out=True, rollout="d/2"))
    assert another == [
        ev.WorkloadObserved(
            observed_at=at(11),
            desired_replicas=1,
            ready_replicas=1,
            available_replicas=1,
            rollout="d/2",
        ),
        ev.WorkloadRolledOut(observed_at=at(11), rollout="d/2"),
    ]


@pytest.mark.parametrize(
    ("steps", "phase", "leaf"), [row[1:] for row in LIFE], ids=[row[0] for row in LIFE]
)
def test_where_the_order_is(
    steps: tuple[ob.Observation, ...], phase: Phase, leaf: machine.Leaf
) -> None:
    state = run(*steps)
    assert (state.phase, state.machine_state) == (phase, leaf.value)


@pytest.mark.parametrize(
    ("failures", "phase", "reason"),
    [(n, Phase.READY, R.ENDPOINT_SERVING) for n in range(1, PROBE_FAILURE_THRESHOLD)]
    + [
        (PROBE_FAILURE_THRESHOLD, Phase.FAILED, R.SERVICE_UNHEALTHY),
        (PROBE_FAILURE_THRESHOLD + 2, Phase.FAILED, R.SERVICE_UNHEALTHY),
    ],
    ids=str,
)
def test_only_a_persistent_failure_after_ready_fails_the_order(
    failures: int, phase: Phase, reason: Reason
) -> None:
    state = run(*SERVING, *(probe(10 + i, ok=False) for i in range(failures)))
    ready = state.condition(C.READY)
    assert ready is not None
    assert (state.phase, ready.reason) == (phase, reason)


def test_a_success_returns_a_failed_order_to_ready() -> None:
    failed = run(*SERVING, *(probe(10 + i, ok=False) for i in range(PROBE_FAILURE_THRESHOLD)))
    back = run(probe(30), state=failed)
    assert (failed.phase, back.phase, back.probe_failures) == (Phase.FAILED, Phase.READY, 0)


# A model edited on a Ready order: replanned onto a T4 and applied.
EDITED = (
    spec(20, 2, name="meta-llama/Llama-3.1-8B"),
    klass(21),
    model(22, name="meta-llama/Llama-3.1-8B"),
    planned(23, device_class="nvidia-t4"),
    applied(24, "nvidia-t4"),
)
# Its new pods replaced the old ones (Recreate): no replica served for a while.
REPLACED = (*SERVED, *EDITED, workload(25, 0, rollout="d/2"), workload(26, rollout="d/2"))


def _ready_reason(state: OrderState) -> tuple[Phase, Reason]:
    ready = state.condition(C.READY)
    assert ready is not None
    return state.phase, ready.reason


def test_a_new_plans_workload_that_replaced_the_old_pods_is_ready_only_once_probed() -> None:
    """SPEC §3 step 7, for every plan: the last success answered for the old model."""
    back = run(*REPLACED)
    assert _ready_reason(back) == (Phase.PENDING, R.AWAITING_FIRST_PROBE)
    assert _ready_reason(run(probe(27), state=back)) == (Phase.READY, R.ENDPOINT_SERVING)
    failing = run(probe(27, ok=False), state=back)
    assert _ready_reason(failing) == (Phase.PENDING, R.HEALTH_CHECK_FAILED)
    assert "new plan" in failing.condition(C.READY).message  # type: ignore[union-attr]
    # It was serving before: failing persistently is Failed, as after any Ready.
    failures = (probe(27 + i, ok=False) for i in range(PROBE_FAILURE_THRESHOLD))
    assert _ready_reason(run(*failures, state=back)) == (Phase.FAILED, R.SERVICE_UNHEALTHY)


def test_a_new_plan_rolled_out_while_the_old_pods_served_stays_ready() -> None:
    rolled = run(*SERVED, *EDITED, workload(25, rollout="d/2"), workload(26, rollout="d/2"))
    assert _ready_reason(rolled) == (Phase.READY, R.ENDPOINT_SERVING)
    # Its first answer is still news (the log says which plan was answered for); the next
    # one is not.
    assert decide(rolled, probe(27)) == [ev.ProbeSucceeded(observed_at=at(27), status_code=200)]
    answered = run(probe(27), state=rolled)
    assert answered.probed_revision == answered.applied_revision
    assert decide(answered, probe(28)) == []


def test_an_order_back_on_the_plan_it_was_answered_for_needs_no_new_probe() -> None:
    """A victim's replicas returned, a runtime restarted: the same plan was answered for."""
    restarted = run(*SERVED, workload(10, 0, rollout="d/2"), workload(11, rollout="d/2"))
    assert _ready_reason(restarted) == (Phase.READY, R.ENDPOINT_SERVING)


def test_failures_before_the_first_ready_never_fail_the_order() -> None:
    state = run(*AVAILABLE, *(probe(8 + i, ok=False) for i in range(10)))
    ready = state.condition(C.READY)
    assert ready is not None
    assert (state.phase, ready.reason) == (Phase.PENDING, R.HEALTH_CHECK_FAILED)


def test_conditions_after_a_false_one_are_unknown_and_name_what_they_wait_for() -> None:
    state = run(spec(0), klass(1, R.CLASS_NOT_FOUND))
    assert [(c.type, c.status, c.reason) for c in state.conditions] == [
        (C.CLASS_RESOLVED, F, R.CLASS_NOT_FOUND),
        (C.MODEL_RESOLVED, U, R.AWAITING_CLASS),
        (C.PLANNED, U, R.AWAITING_MODEL),
        (C.WORKLOAD_READY, U, R.AWAITING_PLAN),
        (C.READY, U, R.AWAITING_WORKLOAD),
        (C.SCALING_HEALTHY, U, R.NOT_SERVING),
    ]


def test_last_transition_time_moves_only_when_the_status_does() -> None:
    failing = run(*RESOLVED, planned(3, R.NO_CAPACITY))
    other_reason = run(planned(40, R.NO_ACCELERATOR_WITH_ENOUGH_MEMORY), state=failing)
    fixed = run(planned(80), state=other_reason)
    times = [s.condition(C.PLANNED).last_transition_time for s in (failing, other_reason, fixed)]  # type: ignore[union-attr]
    assert times == [at(3), at(3), at(80)]


# --- replans and the plan in force ------------------------------------------------------


def test_replan_count_is_a_fold_of_recalculations() -> None:
    """One edit, one recalculation: its retries while capacity moves (each message counts
    what it found) and the plan they end with are that recalculation's verdicts."""
    first = run(*SERVING)
    failed = run(*REPLANNED_AND_FAILED)
    retried = failed
    for t, free in enumerate((2, 3, 2, 3)):
        retried = run(planned(30 + t, R.NO_CAPACITY, f"no A100 free ({free})"), state=retried)
    succeeded = run(planned(40, device_class="mig-1g10gb"), state=retried)
    assert [s.replan_count for s in (first, failed, retried, succeeded)] == [0, 1, 1, 1]
    assert retried.plan_attempts == failed.plan_attempts + 4
    # A second edit is a second recalculation.
    mistral = "mistralai/Mistral-7B-Instruct-v0.3"
    edited = (spec(50, 3, name=mistral), klass(51), model(52, name=mistral))
    again = run(*edited, planned(53), state=succeeded)
    assert again.replan_count == 2


def test_verdicts_before_the_first_plan_are_no_recalculation() -> None:
    """Waiting for room, the order's verdict changed twice before its first plan: the
    plan was calculated once, not recalculated (the seed: replanCount counts how many
    times the plan was recalculated)."""
    waited = run(
        *RESOLVED,
        planned(3, R.NO_CAPACITY, "no A100 free"),
        planned(4, R.NO_CAPACITY, "no A100 free on 2 nodes"),
        planned(5),
    )
    assert (waited.plan_attempts, waited.replan_count) == (3, 0)
    edited = run(
        spec(20, 2, name="meta-llama/Llama-3.1-8B"),
        klass(21),
        model(22, name="meta-llama/Llama-3.1-8B"),
        state=waited,
    )
    assert run(planned(23), state=edited).replan_count == 1


def test_a_failed_recalculation_keeps_the_plan_in_force_and_the_phase() -> None:
    state = run(*REPLANNED_AND_FAILED)
    cond = state.condition(C.PLANNED)
    assert cond is not None
    assert (cond.status, cond.reason) == (T, R.LAUNCH_PLAN_IN_FORCE)
    assert "no A100 free" in cond.message
    assert state.plan == state.plan_in_force == plan()
    assert state.phase is Phase.READY


def test_a_failed_replan_without_a_held_plan_drops_the_plan() -> None:
    edited = (
        spec(10, 2, name="meta-llama/Llama-3.1-8B"),
        klass(11),
        model(12, name="meta-llama/Llama-3.1-8B"),
    )
    state = run(*PLANNED, *edited, planned(13, R.NO_CAPACITY))
    assert state.plan is None
    assert state.condition(C.PLANNED).status is F  # type: ignore[union-attr]


def test_a_device_class_that_never_allocates_is_tried_and_releases_the_plan() -> None:
    state = run(*ROLLING, workload(300, 0, unallocated_since=5))
    assert state.tried_device_classes == ("nvidia-a100",)
    assert state.plan_in_force is None


def test_an_edited_order_searches_afresh() -> None:
    tried = run(*ROLLING, workload(300, 0, unallocated_since=5))
    edited = run(spec(301, 2, name="meta-llama/Llama-3.1-8B"), state=tried)
    assert (tried.tried_device_classes, edited.tried_device_classes) == (("nvidia-a100",), ())


def test_events_after_deletion_change_nothing_but_the_count() -> None:
    deleted = run(*SERVING, ob.Deleted(at=at(9)))
    later = evolve(deleted, ev.ProbeFailed(observed_at=at(10), error="gone"))
    assert later == deleted.model_copy(update={"version": deleted.version + 1})


# --- properties -------------------------------------------------------------------------


def _incremental(events: list[ev.Event]) -> list[OrderState]:
    states = [OrderState()]
    for event in events:
        states.append(evolve(states[-1], event))
    return states


@PROPERTY
@given(order_streams())
def test_fold_of_every_prefix_is_the_incremental_state(events: list[ev.Event]) -> None:
    states = _incremental(events)
    for i in range(len(events) + 1):
        assert fold(events[:i]) == states[i]
        assert fold(events[i:], start=states[i]) == states[-1]


@PROPERTY
@given(order_streams())
def test_every_state_survives_a_snapshot(events: list[ev.Event]) -> None:
    for state in _incremental(events):
        assert OrderState.model_validate(state.model_dump(mode="json")) == state


@PROPERTY
@given(raw_event_streams())
def test_the_fold_takes_any_event_in_any_order(events: list[ev.Event]) -> None:
    for state in _incremental(events):
        assert OrderState.model_validate(state.model_dump(mode="json")) == state
        assert [c.type for c in state.conditions] in ([], list(ConditionType))


@PROPERTY
@given(order_streams() | raw_event_streams())
def test_the_machine_state_is_where_the_conditions_say(events: list[ev.Event]) -> None:
    for state in _incremental(events)[1:]:
        if state.deleted:
            assert state.machine_state == machine.Leaf.DELETED.value
            continue
        summary = tuple((c.status, c.reason) for c in state.conditions)
        assert state.machine_state == expected_leaf(summary).value
        assert state.phase is machine.phase_of(state.machine_state)


@PROPERTY
@given(order_streams() | raw_event_streams())
def test_last_transition_time_changes_exactly_when_the_status_does(events: list[ev.Event]) -> None:
    states = _incremental(events)
    for before, event, after in zip(states[1:], events[1:], states[2:], strict=False):
        if before.deleted:
            continue
        for old, new in zip(before.conditions, after.conditions, strict=True):
            # Stated as "set to the event's time when the status changes, else kept": two
            # events of one observation share an instant, so a second change at the same
            # time leaves the timestamp equal (as metav1.Condition's would be).
            if old.status is not new.status:
                assert new.last_transition_time == event.observed_at
            else:
                assert new.last_transition_time == old.last_transition_time


# --- many orders ------------------------------------------------------------------------


def test_ten_thousand_orders_fold_without_quadratic_work() -> None:
    templates = []
    for steps in (
        SERVING,
        REPLANNED_AND_FAILED,
        (*SERVING, scaling(9, R.SCALE_UP_BLOCKED)),
        (*RESOLVED, planned(3, R.NO_CAPACITY)),
    ):
        state, events = OrderState(), []
        for o in steps:
            for e in decide(state, o):
                events.append(e)
                state = evolve(state, e)
        templates.append(events)

    def fold_orders(n: int) -> tuple[int, int]:
        before = machine.cache_info()
        # Events are immutable values: orders may share them without copying.
        phases = [fold(templates[i % len(templates)]).phase for i in range(n)]
        after = machine.cache_info()
        assert phases.count(Phase.DEGRADED) == n // len(templates)
        return after.misses - before.misses, after.hits - before.hits

    fold_orders(len(templates))  # the machine learns every walk these streams need
    misses, hits = fold_orders(10_000)
    events_folded = sum(len(t) for t in templates) * 10_000 // len(templates)
    # The machine ran no new walk for 10k orders: every settle was a lookup, one per event,
    # and one cursor served them all (transitions' add_model is O(models)).
    assert misses == 0
    assert hits == events_folded
    assert len(machine.machine().models) == 1


def test_the_core_has_no_clock() -> None:
    # Time reaches the core only inside observations and events; replay depends on it.
    core = Path(machine.__file__).parent
    readers = ("datetime.now", "datetime.utcnow", "time.time(", "time.monotonic(", "date.today(")
    offenders = [
        f"{path.name}: {reader}"
        for path in sorted(core.glob("*.py"))
        for reader in readers
        if reader in path.read_text(encoding="utf-8")
    ]
    assert offenders == []


# --- the fast fold against the plain one ---------------------------------------------------


@PROPERTY
@given(order_streams() | raw_event_streams())
def test_the_fold_equals_the_plain_reference_fold(events: list[ev.Event]) -> None:
    # fold judges again only the conditions whose facts moved and copies the state once;
    # the reference judges all six from scratch every event and copies twice.
    expected = [OrderState()]
    for event in events:
        expected.append(reference_fold.evolve(expected[-1], event))
    assert _incremental(events) == expected
    for i in range(len(events) + 1):
        assert fold(events[:i]) == expected[i]
        # From a snapshot (a state rebuilt from JSON, as the controller restores one).
        restored = OrderState.model_validate(expected[i].model_dump(mode="json"))
        assert fold(events[i:], start=restored) == expected[-1]


@PROPERTY
@given(order_streams() | raw_event_streams(), order_streams() | raw_event_streams())
def test_the_fold_from_any_start_equals_the_reference(
    before: list[ev.Event], events: list[ev.Event]
) -> None:
    # A start whose conditions this fold did not judge from its facts, as a snapshot of an
    # older release would be: another stream's state with its conditions shuffled.
    start = reference_fold.fold(before)
    start = start.model_copy(update={"conditions": tuple(reversed(start.conditions))})
    assert fold(events, start=start) == reference_fold.fold(events, start=start)


def test_the_fold_equals_the_reference_on_the_frozen_v1_stream() -> None:
    recorded = json.loads((FIXTURES / "order_stream_v1.json").read_text(encoding="utf-8"))
    events = [ev.from_payload(r["type"], r["version"], r["payload"]) for r in recorded["events"]]
    assert fold(events) == reference_fold.fold(events)


def test_a_failed_order_given_a_new_plan_stays_failed_until_a_probe_answers() -> None:
    """A Failed order whose class was edited: its new plan applied, no probe of it yet.
    The streak is kept (it was reset: Ready, "The inference API answered the probe.",
    with no probe answering); the new workload's first answer makes it Ready."""
    failed = run(*SERVED, *(probe(10 + i, ok=False) for i in range(PROBE_FAILURE_THRESHOLD)))
    assert _ready_reason(failed) == (Phase.FAILED, R.SERVICE_UNHEALTHY)
    replaced = run(
        *EDITED, workload(25, 0, rollout="d/2"), workload(26, rollout="d/2"), state=failed
    )
    assert _ready_reason(replaced) == (Phase.FAILED, R.SERVICE_UNHEALTHY)
    still = run(probe(30, ok=False), state=replaced)
    assert _ready_reason(still) == (Phase.FAILED, R.SERVICE_UNHEALTHY)
    assert _ready_reason(run(probe(31), state=still)) == (Phase.READY, R.ENDPOINT_SERVING)


def test_failures_before_a_new_plan_do_not_count_against_it() -> None:
    """Two failed probes of the old workload, then a new plan whose pods replaced the old
    ones: its first failure keeps it Pending (HealthCheckFailed), it is not the third of
    a streak that makes the order Failed."""
    shaky = (*SERVED, probe(10, ok=False), probe(11, ok=False))
    assert _ready_reason(run(*shaky)) == (Phase.READY, R.ENDPOINT_SERVING)
    replaced = (*EDITED, workload(25, 0, rollout="d/2"), workload(26, rollout="d/2"))
    failing = run(*shaky, *replaced, probe(30, ok=False))
    assert _ready_reason(failing) == (Phase.PENDING, R.HEALTH_CHECK_FAILED)
    failures = (probe(30 + i, ok=False) for i in range(PROBE_FAILURE_THRESHOLD))
    assert _ready_reason(run(*shaky, *replaced, *failures)) == (Phase.FAILED, R.SERVICE_UNHEALTHY)
