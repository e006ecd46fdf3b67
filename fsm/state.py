"""OrderState: everything the fold knows about one order, and nothing else.

`fsm.fold.evolve` builds it from events; `fsm.status` renders the Kubernetes status
from it; `fsm.decide` and `fsm.effects` read it to choose events and commands. The
store snapshots it with `model_dump(mode="json")` and restores it with
`OrderState.model_validate`, which must give back an equal value: so every field is a
JSON-friendly frozen value (tuples, not sets; tz-aware datetimes; str enums).

It is kept small because a controller holds thousands: the facts each condition is
judged from, the six rendered conditions, the machine's state name, and the counters
that are folds (replans, the probe failure streak).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from fsm.reasons import ConditionStatus, ConditionType, Phase, Reason
from fsm.values import (
    Candidate,
    EffectivePolicy,
    EndpointType,
    ExposureType,
    ModelFacts,
    ModelRef,
    Plan,
)

__all__ = [
    "DEVICE_ALLOCATION_GRACE_SECONDS",
    "INITIAL_MACHINE_STATE",
    "PROBE_FAILURE_THRESHOLD",
    "ClassJudgement",
    "Condition",
    "Endpoint",
    "ModelJudgement",
    "OrderState",
    "PlanAttempt",
    "PlanBasis",
    "Scaling",
    "Workload",
    "grace_start",
    "plan_basis",
    "probe_error_text",
    "same_place",
    "serving_basis",
    "state_layout",
]

# Raise when the fold computes a field differently while the state's shape stays.
# 2: a new plan applied starts its own probe failure streak; 3: but for a Failed order's;
# 4: Planned answers an edit that asks the planner nothing new (its observedGeneration),
# and replanCount leaves out the verdicts before the first plan; 6: an edit the planner
# reads nothing of is the plan it has rendered again, and replanCount counts the questions
# asked of the planner, not the retries of one.
FOLD_REVISION = 6

# After the first Ready, this many consecutive failed probes make the order Failed
# (ServiceUnhealthy). One or two failures are a blip — a restarting pod, a slow answer —
# and the order stays Ready. It is a constant, not a setting, because the fold uses it:
# replaying a stream must give the same status whatever the controller is configured with.
PROBE_FAILURE_THRESHOLD = 3

# Pods whose device claims stay unallocated this long mark the plan's device class as
# tried, and the order replans without it. Long enough for the scheduler to place a pod
# on a busy cluster, short enough that a user does not wait minutes for a hopeless class.
DEVICE_ALLOCATION_GRACE_SECONDS = 120

INITIAL_MACHINE_STATE = "Pending_Class"


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True, slots=True)
class Condition:
    """One metav1.Condition as the fold last rendered it.

    A stdlib dataclass rather than a model: the fold builds one whenever a condition
    changes, and this is several times cheaper; pydantic still validates it inside
    `OrderState`, so snapshots round-trip the same.
    """

    type: ConditionType
    status: ConditionStatus
    reason: Reason
    message: str
    last_transition_time: datetime
    observed_generation: int


class ClassJudgement(_Value):
    class_name: str | None
    reason: Reason
    message: str
    policy: EffectivePolicy | None  # set iff the class resolved
    generation: int  # the spec generation it was judged for


class ModelJudgement(_Value):
    reason: Reason
    message: str
    facts: ModelFacts | None
    endpoint_type: EndpointType | None
    generation: int


_NO_AUTH = {"auth_secret_name": None, "auth_secret_key": "token"}


class PlanBasis(_Value):
    """What a plan was computed from, and its workload rendered from: when what the
    planner reads of it changes, the order replans; when only the rest changes (how the
    endpoint is published, the replica ceiling, the update strategy, the model's
    reference to the same facts), the plan it has is rendered again."""

    generation: int
    class_name: str | None
    policy: EffectivePolicy | None
    model_ref: ModelRef | None
    facts: ModelFacts | None
    endpoint_type: EndpointType | None

    def asks_as(self, other: PlanBasis, *, token: bool = True) -> bool:
        """Is a plan for this basis a plan for `other`? True when the planner reads the
        same of both (`PlanRequest`): the model's facts and contract, the accelerator
        policy, the minimum replicas and the priority class. An edit of anything else, or
        one that comes back to what a plan was computed for (a typo undone, re-read at a
        newer commit), asks the planner nothing new. Replanning then would move a serving
        order off the place it holds, which no replan is offered (SPEC §3.1), or fail for
        room the order already has; and a new commit alone does not replan
        (decide._kept). Whether a token is checked is asked too, as the planner keeps to
        recipes that take a key; `token=False` sets it aside, for a plan whose recipe
        takes one answers either (decide._plan)."""
        return self == other or self._question(token) == other._question(token)

    def renders_as(self, other: PlanBasis) -> bool:
        """Does a workload rendered for this basis equal one rendered for `other`? All of
        it, the generation and the model's upstream commit apart."""
        return self == other or self._rendering() == other._rendering()

    def _facts(self) -> ModelFacts | None:
        # Nor the GGUF file: a stream resolved before facts named it (None) asks what a
        # re-read naming it asks, and a plan in force moves for neither.
        unasked = {"revision": None, "weights_file": None}
        return self.facts.model_copy(update=unasked) if self.facts else None

    def _question(self, token: bool) -> tuple[object, ...]:
        facts, ref = self.facts, self.model_ref
        # Which model (another is a replan, SPEC §3, whatever its facts; the Secret its
        # hub token is read from is not), and what the planner and its sizing read of its
        # facts: a context window or a chat template re-read upstream is no question.
        model = None if ref is None else ref.model_copy(update=_NO_AUTH)
        planned = (
            None
            if facts is None
            else (
                facts.source,
                facts.name,
                facts.endpoint_types,
                facts.format,
                facts.quantization,
                facts.parameter_count,
                facts.weights_bytes,
                facts.dtype,
            )
        )
        policy = self.policy
        asked = (
            None
            if policy is None
            else (
                policy.accelerator,
                policy.constraints.min_replicas,
                policy.constraints.priority_class_name,
                token and policy.exposure.needs_token,
            )
        )
        return (asked, model, planned, self.endpoint_type)

    def _rendering(self) -> tuple[object, ...]:
        return (self.class_name, self.policy, self.model_ref, self._facts(), self.endpoint_type)


