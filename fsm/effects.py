"""effects(state) -> [Command]: what the controller should do now, as data.

The core never acts. After folding a pass's events the controller asks `effects` for the
commands that bring the world in line with the state, and executes them idempotently
(server-side apply, status written only when it differs from the last write). Because a
command is a function of the state alone, a crash between appending an event and acting
on it is repaired by the next pass: the same state yields the same commands.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsm import identity
from fsm.decide import excluded_device_classes, held_devices, needs_plan, token_name_taken
from fsm.reasons import ConditionStatus, ConditionType, Phase, Reason
from fsm.state import (
    DEVICE_ALLOCATION_GRACE_SECONDS,
    PROBE_FAILURE_THRESHOLD,
    OrderState,
    PlanBasis,
    grace_start,
    plan_basis,
)
from fsm.status import render_status
from fsm.values import EffectivePolicy, EndpointType, ModelFacts, ModelRef, Plan

__all__ = [
    "ApplyWorkload",
    "Command",
    "EnsureAuthSecret",
    "ProbeTimings",
    "PublishStatus",
    "Recheck",
    "ReleaseWorkload",
    "RequestPlan",
    "ScheduleProbe",
    "auth_secret_name",
    "effects",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeTimings:
    """How often to probe; from the module settings (the fold does not depend on them)."""

    pending_seconds: float = 10.0  # before the first Ready: the user is waiting
    ready_seconds: float = 30.0  # a healthy order: a light periodic check
    failing_seconds: float = 5.0  # after a failure: confirm or clear it quickly


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestPlan:
    """Run the planner for this order and hand its outcome back as `PlanJudged`."""

    excluded_device_classes: tuple[str, ...]
    held_devices: tuple[str, ...]  # the order's own place: not to be offered again
    plan_in_force: Plan | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyWorkload:
    """Server-side apply every object of the order's workload for `plan`, and remove
    what the plan no longer renders.

    `repair`: the plan is applied already; compare what it renders with the live objects
    and re-apply only what is missing or drifted (a level-based controller repairs on
    every pass, not only on a new plan)."""

    plan: Plan
    model_ref: ModelRef
    facts: ModelFacts
    endpoint_type: EndpointType | None
    policy: EffectivePolicy
    auth_secret_name: str | None  # the token Secret the runtime checks requests against
    generation: int
    reclaims: tuple[str, ...] = ()  # free these lower-priority claims first (DRA.md)
    repair: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseWorkload:
    """Delete the order's Deployment: it runs no plan. Its plan's device class was tried
    (its pods waited past the grace period, nothing served) and no plan replaced it. Its
    pods, still waiting for that class's devices, would take one the moment it frees,
    while the planner counts it free for other orders and this one, exhausted, never
    learns it has it. A plan made later creates the Deployment anew."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EnsureAuthSecret:
    """Create the order's token Secret (random token, key `token`) unless it exists.

    Asked on every pass while the class requires a token: a Secret deleted (to rotate
    the token, or by mistake) is made again."""

    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleProbe:
    after_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Recheck:
    """Look at the order again after a delay even if nothing it watches changes."""

    after_seconds: float
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishStatus:
    """Write `status` to the status subresource if it differs from the last write."""

    status: Mapping[str, Any]


Command = (
    RequestPlan
    | ApplyWorkload
    | ReleaseWorkload
    | EnsureAuthSecret
    | ScheduleProbe
    | Recheck
    | PublishStatus
)


def auth_secret_name(state: OrderState) -> str:
    """The order's own token Secret: `{order}-auth` (SPEC §3 step 6)."""
    return identity.auth_secret_name(state.name)


def _status_of(state: OrderState, type_: ConditionType) -> ConditionStatus | None:
    cond = state.condition(type_)
    return cond.status if cond is not None else None


def _applied(state: OrderState) -> bool:
    """The plan the order should run is applied (a pass repairs, it does not roll out)."""
    return state.applied_revision == state.plan_revision and state.apply_error is None


def _next_basis(state: OrderState) -> PlanBasis:
    """What the next apply renders from: a new plan, what it was computed from; else what
    the plan in force was applied with (a repair, a retry after an apply error, a
    recipe replaced under it). The current spec is neither once it was edited: rendered
    there, the edited model reached a place no planner judged for it (after a failed
    replan, SPEC §3.1; or while the edit waited for its model and a repair was refused).
    The fold records the same basis when the apply succeeds (fold._applied)."""
    a, applied_with = state.attempt, state.applied_basis
    if a is not None and a.ok and state.plan_revision != state.applied_revision:
        return a.basis
    if state.plan_in_force is None or applied_with is None:
        return plan_basis(state)  # nothing held, or a stream older than the applied basis
    return applied_with


def _keeps_token(state: OrderState) -> bool:
    """Does the workload the next apply renders check a token? A new plan's follows the
    spec; a plan in force held through a failed replan keeps what it was applied with:
    a token Secret made for a spec no workload runs yet was pruned by the repair and made
    again in every pass."""
    policy = _next_basis(state).policy
    return policy is not None and policy.exposure.needs_token


