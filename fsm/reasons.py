"""The catalogue of every phase, condition and reason the project can emit.

Reasons are used verbatim as Kubernetes condition reasons, so they are CamelCase `str`
Enums and nothing else in the code spells a reason as a bare string. The reasons page in
the docs (`docs/reasons.md`) is generated from `CATALOGUE`; a test fails when they differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "CATALOGUE",
    "CLASS_CONDITION_CATALOGUE",
    "ORDER_CONDITIONS",
    "READINESS_CONDITIONS",
    "ROLLOUT_STEPS",
    "ClassReason",
    "ConditionStatus",
    "ConditionType",
    "Phase",
    "Reason",
    "ReasonInfo",
    "Who",
]


class Phase(StrEnum):
    """The order's `status.phase`."""

    PENDING = "Pending"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"


class ConditionType(StrEnum):
    """An order's conditions, in the order they are evaluated and written."""

    CLASS_RESOLVED = "ClassResolved"
    MODEL_RESOLVED = "ModelResolved"
    PLANNED = "Planned"
    WORKLOAD_READY = "WorkloadReady"
    READY = "Ready"
    SCALING_HEALTHY = "ScalingHealthy"


READINESS_CONDITIONS: tuple[ConditionType, ...] = (
    ConditionType.CLASS_RESOLVED,
    ConditionType.MODEL_RESOLVED,
    ConditionType.PLANNED,
    ConditionType.WORKLOAD_READY,
    ConditionType.READY,
)
ORDER_CONDITIONS: tuple[ConditionType, ...] = (
    *READINESS_CONDITIONS,
    ConditionType.SCALING_HEALTHY,
)


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Who(StrEnum):
    """Who can act on a reason: the answer `ai-inference why` gives."""

    NOBODY = "nobody"  # all is well
    WAIT = "wait"  # it resolves by itself
    USER = "user"  # the order's author: the model ref or the Secret
    ADMIN = "admin"  # the cluster administrator: class, recipes, capacity