class PlanAttempt(_Value):
    """The latest planner verdict the order recorded."""

    ok: bool
    reason: Reason
    message: str
    candidates: tuple[Candidate, ...]
    excluded_device_classes: tuple[str, ...]
    reclaims: tuple[str, ...]  # lower-priority claims the plan's place needs freed
    basis: PlanBasis
    generation: int
    at: datetime


class Workload(_Value):
    desired_replicas: int
    ready_replicas: int
    available_replicas: int
    unallocated_since: datetime | None
    unschedulable: str | None = None  # the scheduler's message for a non-device reason
    rollout: str = ""  # the Deployment's "uid/generation" these counts are of
    not_starting: str | None = None  # Kubernetes' word on a container that does not start


class Endpoint(_Value):
    url: str
    type: ExposureType


class Scaling(_Value):
    """Why the order cannot grow (absent: it can)."""

    reason: Reason  # ScaleUpBlocked or CapacityTakenByPriority
    message: str
    taken_by: str | None = None
    priority_class_name: str | None = None
    replicas: int = 0


class OrderState(_Value):
    """The fold of one order's stream. The initial value is `OrderState()`."""

    version: int = 0  # events folded so far
    name: str = ""
    namespace: str = ""
    generation: int = 0
    spec_seen: bool = False
    model_ref: ModelRef | None = None
    class_name: str | None = None

    klass: ClassJudgement | None = None
    model: ModelJudgement | None = None

    plan_attempts: int = 0  # every planner verdict recorded
    # replanCount: the verdicts recorded once a plan had been computed (SPEC: how many
    # times the plan was recalculated); a wait for the first plan recalculates nothing.
    replans: int = 0
    attempt: PlanAttempt | None = None
    plan: Plan | None = (
        None  # the plan the order should run (after a failed replan: the one in force)
    )
    plan_revision: int = 0  # bumps with every computed plan, so an equal plan is re-applied
    plan_in_force: Plan | None = None  # the plan the workload was last applied with
    # What the plan in force was computed from (model, facts, policy): a repair renders
    # the workload from it, so a failed replan never leaks the new spec into the old plan.
    applied_basis: PlanBasis | None = None
    applied_revision: int = 0
    # When the plan in force was last applied: pods older than this waited for another
    # plan's devices, so a device class's grace period counts from here.
    applied_at: datetime | None = None
    apply_error: str | None = None
    apply_error_reason: Reason = Reason.WORKLOAD_APPLY_FAILED
    tried_device_classes: tuple[str, ...] = ()
    # (device class, free share units when it was tried): a class offering more is retried.
    tried_free_units: tuple[tuple[str, int], ...] = ()

    workload: Workload | None = None
    # The Deployment rollout ("uid/generation") last seen complete: while the workload is
    # at that rollout, a replica lost is not a rollout but the runtime failing.
    rolled_out: str | None = None
    endpoint: Endpoint | None = None
    auth_secret_name: str | None = None

    probe_ok: bool | None = None  # the last probe's answer; None: never probed
    probe_failures: int = 0  # consecutive failures since the last success
    probe_error: str = ""
    last_probe_at: datetime | None = None
    # The `applied_revision` the last successful probe answered for: a new plan's
    # workload that replaced the old pods is Ready only once a probe answered for it.
    probed_revision: int = 0
    ever_ready: bool = False

    scaling: Scaling | None = None
    last_reclaim: tuple[datetime, str] | None = None  # (when, victim) of the latest take
    # (victim, the resourceVersion of its Deployment it was decided from) of the latest
    # take: takes are scaled in the order they are recorded, so only the latest can be
    # recorded and not carried out (a crash, a failed patch) and be decided again.
    last_reclaim_basis: tuple[str, str] | None = None
    deleted: bool = False

    phase: Phase = Phase.PENDING
    machine_state: str = INITIAL_MACHINE_STATE
    state_since: datetime | None = None
    conditions: tuple[Condition, ...] = ()
    last_event_at: datetime | None = None

    @property
    def policy(self) -> EffectivePolicy | None:
        """The policy in force, once the class (or classless mode) resolved."""
        return self.klass.policy if self.klass is not None else None

    @property
    def replan_count(self) -> int:
        return self.replans

    def condition(self, type_: ConditionType) -> Condition | None:
        for cond in self.conditions:
            if cond.type is type_:
                return cond
        return None


