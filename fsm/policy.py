"""Class policy: is a class valid, may this order use it, and what does it impose.

Three pure decisions, each a frozen value with a reason from fsm/reasons.py:

- `validate_class` — an InferenceServiceClass's own Ready condition (ClassReason): every
  problem an admin can act on, with a message that names the field.
- `resolve_class` — the order's ClassResolved: the named class exists, is valid, admits
  the namespace; or classless mode (SPEC §4), whose exposure is built in here and never
  read from the shipped `default-llm` object. The result carries the EffectivePolicy.
- `resolve_model` — the order's ModelResolved under that policy: the endpoint type
  (allowedEndpointTypes ∩ what the model offers, Chat > Embeddings > Rerank) and the
  class's model policy (formats, parameter count). Classless: no check at all.

Absent blocks mean defaults, the same with a class or without: no scalingPolicy is
exactly one replica, no acceleratorPolicy is one whole device, Dedicated.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from fsm.identity import is_object_name
from fsm.placement.sizing import parameter_count
from fsm.quantity import QuantityError, parse_parameter_count
from fsm.reasons import CLASS_CONDITION_CATALOGUE, ClassReason, ConditionStatus, Reason
from fsm.values import (
    AcceleratorPolicy,
    Authentication,
    ClassOutcome,
    ClassSpec,
    Constraints,
    EffectivePolicy,
    EndpointType,
    ExposurePolicy,
    ExposureType,
    HttpsMode,
    HttpsPolicy,
    ModelFacts,
    ModelOutcome,
    ScalingPolicy,
    UpdateStrategy,
)

__all__ = [
    "CLASSLESS_EXPOSURE",
    "DEFAULT_ACCELERATOR",
    "ENDPOINT_PREFERENCE",
    "INT32_MAX",
    "ClassProblem",
    "ClassValidity",
    "choose_endpoint_type",
    "classless_policy",
    "constraints_of",
    "effective_policy",
    "resolve_class",
    "resolve_model",
    "validate_class",
]

# SPEC §4: the values of the shipped default-llm on the day classless mode appeared.
# The issuer is left to the module's https settings (default letsencrypt), as for a class.
CLASSLESS_EXPOSURE = ExposurePolicy(
    type=ExposureType.EXTERNAL,
    authentication=Authentication.TOKEN,
    https=HttpsPolicy(mode=HttpsMode.CERT_MANAGER),
)
DEFAULT_ACCELERATOR = AcceleratorPolicy()  # one whole device, Dedicated
DEFAULT_EXPOSURE = ExposurePolicy()  # a class without the block: ClusterLocal, no token
ENDPOINT_PREFERENCE: tuple[EndpointType, ...] = (
    EndpointType.CHAT,
    EndpointType.EMBEDDINGS,
    EndpointType.RERANK,
)
# The largest count the CRDs admit (`format: int32`, `maximum`): a bigger replica bound
# reaches the HorizontalPodAutoscaler as a wrapped negative number. A 1.20 server does not
# enforce the format, and a class may have been stored before the maxima were added.
INT32_MAX = 2**31 - 1


# --- class validation ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClassProblem:
    reason: ClassReason
    message: str


@dataclass(frozen=True, slots=True)
class ClassValidity:
    """The class's Ready condition: the first problem's reason, every problem's message."""

    problems: tuple[ClassProblem, ...] = ()

    @property
    def ready(self) -> bool:
        return not self.problems

    @property
    def reason(self) -> ClassReason:
        return self.problems[0].reason if self.problems else ClassReason.VALID

    @property
    def status(self) -> ConditionStatus:
        return CLASS_CONDITION_CATALOGUE[self.reason][0]

    @property
    def message(self) -> str:
        if not self.problems:
            return CLASS_CONDITION_CATALOGUE[ClassReason.VALID][1]
        return "; ".join(problem.message for problem in self.problems)


def _bounds(scaling: ScalingPolicy) -> tuple[int, int]:
    # A block that sets only minReplicas means "at least that many": max follows min.
    maximum = scaling.max_replicas
    if "max_replicas" not in scaling.model_fields_set:
        maximum = max(maximum, scaling.min_replicas)
    return scaling.min_replicas, maximum