class Reason(StrEnum):
    """Every reason an order's condition can carry."""

    # ClassResolved
    CLASS_ADMITTED = "ClassAdmitted"
    CLASSLESS_DEFAULTS = "ClasslessDefaults"
    CLASS_NOT_FOUND = "ClassNotFound"
    CLASS_NOT_READY = "ClassNotReady"
    NAMESPACE_NOT_ADMITTED = "NamespaceNotAdmitted"
    # ModelResolved
    MODEL_RESOLVED = "ModelResolved"
    MODEL_NOT_FOUND = "ModelNotFound"
    MODEL_NAMESPACE_FORBIDDEN = "ModelNamespaceForbidden"
    MODEL_NOT_READY = "ModelNotReady"
    MODEL_ACCESS_DENIED = "ModelAccessDenied"
    MODEL_SOURCE_UNREACHABLE = "ModelSourceUnreachable"
    MODEL_METADATA_INVALID = "ModelMetadataInvalid"
    AUTH_SECRET_NOT_FOUND = "AuthSecretNotFound"
    AUTH_SECRET_KEY_MISSING = "AuthSecretKeyMissing"
    AUTH_SECRET_INVALID = "AuthSecretInvalid"
    CATALOG_DISABLED = "CatalogDisabled"
    ENDPOINT_TYPE_POLICY_CONFLICT = "EndpointTypePolicyConflict"
    FORMAT_NOT_ALLOWED = "FormatNotAllowed"
    PARAMETER_COUNT_NOT_ALLOWED = "ParameterCountNotAllowed"
    # Planned
    PLAN_COMPUTED = "PlanComputed"
    LAUNCH_PLAN_IN_FORCE = "LaunchPlanInForce"
    NO_CAPACITY = "NoCapacity"
    NO_ACCELERATOR_WITH_ENOUGH_MEMORY = "NoAcceleratorWithEnoughMemory"
    QUANTIZATION_MISMATCH = "QuantizationMismatch"
    NO_COMPATIBLE_RUNTIME_AVAILABLE = "NoCompatibleRuntimeAvailable"
    RESOURCE_CLAIM_EXHAUSTED = "ResourceClaimExhausted"
    PLACEMENT_UNDECIDABLE = "PlacementUndecidable"
    PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
    # WorkloadReady
    WORKLOAD_AVAILABLE = "WorkloadAvailable"
    ROLLED_OUT = "RolledOut"
    ROLLOUT_IN_PROGRESS = "RolloutInProgress"
    DEVICES_NOT_ALLOCATED = "DevicesNotAllocated"
    PODS_UNSCHEDULABLE = "PodsUnschedulable"
    RUNTIME_NOT_STARTING = "RuntimeNotStarting"
    WORKLOAD_APPLY_FAILED = "WorkloadApplyFailed"
    CERTIFICATE_SECRET_MISSING = "CertificateSecretMissing"
    AUTH_SECRET_CONFLICT = "AuthSecretConflict"
    PREEMPTED_BY_PRIORITY = "PreemptedByPriority"
    # Ready
    ENDPOINT_SERVING = "EndpointServing"
    AWAITING_FIRST_PROBE = "AwaitingFirstProbe"
    HEALTH_CHECK_FAILED = "HealthCheckFailed"
    SERVICE_UNHEALTHY = "ServiceUnhealthy"
    # ScalingHealthy
    SCALING_WITHIN_BOUNDS = "ScalingWithinBounds"
    CAPACITY_TAKEN_BY_PRIORITY = "CapacityTakenByPriority"
    SCALE_UP_BLOCKED = "ScaleUpBlocked"
    NOT_SERVING = "NotServing"
    # Unknown: a condition after a False one is not evaluated and names what it waits for
    AWAITING_CLASS = "AwaitingClass"
    AWAITING_MODEL = "AwaitingModel"
    AWAITING_PLAN = "AwaitingPlan"
    AWAITING_WORKLOAD = "AwaitingWorkload"
    EVALUATING = "Evaluating"


@dataclass(frozen=True, slots=True)
class ReasonInfo:
    condition: ConditionType | None  # None: used on any condition (the Unknown ones)
    status: ConditionStatus
    who: Who
    meaning: str


_T, _F, _U = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN
_C = ConditionType

