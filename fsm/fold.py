"""The fold: `evolve(state, event) -> state` and `fold(events) -> state`.

Replaying a stream and running live are the same function, so the status, the replan
count, LaunchPlanInForce and the probe streak are all folds of the log and nothing is
stored beside it. `evolve` records the event's facts, judges the six conditions
(`fold`, after its first event, only those whose facts moved), stamps them Kubernetes-style
(lastTransitionTime moves only when a condition's status changes) and lets the machine
settle on the order's new state.

Pure: the only time it knows is the events' `observed_at`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from fsm import events as ev
from fsm import machine
from fsm.identity import RECLAIMS_NOTE, reclaims_note, shown_to
from fsm.reasons import Phase, Reason
from fsm.state import (
    PROBE_FAILURE_THRESHOLD,
    ClassJudgement,
    Condition,
    Endpoint,
    ModelJudgement,
    OrderState,
    PlanAttempt,
    PlanBasis,
    Scaling,
    Workload,
    plan_basis,
    probe_error_text,
    same_place,
)
from fsm.status import Verdict, judge, rejudge

__all__ = ["evolve", "fold", "plan_basis"]

Updates = dict[str, Any]


def _spec(s: OrderState, e: ev.SpecObserved) -> Updates:
    updates: Updates = {
        "spec_seen": True,
        "generation": e.generation,
        "model_ref": e.model_ref,
        "class_name": e.class_name,
        "name": e.name or s.name,
        "namespace": e.namespace or s.namespace,
    }
    if s.spec_seen and e.generation != s.generation:
        # An edited order is a new search: device classes that did not hold the old one
        # may hold this one.
        updates["tried_device_classes"] = ()
        updates["tried_free_units"] = ()
    return updates


def _class_resolved(s: OrderState, e: ev.ClassResolved) -> Updates:
    return {
        "klass": ClassJudgement(
            class_name=e.class_name,
            reason=e.reason,
            message=e.message,
            policy=e.policy,
            generation=s.generation,
        )
    }


def _class_failed(s: OrderState, e: ev.ClassFailed) -> Updates:
    judgement = ClassJudgement(
        class_name=e.class_name,
        reason=e.reason,
        message=e.message,
        policy=None,
        generation=s.generation,
    )
    return {"klass": judgement}


def _model_resolved(s: OrderState, e: ev.ModelResolved) -> Updates:
    judgement = ModelJudgement(
        reason=e.reason,
        message=e.message,
        facts=e.facts,
        endpoint_type=e.endpoint_type,
        generation=s.generation,
    )
    return {"model": judgement}


def _model_failed(s: OrderState, e: ev.ModelFailed) -> Updates:
    judgement = ModelJudgement(
        reason=e.reason,
        message=e.message,
        facts=e.facts,
        endpoint_type=None,
        generation=s.generation,
    )
    return {"model": judgement}


def _attempt(
    s: OrderState, e: ev.PlanComputed | ev.PlanFailed, ok: bool, reason: Reason
) -> PlanAttempt:
    message = e.message
    if isinstance(e, ev.PlanComputed) and e.reclaims:
        head, note, _ = message.partition(RECLAIMS_NOTE)
        if note:  # as the order's tenant may read them, however old the event
            message = head + reclaims_note(s.namespace, e.reclaims)
    return PlanAttempt(
        ok=ok,
        reason=reason,
        message=message,
        candidates=e.candidates,
        excluded_device_classes=e.excluded_device_classes,
        reclaims=e.reclaims if isinstance(e, ev.PlanComputed) else (),
        basis=plan_basis(s),
        generation=s.generation,
        at=e.observed_at,
    )


def _new_question(s: OrderState, e: ev.PlanComputed | ev.PlanFailed) -> bool:
    """Is this verdict a recalculation: the first for what the planner reads of the spec,
    policy and facts now, or with other device classes excluded? A retry of the same
    question (capacity may have appeared; its message counts what it found) is the same
    recalculation, and so is one after an edit the planner reads nothing of."""
    a = s.attempt
    return (
        a is None
        or not a.basis.asks_as(plan_basis(s))
        or a.excluded_device_classes != e.excluded_device_classes
    )


def _plan_computed(s: OrderState, e: ev.PlanComputed) -> Updates:
    # The place held answers a spec whose edit asks the planner nothing new: no
    # recalculation. Rendered as it was applied (the spec came back to it), nothing new to
    # apply; rendered otherwise (the exposure, the ceiling, a recipe replaced under it
    # and not applied yet), a new revision of the workload on that place.
    held = s.plan_in_force
    basis = plan_basis(s)
    applied_with = s.applied_basis
    answered = (
        held is not None
        and same_place(e.plan, held)
        and applied_with is not None
        and applied_with.asks_as(basis, token=False)
    )
    again = (
        answered and e.plan == held and applied_with is not None and applied_with.renders_as(basis)
    )
    return {
        "plan_attempts": s.plan_attempts + 1,
        "replans": s.replans + (s.plan_revision > 0 and not answered and _new_question(s, e)),
        "attempt": _attempt(s, e, True, Reason.PLAN_COMPUTED),
        "plan": e.plan,
        "plan_revision": s.applied_revision if again else s.plan_revision + 1,
    }


def _plan_failed(s: OrderState, e: ev.PlanFailed) -> Updates:
    held, current = s.plan_in_force, s.plan
    # The order keeps the plan it holds (SPEC §3.1), on its recipe replaced since if it
    # was (not applied yet: still to be); without one it has no plan.
    kept = (
        current if current is not None and held is not None and same_place(current, held) else held
    )
    updates: Updates = {
        "plan_attempts": s.plan_attempts + 1,
        "replans": s.replans + (s.plan_revision > 0 and _new_question(s, e)),
        "attempt": _attempt(s, e, False, e.reason),
        "plan": kept,
    }
    if held is not None and kept == held:
        updates["plan_revision"] = s.applied_revision  # nothing new to apply
    return updates


def _applied(s: OrderState, e: ev.WorkloadApplied) -> Updates:
    current = e.plan == s.plan
    a = s.attempt
    if current and a is not None and a.ok:
        basis: PlanBasis | None = a.basis
    else:
        basis = s.applied_basis or plan_basis(s)
    updates: Updates = {
        "plan_in_force": e.plan,
        "applied_basis": basis,
        "apply_error": None,
        "apply_error_reason": Reason.WORKLOAD_APPLY_FAILED,
        "applied_revision": s.plan_revision if current else s.applied_revision,
        "applied_at": e.observed_at,
    }
    failed = s.ever_ready and s.probe_failures >= PROBE_FAILURE_THRESHOLD
    if current and s.plan_revision != s.applied_revision and not failed:
        # A new plan's workload: the failures that make an order Failed are its own, not
        # the old workload's (two of those and one of the new plan's were three). A Failed
        # order keeps its streak: only an answer lifts it (a reset made it Ready with no
        # probe answering, the moment the new plan was applied).
        updates["probe_failures"] = 0
    return updates


def _apply_failed(s: OrderState, e: ev.WorkloadApplyFailed) -> Updates:
    return {"apply_error": e.message, "apply_error_reason": e.reason}


def _workload(s: OrderState, e: ev.WorkloadObserved) -> Updates:
    workload = Workload(
        desired_replicas=e.desired_replicas,
        ready_replicas=e.ready_replicas,
        available_replicas=e.available_replicas,
        unallocated_since=e.unallocated_since,
        unschedulable=e.unschedulable,
        rollout=e.rollout,
        not_starting=e.not_starting,
    )
    return {"workload": workload}


def _rolled_out(s: OrderState, e: ev.WorkloadRolledOut) -> Updates:
    return {"rolled_out": e.rollout}


def _endpoint(s: OrderState, e: ev.EndpointPublished) -> Updates:
    return {"endpoint": Endpoint(url=e.url, type=e.type)}


def _auth_secret(s: OrderState, e: ev.AuthSecretIssued) -> Updates:
    updates: Updates = {"auth_secret_name": e.name}
    if s.apply_error is not None and s.apply_error_reason is Reason.AUTH_SECRET_CONFLICT:
        # The name is the order's own again: what waited for it is applied now.
        updates |= {"apply_error": None, "apply_error_reason": Reason.WORKLOAD_APPLY_FAILED}
    return updates


def _probe_ok(s: OrderState, e: ev.ProbeSucceeded) -> Updates:
    return {
        "probe_ok": True,
        "probe_failures": 0,
        "probe_error": "",
        "last_probe_at": e.observed_at,
        "probed_revision": s.applied_revision,
    }


def _probe_failed(s: OrderState, e: ev.ProbeFailed) -> Updates:
    error = probe_error_text(e.status_code, e.error)
    return {
        "probe_ok": False,
        "probe_failures": s.probe_failures + 1,
        "probe_error": error,
        "last_probe_at": e.observed_at,
    }


def _scaling_blocked(s: OrderState, e: ev.ScalingBlocked) -> Updates:
    return {"scaling": Scaling(reason=Reason.SCALE_UP_BLOCKED, message=e.message)}


def _capacity_taken(s: OrderState, e: ev.CapacityTaken) -> Updates:
    taken_by = shown_to(s.namespace, e.taken_by.split(", "))  # Taking.by: the takers
    message = e.message or f"{e.replicas} replica(s) taken by {taken_by}."
    scaling = Scaling(
        reason=Reason.CAPACITY_TAKEN_BY_PRIORITY,
        message=message,
        taken_by=e.taken_by,
        priority_class_name=e.priority_class_name,
        replicas=e.replicas,
    )
    return {"scaling": scaling}


def _scaling_recovered(s: OrderState, e: ev.ScalingRecovered) -> Updates:
    return {"scaling": None}


def _device_class_tried(s: OrderState, e: ev.DeviceClassTried) -> Updates:
    updates: Updates = {}
    if e.device_class not in s.tried_device_classes:
        updates["tried_device_classes"] = (*s.tried_device_classes, e.device_class)
    if e.free_units is not None:
        others = tuple(t for t in s.tried_free_units if t[0] != e.device_class)
        updates["tried_free_units"] = (*others, (e.device_class, e.free_units))
    if s.plan_in_force is not None and s.plan_in_force.device_class == e.device_class:
        # Its claims were never allocated: the order holds no place on that plan.
        updates["plan_in_force"] = None
    return updates


def _device_class_retried(s: OrderState, e: ev.DeviceClassRetried) -> Updates:
    return {
        "tried_device_classes": tuple(d for d in s.tried_device_classes if d != e.device_class),
        "tried_free_units": tuple(t for t in s.tried_free_units if t[0] != e.device_class),
    }


def _recipe_replaced(s: OrderState, e: ev.RecipeReplaced) -> Updates:
    return {"plan": e.plan, "plan_revision": s.plan_revision + 1}


def _replicas_reclaimed(s: OrderState, e: ev.ReplicasReclaimed) -> Updates:
    return {
        "last_reclaim": (e.observed_at, e.victim),
        "last_reclaim_basis": (e.victim, e.basis) if e.basis else None,
    }


def _deleted(s: OrderState, e: ev.OrderDeleted) -> Updates:
    return {"deleted": True}


_HANDLERS: dict[type[ev.Event], Callable[[OrderState, Any], Updates]] = {
    ev.SpecObserved: _spec,
    ev.ClassResolved: _class_resolved,
    ev.ClassFailed: _class_failed,
    ev.ModelResolved: _model_resolved,
    ev.ModelFailed: _model_failed,
    ev.PlanComputed: _plan_computed,
    ev.PlanFailed: _plan_failed,
    ev.WorkloadApplied: _applied,
    ev.WorkloadApplyFailed: _apply_failed,
    ev.WorkloadObserved: _workload,
    ev.WorkloadRolledOut: _rolled_out,
    ev.EndpointPublished: _endpoint,
    ev.AuthSecretIssued: _auth_secret,
    ev.ProbeSucceeded: _probe_ok,
    ev.ProbeFailed: _probe_failed,
    ev.ScalingBlocked: _scaling_blocked,
    ev.CapacityTaken: _capacity_taken,
    ev.ScalingRecovered: _scaling_recovered,
    ev.DeviceClassTried: _device_class_tried,
    ev.DeviceClassRetried: _device_class_retried,
    ev.RecipeReplaced: _recipe_replaced,
    ev.ReplicasReclaimed: _replicas_reclaimed,
    ev.OrderDeleted: _deleted,
}


def _stamp(
    previous: tuple[Condition, ...], verdicts: Sequence[Verdict | Condition], at: datetime
) -> tuple[Condition, ...]:
    if not previous:
        previous_by_index: Sequence[Condition | None] = [None] * len(verdicts)
    else:
        previous_by_index = previous
    out: list[Condition] = []
    for old, v in zip(previous_by_index, verdicts, strict=True):
        if old is not None and (
            v is old  # rejudge saw nothing it reads change
            or (
                old.status is v.status
                and old.reason is v.reason
                and old.message == v.message
                and old.observed_generation == v.observed_generation
            )
        ):
            out.append(old)  # unchanged: keep the very object, snapshots stay small
            continue
        moved = old is None or old.status is not v.status
        out.append(
            Condition(
                type=v.type,
                status=v.status,
                reason=v.reason,
                message=v.message,
                last_transition_time=at if moved or old is None else old.last_transition_time,
                observed_generation=v.observed_generation,
            )
        )
    return tuple(out)


_SERVING = (Phase.READY, Phase.DEGRADED)
# What evolve sets after judging. The conditions of a state were judged before these
# were set, so the next event's rejudging counts them as changed (`ever_ready` is the one
# a judge reads).
_SET_AFTER_JUDGING = frozenset(
    {"conditions", "machine_state", "phase", "state_since", "ever_ready"}
)


def evolve(state: OrderState, event: ev.Event) -> OrderState:
    """The state after `event`. Events after OrderDeleted are counted and otherwise ignored.

    Every condition is judged afresh from the new facts, whatever `state`'s conditions say.
    """
    return _evolve(state, event, incremental=False)


def fold(events: Iterable[ev.Event], start: OrderState | None = None) -> OrderState:
    """Fold a stream (or, from a snapshot `start`, the rest of it).

    The same as evolving event by event, but only the first event judges all six
    conditions: `start` may come from anywhere (a snapshot of an older release, whose
    judges said things differently). From then on the conditions are this fold's own
    judgement of the facts, so an event judges again only those whose facts it moved
    (`fsm.status.rejudge`).
    """
    state = OrderState() if start is None else start
    incremental = False
    for event in events:
        state = _evolve(state, event, incremental)
        incremental = True
    return state


def _evolve(state: OrderState, event: ev.Event, incremental: bool) -> OrderState:
    if state.deleted:
        return state.model_copy(update={"version": state.version + 1})
    try:
        handler = _HANDLERS[type(event)]
    except KeyError:
        raise TypeError(f"the order fold does not know {type(event).__name__}") from None
    updates = handler(state, event)
    changed = updates.keys() | _SET_AFTER_JUDGING
    updates["version"] = state.version + 1
    updates["last_event_at"] = event.observed_at
    # One copy per event: the facts, then what judging them settles, written into that
    # copy before anyone else can see it.
    new = state.model_copy(update=updates)

    verdicts = rejudge(new, changed, state.conditions) if incremental else judge(new)
    if isinstance(event, ev.OrderDeleted):
        leaf, phase = machine.delete(state.machine_state), state.phase
    else:
        leaf = machine.settle(state.machine_state, verdicts)
        phase = machine.phase_of(leaf) or state.phase
    moved = leaf.value != state.machine_state or state.state_since is None
    settled = {
        "conditions": _stamp(state.conditions, verdicts, event.observed_at),
        "machine_state": leaf.value,
        "phase": phase,
        "state_since": event.observed_at if moved else state.state_since,
        "ever_ready": new.ever_ready or phase in _SERVING,
    }
    new.__dict__.update(settled)
    new.__pydantic_fields_set__.update(settled)
    return new