def validate_class(
    spec: ClassSpec, *, priority_classes: Collection[str], device_classes: Collection[str]
) -> ClassValidity:
    """Every inconsistency of a class against itself and the cluster, in field order."""
    problems: list[ClassProblem] = []
    model = spec.model_policy
    if model is None or not model.allowed_endpoint_types:
        problems.append(
            ClassProblem(
                ClassReason.NO_ENDPOINT_TYPES,
                "modelPolicy.allowedEndpointTypes is empty: list at least one of Chat, "
                "Embeddings, Rerank",
            )
        )
    if model is not None and model.max_parameter_count is not None:
        try:
            parse_parameter_count(model.max_parameter_count)
        except QuantityError as invalid:
            problems.append(
                ClassProblem(
                    ClassReason.INVALID_PARAMETER_COUNT,
                    f"modelPolicy.maxParameterCount: {invalid}",
                )
            )
    if model is not None and model.allowed_formats == ():
        problems.append(_empty("modelPolicy.allowedFormats", "format", "any format"))
    if spec.scaling_policy is not None:
        low, high = _bounds(spec.scaling_policy)
        if low < 1 or high < 1 or low > high or high > INT32_MAX:
            problems.append(
                ClassProblem(
                    ClassReason.INVALID_REPLICA_BOUNDS,
                    f"scalingPolicy minReplicas={low} maxReplicas={high}: both must be "
                    f"between 1 and {INT32_MAX} and minReplicas at most maxReplicas",
                )
            )
        missing = [
            name
            for name in spec.scaling_policy.allowed_priority_class_names or ()
            if name not in priority_classes
        ]
        if missing:
            problems.append(
                ClassProblem(
                    ClassReason.PRIORITY_CLASS_NOT_FOUND,
                    f"scalingPolicy.allowedPriorityClassNames: PriorityClass "
                    f"{', '.join(missing)} does not exist; create it or remove the name",
                )
            )
    accelerator = spec.accelerator_policy
    if accelerator is not None:
        if not accelerator.allowed_sharing_modes:
            problems.append(
                _empty("acceleratorPolicy.allowedSharingModes", "sharing mode", "Dedicated")
            )
        if not accelerator.allowed_placement_types:
            problems.append(
                _empty("acceleratorPolicy.allowedPlacementTypes", "placement type", "WholeDevice")
            )
        if accelerator.allowed_device_classes == ():
            problems.append(
                _empty("acceleratorPolicy.allowedDeviceClasses", "DeviceClass", "any DeviceClass")
            )
        missing = [
            name for name in accelerator.allowed_device_classes or () if name not in device_classes
        ]
        if missing:
            problems.append(
                ClassProblem(
                    ClassReason.DEVICE_CLASS_NOT_FOUND,
                    f"acceleratorPolicy.allowedDeviceClasses: DeviceClass "
                    f"{', '.join(missing)} does not exist; install its driver or remove the name",
                )
            )
        if accelerator.max_accelerator_count > INT32_MAX:
            problems.append(
                ClassProblem(
                    ClassReason.INVALID_ACCELERATOR_COUNT,
                    f"acceleratorPolicy.maxAcceleratorCount={accelerator.max_accelerator_count}: "
                    f"must be at most {INT32_MAX}",
                )
            )
    https = spec.exposure_policy.https if spec.exposure_policy is not None else None
    if https is not None and https.mode is HttpsMode.CERT_MANAGER and not https.cluster_issuer_name:
        problems.append(
            ClassProblem(
                ClassReason.ISSUER_MISSING,
                "exposurePolicy.https.mode is CertManager: set "
                "exposurePolicy.https.certManager.clusterIssuerName (e.g. letsencrypt)",
            )
        )
    if (
        https is not None
        and https.mode is HttpsMode.CUSTOM_CERTIFICATE
        and not https.custom_certificate_secret_name
    ):
        # Else the module's Secret would be used without a word: a class's block is
        # taken whole (docs/policy.md), so it names its own certificate.
        problems.append(
            ClassProblem(
                ClassReason.CERTIFICATE_SECRET_UNNAMED,
                "exposurePolicy.https.mode is CustomCertificate: set "
                "exposurePolicy.https.customCertificate.secretName (a kubernetes.io/tls "
                "Secret in the module's namespace)",
            )
        )
    # Names the CRD's pattern refuses on a server, told here for a class stored before
    # it. The Secret's is read with the controller's rights (`../../ns/secrets/x` was
    # another namespace's TLS key, copied next to the order); the issuer's is written into
    # every order's Ingress annotation, where only cert-manager's own logs say it is wrong.
    if https is not None:
        names = (
            ("customCertificate.secretName", https.custom_certificate_secret_name, "a Secret",
             ClassReason.INVALID_CERTIFICATE_SECRET_NAME),
            ("certManager.clusterIssuerName", https.cluster_issuer_name, "a ClusterIssuer",
             ClassReason.INVALID_ISSUER_NAME),
        )  # fmt: skip
        for field, name, kind, reason in names:
            if name and not is_object_name(name):
                problems.append(
                    ClassProblem(
                        reason,
                        f"exposurePolicy.https.{field} {name[:80]!r} is not the name of "
                        f"{kind} (lowercase letters, digits, '-' and '.')",
                    )
                )
    return ClassValidity(tuple(problems))


