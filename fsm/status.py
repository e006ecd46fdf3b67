"""From an order's facts to its six conditions, and from its state to `status`.

`judge` is the one place that says what each condition is, given the facts the fold
holds: the five readiness conditions answer in order, a condition after one that is not
True is Unknown with the reason naming what it waits for, and `ScalingHealthy` speaks of
growth only while the order serves. The fold calls `judge` after every event and stamps
the verdicts with transition times (see `fsm.fold`); the machine reads them to choose the
order's state (see `fsm.machine`).

`render_status` turns an `OrderState` into the dict the controller writes to the status
subresource, with SPEC §2.1's camelCase names; absent fields are omitted, never null.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime
from typing import Any, NamedTuple

from fsm.reasons import CATALOGUE, ConditionStatus, ConditionType, Reason
from fsm.state import (
    PROBE_FAILURE_THRESHOLD,
    Condition,
    OrderState,
    plan_basis,
    serving_basis,
    unprobed_plan,
)
from fsm.values import Plan

__all__ = [
    "MESSAGE_LIMIT",
    "READS",
    "Verdict",
    "clipped",
    "judge",
    "rejudge",
    "render_condition",
    "render_status",
    "rfc3339",
]

_T, _F, _U = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN
_C = ConditionType


class Verdict(NamedTuple):
    """A condition before it is stamped with its lastTransitionTime."""

    type: ConditionType
    status: ConditionStatus
    reason: Reason
    message: str
    observed_generation: int


# The CRDs cap a condition's message at 32768 characters (as metav1.Condition does), and
# a status holding a longer one is refused whole. Messages quote what they are given (a
# catalog's condition, every name a class misses): the status shows their beginning, and
# the log keeps every word (`ai-inference why`).
MESSAGE_LIMIT = 4096


def clipped(message: str) -> str:
    """`message`, cut to MESSAGE_LIMIT characters with what was left out counted."""
    if len(message) <= MESSAGE_LIMIT:
        return message
    tail = f"… ({len(message) - MESSAGE_LIMIT} more characters)"
    return message[: MESSAGE_LIMIT - len(tail)] + tail


def rfc3339(moment: datetime) -> str:
    """Kubernetes' time format: UTC, whole seconds, `Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _verdict(type_: ConditionType, reason: Reason, message: str, generation: int) -> Verdict:
    info = CATALOGUE[reason]
    return Verdict(type_, info.status, reason, message or info.meaning, generation)


# The reason a condition carries while the one before it is not True.
_AWAITING: dict[ConditionType, Reason] = {
    _C.MODEL_RESOLVED: Reason.AWAITING_CLASS,
    _C.PLANNED: Reason.AWAITING_MODEL,
    _C.WORKLOAD_READY: Reason.AWAITING_PLAN,
    _C.READY: Reason.AWAITING_WORKLOAD,
    _C.SCALING_HEALTHY: Reason.NOT_SERVING,
}


def _class(s: OrderState) -> Verdict:
    k = s.klass
    if k is None:
        return _verdict(_C.CLASS_RESOLVED, Reason.EVALUATING, "", s.generation)
    return _verdict(_C.CLASS_RESOLVED, k.reason, k.message, k.generation)


def _model(s: OrderState) -> Verdict:
    m = s.model
    if m is None:
        return _verdict(_C.MODEL_RESOLVED, Reason.EVALUATING, "", s.generation)
    return _verdict(_C.MODEL_RESOLVED, m.reason, m.message, m.generation)


def _planned(s: OrderState) -> Verdict:
    a = s.attempt
    if a is None:
        return _verdict(_C.PLANNED, Reason.EVALUATING, "", s.generation)
    # An edit that asks the planner nothing new is answered by the verdict already given.
    gen = s.generation if a.basis.asks_as(plan_basis(s)) else a.generation
    if a.ok:
        return _verdict(_C.PLANNED, Reason.PLAN_COMPUTED, a.message, gen)
    if s.plan_in_force is not None:
        # SPEC §3.1: a failed recalculation leaves the order on the plan it holds.
        message = f"Recalculation failed ({a.reason}): {a.message or CATALOGUE[a.reason].meaning}"
        return _verdict(_C.PLANNED, Reason.LAUNCH_PLAN_IN_FORCE, message, gen)
    return _verdict(_C.PLANNED, a.reason, a.message, gen)


