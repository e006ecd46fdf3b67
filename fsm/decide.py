"""decide(state, observation) -> [events]: which facts an observation adds to the log.

The controller is level-triggered: every pass re-observes the world, so most
observations repeat what the stream already says. The log records changes, not
heartbeats — an observation that changes nothing yields `[]`, and deciding again on the
same observation after its events were folded yields `[]` too (a property the tests
check). Probes are told apart by their time: a probe result no later than the last one
recorded is the same probe, or a stale one.

Also the pure questions the controller asks before it calls the planner:
`needs_plan`, and what the planner must leave out (`excluded_device_classes`,
`held_devices`).
"""

from __future__ import annotations

from fsm import events as ev
from fsm import observations as ob
from fsm.fold import plan_basis
from fsm.identity import shown_to
from fsm.reasons import Reason
from fsm.state import (
    PROBE_FAILURE_THRESHOLD,
    OrderState,
    grace_start,
    probe_error_text,
    same_place,
)
from fsm.values import ClassOutcome, ModelOutcome, PlanOutcome

__all__ = [
    "decide",
    "excluded_device_classes",
    "held_devices",
    "needs_plan",
    "pods_wait_for_devices",
    "probe_is_news",
    "resolved_now",
    "waits_for_capacity",
]


def _resolved(state: OrderState) -> bool:
    """Class and model resolved for the spec generation the order is at."""
    k, m = state.klass, state.model
    return (
        k is not None
        and k.policy is not None
        and k.generation == state.generation
        and m is not None
        and m.facts is not None
        and m.reason is Reason.MODEL_RESOLVED
        and m.generation == state.generation
    )


def needs_plan(state: OrderState) -> bool:
    """Should the controller run the planner for this order now?

    Yes when class and model are resolved for the current spec and: no plan was tried
    yet; the spec, the policy or the model facts changed since the last attempt; a
    device class was marked tried since; or the last attempt failed (capacity may have
    appeared — an unchanged verdict is then not recorded).
    """
    if state.deleted or not _resolved(state):
        return False
    a = state.attempt
    # Rendered otherwise, too: the plan the order has may answer it (`_plan`).
    if a is None or not a.ok or not a.basis.renders_as(plan_basis(state)):
        return True
    return any(dc not in a.excluded_device_classes for dc in state.tried_device_classes)


def waits_for_capacity(state: OrderState) -> bool:
    """Can a change of capacity (a device freed or taken) change this order's decisions?

    Yes while it needs a plan (a failed verdict is retried when capacity appears), has
    tried device classes (their free units are watched), or cannot grow or was scaled
    down for a higher priority. A deleted order, one not yet resolved, and one serving on
    its plan with every pod allocated do not: capacity events need not wake them (their
    own claims' events still do). One whose pods wait for devices (`pods_wait_for_devices`)
    may: that is the arbiter's to say, which knows the other orders' priorities.
    """
    if state.deleted:
        return False
    return needs_plan(state) or bool(state.tried_device_classes) or state.scaling is not None


def pods_wait_for_devices(state: OrderState) -> bool:
    """Do pods of the order wait for their claims to be allocated? Its own decisions do
    not change with capacity then (the grace for the device class runs on the clock);
    only the arbiter's may, by growth or by a reclaim (adapters/kubernetes/arbiter.py)."""
    return (
        not state.deleted
        and state.workload is not None
        and state.workload.unallocated_since is not None
    )


def excluded_device_classes(state: OrderState) -> tuple[str, ...]:
    """Device classes the planner must not offer: tried, and none held the order."""
    return state.tried_device_classes


def held_devices(state: OrderState) -> tuple[str, ...]:
    """The place the order holds (SPEC §3.1): not offered to anyone, its replan included."""
    return state.plan_in_force.devices if state.plan_in_force is not None else ()