def _empty(field: str, item: str, default: str) -> ClassProblem:
    # An empty allow-list admits nothing, and orders would be told something else went
    # wrong (no DeviceClass, no format); absent is the default the admin likely meant.
    return ClassProblem(
        ClassReason.EMPTY_ALLOW_LIST,
        f"{field} is empty, so no order can pass it: list at least one {item}, or leave "
        f"the field out for the default ({default})",
    )


# --- the effective policy ------------------------------------------------------------


def constraints_of(scaling: ScalingPolicy | None, priority_classes: Collection[str]) -> Constraints:
    """Replica bounds and the priority class an order runs with.

    The priority class is the first of `allowedPriorityClassNames` that exists; when none
    exists the first is still named, so the planner can say PriorityClassNotFound. No
    list: no priority class (the cluster's globalDefault, else 0, applies).
    """
    if scaling is None:
        return Constraints(min_replicas=1, max_replicas=1)
    low, high = _bounds(scaling)
    names = scaling.allowed_priority_class_names or ()
    chosen = next((n for n in names if n in priority_classes), names[0] if names else None)
    return Constraints(min_replicas=low, max_replicas=high, priority_class_name=chosen)


def classless_policy(priority_classes: Collection[str] = ()) -> EffectivePolicy:
    """SPEC §4: built-in exposure, no endpoint-type check, every other block absent."""
    return EffectivePolicy(
        class_name=None,
        model_policy=None,
        accelerator=DEFAULT_ACCELERATOR,
        exposure=CLASSLESS_EXPOSURE,
        constraints=constraints_of(None, priority_classes),
        update_strategy=UpdateStrategy.ROLLING_UPDATE,
    )


def effective_policy(
    class_name: str, spec: ClassSpec, priority_classes: Collection[str] = ()
) -> EffectivePolicy:
    return EffectivePolicy(
        class_name=class_name,
        model_policy=spec.model_policy,
        accelerator=spec.accelerator_policy or DEFAULT_ACCELERATOR,
        exposure=spec.exposure_policy or DEFAULT_EXPOSURE,
        constraints=constraints_of(spec.scaling_policy, priority_classes),
        update_strategy=(
            spec.update_policy.strategy if spec.update_policy else UpdateStrategy.ROLLING_UPDATE
        ),
    )