CATALOGUE: dict[Reason, ReasonInfo] = {
    Reason.CLASS_ADMITTED: ReasonInfo(
        _C.CLASS_RESOLVED,
        _T,
        Who.NOBODY,
        "The named class exists, is Ready and admits the namespace.",
    ),
    Reason.CLASSLESS_DEFAULTS: ReasonInfo(
        _C.CLASS_RESOLVED,
        _T,
        Who.NOBODY,
        "No class is named: the built-in classless defaults apply (External, Token, TLS).",
    ),
    Reason.CLASS_NOT_FOUND: ReasonInfo(
        _C.CLASS_RESOLVED,
        _F,
        Who.USER,
        "The named class does not exist; compare spec.inferenceServiceClassName with what the "
        "administrator installed (expected right after an upgrade renamed the shipped class).",
    ),
    Reason.CLASS_NOT_READY: ReasonInfo(
        _C.CLASS_RESOLVED,
        _F,
        Who.ADMIN,
        "The named class exists but is not Ready; its own Ready condition says what is wrong.",
    ),
    Reason.NAMESPACE_NOT_ADMITTED: ReasonInfo(
        _C.CLASS_RESOLVED,
        _F,
        Who.ADMIN,
        "The class's admissionPolicy does not list the order's namespace.",
    ),
    Reason.MODEL_RESOLVED: ReasonInfo(
        _C.MODEL_RESOLVED,
        _T,
        Who.NOBODY,
        "The model ref resolved, its facts are known and the class's model policy admits it.",
    ),
    Reason.MODEL_NOT_FOUND: ReasonInfo(
        _C.MODEL_RESOLVED, _F, Who.USER, "The model ref does not resolve at its source."
    ),
    Reason.MODEL_NAMESPACE_FORBIDDEN: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.USER,
        "The ref names a Model in another namespace. A Model is read only in the order's own "
        "namespace; a model shared between namespaces is a ClusterModel.",
    ),
    # The user's, as the guide has it: the catalog model is theirs to bring to Ready (or
    # to wait for while it is still being made), the platform cannot do it for them.
    Reason.MODEL_NOT_READY: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.USER,
        "The catalog model exists but is not Ready yet: see the Model's own status.",
    ),
    Reason.MODEL_ACCESS_DENIED: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.USER,
        "The model is gated and the hub refused the token (or no token was given).",
    ),
    Reason.MODEL_SOURCE_UNREACHABLE: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.WAIT,
        "The model hub or catalog did not answer in time; retried with backoff.",
    ),
    Reason.MODEL_METADATA_INVALID: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.ADMIN,
        "The source answered, but its metadata could not be read (malformed config or index).",
    ),
    Reason.AUTH_SECRET_NOT_FOUND: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.USER,
        "spec.model.authSecretRef names a Secret that does not exist in the order's namespace.",
    ),
    Reason.AUTH_SECRET_KEY_MISSING: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.USER,
        "The Secret named by spec.model.authSecretRef has no such key (default key: token).",
    ),
    Reason.AUTH_SECRET_INVALID: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.USER,
        "The token in the Secret named by spec.model.authSecretRef cannot be sent in an HTTP "
        "header (a line break, a control or non-ASCII character inside it); nothing was sent "
        "to the hub.",
    ),
    Reason.CATALOG_DISABLED: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.ADMIN,
        "The order names an ai-models catalog model, but settings.catalog.mode is None "
        "or the cluster does not serve the ai-models kinds (Model, ClusterModel).",
    ),
    Reason.ENDPOINT_TYPE_POLICY_CONFLICT: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.ADMIN,
        "The class allows no endpoint type the model offers; another class is needed.",
    ),
    Reason.FORMAT_NOT_ALLOWED: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.USER,
        "The class's modelPolicy.allowedFormats excludes the model's format.",
    ),
    Reason.PARAMETER_COUNT_NOT_ALLOWED: ReasonInfo(
        _C.MODEL_RESOLVED,
        _F,
        Who.USER,
        "The model has more parameters than the class's modelPolicy.maxParameterCount.",
    ),
    Reason.PLAN_COMPUTED: ReasonInfo(
        _C.PLANNED, _T, Who.NOBODY, "A launch plan was chosen; status.resolved shows it."
    ),
    Reason.LAUNCH_PLAN_IN_FORCE: ReasonInfo(
        _C.PLANNED,
        _T,
        Who.WAIT,
        "Serving on the plan it holds; a recalculation failed (the message says why), which "
        "speaks of capacity beyond the order's own place. Who can act is that failure's "
        "(`why` says it; its Event is a Warning when someone must).",
    ),
    Reason.NO_CAPACITY: ReasonInfo(
        _C.PLANNED,
        _F,
        Who.WAIT,
        "Devices large enough exist, but none is free (counting what lower-priority orders "
        "hold as reclaimable); waiting is the right answer.",
    ),
    Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY: ReasonInfo(
        _C.PLANNED,
        _F,
        Who.WAIT,
        "No allowed device has enough memory for the model, even at maxAcceleratorCount.",
    ),
    Reason.QUANTIZATION_MISMATCH: ReasonInfo(
        _C.PLANNED,
        _F,
        Who.ADMIN,
        "Recipes exist for this hardware, but none takes the model's quantization.",
    ),
    Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE: ReasonInfo(
        _C.PLANNED, _F, Who.ADMIN, "No launch recipe fits this hardware and model format at all."
    ),
    Reason.RESOURCE_CLAIM_EXHAUSTED: ReasonInfo(
        _C.PLANNED,
        _F,
        Who.ADMIN,
        "Every device class the order could try was tried and none held it: look for capacity. "
        "A tried class is tried again by itself once it offers more free capacity than when "
        "it was tried (a ResourceSlice added, a claim freed). Meanwhile the order runs no "
        "workload: its Deployment is made anew with the next plan.",
    ),
    Reason.PLACEMENT_UNDECIDABLE: ReasonInfo(
        _C.PLANNED,
        _F,
        Who.ADMIN,
        "Nothing to try from the start: the class's device selection cannot be judged "
        "(missing device classes or a selector that cannot be evaluated).",
    ),
    Reason.PRIORITY_CLASS_NOT_FOUND: ReasonInfo(
        _C.PLANNED, _F, Who.ADMIN, "The priority class the class admits does not exist."
    ),
    Reason.WORKLOAD_AVAILABLE: ReasonInfo(
        _C.WORKLOAD_READY, _T, Who.NOBODY, "The runtime Deployment has its replicas available."
    ),
    Reason.ROLLED_OUT: ReasonInfo(
        _C.WORKLOAD_READY,
        _T,
        Who.ADMIN,
        "After the first Ready, the Deployment completed its rollout and has no replica "
        "available now, its spec unchanged: the runtime's pods crashed or fail their "
        "readiness probe (their events and logs say why). This is the service failing, not "
        "a rollout, so the probe keeps judging it: persistent failures make the order "
        "Failed (ServiceUnhealthy), a replica back makes it Ready.",
    ),
    Reason.ROLLOUT_IN_PROGRESS: ReasonInfo(
        _C.WORKLOAD_READY, _F, Who.WAIT, "The workload is applied and rolling out."
    ),
    Reason.PREEMPTED_BY_PRIORITY: ReasonInfo(
        _C.WORKLOAD_READY,
        _F,
        Who.WAIT,
        "A higher-priority order took every replica (docs/priority.md); the order waits at "
        "zero replicas and comes back by itself when capacity frees.",
    ),
    Reason.DEVICES_NOT_ALLOCATED: ReasonInfo(
        _C.WORKLOAD_READY,
        _F,
        Who.WAIT,
        "The workload's pods wait for their device claims; past the grace period the device "
        "class is marked tried and the order replans. Pods pending for anything else are "
        "PodsUnschedulable.",
    ),
    Reason.PODS_UNSCHEDULABLE: ReasonInfo(
        _C.WORKLOAD_READY,
        _F,
        Who.ADMIN,
        "The workload's pods cannot be scheduled for a reason other than their devices (CPU, "
        "memory, taints, node selectors); the message quotes the scheduler. The device class "
        "is not marked tried for it.",
    ),
    Reason.RUNTIME_NOT_STARTING: ReasonInfo(
        _C.WORKLOAD_READY,
        _F,
        Who.ADMIN,
        "A runtime container does not start: its image cannot be pulled (ImagePullBackOff), "
        "it exits as it starts (CrashLoopBackOff; the message gives the last exit, such as "
        "OOMKilled for a model that does not fit the memory planned), Kubernetes cannot "
        "create it, or the namespace refuses its pods (a LimitRange, a ResourceQuota, an "
        "admission webhook: the Deployment's ReplicaFailure). The message quotes Kubernetes; "
        "the recipe, the registry, the plan or the namespace's limits are the "
        "administrator's.",
    ),
    Reason.WORKLOAD_APPLY_FAILED: ReasonInfo(
        _C.WORKLOAD_READY,
        _F,
        Who.ADMIN,
        "The API server refused a workload object or the token Secret (a quota, an admission "
        "webhook, a namespace being deleted, a failed request); the message quotes it, or for "
        "the Secret its HTTP status only. Or an object of a child's name exists that is not "
        "the order's (a user's own Service, Ingress or HPA): it is never adopted, changed or "
        "deleted, and the message names it. Or the plan's launch recipe was deleted, or "
        "edited into one the controller refuses, and no other recipe serves the model on its "
        "hardware: the workload runs on as last applied (with another, it rolls out on that "
        "one, `RecipeReplaced` in the history). Tried again at every change of the order "
        "and on a backoff from 5 s doubling to 5 min.",
    ),
    Reason.CERTIFICATE_SECRET_MISSING: ReasonInfo(
        _C.WORKLOAD_READY,
        _F,
        Who.ADMIN,
        "https mode CustomCertificate names a Secret that does not exist where it is read "
        "(d8-system for the module's ModuleConfig block; the controller's "
        "namespace for a class's, the settings file's or the flags'), or one that is not a "
        "kubernetes.io/tls Secret with tls.crt and tls.key (nothing else is ever copied), so "
        "no copy can be made for the order's Ingress; nothing is applied until it is one (what "
        "runs keeps running).",
    ),
    Reason.AUTH_SECRET_CONFLICT: ReasonInfo(
        _C.WORKLOAD_READY,
        _F,
        Who.USER,
        "The class requires a token, and a Secret of the token's name (`{order}-auth`) "
        "exists in the order's namespace that the order does not own: a user's, or a "
        "deleted order's of the same name that the garbage collector has not removed yet. "
        "It is never adopted, changed or deleted; nothing is applied until it is gone "
        "(looked at again every 30 s).",
    ),
    Reason.ENDPOINT_SERVING: ReasonInfo(
        _C.READY, _T, Who.NOBODY, "The inference API answered the probe."
    ),
    Reason.AWAITING_FIRST_PROBE: ReasonInfo(
        _C.READY, _F, Who.WAIT, "The workload is available; the first probe has not passed yet."
    ),
    Reason.HEALTH_CHECK_FAILED: ReasonInfo(
        _C.READY, _F, Who.WAIT, "The probe fails before the first Ready; the order stays Pending."
    ),
    Reason.SERVICE_UNHEALTHY: ReasonInfo(
        _C.READY,
        _F,
        Who.ADMIN,
        "The inference API failed persistently after Ready; the order is Failed until it recovers.",
    ),
    Reason.SCALING_WITHIN_BOUNDS: ReasonInfo(
        _C.SCALING_HEALTHY, _T, Who.NOBODY, "Replicas can move between the class's bounds."
    ),
    Reason.CAPACITY_TAKEN_BY_PRIORITY: ReasonInfo(
        _C.SCALING_HEALTHY,
        _F,
        Who.WAIT,
        "A higher-priority order took replicas from this one; it serves at fewer replicas.",
    ),
    Reason.SCALE_UP_BLOCKED: ReasonInfo(
        _C.SCALING_HEALTHY,
        _F,
        Who.WAIT,
        "Serving but cannot grow: preemption has exhausted capacity. Behind Degraded.",
    ),
    Reason.NOT_SERVING: ReasonInfo(
        _C.SCALING_HEALTHY, _U, Who.NOBODY, "Growth is judged only once the order serves."
    ),
    Reason.AWAITING_CLASS: ReasonInfo(
        None, _U, Who.NOBODY, "Not evaluated: waits for ClassResolved."
    ),
    Reason.AWAITING_MODEL: ReasonInfo(
        None, _U, Who.NOBODY, "Not evaluated: waits for ModelResolved."
    ),
    Reason.AWAITING_PLAN: ReasonInfo(None, _U, Who.NOBODY, "Not evaluated: waits for Planned."),
    Reason.AWAITING_WORKLOAD: ReasonInfo(
        None, _U, Who.NOBODY, "Not evaluated: waits for WorkloadReady."
    ),
    Reason.EVALUATING: ReasonInfo(
        None, _U, Who.WAIT, "The controller has not judged this condition yet."
    ),
}