def _apply(state: OrderState) -> ApplyWorkload | None:
    """The plan the order should run, to roll out; once applied, the plan in force, to
    compare with the live objects (`repair`: a level-based controller repairs on every
    pass, not only on a new plan)."""
    if token_name_taken(state):
        return None
    repair = _applied(state)
    plan = state.plan_in_force if repair else state.plan
    if plan is None:
        return None  # no plan yet, or its device class was tried: the next plan replaces it
    basis = _next_basis(state)
    if basis.policy is None or basis.model_ref is None or basis.facts is None:
        return None
    token = basis.policy.exposure.needs_token
    if token and state.auth_secret_name is None:
        return None  # the runtime must not start without the token it checks
    a = state.attempt
    return ApplyWorkload(
        plan=plan,
        model_ref=basis.model_ref,
        facts=basis.facts,
        endpoint_type=basis.endpoint_type,
        policy=basis.policy,
        auth_secret_name=state.auth_secret_name if token else None,
        generation=basis.generation,
        reclaims=a.reclaims if a is not None and a.ok and not repair else (),
        repair=repair,
    )


def dropped_plan(state: OrderState) -> bool:
    """Was a workload applied for a plan the order no longer holds? Only a device class
    marked tried drops the plan in force (fold._device_class_tried), and only while none
    of its replicas is available; until a new plan is applied there is none."""
    return state.plan_in_force is None and state.applied_revision > 0


def _probe_after(state: OrderState, timings: ProbeTimings) -> float | None:
    if state.endpoint is None:
        return None
    workload = _status_of(state, ConditionType.WORKLOAD_READY)
    # Held back by a condition before its workload (Unknown), or by an apply that failed
    # while the workload applied before runs on (a repair refused, a recipe gone).
    behind = workload is ConditionStatus.UNKNOWN or (
        workload is ConditionStatus.FALSE and state.apply_error is not None
    )
    held = behind and _served_behind_a_break(state)
    if workload is not ConditionStatus.TRUE and not held:
        return None
    if state.probe_ok is False and state.probe_failures < PROBE_FAILURE_THRESHOLD:
        return timings.failing_seconds
    if held or state.phase in (Phase.READY, Phase.DEGRADED, Phase.FAILED):
        return timings.ready_seconds
    return timings.pending_seconds


def _served_behind_a_break(state: OrderState) -> bool:
    """An order that served, and is held back since by a condition before its workload
    (its class or model stopped resolving) or by an apply error: its workload runs on
    the plan in force, so it is still probed. Its health is then known
    when the chain mends, and a runtime that died meanwhile fails the order at once
    instead of showing Ready."""
    workload = state.workload
    return (
        state.ever_ready
        and state.plan_in_force is not None
        and workload is not None
        and workload.available_replicas >= 1
    )


def _allocation_recheck(state: OrderState, grace_seconds: float) -> Recheck | None:
    cond = state.condition(ConditionType.WORKLOAD_READY)
    w = state.workload
    if cond is None or cond.reason is not Reason.DEVICES_NOT_ALLOCATED or w is None:
        return None
    if w.unallocated_since is None or state.last_event_at is None:
        return None
    since = grace_start(state, w.unallocated_since)
    assert since is not None
    waited = (state.last_event_at - since).total_seconds()
    return Recheck(
        after_seconds=max(grace_seconds - waited, 1.0),
        why="device claims unallocated: mark the device class tried when the grace period ends",
    )


def effects(
    state: OrderState,
    timings: ProbeTimings | None = None,
    *,
    allocation_grace_seconds: float = DEVICE_ALLOCATION_GRACE_SECONDS,
) -> list[Command]:
    """The commands that bring the world in line with `state`, in execution order.

    `allocation_grace_seconds` must be the value the controller puts in `WorkloadSeen`:
    it only says when to look again, the verdict itself is decided there."""
    if state.deleted or not state.spec_seen:
        return []  # deleted: owner references let the garbage collector clean up
    timings = timings or ProbeTimings()
    commands: list[Command] = []
    if _keeps_token(state) and state.name:
        commands.append(EnsureAuthSecret(name=auth_secret_name(state)))
    if needs_plan(state):
        commands.append(
            RequestPlan(
                excluded_device_classes=excluded_device_classes(state),
                held_devices=held_devices(state),
                plan_in_force=state.plan_in_force,
            )
        )
    apply = _apply(state)
    if apply is not None:
        commands.append(apply)
    elif dropped_plan(state):
        commands.append(ReleaseWorkload())
    after = _probe_after(state, timings)
    if after is not None:
        commands.append(ScheduleProbe(after_seconds=after))
    recheck = _allocation_recheck(state, allocation_grace_seconds)
    if recheck is not None:
        commands.append(recheck)
    commands.append(PublishStatus(status=render_status(state)))
    return commands
