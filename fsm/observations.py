"""Observations: what the controller saw in one pass, handed to `decide` as typed values.

The controller reads the world (its watch caches, a probe's answer, the policy and
planner verdicts it computed from them) and wraps each reading in one of these. They are
not stored: `decide` turns those that change something into events, which are. Every
observation carries `at`, the moment it was made — the core has no clock of its own, so
any decision that depends on time (a grace period, the order of probes) reads it here.

The verdicts of `fsm.policy` and `fsm.placement.planner` arrive inside `ClassJudged`,
`ModelJudged` and `PlanJudged`: the core records outcomes, it does not compute them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from fsm.reasons import Reason
from fsm.state import DEVICE_ALLOCATION_GRACE_SECONDS
from fsm.values import ClassOutcome, ExposureType, ModelOutcome, ModelRef, Plan, PlanOutcome

__all__ = [
    "ApplyFailed",
    "ApplySucceeded",
    "AuthSecretSeen",
    "CapacitySeen",
    "ClassJudged",
    "Deleted",
    "EndpointSeen",
    "ModelJudged",
    "Observation",
    "PlanJudged",
    "ProbeResult",
    "RecipeEdited",
    "RecipeUnusable",
    "ReplicasReclaimed",
    "ScalingSeen",
    "SpecSeen",
    "WorkloadSeen",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecSeen:
    """The order object from the cache: its generation and the two things it orders."""

    at: datetime
    generation: int
    model_ref: ModelRef
    class_name: str | None = None
    name: str = ""
    namespace: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassJudged:
    """`fsm.policy`'s verdict on the order's class (or on classless mode)."""

    at: datetime
    outcome: ClassOutcome


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelJudged:
    """The model source's answer, checked against the class's model policy."""

    at: datetime
    outcome: ModelOutcome


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanJudged:
    """`fsm.placement.planner`'s verdict, computed because `decide.needs_plan` said so."""

    at: datetime
    outcome: PlanOutcome
    # Launch recipes of the plans the order has (in force, and its replacement not
    # applied yet) that cannot be given an API key: such a plan cannot answer a spec
    # whose exposure checks a token, whatever else it asks.
    keyless_recipes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplySucceeded:
    """The workload objects were server-side applied with `plan`."""

    at: datetime
    plan: Plan


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyFailed:
    """The workload could not be applied: the API server refused an object (`message`
    quotes it), or something it needs is missing (`reason` names what)."""

    at: datetime
    message: str
    reason: Reason = Reason.WORKLOAD_APPLY_FAILED


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSeen:
    """The runtime Deployment and its pods' device claims, from the cache."""

    at: datetime
    desired: int
    ready: int
    available: int
    unallocated_since: datetime | None = None  # earliest pod still waiting for its claim
    # How long claims may stay unallocated before the plan's device class counts as tried.
    # The controller's setting, read here because `decide` records the verdict as an event
    # (DeviceClassTried): replay folds that event and never judges the wait again.
    grace_seconds: float = DEVICE_ALLOCATION_GRACE_SECONDS
    unschedulable: str | None = None  # pods pending for CPU, memory, taints: not devices
    not_starting: str | None = None  # a runtime container that does not start, and why
    free_units: int | None = None  # free share units of the plan's device class now
    # Which Deployment, at which of its generations, the counts are of ("uid/generation"):
    # any change of its spec (an apply, a repair, `kubectl rollout restart`, a scale) or a
    # Deployment made anew is another rollout.
    rollout: str = ""
    # That rollout is complete, as `kubectl rollout status` judges it: every replica
    # updated and available, none of an older template left.
    rolled_out: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacitySeen:
    """Free share units (100 a device) each tried device class offers now."""

    at: datetime
    free_units: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecipeUnusable:
    """The launch recipe `recipe` is not among the usable ones (deleted, or edited into
    one the controller refuses: `message` says which), and `replacement` is the best
    usable recipe for the same hardware, model and endpoint type."""

    at: datetime
    recipe: str
    message: str
    replacement: str
    tool_calling_supported: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RecipeEdited:
    """The launch recipe `recipe`, still usable, says now what the plan took from it
    otherwise: whether it turns tool calling on (`tool_calling_supported`). An edit is
    rendered at the next apply, so the plan follows it or the status would tell clients
    of a runtime parameter the workload no longer carries (or of none it carries)."""

    at: datetime
    recipe: str
    tool_calling_supported: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointSeen:
    at: datetime
    url: str
    type: ExposureType


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthSecretSeen:
    """The order's own token Secret exists under `name` (its value is never read here)."""

    at: datetime
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeResult:
    """One HTTP probe of the inference API (`/v1/models`)."""

    at: datetime
    ok: bool
    status_code: int | None = None
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingSeen:
    """The growth verdict of the capacity arbiter for this order.

    `reason` is one of ScalingWithinBounds, ScaleUpBlocked, CapacityTakenByPriority;
    the last one names the order that took the capacity in `taken_by`.
    """

    at: datetime
    reason: Reason
    message: str = ""
    taken_by: str | None = None
    priority_class_name: str | None = None
    replicas: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicasReclaimed:
    """The arbiter decided this order takes `replicas` of order `victim` (arbitration.py),
    from the victim's Deployment at resourceVersion `basis` (the scale is conditional on
    it). The same take decided again from the same read — its scale never written, as
    after a crash between the record and the scale — has the same basis."""

    at: datetime
    victim: str  # namespace/name
    replicas: int
    basis: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Deleted:
    """The order is gone from the API (or carries a deletionTimestamp)."""

    at: datetime


Observation = (
    SpecSeen
    | ClassJudged
    | ModelJudged
    | PlanJudged
    | ApplySucceeded
    | ApplyFailed
    | WorkloadSeen
    | EndpointSeen
    | AuthSecretSeen
    | ProbeResult
    | ScalingSeen
    | CapacitySeen
    | RecipeUnusable
    | RecipeEdited
    | ReplicasReclaimed
    | Deleted
)