def _spec(s: OrderState, o: ob.SpecSeen) -> list[ev.Event]:
    if s.spec_seen and o.generation < s.generation:
        return []  # an older copy of the object than one already seen
    if (
        s.spec_seen
        and o.generation == s.generation
        and (o.model_ref, o.class_name, o.name, o.namespace)
        == (s.model_ref, s.class_name, s.name, s.namespace)
    ):
        return []
    return [
        ev.SpecObserved(
            observed_at=o.at,
            generation=o.generation,
            model_ref=o.model_ref,
            class_name=o.class_name,
            name=o.name,
            namespace=o.namespace,
        )
    ]


def _class(s: OrderState, o: ob.ClassJudged) -> list[ev.Event]:
    if not s.spec_seen:
        return []
    out: ClassOutcome = o.outcome
    k = s.klass
    policy = out.policy if out.ok else None
    if (
        k is not None
        and k.generation == s.generation
        and (k.class_name, k.reason, k.message, k.policy)
        == (s.class_name, out.reason, out.message, policy)
    ):
        return []
    if out.ok:
        if out.policy is None:
            raise ValueError(f"class outcome {out.reason} carries no policy")
        return [
            ev.ClassResolved(
                observed_at=o.at,
                class_name=s.class_name,
                policy=out.policy,
                reason=out.reason,
                message=out.message,
            )
        ]
    return [
        ev.ClassFailed(
            observed_at=o.at, class_name=s.class_name, reason=out.reason, message=out.message
        )
    ]


# A source that cannot be reached says nothing about the model: an order that resolved
# keeps the facts it resolved (SPEC §3.1 — a Ready order is not demoted by a blip).
TRANSIENT_MODEL_REASONS = frozenset({Reason.MODEL_SOURCE_UNREACHABLE})
PLAN_IN_FORCE_ANSWERS = (
    "the plan in force was computed for what the planner reads of this spec: the order "
    "stays where it runs"
)
STALE_FACTS_NOTE = "the model source is unreachable, keeping the facts read earlier"


def resolved_now(s: OrderState) -> bool:
    """The order's model resolved for its spec of now (its generation)."""
    m = s.model
    return (
        m is not None
        and m.generation == s.generation
        and m.facts is not None
        and m.reason is Reason.MODEL_RESOLVED
    )


def _kept(s: OrderState, out: ModelOutcome) -> ModelOutcome:
    """The outcome to record: a transient failure or a new upstream revision of an order
    that resolved keeps the facts it resolved (a new commit alone does not replan)."""
    m = s.model
    if m is None or m.facts is None or not resolved_now(s):
        return out
    if out.reason in TRANSIENT_MODEL_REASONS:
        note = f"{STALE_FACTS_NOTE}: {out.message}" if out.message else STALE_FACTS_NOTE
        return ModelOutcome(
            reason=Reason.MODEL_RESOLVED,
            message=note,
            facts=m.facts,
            endpoint_type=m.endpoint_type,
        )
    if (
        out.ok
        and out.facts is not None
        and out.facts.model_copy(update={"revision": m.facts.revision}) == m.facts
    ):
        return out.model_copy(update={"facts": m.facts})
    return out


def _model(s: OrderState, o: ob.ModelJudged) -> list[ev.Event]:
    if not s.spec_seen:
        return []
    out: ModelOutcome = _kept(s, o.outcome)
    m = s.model
    endpoint_type = out.endpoint_type if out.ok else None
    if (
        m is not None
        and m.generation == s.generation
        and (m.reason, m.message, m.facts, m.endpoint_type)
        == (out.reason, out.message, out.facts, endpoint_type)
    ):
        return []
    if out.ok:
        if out.facts is None:
            raise ValueError(f"model outcome {out.reason} carries no facts")
        return [
            ev.ModelResolved(
                observed_at=o.at,
                facts=out.facts,
                endpoint_type=out.endpoint_type,
                reason=out.reason,
                message=out.message,
            )
        ]
    return [
        ev.ModelFailed(observed_at=o.at, reason=out.reason, message=out.message, facts=out.facts)
    ]