class ClassReason(StrEnum):
    """Reasons of an InferenceServiceClass's own `Ready` condition."""

    VALID = "Valid"
    NO_ENDPOINT_TYPES = "NoEndpointTypes"
    INVALID_PARAMETER_COUNT = "InvalidParameterCount"
    INVALID_REPLICA_BOUNDS = "InvalidReplicaBounds"
    INVALID_ACCELERATOR_COUNT = "InvalidAcceleratorCount"
    EMPTY_ALLOW_LIST = "EmptyAllowList"
    PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
    DEVICE_CLASS_NOT_FOUND = "DeviceClassNotFound"
    ISSUER_MISSING = "IssuerMissing"
    CERTIFICATE_SECRET_UNNAMED = "CertificateSecretUnnamed"
    INVALID_CERTIFICATE_SECRET_NAME = "InvalidCertificateSecretName"
    INVALID_ISSUER_NAME = "InvalidIssuerName"
    INVALID_SPEC = "InvalidSpec"


# Steps every healthy rollout passes through. The conditions show them; no Kubernetes
# Event tells them: as Warnings (they are False) they would say something is wrong on
# every order's way to Ready, and platform teams alert on Warning Events. A rollout that
# stalls says why with a reason of its own (DevicesNotAllocated, PodsUnschedulable, ...).
ROLLOUT_STEPS: frozenset[Reason] = frozenset(
    {Reason.ROLLOUT_IN_PROGRESS, Reason.AWAITING_FIRST_PROBE}
)