def _workload(s: OrderState) -> Verdict:
    w, gen = s.workload, s.generation
    if s.apply_error is not None:
        return _verdict(_C.WORKLOAD_READY, s.apply_error_reason, s.apply_error, gen)
    if w is not None and w.available_replicas >= 1:
        replicas = f"{w.available_replicas}/{w.desired_replicas} replicas available."
        return _verdict(_C.WORKLOAD_READY, Reason.WORKLOAD_AVAILABLE, replicas, gen)
    taken = s.scaling
    if (
        w is not None
        and w.desired_replicas == 0
        and taken is not None
        and taken.reason is Reason.CAPACITY_TAKEN_BY_PRIORITY
    ):
        # Scaled to zero for a higher-priority order: not serving, so ScalingHealthy is
        # not evaluated and this condition is where the user reads why.
        return _verdict(_C.WORKLOAD_READY, Reason.PREEMPTED_BY_PRIORITY, taken.message, gen)
    if w is not None and w.unallocated_since is not None:
        since = f"Device claims unallocated since {rfc3339(w.unallocated_since)}."
        return _verdict(_C.WORKLOAD_READY, Reason.DEVICES_NOT_ALLOCATED, since, gen)
    if w is not None and w.unschedulable:
        return _verdict(_C.WORKLOAD_READY, Reason.PODS_UNSCHEDULABLE, w.unschedulable, gen)
    if w is not None and w.desired_replicas >= 1 and w.rollout == s.rolled_out and s.ever_ready:
        # The Deployment is at a rollout seen complete, and lost every replica since: the
        # runtime fails (SPEC §3 step 8). Pending would say it is not serving *yet*.
        lost = f"0/{w.desired_replicas} replicas available after the rollout completed."
        return _verdict(_C.WORKLOAD_READY, Reason.ROLLED_OUT, lost, gen)
    if w is not None and w.not_starting:
        # Not a rollout that takes its time: one that cannot end without someone acting.
        return _verdict(_C.WORKLOAD_READY, Reason.RUNTIME_NOT_STARTING, w.not_starting, gen)
    if w is None and s.plan_in_force is None:
        return _verdict(_C.WORKLOAD_READY, Reason.EVALUATING, "", gen)
    progress = (
        "" if w is None else f"{w.available_replicas}/{w.desired_replicas} replicas available."
    )
    return _verdict(_C.WORKLOAD_READY, Reason.ROLLOUT_IN_PROGRESS, progress, gen)


def _ready(s: OrderState) -> Verdict:
    gen, streak = s.generation, s.probe_failures
    if s.ever_ready and streak >= PROBE_FAILURE_THRESHOLD:
        message = f"Probes failed {streak} times in a row since the last success: {s.probe_error}"
        return _verdict(_C.READY, Reason.SERVICE_UNHEALTHY, message, gen)
    if unprobed_plan(s):
        failed = (
            s.probe_ok is False
            and s.last_probe_at is not None
            and s.applied_at is not None
            and s.last_probe_at >= s.applied_at
        )
        if failed:
            message = f"Probe of the new plan's workload failed: {s.probe_error}"
            return _verdict(_C.READY, Reason.HEALTH_CHECK_FAILED, message, gen)
        return _verdict(_C.READY, Reason.AWAITING_FIRST_PROBE, "", gen)
    if s.ever_ready or s.probe_ok:
        message = ""
        if streak:
            message = (
                f"The inference API answered; the last {streak} probe(s) failed "
                f"({PROBE_FAILURE_THRESHOLD} make the order Failed): {s.probe_error}"
            )
        return _verdict(_C.READY, Reason.ENDPOINT_SERVING, message, gen)
    if s.probe_ok is None:
        return _verdict(_C.READY, Reason.AWAITING_FIRST_PROBE, "", gen)
    return _verdict(_C.READY, Reason.HEALTH_CHECK_FAILED, f"Probe failed: {s.probe_error}", gen)


def _scaling(s: OrderState) -> Verdict:
    if s.scaling is None:
        return _verdict(_C.SCALING_HEALTHY, Reason.SCALING_WITHIN_BOUNDS, "", s.generation)
    return _verdict(_C.SCALING_HEALTHY, s.scaling.reason, s.scaling.message, s.generation)


_JUDGES = (
    (_C.CLASS_RESOLVED, _class),
    (_C.MODEL_RESOLVED, _model),
    (_C.PLANNED, _planned),
    (_C.WORKLOAD_READY, _workload),
    (_C.READY, _ready),
    (_C.SCALING_HEALTHY, _scaling),
)


# What each judge reads of the state, and what a condition waiting on a broken chain
# reads. `rejudge` skips a judge when none of it changed; tests/fsm/test_status.py holds
# these against what the judges are seen to read.
READS: dict[ConditionType, frozenset[str]] = {
    _C.CLASS_RESOLVED: frozenset({"klass", "generation"}),
    _C.MODEL_RESOLVED: frozenset({"model", "generation"}),
    _C.PLANNED: frozenset(
        # plan_basis: the policy is the class judgement's
        {"attempt", "plan_in_force", "generation", "class_name", "klass", "policy"}
        | {"model_ref", "model"}
    ),
    _C.WORKLOAD_READY: frozenset(
        {
            "apply_error",
            "apply_error_reason",
            "workload",
            "rolled_out",
            "ever_ready",
            "scaling",
            "plan_in_force",
            "generation",
        }
    ),
    _C.READY: frozenset(
        {
            "ever_ready",
            "probe_failures",
            "probe_error",
            "probe_ok",
            "generation",
            # unprobed_plan
            "phase",
            "probed_revision",
            "applied_revision",
            "last_probe_at",
            "applied_at",
        }
    ),
    _C.SCALING_HEALTHY: frozenset({"scaling", "generation"}),
}
_AWAITING_READS = frozenset({"generation"})