def _plan(s: OrderState, o: ob.PlanJudged) -> list[ev.Event]:
    if not needs_plan(s):
        return []  # a plan in good standing is not recalculated because the world moved
    out: PlanOutcome = o.outcome
    excluded = excluded_device_classes(s)
    basis = plan_basis(s)
    held, applied_with = s.plan_in_force, s.applied_basis
    if held is not None and applied_with is not None and applied_with.asks_as(basis, token=False):
        # The spec asks the planner nothing the plan in force was not computed for: an
        # edit of what it does not read (the exposure, the replica ceiling), or one
        # undone after its replan failed or waited. That plan answers it, rendered for
        # the spec, on its recipe replaced since if it was (not applied yet: kept). A
        # replan would have to move the order, since no replan is offered the place it
        # holds, and on a full cluster would fail for room the order has. But not a
        # token asked of a recipe that cannot take one: that is the planner's to find.
        answer = s.plan if s.plan is not None and same_place(s.plan, held) else held
        token = basis.policy is not None and basis.policy.exposure.needs_token
        if not (token and answer.recipe in o.keyless_recipes):
            return [
                ev.PlanComputed(
                    observed_at=o.at,
                    plan=answer,
                    excluded_device_classes=excluded,
                    message=PLAN_IN_FORCE_ANSWERS,
                )
            ]
    a = s.attempt
    same_question = (
        a is not None and a.basis.asks_as(basis) and a.excluded_device_classes == excluded
    )
    if (
        same_question
        and a is not None
        and not a.ok
        and (a.reason, a.message) == (out.reason, out.message)
    ):
        return []  # the retry of a failed plan says what the last one said
    if out.ok:
        if out.plan is None or out.reason is not Reason.PLAN_COMPUTED:
            raise ValueError(f"plan outcome {out.reason} is ok but carries no plan")
        return [
            ev.PlanComputed(
                observed_at=o.at,
                plan=out.plan,
                candidates=out.candidates,
                excluded_device_classes=excluded,
                reclaims=out.reclaims,
                message=out.message,
            )
        ]
    return [
        ev.PlanFailed(
            observed_at=o.at,
            reason=out.reason,
            message=out.message,
            candidates=out.candidates,
            excluded_device_classes=excluded,
        )
    ]


def _applied(s: OrderState, o: ob.ApplySucceeded) -> list[ev.Event]:
    if (
        s.plan_in_force == o.plan
        and s.apply_error is None
        and (o.plan != s.plan or s.applied_revision == s.plan_revision)
    ):
        return []
    return [ev.WorkloadApplied(observed_at=o.at, plan=o.plan)]


def _apply_failed(s: OrderState, o: ob.ApplyFailed) -> list[ev.Event]:
    if (s.apply_error, s.apply_error_reason) == (o.message, o.reason):
        return []
    return [ev.WorkloadApplyFailed(observed_at=o.at, message=o.message, reason=o.reason)]


def _workload(s: OrderState, o: ob.WorkloadSeen) -> list[ev.Event]:
    out: list[ev.Event] = []
    w = s.workload
    if w is None or (
        w.desired_replicas,
        w.ready_replicas,
        w.available_replicas,
        w.unallocated_since,
        w.unschedulable,
        w.rollout,
        w.not_starting,
    ) != (
        o.desired,
        o.ready,
        o.available,
        o.unallocated_since,
        o.unschedulable,
        o.rollout,
        o.not_starting,
    ):
        out.append(
            ev.WorkloadObserved(
                observed_at=o.at,
                desired_replicas=o.desired,
                ready_replicas=o.ready,
                available_replicas=o.available,
                unallocated_since=o.unallocated_since,
                unschedulable=o.unschedulable,
                rollout=o.rollout,
                not_starting=o.not_starting,
            )
        )
    plan = s.plan_in_force
    if plan is not None and o.rolled_out and o.rollout and o.rollout != s.rolled_out:
        out.append(ev.WorkloadRolledOut(observed_at=o.at, rollout=o.rollout))
    waited_since = grace_start(s, o.unallocated_since)
    if (
        plan is not None
        and o.available == 0
        and waited_since is not None
        and (o.at - waited_since).total_seconds() >= o.grace_seconds
        and plan.device_class not in s.tried_device_classes
    ):
        waited = int((o.at - waited_since).total_seconds())
        message = f"Device claims on {plan.device_class} stayed unallocated for {waited}s."
        out.append(
            ev.DeviceClassTried(
                observed_at=o.at,
                device_class=plan.device_class,
                message=message,
                free_units=o.free_units,
            )
        )
    return out