def resolve_class(
    class_name: str | None,
    namespace: str,
    spec: ClassSpec | None,
    *,
    priority_classes: Collection[str] = (),
    device_classes: Collection[str] = (),
) -> ClassOutcome:
    """ClassResolved for an order naming `class_name` (None: classless) in `namespace`."""
    if class_name is None:
        return ClassOutcome(
            reason=Reason.CLASSLESS_DEFAULTS,
            message="No class named: External exposure with a token and TLS via cert-manager, "
            "one whole device, one replica",
            policy=classless_policy(priority_classes),
        )
    if spec is None:
        return ClassOutcome(
            reason=Reason.CLASS_NOT_FOUND,
            message=f"InferenceServiceClass {class_name!r} does not exist",
        )
    validity = validate_class(
        spec, priority_classes=priority_classes, device_classes=device_classes
    )
    if not validity.ready:
        return ClassOutcome(
            reason=Reason.CLASS_NOT_READY,
            message=f"InferenceServiceClass {class_name!r} is not Ready ({validity.reason}): "
            f"{validity.message}",
        )
    admission = spec.admission_policy
    allowed = admission.allowed_namespaces if admission is not None else None
    if allowed is not None and namespace not in allowed:
        return ClassOutcome(
            reason=Reason.NAMESPACE_NOT_ADMITTED,
            message=f"InferenceServiceClass {class_name!r} does not admit namespace "
            f"{namespace!r}; ask the administrator to add it to admissionPolicy.allowedNamespaces",
        )
    return ClassOutcome(
        reason=Reason.CLASS_ADMITTED,
        message=f"InferenceServiceClass {class_name!r} admits namespace {namespace!r}",
        policy=effective_policy(class_name, spec, priority_classes),
    )


# --- the model under the policy ------------------------------------------------------


def choose_endpoint_type(
    allowed: Collection[EndpointType], offered: Collection[EndpointType]
) -> EndpointType | None:
    """The first of Chat, Embeddings, Rerank that both the class and the model have."""
    return next((t for t in ENDPOINT_PREFERENCE if t in allowed and t in offered), None)


def resolve_model(policy: EffectivePolicy, facts: ModelFacts) -> ModelOutcome:
    """ModelResolved: the contract and the class's model policy (none in classless mode)."""
    model_policy = policy.model_policy
    if model_policy is None:
        return ModelOutcome(
            reason=Reason.MODEL_RESOLVED,
            message=f"{facts.name}: no class, so no endpoint type is chosen or checked",
            facts=facts,
        )
    allowed = model_policy.allowed_endpoint_types
    endpoint_type = choose_endpoint_type(allowed, facts.endpoint_types)
    if endpoint_type is None:
        offered = ", ".join(facts.endpoint_types) or "nothing known"
        return ModelOutcome(
            reason=Reason.ENDPOINT_TYPE_POLICY_CONFLICT,
            message=f"the class allows {', '.join(allowed) or 'no endpoint type'}; "
            f"{facts.name} offers {offered}: another class is needed",
            facts=facts,
        )
    formats = model_policy.allowed_formats
    if formats is not None and facts.format not in formats:
        return ModelOutcome(
            reason=Reason.FORMAT_NOT_ALLOWED,
            message=f"{facts.name} is {facts.format}; the class allows {', '.join(formats)}",
            facts=facts,
        )
    limit_text = model_policy.max_parameter_count
    if limit_text is not None:
        refusal = _parameter_refusal(facts, limit_text)
        if refusal:
            return ModelOutcome(
                reason=Reason.PARAMETER_COUNT_NOT_ALLOWED, message=refusal, facts=facts
            )
    return ModelOutcome(
        reason=Reason.MODEL_RESOLVED,
        message=f"{facts.name} served as {endpoint_type}",
        facts=facts,
        endpoint_type=endpoint_type,
    )


def _parameter_refusal(facts: ModelFacts, limit_text: str) -> str:
    try:
        limit = parse_parameter_count(limit_text)
    except QuantityError as invalid:
        return f"the class's maxParameterCount cannot be read: {invalid}"
    count = parameter_count(facts)
    if count is None:
        return ""  # nothing is known to compare; the planner's memory check still applies
    if count > limit:
        estimated = "" if facts.parameter_count is not None else " (estimated from its size)"
        return (
            f"{facts.name} has {_human(count)} parameters{estimated}; "
            f"the class allows at most {limit_text}"
        )
    return ""


def _human(count: int) -> str:
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return str(count)