def rejudge(
    state: OrderState, changed: AbstractSet[str], previous: Sequence[Condition]
) -> tuple[Verdict | Condition, ...]:
    """`judge(state)` where `previous` are the conditions judged from a state that
    differed from `state` only in the fields `changed`: a condition whose judge reads none
    of them, behind a chain exactly as broken as before, is given back as the previous
    `Condition` object itself (its verdict would be the same). The fold calls this once
    per event; most events move one or two conditions."""
    if not previous:
        return judge(state)
    out: list[Verdict | Condition] = []
    blocked = was_blocked = False
    for (type_, judge_one), old in zip(_JUDGES, previous, strict=True):
        reads = _AWAITING_READS if blocked else READS[type_]
        verdict: Verdict | Condition
        if blocked == was_blocked and changed.isdisjoint(reads):
            verdict = old
        elif blocked:
            verdict = _verdict(type_, _AWAITING[type_], "", state.generation)
        else:
            verdict = judge_one(state)
        out.append(verdict)
        was_blocked = was_blocked or old.status is not _T
        blocked = blocked or verdict.status is not _T
    return tuple(out)


def judge(state: OrderState) -> tuple[Verdict, ...]:
    """The six conditions in SPEC order, as the facts of `state` make them."""
    verdicts: list[Verdict] = []
    blocked = False
    for type_, judge_one in _JUDGES:
        if blocked:
            # Not evaluated: the facts may be there, but they speak of a chain that broke.
            verdicts.append(_verdict(type_, _AWAITING[type_], "", state.generation))
            continue
        verdict = judge_one(state)
        verdicts.append(verdict)
        blocked = verdict.status is not _T
    return tuple(verdicts)


# --- the status dict ----------------------------------------------------------------


def render_condition(cond: Condition) -> dict[str, Any]:
    return {
        "type": str(cond.type),
        "status": str(cond.status),
        "reason": str(cond.reason),
        "message": clipped(cond.message),
        "lastTransitionTime": rfc3339(cond.last_transition_time),
        "observedGeneration": cond.observed_generation,
    }


def _resolved(plan: Plan, replan_count: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "deviceClass": plan.device_class,
        "acceleratorProductName": plan.accelerator_product_name,
        "acceleratorMemoryGiB": plan.accelerator_memory_gib,
        "acceleratorCount": plan.accelerator_count,
        "placementMode": str(plan.placement_mode),
        "sharingMode": str(plan.sharing_mode),
    }
    if plan.share_percent is not None:
        out["sharePercent"] = plan.share_percent
    out |= {
        "recipe": plan.recipe,
        "cpu": plan.cpu,
        "memory": plan.memory,
        "modelVolume": plan.model_volume,
        "replanCount": replan_count,
    }
    return out


def render_status(state: OrderState) -> dict[str, Any]:
    """`status` of the InferenceService, camelCase, absent fields omitted."""
    out: dict[str, Any] = {"phase": str(state.phase)}
    if state.spec_seen:
        out["observedGeneration"] = state.generation
    out["conditions"] = [render_condition(c) for c in state.conditions]

    # How the endpoint is reached, what it serves, whether it checks a token and how far
    # it scales are the workload's in force, which a failed replan leaves on its older
    # policy and model: a classless one has no API contract (SPEC §4), whatever the
    # edit waiting for room asks.
    serving = serving_basis(state)
    policy = serving.policy
    # (A stream from before the applied basis kept the endpoint type has the model's.)
    endpoint_type = serving.endpoint_type or (state.model and state.model.endpoint_type)
    resolved = state.condition(_C.MODEL_RESOLVED)
    if (
        policy is not None
        and policy.class_name is not None
        and endpoint_type is not None
        # No contract while the order's model is unresolved; resolved under classless
        # mode it has none of its own, and the class's workload in force still serves.
        and resolved is not None
        and resolved.status is _T
    ):
        out["model"] = {"endpointType": str(endpoint_type)}

    endpoint: dict[str, Any] = {}
    if state.endpoint is not None:
        endpoint["url"] = state.endpoint.url
        endpoint["type"] = str(state.endpoint.type)
    elif serving.policy is not None:
        endpoint["type"] = str(serving.policy.exposure.type)
    if state.plan is not None:
        endpoint["toolCallingSupported"] = state.plan.tool_calling_supported
    if endpoint:
        out["endpoint"] = endpoint

    if (
        serving.policy is not None
        and serving.policy.exposure.needs_token
        and state.auth_secret_name is not None
    ):
        out["authSecretName"] = state.auth_secret_name

    if policy is not None:
        constraints: dict[str, Any] = {
            "minReplicas": policy.constraints.min_replicas,
            "maxReplicas": policy.constraints.max_replicas,
        }
        if policy.constraints.priority_class_name is not None:
            constraints["priorityClassName"] = policy.constraints.priority_class_name
        out["constraints"] = constraints

    if state.plan is not None:
        out["resolved"] = _resolved(state.plan, state.replan_count)
    return out