def _endpoint(s: OrderState, o: ob.EndpointSeen) -> list[ev.Event]:
    e = s.endpoint
    if e is not None and (e.url, e.type) == (o.url, o.type):
        return []
    return [ev.EndpointPublished(observed_at=o.at, url=o.url, type=o.type)]


def token_name_taken(s: OrderState) -> bool:
    """A Secret not the order's holds its token's name (`AuthSecretConflict`): nothing is
    applied meanwhile, or the runtime would be rendered onto that Secret (its uid, its
    value), and the order's own Secret made again is news even under the same name."""
    return s.apply_error is not None and s.apply_error_reason is Reason.AUTH_SECRET_CONFLICT


def _auth_secret(s: OrderState, o: ob.AuthSecretSeen) -> list[ev.Event]:
    if s.auth_secret_name == o.name and not token_name_taken(s):
        return []
    return [ev.AuthSecretIssued(observed_at=o.at, name=o.name)]


def _probe(s: OrderState, o: ob.ProbeResult) -> list[ev.Event]:
    if s.last_probe_at is not None and o.at <= s.last_probe_at:
        return []  # this probe, or an older one, is already in the log
    return _probe_answer(s, o)


def probe_is_news(state: OrderState, answer: ob.ProbeResult) -> bool:
    """Would this answer add to the log, recorded after the last probe? (A repeated probe
    that says what the log says need not wake the order.)"""
    return bool(_probe_answer(state, answer))


def _probe_answer(s: OrderState, o: ob.ProbeResult) -> list[ev.Event]:
    if o.ok:
        if s.probe_ok and s.probe_failures == 0 and s.probed_revision == s.applied_revision:
            return []  # a new plan's first answer is news: it may be what makes it Ready
        return [ev.ProbeSucceeded(observed_at=o.at, status_code=o.status_code)]
    repeated = s.probe_ok is False and probe_error_text(o.status_code, o.error) == s.probe_error
    # Before the first Ready the streak means nothing, and past the threshold the order
    # is Failed already: only a new error is news. In between every failure counts.
    counting = s.ever_ready and s.probe_failures < PROBE_FAILURE_THRESHOLD
    if repeated and not counting:
        return []
    return [ev.ProbeFailed(observed_at=o.at, status_code=o.status_code, error=o.error)]


def _scaling(s: OrderState, o: ob.ScalingSeen) -> list[ev.Event]:
    sc = s.scaling
    if o.reason is Reason.SCALING_WITHIN_BOUNDS:
        return [] if sc is None else [ev.ScalingRecovered(observed_at=o.at, message=o.message)]
    if o.reason is Reason.SCALE_UP_BLOCKED:
        if sc is not None and (sc.reason, sc.message) == (o.reason, o.message):
            return []
        return [ev.ScalingBlocked(observed_at=o.at, message=o.message)]
    if o.reason is Reason.CAPACITY_TAKEN_BY_PRIORITY:
        if o.taken_by is None:
            raise ValueError("CapacityTakenByPriority needs the order that took the capacity")
        # The message too, when it says one: one recorded before it counted other
        # tenants' takers is said anew, once.
        asked = (o.reason, o.taken_by, o.priority_class_name, o.replicas)
        if (
            sc is not None
            and (sc.reason, sc.taken_by, sc.priority_class_name, sc.replicas) == asked
            and (not o.message or sc.message == o.message)
        ):
            return []
        return [
            ev.CapacityTaken(
                observed_at=o.at,
                taken_by=o.taken_by,
                priority_class_name=o.priority_class_name,
                replicas=o.replicas,
                message=o.message,
            )
        ]
    raise ValueError(f"{o.reason} is not a ScalingHealthy verdict")