CLASS_CONDITION_CATALOGUE: dict[ClassReason, tuple[ConditionStatus, str]] = {
    ClassReason.VALID: (_T, "Every policy block is consistent; orders may use the class."),
    ClassReason.NO_ENDPOINT_TYPES: (_F, "modelPolicy.allowedEndpointTypes is missing or empty."),
    ClassReason.INVALID_PARAMETER_COUNT: (
        _F,
        "modelPolicy.maxParameterCount is not a count such as 500M, 8B or 1.5T.",
    ),
    ClassReason.INVALID_REPLICA_BOUNDS: (
        _F,
        "scalingPolicy.minReplicas is above maxReplicas, or a bound is below 1 or above "
        "2147483647 (int32, what a HorizontalPodAutoscaler holds).",
    ),
    ClassReason.INVALID_ACCELERATOR_COUNT: (
        _F,
        "acceleratorPolicy.maxAcceleratorCount is above 2147483647 (int32).",
    ),
    ClassReason.EMPTY_ALLOW_LIST: (
        _F,
        "An allow-list is set but empty (modelPolicy.allowedFormats, acceleratorPolicy."
        "allowedSharingModes, allowedPlacementTypes or allowedDeviceClasses), so no order "
        "could pass it; leave it out for its default.",
    ),
    ClassReason.PRIORITY_CLASS_NOT_FOUND: (
        _F,
        "scalingPolicy.allowedPriorityClassNames names a PriorityClass that does not exist.",
    ),
    ClassReason.DEVICE_CLASS_NOT_FOUND: (
        _F,
        "acceleratorPolicy.allowedDeviceClasses names a DeviceClass that does not exist.",
    ),
    ClassReason.ISSUER_MISSING: (
        _F,
        "exposurePolicy.https.mode is CertManager but no clusterIssuerName is set.",
    ),
    ClassReason.CERTIFICATE_SECRET_UNNAMED: (
        _F,
        "exposurePolicy.https.mode is CustomCertificate but no secretName is set (the CRD's "
        "CEL rule refuses such a class where the server has CEL; this is for the others).",
    ),
    ClassReason.INVALID_CERTIFICATE_SECRET_NAME: (
        _F,
        "customCertificate.secretName is not a Secret's name (a DNS-1123 subdomain); no "
        "Secret is read for it.",
    ),
    ClassReason.INVALID_ISSUER_NAME: (
        _F,
        "certManager.clusterIssuerName is not a ClusterIssuer's name (a DNS-1123 "
        "subdomain); no Ingress asks cert-manager for it.",
    ),
    ClassReason.INVALID_SPEC: (
        _F,
        "The spec cannot be read as a class (a field of the wrong shape); the message quotes it.",
    ),
}
