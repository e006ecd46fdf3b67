"""decide (what an observation adds to the log), needs_plan, and effects (what to do)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm import events as ev
from fsm import observations as ob
from fsm.decide import decide, excluded_device_classes, held_devices, needs_plan
from fsm.effects import (
    ApplyWorkload,
    EnsureAuthSecret,
    PublishStatus,
    Recheck,
    RequestPlan,
    ScheduleProbe,
    effects,
)
from fsm.fold import evolve, fold
from fsm.placement.arbitration import Taker, Taking, taken_verdict
from fsm.reasons import Phase, Reason
from fsm.state import DEVICE_ALLOCATION_GRACE_SECONDS, PROBE_FAILURE_THRESHOLD, OrderState
from fsm.status import render_status
from fsm.values import ClassOutcome, EndpointType, ExposureType, ModelOutcome, PlanOutcome
from tests.support.strategies import (
    AVAILABLE,
    PLANNED,
    REPLANNED_AND_FAILED,
    RESOLVED,
    ROLLING,
    SERVING,
    at,
    facts,
    klass,
    model,
    model_ref,
    observation_runs,
    observations,
    plan,
    planned,
    policy,
    probe,
    run,
    scaling,
    spec,
    workload,
)

R = Reason
PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def events_of(state: OrderState, o: ob.Observation) -> list[str]:
    return [e.TYPE for e in decide(state, o)]


# --- heartbeats are not recorded ---------------------------------------------------------

REPEATS = [
    ("spec", RESOLVED, spec(10)),
    ("class", RESOLVED, klass(10)),
    ("model", RESOLVED, model(10)),
    ("plan", PLANNED, planned(10)),
    ("plan-failure", (*RESOLVED, planned(3, R.NO_CAPACITY)), planned(10, R.NO_CAPACITY)),
    ("apply", ROLLING, ob.ApplySucceeded(at=at(10), plan=plan())),
    (
        "apply-failed",
        (*PLANNED, ob.ApplyFailed(at=at(4), message="quota")),
        ob.ApplyFailed(at=at(10), message="quota"),
    ),
    ("workload", AVAILABLE, workload(10)),
    (
        "endpoint",
        AVAILABLE,
        ob.EndpointSeen(at=at(10), url="https://x.example.com", type=ExposureType.EXTERNAL),
    ),
    ("secret", ROLLING, ob.AuthSecretSeen(at=at(10), name="support-llm-auth")),
    ("healthy-probe", SERVING, probe(10)),
    ("failing-probe-before-ready", (*AVAILABLE, probe(8, False)), probe(10, False)),
    ("scaling-healthy", SERVING, scaling(10, R.SCALING_WITHIN_BOUNDS)),
    (
        "scaling-blocked",
        (*SERVING, scaling(9, R.SCALE_UP_BLOCKED)),
        scaling(10, R.SCALE_UP_BLOCKED),
    ),
    (
        "capacity-taken",
        (*SERVING, scaling(9, R.CAPACITY_TAKEN_BY_PRIORITY)),
        scaling(10, R.CAPACITY_TAKEN_BY_PRIORITY),
    ),
    ("healthy-plan-not-recomputed", SERVING, planned(10, R.NO_CAPACITY)),
    ("deleted", (*SERVING, ob.Deleted(at=at(9))), probe(10, False)),
]


@pytest.mark.parametrize(("steps", "again"), [r[1:] for r in REPEATS], ids=[r[0] for r in REPEATS])
def test_an_observation_that_changes_nothing_records_nothing(
    steps: tuple[ob.Observation, ...], again: ob.Observation
) -> None:
    assert decide(run(*steps), again) == []


CHANGES = [
    ("first-spec", (), spec(0), ["SpecObserved"]),
    ("edited-spec", RESOLVED, spec(10, 2), ["SpecObserved"]),
    ("class-rejudged-for-new-generation", (*RESOLVED, spec(10, 2)), klass(11), ["ClassResolved"]),
    ("class-refused", RESOLVED, klass(10, R.CLASS_NOT_READY), ["ClassFailed"]),
    ("model-refused", RESOLVED, model(10, R.MODEL_NOT_READY), ["ModelFailed"]),
    ("first-plan", RESOLVED, planned(3), ["PlanComputed"]),
    (
        "plan-failure-changes",
        (*RESOLVED, planned(3, R.NO_CAPACITY)),
        planned(10, R.QUANTIZATION_MISMATCH),
        ["PlanFailed"],
    ),
    ("capacity-appears", (*RESOLVED, planned(3, R.NO_CAPACITY)), planned(10), ["PlanComputed"]),
    ("probe-fails-after-ready", SERVING, probe(10, False), ["ProbeFailed"]),
    ("probe-recovers", (*SERVING, probe(9, False)), probe(10), ["ProbeSucceeded"]),
    ("deleted", SERVING, ob.Deleted(at=at(10)), ["OrderDeleted"]),
    (
        "claims-stuck-past-grace",
        ROLLING,
        workload(6 + DEVICE_ALLOCATION_GRACE_SECONDS, 0, unallocated_since=6),
        ["WorkloadObserved", "DeviceClassTried"],
    ),
    (
        "claims-stuck-within-grace",
        ROLLING,
        workload(60, 0, unallocated_since=6),
        ["WorkloadObserved"],
    ),
]


@pytest.mark.parametrize(
    ("steps", "o", "expected"), [r[1:] for r in CHANGES], ids=[r[0] for r in CHANGES]
)
def test_an_observation_that_changes_something_records_it(
    steps: tuple[ob.Observation, ...], o: ob.Observation, expected: list[str]
) -> None:
    assert events_of(run(*steps), o) == expected


@pytest.mark.parametrize("failures", range(PROBE_FAILURE_THRESHOLD + 3))
def test_failures_after_ready_count_up_to_the_threshold_and_then_go_quiet(failures: int) -> None:
    state = run(*SERVING, *(probe(10 + i, False) for i in range(failures)))
    counting = failures < PROBE_FAILURE_THRESHOLD
    assert events_of(state, probe(100, False)) == (["ProbeFailed"] if counting else [])


def test_a_probe_is_told_apart_by_its_time() -> None:
    state = run(*SERVING, probe(10, False))
    assert decide(state, probe(10, False)) == []
    assert decide(state, probe(9, True)) == []  # older than the last recorded probe


def test_an_older_generation_of_the_spec_is_ignored() -> None:
    state = run(*RESOLVED, spec(10, 3))
    assert decide(state, spec(11, 2)) == []


@pytest.mark.parametrize(
    "o",
    [
        ob.ClassJudged(at=at(5), outcome=ClassOutcome(reason=R.CLASS_ADMITTED)),
        ob.ModelJudged(at=at(5), outcome=ModelOutcome(reason=R.MODEL_RESOLVED)),
        ob.ScalingSeen(at=at(5), reason=R.CAPACITY_TAKEN_BY_PRIORITY),
        ob.ScalingSeen(at=at(5), reason=R.NO_CAPACITY),
    ],
    ids=[
        "class-ok-without-policy",
        "model-ok-without-facts",
        "taken-by-nobody",
        "not-a-scaling-reason",
    ],
)
def test_malformed_verdicts_are_refused(o: ob.Observation) -> None:
    with pytest.raises(ValueError):
        decide(run(*RESOLVED), o)


def test_a_plan_outcome_that_is_ok_must_carry_a_plan() -> None:
    with pytest.raises(ValueError):
        decide(run(*RESOLVED), ob.PlanJudged(at=at(5), outcome=PlanOutcome(reason=R.PLAN_COMPUTED)))


# --- needs_plan and what the planner must leave out --------------------------------------

NEEDS_PLAN = [
    ("nothing-observed", (), False),
    ("class-not-judged", (spec(0),), False),
    ("model-refused", (spec(0), klass(1), model(2, R.MODEL_NOT_FOUND)), False),
    ("resolved-never-planned", RESOLVED, True),
    ("planned", PLANNED, False),
    ("last-attempt-failed", (*RESOLVED, planned(3, R.NO_CAPACITY)), True),
    ("spec-edited-not-rejudged", (*SERVING, spec(10, 2)), False),
    # An edit that changes nothing the planner reads asks it nothing new.
    ("spec-edited-to-the-same-and-rejudged", (*SERVING, spec(10, 2), klass(11), model(12)), False),
    (
        "model-edited-and-rejudged",
        (
            *SERVING,
            spec(10, 2, name="meta-llama/Llama-3.1-8B"),
            klass(11),
            model(12, name="meta-llama/Llama-3.1-8B"),
        ),
        True,
    ),
    ("plan-in-force-after-failure", REPLANNED_AND_FAILED, True),
    ("device-class-tried", (*ROLLING, workload(300, 0, unallocated_since=5)), True),
    (
        "class-policy-changed",
        (
            *SERVING,
            ob.ClassJudged(
                at=at(9),
                outcome=ClassOutcome(reason=R.CLASS_ADMITTED, policy=policy(max_replicas=8)),
            ),
        ),
        True,
    ),
    ("deleted", (*RESOLVED, ob.Deleted(at=at(5))), False),
]


@pytest.mark.parametrize(
    ("steps", "expected"), [r[1:] for r in NEEDS_PLAN], ids=[r[0] for r in NEEDS_PLAN]
)
def test_needs_plan(steps: tuple[ob.Observation, ...], expected: bool) -> None:
    assert needs_plan(run(*steps)) is expected


def test_the_planner_skips_tried_classes_and_the_order_keeps_its_place() -> None:
    serving = run(*SERVING)
    tried = run(*ROLLING, workload(300, 0, unallocated_since=5))
    assert held_devices(serving) == plan().devices
    assert (excluded_device_classes(tried), held_devices(tried)) == (("nvidia-a100",), ())


# --- properties -------------------------------------------------------------------------


@PROPERTY
@given(st.data())
def test_deciding_again_on_the_same_observation_records_nothing(data: st.DataObject) -> None:
    state = run(*data.draw(observation_runs(30)))
    o = data.draw(observations(state))
    after = fold(decide(state, o), start=state)
    assert decide(after, o) == []


@PROPERTY
@given(observation_runs(30))
def test_decide_emits_only_events_that_change_the_state(runs: list[ob.Observation]) -> None:
    state = OrderState()
    for o in runs:
        for event in decide(state, o):
            after = evolve(state, event)
            assert after.model_dump(exclude={"version", "last_event_at"}) != state.model_dump(
                exclude={"version", "last_event_at"}
            ), event
            state = after


@PROPERTY
@given(observation_runs(30))
def test_effects_are_a_function_of_the_state(runs: list[ob.Observation]) -> None:
    state = run(*runs)
    restored = OrderState.model_validate(state.model_dump(mode="json"))
    assert effects(state) == effects(restored)


# --- effects ----------------------------------------------------------------------------


class Repair:
    """Stands for an ApplyWorkload with repair=True: the applied plan, compared live."""


def kinds(state: OrderState) -> list[type]:
    return [
        Repair if isinstance(c, ApplyWorkload) and c.repair else type(c) for c in effects(state)
    ]


EFFECTS = [
    ("nothing-seen", (), []),
    (
        "classless-no-token-yet",
        (spec(0, class_name=None), klass(1, R.CLASSLESS_DEFAULTS, None)),
        [EnsureAuthSecret, PublishStatus],
    ),
    ("resolved", RESOLVED, [EnsureAuthSecret, RequestPlan, PublishStatus]),
    ("planned-waits-for-the-token", PLANNED, [EnsureAuthSecret, PublishStatus]),
    (
        "planned-with-token",
        (*PLANNED, ob.AuthSecretSeen(at=at(4), name="support-llm-auth")),
        [EnsureAuthSecret, ApplyWorkload, PublishStatus],
    ),
    # From the first apply on, every pass asks for the token Secret and compares the
    # workload with the live objects (level-based repair).
    ("rolling", ROLLING, [EnsureAuthSecret, Repair, PublishStatus]),
    (
        "claims-waiting",
        (*ROLLING, workload(60, 0, unallocated_since=6)),
        [EnsureAuthSecret, Repair, Recheck, PublishStatus],
    ),
    ("available", AVAILABLE, [EnsureAuthSecret, Repair, ScheduleProbe, PublishStatus]),
    ("serving", SERVING, [EnsureAuthSecret, Repair, ScheduleProbe, PublishStatus]),
    (
        "plan-in-force",
        REPLANNED_AND_FAILED,
        [EnsureAuthSecret, RequestPlan, Repair, ScheduleProbe, PublishStatus],
    ),
    (
        "apply-failed",
        (*ROLLING, ob.ApplyFailed(at=at(6), message="quota")),
        [EnsureAuthSecret, ApplyWorkload, PublishStatus],
    ),
    ("deleted", (*SERVING, ob.Deleted(at=at(9))), []),
]


@pytest.mark.parametrize(
    ("steps", "expected"), [r[1:] for r in EFFECTS], ids=[r[0] for r in EFFECTS]
)
def test_effects(steps: tuple[ob.Observation, ...], expected: list[type]) -> None:
    assert kinds(run(*steps)) == expected


def test_apply_carries_what_the_workload_is_built_from() -> None:
    state = run(*PLANNED, ob.AuthSecretSeen(at=at(4), name="support-llm-auth"))
    (apply,) = [c for c in effects(state) if isinstance(c, ApplyWorkload)]
    assert (apply.plan, apply.model_ref, apply.facts, apply.auth_secret_name) == (
        plan(),
        model_ref(),
        facts(),
        "support-llm-auth",
    )
    assert apply.policy == policy()


def test_an_edited_model_is_applied_even_when_the_plan_is_the_same() -> None:
    edited = run(
        *SERVING,
        spec(10, 2, name="meta-llama/Llama-3.1-8B"),
        klass(11),
        model(12, name="meta-llama/Llama-3.1-8B"),
        planned(13),
    )
    assert ApplyWorkload in kinds(edited)
    applied = run(ob.ApplySucceeded(at=at(14), plan=plan()), state=edited)
    assert ApplyWorkload not in kinds(applied)
    assert Repair in kinds(applied)


def _planned_condition(state: OrderState) -> dict[str, object]:
    status = render_status(state)
    return next(c for c in status["conditions"] if c["type"] == "Planned")


def test_an_edit_that_changes_nothing_the_planner_reads_keeps_the_plan() -> None:
    """A spec written again as it was (a new generation, the same model and class): no
    replan, which would move the order off the place it holds, and the verdict given
    answers the new generation."""
    edited = run(*SERVING, spec(10, 2), klass(11), model(12))
    assert not needs_plan(edited)
    assert RequestPlan not in kinds(edited)
    assert ApplyWorkload not in kinds(edited)
    assert edited.replan_count == 0
    planned_now = _planned_condition(edited)
    assert (planned_now["reason"], planned_now["observedGeneration"]) == ("PlanComputed", 2)


def test_an_edit_undone_after_its_replan_failed_is_answered_by_the_plan_in_force() -> None:
    """The model edited (its replan found no room: LaunchPlanInForce), then edited back:
    the plan in force was computed for that spec, so it is chosen again, whatever a
    replan (never offered the order's own place) would have said."""
    undone = (spec(30, 3), klass(31), model(32))
    state = run(*REPLANNED_AND_FAILED, *undone)
    assert needs_plan(state)  # the failed verdict was for another question
    chosen = decide(state, planned(33, R.NO_CAPACITY, "no A100 free"))
    assert [e.TYPE for e in chosen] == ["PlanComputed"]
    back = run(planned(33, R.NO_CAPACITY, "no A100 free"), state=state)
    assert back.plan == back.plan_in_force == plan()
    assert back.replan_count == state.replan_count  # the plan set aside is no recalculation
    assert not needs_plan(back)
    assert ApplyWorkload not in kinds(back)  # nothing new to roll out
    assert Repair in kinds(back)
    assert back.phase is Phase.READY
    planned_now = _planned_condition(back)
    assert (planned_now["status"], planned_now["reason"]) == ("True", "PlanComputed")
    assert planned_now["observedGeneration"] == 3


def _model_at(t: float, **moved_facts: str) -> ob.ModelJudged:
    """The model judged again: the hub at another upstream commit, or facts read by a
    release that names more of them."""
    moved = facts().model_copy(update=moved_facts)
    outcome = ModelOutcome(reason=R.MODEL_RESOLVED, facts=moved, endpoint_type=EndpointType.CHAT)
    return ob.ModelJudged(at=at(t), outcome=outcome)


@pytest.mark.parametrize(
    "moved",
    [{"revision": "r2"}, {"weights_file": "m-q4_k_m.gguf"}],
    ids=["newer-commit", "gguf-file-named-after-an-upgrade"],
)
def test_an_edit_undone_at_a_newer_upstream_commit_still_keeps_the_plan(
    moved: dict[str, str],
) -> None:
    """An edit re-reads the model's facts; past the hub cache they carry the newest
    commit. The commit alone asks the planner nothing (a new commit never replans), so
    neither a spec written again nor an edit undone moves the order for it. Nor the GGUF
    file facts of an older release did not name."""
    again = run(*SERVING, spec(10, 2), klass(11), _model_at(12, **moved))
    assert not needs_plan(again)
    undone = run(*REPLANNED_AND_FAILED, spec(30, 3), klass(31), _model_at(32, **moved))
    chosen = decide(undone, planned(33, device_class="nvidia-l4"))
    assert [e.TYPE for e in chosen] == ["PlanComputed"]
    assert run(planned(33, device_class="nvidia-l4"), state=undone).plan == plan()


def test_a_new_plan_not_yet_applied_gives_way_when_its_edit_is_undone() -> None:
    """The edited model got a plan on another device class, not applied yet (its apply
    failed); the edit undone, the plan in force is the plan again, and the other one is
    never rolled out: what is applied (a retry, since the last apply failed) is the plan
    in force, as it was applied."""
    edited = run(
        *SERVING,
        spec(20, 2, name="meta-llama/Llama-3.1-8B"),
        klass(21),
        model(22, name="meta-llama/Llama-3.1-8B"),
        planned(23, device_class="nvidia-l4"),
        ob.ApplyFailed(at=at(24), message="quota"),
    )
    assert edited.plan == plan("nvidia-l4")
    back = run(spec(30, 3), klass(31), model(32), planned(33), state=edited)
    assert back.plan == back.plan_in_force == plan()
    (apply,) = [c for c in effects(back) if isinstance(c, ApplyWorkload)]
    assert (apply.plan, apply.model_ref, apply.generation) == (plan(), model_ref(), 1)


def test_probes_come_faster_while_a_failure_is_being_confirmed() -> None:
    (healthy,) = [c for c in effects(run(*SERVING)) if isinstance(c, ScheduleProbe)]
    (failing,) = [
        c for c in effects(run(*SERVING, probe(9, False))) if isinstance(c, ScheduleProbe)
    ]
    assert failing.after_seconds < healthy.after_seconds


def test_a_served_order_held_back_by_its_class_is_still_probed() -> None:
    """The class went (an upgrade renamed it): the order is Pending on ClassNotFound, its
    workload runs on, and the probe keeps watching it at the Ready pace."""
    (healthy,) = [c for c in effects(run(*SERVING)) if isinstance(c, ScheduleProbe)]
    held = run(*SERVING, klass(10, Reason.CLASS_NOT_FOUND))
    assert held.phase is Phase.PENDING
    (probe_held,) = [c for c in effects(held) if isinstance(c, ScheduleProbe)]
    assert probe_held.after_seconds == healthy.after_seconds
    # Failures meanwhile are counted: the order is Failed as soon as the class is back.
    failing = run(*(probe(11 + i, False) for i in range(PROBE_FAILURE_THRESHOLD)), state=held)
    back = run(klass(20), state=failing)
    assert back.phase is Phase.FAILED
    # One that never served is not probed behind a broken chain.
    never = run(*AVAILABLE, klass(10, Reason.CLASS_NOT_FOUND))
    assert not [c for c in effects(never) if isinstance(c, ScheduleProbe)]


def test_the_allocation_recheck_lands_on_the_end_of_the_grace_period() -> None:
    state = run(*ROLLING, workload(60, 0, unallocated_since=20))
    (recheck,) = [c for c in effects(state) if isinstance(c, Recheck)]
    assert recheck.after_seconds == DEVICE_ALLOCATION_GRACE_SECONDS - 40


def test_publish_status_is_the_rendered_status() -> None:
    state = run(*SERVING)
    assert effects(state)[-1] == PublishStatus(status=render_status(state))


def test_the_request_for_a_replan_names_the_place_held() -> None:
    (request,) = [c for c in effects(run(*REPLANNED_AND_FAILED)) if isinstance(c, RequestPlan)]
    assert (request.held_devices, request.plan_in_force) == (plan().devices, plan())


# --- a reclaim decided again after its record (docs/priority.md, docs/faults.md) ----------


def test_a_take_decided_again_from_the_same_read_of_the_victim_is_recorded_once() -> None:
    """A crash (or a failed patch) between a take's record and its scale: the next pass
    decides the take again from the victim's Deployment as it was — the same take, not a
    second one. A take from a newer read (the victim was scaled since) is a new take."""

    def take(t: int, basis: str, victim: str = "support/low") -> ob.ReplicasReclaimed:
        return ob.ReplicasReclaimed(at=at(t), victim=victim, replicas=1, basis=basis)

    state = fold(decide(OrderState(), take(1, "100")))
    assert state.last_reclaim_basis == ("support/low", "100")
    assert events_of(state, take(2, "100")) == []  # after a restart: the same take
    assert events_of(state, take(2, "130")) == ["ReplicasReclaimed"]  # scaled since
    assert events_of(state, take(2, "100", victim="support/other")) == ["ReplicasReclaimed"]
    # A take without a basis (recorded before the basis was) is never taken for another.
    unbased = fold(decide(OrderState(), take(1, "")))
    assert unbased.last_reclaim_basis is None
    assert events_of(unbased, take(2, "")) == ["ReplicasReclaimed"]


def test_a_take_names_its_victim_only_to_an_order_of_the_victims_namespace() -> None:
    """The taker's Events are its tenant's to read: another tenant's order is counted."""
    take = ob.ReplicasReclaimed(at=at(1), victim="analytics/low", replicas=1, basis="7")
    (mine,) = decide(OrderState().model_copy(update={"namespace": "analytics"}), take)
    (theirs,) = decide(OrderState().model_copy(update={"namespace": "support"}), take)
    assert isinstance(mine, ev.ReplicasReclaimed) and isinstance(theirs, ev.ReplicasReclaimed)
    assert "analytics/low" in mine.message
    assert theirs.message == "took 1 replica(s) of 1 in another namespace, of lower priority"
    assert theirs.victim == "analytics/low"  # the log keeps the name for the administrator


def test_a_victim_taken_from_before_the_upgrade_stops_naming_the_taker() -> None:
    """A stream of a release that named other tenants' takers in the message: the same
    take judged again, by the message that counts them, is said anew, once."""
    state = run(*SERVING)  # an order of namespace "support"
    old = ev.CapacityTaken(
        observed_at=at(20),
        taken_by="shop/high",
        priority_class_name="hi",
        replicas=1,
        message="1 replica(s) taken by shop/high (hi), of higher priority; ...",
    )
    state = evolve(state, old)
    verdict = taken_verdict(Taking((Taker("shop/high", "hi", 1),)), "support")
    seen = ob.ScalingSeen(
        at=at(30),
        reason=verdict.reason,
        message=verdict.message,
        taken_by=verdict.taken_by,
        priority_class_name="hi",
        replicas=1,
    )
    state = run(seen, state=state)
    conditions = {c["type"]: c["message"] for c in render_status(state)["conditions"]}
    assert "shop/high" not in conditions["ScalingHealthy"]
    assert "1 in another namespace" in conditions["ScalingHealthy"]
    assert events_of(state, seen) == []  # and once only


def test_a_plan_recorded_before_the_upgrade_stops_naming_other_tenants_claims() -> None:
    """The Planned message of a PlanComputed that named every claim to free: folded now,
    it names its own namespace's and counts the others."""
    state = run(*PLANNED)
    old = ev.PlanComputed(
        observed_at=at(4),
        plan=plan(),
        reclaims=("shop/low-gpu-x", "support/mine-gpu-y"),
        message="nvidia-a100 x1; needs lower-priority claim(s) freed: shop/low-gpu-x, "
        "support/mine-gpu-y",
    )
    state = evolve(state, old)
    planned = {c["type"]: c["message"] for c in render_status(state)["conditions"]}["Planned"]
    assert planned.endswith("freed: support/mine-gpu-y, 1 in another namespace")


def test_a_take_recorded_without_a_message_counts_each_other_tenants_taker() -> None:
    """`taken_by` names every taker; each is named or counted on its own."""
    state = run(*SERVING)  # an order of namespace "support"
    old = ev.CapacityTaken(
        observed_at=at(20), taken_by="support/mine, shop/secret-order", replicas=2, message=""
    )
    state = evolve(state, old)
    conditions = {c["type"]: c["message"] for c in render_status(state)["conditions"]}
    assert conditions["ScalingHealthy"] == (
        "2 replica(s) taken by support/mine, 1 in another namespace."
    )