def _capacity(s: OrderState, o: ob.CapacitySeen) -> list[ev.Event]:
    """A tried device class is tried again once it offers more than when it was tried:
    an administrator added a slice, or a claim was freed (the seed: "look for capacity")."""
    when_tried = dict(s.tried_free_units)
    out: list[ev.Event] = []
    for device_class, free in o.free_units:
        if device_class not in s.tried_device_classes:
            continue
        before = when_tried.get(device_class, 0)
        if free > before:
            message = (
                f"{device_class} offers {free} free share units now, {before} when it was tried"
            )
            out.append(
                ev.DeviceClassRetried(observed_at=o.at, device_class=device_class, message=message)
            )
    return out


def _recipe(s: OrderState, o: ob.RecipeUnusable) -> list[ev.Event]:
    """The plan's recipe withdrawn: the same place on the recipe given. A recipe the plan
    no longer names (replaced already, or a replan chose another) is no news."""
    if s.plan is None or s.plan.recipe != o.recipe or o.replacement == o.recipe:
        return []
    plan = s.plan.model_copy(
        update={"recipe": o.replacement, "tool_calling_supported": o.tool_calling_supported}
    )
    message = f"{o.message}; the workload runs on launch recipe {o.replacement!r} instead"
    return [ev.RecipeReplaced(observed_at=o.at, recipe=o.recipe, plan=plan, message=message)]


def _recipe_edited(s: OrderState, o: ob.RecipeEdited) -> list[ev.Event]:
    """The plan's recipe edited to turn tool calling on or off: the same place on the same
    recipe, the plan saying what the workload, rendered from the recipe at every apply,
    carries. Recorded as a recipe replaced by itself (no replan: the planner was not
    asked); a recipe the plan does not name, or one that says what the plan says, is no
    news."""
    if (
        s.plan is None
        or s.plan.recipe != o.recipe
        or s.plan.tool_calling_supported == o.tool_calling_supported
    ):
        return []
    plan = s.plan.model_copy(update={"tool_calling_supported": o.tool_calling_supported})
    turned = "on" if o.tool_calling_supported else "off"
    message = f"launch recipe {o.recipe!r} was edited to turn tool calling {turned}"
    return [ev.RecipeReplaced(observed_at=o.at, recipe=o.recipe, plan=plan, message=message)]


def _reclaimed(s: OrderState, o: ob.ReplicasReclaimed) -> list[ev.Event]:
    if s.last_reclaim == (o.at, o.victim):
        return []  # this take is in the log already
    if o.basis and s.last_reclaim_basis == (o.victim, o.basis):
        return []  # decided from the same read of the victim: the same take, not scaled yet
    message = (
        f"took {o.replicas} replica(s) of {shown_to(s.namespace, [o.victim])}, of lower priority"
    )
    return [
        ev.ReplicasReclaimed(
            observed_at=o.at,
            victim=o.victim,
            replicas=o.replicas,
            message=message,
            basis=o.basis,
        )
    ]


def decide(state: OrderState, observation: ob.Observation) -> list[ev.Event]:
    """The events `observation` adds to the order's stream (often none)."""
    if state.deleted:
        return []
    match observation:
        case ob.SpecSeen():
            return _spec(state, observation)
        case ob.ClassJudged():
            return _class(state, observation)
        case ob.ModelJudged():
            return _model(state, observation)
        case ob.PlanJudged():
            return _plan(state, observation)
        case ob.ApplySucceeded():
            return _applied(state, observation)
        case ob.ApplyFailed():
            return _apply_failed(state, observation)
        case ob.WorkloadSeen():
            return _workload(state, observation)
        case ob.EndpointSeen():
            return _endpoint(state, observation)
        case ob.AuthSecretSeen():
            return _auth_secret(state, observation)
        case ob.ProbeResult():
            return _probe(state, observation)
        case ob.ScalingSeen():
            return _scaling(state, observation)
        case ob.CapacitySeen():
            return _capacity(state, observation)
        case ob.RecipeUnusable():
            return _recipe(state, observation)
        case ob.RecipeEdited():
            return _recipe_edited(state, observation)
        case ob.ReplicasReclaimed():
            return _reclaimed(state, observation)
        case ob.Deleted():
            return [ev.OrderDeleted(observed_at=observation.at)]
    raise TypeError(f"unknown observation {type(observation).__name__}")
