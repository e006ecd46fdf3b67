"""Events: the facts an order's stream is made of.

Every event is a frozen pydantic model named in the past tense, registered under a stable
type name (never the class name, so classes can be renamed) and a schema version. The
store encodes `to_payload(event)` and, on read, lifts old payloads with the registered
upcasters before `from_payload` builds today's class. Time is data: every event carries
`observed_at`, the moment the controller observed what the event records.

No event may carry secret material: a Secret is named, never quoted.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, field_validator

from fsm.reasons import CATALOGUE, ConditionStatus, ConditionType, Reason
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
    "AuthSecretIssued",
    "CapacityTaken",
    "ClassFailed",
    "ClassResolved",
    "DeviceClassRetried",
    "DeviceClassTried",
    "EndpointPublished",
    "Event",
    "ModelFailed",
    "ModelResolved",
    "OrderDeleted",
    "OrderEvent",
    "PlanComputed",
    "PlanFailed",
    "ProbeFailed",
    "ProbeSucceeded",
    "RecipeReplaced",
    "ReplicasReclaimed",
    "ScalingBlocked",
    "ScalingRecovered",
    "SpecObserved",
    "UnknownEventType",
    "WorkloadApplied",
    "WorkloadApplyFailed",
    "WorkloadObserved",
    "WorkloadRolledOut",
    "cannot_read",
    "event",
    "event_class",
    "from_payload",
    "registered_types",
    "to_payload",
    "upcast",
    "upcast_spec_observed_v1_v2",
    "upcaster",
]

Payload = dict[str, Any]
E = TypeVar("E", bound="Event")
_TRUE, _FALSE = ConditionStatus.TRUE, ConditionStatus.FALSE


class UnknownEventType(LookupError):
    """A stored event names a type (or a version) this code does not know."""


class Event(BaseModel):
    """Base of every event. Subclasses are declared with `@event("TypeName", version=N)`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    observed_at: datetime

    @field_validator("observed_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("observed_at must be timezone-aware")
        return value


_TYPES: dict[str, type[Event]] = {}
_UPCASTERS: dict[tuple[str, int], Callable[[Payload], Payload]] = {}


def event(type_name: str, *, version: int = 1) -> Callable[[type[E]], type[E]]:
    """Register an event class under a stable type name and its current schema version."""

    def register(cls: type[E]) -> type[E]:
        if type_name in _TYPES and _TYPES[type_name] is not cls:
            raise ValueError(f"event type {type_name!r} registered twice")
        cls.TYPE = type_name
        cls.VERSION = version
        _TYPES[type_name] = cls
        return cls

    return register


def upcaster(
    type_name: str, from_version: int
) -> Callable[[Callable[[Payload], Payload]], Callable[[Payload], Payload]]:
    """Register `fn(payload_vN) -> payload_vN+1` for one event type."""

    def register(fn: Callable[[Payload], Payload]) -> Callable[[Payload], Payload]:
        _UPCASTERS[(type_name, from_version)] = fn
        return fn

    return register


def event_class(type_name: str) -> type[Event]:
    try:
        return _TYPES[type_name]
    except KeyError:
        raise UnknownEventType(f"unknown event type {type_name!r}") from None


def registered_types() -> dict[str, type[Event]]:
    return dict(_TYPES)


def cannot_read(type_name: str, version: int) -> str | None:
    """Why this code cannot turn a stored event of `type_name` at `version` into an
    event (None: it can), without a payload: what a log's inventory of types is checked by.
    """
    cls = _TYPES.get(type_name)
    if cls is None:
        return "a type this release does not know"
    if version > cls.VERSION:
        return f"this release reads it up to v{cls.VERSION}"
    for step in range(max(version, 1), cls.VERSION):
        if (type_name, step) not in _UPCASTERS:
            return f"no upcaster from v{step}"
    return None


def upcast(type_name: str, version: int, payload: Payload) -> Payload:
    """Lift a stored payload from `version` to the type's current version."""
    current = event_class(type_name).VERSION
    if version > current:
        raise UnknownEventType(f"{type_name} v{version} is newer than this code (v{current})")
    while version < current:
        try:
            step = _UPCASTERS[(type_name, version)]
        except KeyError:
            raise UnknownEventType(f"no upcaster for {type_name} v{version}") from None
        payload = step(dict(payload))
        version += 1
    return payload


def to_payload(evt: Event) -> Payload:
    """A JSON-compatible dict of the event's fields (datetimes as ISO strings)."""
    return evt.model_dump(mode="json")


def from_payload(type_name: str, version: int, payload: Payload) -> Event:
    """Today's event from a stored payload of `version`, validated."""
    cls = _TYPES.get(type_name)
    if cls is not None and version == cls.VERSION:
        # Written by today's code: nothing to lift. The class's own validator, which is
        # what model_validate calls, without its per-call set-up: a replay comes here for
        # every event of the log.
        event: Event = cls.__pydantic_validator__.validate_python(payload)
        return event
    return event_class(type_name).model_validate(upcast(type_name, version, payload))


# --- the concrete events of an order's stream -------------------------------------------
#
# One class per fact, past tense. A field holding a reason is checked against the
# catalogue, so a stream can never carry, say, a Planned reason on a ClassFailed event.


def _reason_of(condition: ConditionType, status: ConditionStatus) -> Callable[[Reason], Reason]:
    def check(reason: Reason) -> Reason:
        info = CATALOGUE[reason]
        if info.condition is not condition or info.status is not status:
            raise ValueError(f"{reason} is not a {status} reason of {condition}")
        return reason

    return check


_ClassTrue = Annotated[Reason, AfterValidator(_reason_of(ConditionType.CLASS_RESOLVED, _TRUE))]
_ClassFalse = Annotated[Reason, AfterValidator(_reason_of(ConditionType.CLASS_RESOLVED, _FALSE))]
_ModelTrue = Annotated[Reason, AfterValidator(_reason_of(ConditionType.MODEL_RESOLVED, _TRUE))]
_ModelFalse = Annotated[Reason, AfterValidator(_reason_of(ConditionType.MODEL_RESOLVED, _FALSE))]
_PlanFalse = Annotated[Reason, AfterValidator(_reason_of(ConditionType.PLANNED, _FALSE))]
_WorkloadFalse = Annotated[Reason, AfterValidator(_reason_of(ConditionType.WORKLOAD_READY, _FALSE))]


@event("SpecObserved", version=2)
class SpecObserved(Event):
    """The order's spec as the controller saw it at `generation` (v2: `class_name`)."""

    generation: int
    model_ref: ModelRef
    class_name: str | None = None  # None: classless mode
    name: str = ""  # the order's metadata.name: names the objects it owns
    namespace: str = ""


@upcaster("SpecObserved", 1)
def upcast_spec_observed_v1_v2(payload: Payload) -> Payload:
    """v1 named the class after the CRD field; v2 calls it what the core calls it."""
    payload["class_name"] = payload.pop("inference_service_class_name", None)
    return payload


@event("ClassResolved")
class ClassResolved(Event):
    """The named class (or the classless defaults) admitted the order: its policy applies."""

    class_name: str | None
    policy: EffectivePolicy
    reason: _ClassTrue = Reason.CLASS_ADMITTED
    message: str = ""


@event("ClassFailed")
class ClassFailed(Event):
    class_name: str | None
    reason: _ClassFalse
    message: str = ""


@event("ModelResolved", version=2)
class ModelResolved(Event):
    """The model ref resolved; `facts` are what every later decision about it used (v2:
    `facts.weights_file`)."""

    facts: ModelFacts
    endpoint_type: EndpointType | None = None  # None in classless mode
    reason: _ModelTrue = Reason.MODEL_RESOLVED
    message: str = ""


@upcaster("ModelResolved", 1)
def upcast_model_resolved_v1_v2(payload: Payload) -> Payload:
    """v1 facts did not name the file a GGUF runtime opens: the runtime chose it."""
    return payload  # `weights_file` absent reads as None


@event("ModelFailed", version=2)
class ModelFailed(Event):
    """(v2: `facts.weights_file`.)"""

    reason: _ModelFalse
    message: str = ""
    facts: ModelFacts | None = None  # when the facts were read and policy refused them


@upcaster("ModelFailed", 1)
def upcast_model_failed_v1_v2(payload: Payload) -> Payload:
    """v1 facts did not name the file a GGUF runtime opens: the runtime chose it."""
    return payload


@event("PlanComputed")
class PlanComputed(Event):
    """The planner chose `plan`; `candidates` are the options it weighed."""

    plan: Plan
    candidates: tuple[Candidate, ...] = ()
    excluded_device_classes: tuple[str, ...] = ()  # tried classes the planner was told to skip
    # "namespace/name" of lower-priority claims the place needs freed, freed before applying
    reclaims: tuple[str, ...] = ()
    message: str = ""


@event("PlanFailed")
class PlanFailed(Event):
    """No plan: `candidates` say why each option lost."""

    reason: _PlanFalse
    message: str = ""
    candidates: tuple[Candidate, ...] = ()
    excluded_device_classes: tuple[str, ...] = ()


@event("WorkloadApplied")
class WorkloadApplied(Event):
    """The workload objects were applied with `plan`: from now on the order holds it."""

    plan: Plan


@event("WorkloadApplyFailed")
class WorkloadApplyFailed(Event):
    message: str
    # Older streams carry no reason: the API server's refusal, which they all were.
    reason: _WorkloadFalse = Reason.WORKLOAD_APPLY_FAILED


@event("WorkloadObserved", version=2)
class WorkloadObserved(Event):
    """The runtime Deployment's counts and what its pods say (v2: `not_starting`)."""

    desired_replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0
    unallocated_since: datetime | None = None  # pods wait for device claims since then
    # The scheduler's word on pods pending for anything but their devices (CPU, taints).
    unschedulable: str | None = None
    rollout: str = ""  # the Deployment's "uid/generation" (older streams: unknown)
    # Kubernetes' word on a runtime container that does not start (ImagePullBackOff,
    # CrashLoopBackOff and its last exit, CreateContainerConfigError).
    not_starting: str | None = None


@upcaster("WorkloadObserved", 1)
def upcast_workload_observed_v1_v2(payload: Payload) -> Payload:
    """v1 did not read the pods' containers: nothing was said of them."""
    payload.setdefault("not_starting", None)
    return payload


@event("WorkloadRolledOut")
class WorkloadRolledOut(Event):
    """The Deployment finished `rollout` (its "uid/generation"): every replica of it was
    available. While the Deployment stays at that rollout, a replica lost is the runtime
    failing, not a rollout."""

    rollout: str


@event("EndpointPublished")
class EndpointPublished(Event):
    url: str
    type: ExposureType


@event("AuthSecretIssued")
class AuthSecretIssued(Event):
    """The order's token Secret exists. Its name only: a token never enters the log."""

    name: str


@event("ProbeSucceeded")
class ProbeSucceeded(Event):
    status_code: int | None = None


@event("ProbeFailed")
class ProbeFailed(Event):
    status_code: int | None = None
    error: str = ""


@event("ScalingBlocked")
class ScalingBlocked(Event):
    """The order serves but cannot grow: preemption has exhausted capacity."""

    message: str = ""


@event("CapacityTaken")
class CapacityTaken(Event):
    """A higher-priority order took replicas from this one."""

    taken_by: str
    priority_class_name: str | None = None
    replicas: int = 0
    message: str = ""


@event("ReplicasReclaimed")
class ReplicasReclaimed(Event):
    """This order took replicas of a lower-priority order (docs/priority.md); the victim's
    stream records the same take as CapacityTaken, both before its Deployment is scaled."""

    victim: str  # namespace/name
    replicas: int
    message: str = ""
    basis: str = ""  # the victim Deployment's resourceVersion the take was decided from


@event("ScalingRecovered")
class ScalingRecovered(Event):
    message: str = ""


@event("DeviceClassTried")
class DeviceClassTried(Event):
    """The workload's claims stayed unallocated past the grace period on this device class."""

    device_class: str
    message: str = ""
    # Share units (100 a device) the class had free when it was marked tried: the class
    # is tried again once it offers more (DeviceClassRetried). None in older streams.
    free_units: int | None = None


@event("DeviceClassRetried")
class DeviceClassRetried(Event):
    """A tried device class offers more capacity than when it was tried: plan on it again."""

    device_class: str
    message: str = ""


@event("RecipeReplaced")
class RecipeReplaced(Event):
    """The launch recipe the plan named (`recipe`) was deleted, or edited into one the
    controller refuses: `plan` is the same place on the best recipe left, rolled out as a
    recipe's edit is. Or it was edited to turn tool calling on or off: `plan` is the same
    place on the same recipe, saying so. Not a replan (the planner was not asked;
    replanCount stays)."""

    recipe: str
    plan: Plan
    message: str = ""


@event("OrderDeleted")
class OrderDeleted(Event):
    """The order is gone; its stream is closed."""


OrderEvent = (
    SpecObserved
    | ClassResolved
    | ClassFailed
    | ModelResolved
    | ModelFailed
    | PlanComputed
    | PlanFailed
    | WorkloadApplied
    | WorkloadApplyFailed
    | WorkloadObserved
    | WorkloadRolledOut
    | EndpointPublished
    | AuthSecretIssued
    | ProbeSucceeded
    | ProbeFailed
    | ScalingBlocked
    | CapacityTaken
    | ScalingRecovered
    | ReplicasReclaimed
    | DeviceClassTried
    | DeviceClassRetried
    | RecipeReplaced
    | OrderDeleted
)