def same_place(plan: Plan, other: Plan) -> bool:
    """The same plan but for its launch recipe (replaced under it, or edited to turn tool
    calling on or off: decide._recipe): the same place, asked the same."""
    recipe = {"recipe": other.recipe, "tool_calling_supported": other.tool_calling_supported}
    return plan.model_copy(update=recipe) == other


def plan_basis(state: OrderState) -> PlanBasis:
    """What a plan computed now would be computed from."""
    return PlanBasis(
        generation=state.generation,
        class_name=state.class_name,
        policy=state.policy,
        model_ref=state.model_ref,
        facts=state.model.facts if state.model is not None else None,
        endpoint_type=state.model.endpoint_type if state.model is not None else None,
    )


def serving_basis(state: OrderState) -> PlanBasis:
    """What the workload in force runs: the basis it was applied with while a plan is in
    force, else what a plan now would be computed from.

    A replan that failed (LaunchPlanInForce) or waits leaves the workload on its old
    policy and model: how the endpoint is reached and whether it checks a token (the
    status, the probe, the token Secret kept) follow that, not the newer spec."""
    if state.plan_in_force is not None and state.applied_basis is not None:
        return state.applied_basis
    return plan_basis(state)


@functools.cache
def state_layout() -> str:
    """The tag of the fold that writes `OrderState` as it is: a snapshot of the state is
    good only for the fold that wrote it. A field added with a default would otherwise
    load from an older snapshot as that default, not as the fold of the events before it
    (`applied_at` did: the grace period of restored orders counted from the wrong time)."""
    shape = json.dumps(OrderState.model_json_schema(), sort_keys=True).encode()
    return f"{FOLD_REVISION}:{hashlib.sha256(shape).hexdigest()[:16]}"


def grace_start(state: OrderState, unallocated_since: datetime | None) -> datetime | None:
    """Since when the plan in force waits for devices: a pod of an earlier plan (still
    pending through a rolling update) does not use up the grace of the plan applied after."""
    if unallocated_since is None or state.applied_at is None:
        return unallocated_since
    return max(unallocated_since, state.applied_at)


def unprobed_plan(state: OrderState) -> bool:
    """The order is Pending on a plan no probe has answered for since it was applied.

    Only a successful probe makes an order Ready (SPEC §3 step 7). An order that stopped
    serving and comes back on the same plan (a victim's replicas returned, the class
    found again) was answered for; one whose new plan's pods replaced the old ones was
    not, and its first probe decides, as a new order's does. A plan rolled out while the
    old pods served never left the serving phases: the probes that follow judge it."""
    return (
        state.ever_ready
        and state.phase is Phase.PENDING
        and state.probed_revision != state.applied_revision
    )


def probe_error_text(status_code: int | None, error: str) -> str:
    """A failed probe as the status and the log say it."""
    return error if status_code is None else f"HTTP {status_code}: {error}".rstrip(": ")
