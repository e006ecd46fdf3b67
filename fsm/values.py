"""The nouns the core decides about: model refs and facts, class policy, plans, outcomes.

Shared by policy, planner, events and status so every module speaks of the same things.
All values are frozen pydantic models; the ones parsed from Kubernetes objects accept the
objects' camelCase field names (`ClassSpec.model_validate(obj["spec"])`) and dump with
them (`model_dump(by_alias=True)`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from fsm.reasons import CATALOGUE, ConditionStatus, Reason

__all__ = [
    "AcceleratorPolicy",
    "AdmissionPolicy",
    "Authentication",
    "Candidate",
    "CatalogKind",
    "ClassOutcome",
    "ClassSpec",
    "Constraints",
    "EffectivePolicy",
    "EndpointType",
    "ExposurePolicy",
    "ExposureType",
    "Frozen",
    "HttpsMode",
    "HttpsPolicy",
    "ModelFacts",
    "ModelFormat",
    "ModelOutcome",
    "ModelPolicy",
    "ModelRef",
    "ModelSource",
    "PlacementMode",
    "Plan",
    "PlanOutcome",
    "Quantization",
    "ScalingPolicy",
    "SharingMode",
    "UpdatePolicy",
    "UpdateStrategy",
]


class Frozen(BaseModel):
    """Immutable, camelCase-aliased, strict about unknown fields."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


class EndpointType(StrEnum):
    CHAT = "Chat"
    EMBEDDINGS = "Embeddings"
    RERANK = "Rerank"


class ModelSource(StrEnum):
    HUGGING_FACE = "HuggingFace"
    AI_MODELS = "ai-models"


class CatalogKind(StrEnum):
    MODEL = "Model"
    CLUSTER_MODEL = "ClusterModel"


class ModelFormat(StrEnum):
    SAFETENSORS = "Safetensors"
    GGUF = "GGUF"
    DIFFUSERS = "Diffusers"
    PYTORCH = "PyTorch"
    UNKNOWN = "Unknown"


class Quantization(StrEnum):
    NONE = "None"
    AWQ = "AWQ"
    GPTQ = "GPTQ"
    FP8 = "FP8"
    BITSANDBYTES = "BitsAndBytes"
    GGUF = "GGUF"


class PlacementMode(StrEnum):
    WHOLE_DEVICE = "WholeDevice"
    PARTITION = "Partition"


class SharingMode(StrEnum):
    DEDICATED = "Dedicated"
    SHARED = "Shared"


class ExposureType(StrEnum):
    CLUSTER_LOCAL = "ClusterLocal"
    EXTERNAL = "External"


class Authentication(StrEnum):
    NONE = "None"
    TOKEN = "Token"


class HttpsMode(StrEnum):
    DISABLED = "Disabled"
    CERT_MANAGER = "CertManager"
    CUSTOM_CERTIFICATE = "CustomCertificate"
    ONLY_IN_URI = "OnlyInURI"


class UpdateStrategy(StrEnum):
    ROLLING_UPDATE = "RollingUpdate"
    RECREATE = "Recreate"


# --- the order's model ---------------------------------------------------------------


class ModelRef(Frozen):
    """`spec.model` of an order, flattened."""

    src: ModelSource
    name: str
    kind: CatalogKind | None = None
    namespace: str | None = None
    auth_secret_name: str | None = None
    auth_secret_key: str = "token"


# The integers msgpack, and so the event log, can record.
INT64_MAX = 2**63 - 1
Int64 = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]


class ModelFacts(Frozen):
    """What a source says about a model; recorded in the ModelResolved event."""

    source: ModelSource
    name: str
    endpoint_types: tuple[EndpointType, ...] = ()
    format: ModelFormat = ModelFormat.UNKNOWN
    quantization: Quantization = Quantization.NONE
    # Counts a source reports, or sums of them: bounded to what the log can record.
    parameter_count: Int64 | None = None
    weights_bytes: Int64 | None = None
    dtype: str | None = None  # torch dtype name from config.json, e.g. "bfloat16"
    architecture: str | None = None
    context_window_tokens: Int64 | None = None
    gated: bool = False
    supports_tool_calling: bool = False
    revision: str | None = None  # commit sha or catalog digest the facts were read at
    # The file a runtime that opens one file is given: the GGUF variant the facts were
    # sized for (its first part). None: the runtime chooses (older facts, other formats).
    weights_file: str | None = None


# --- class policy (InferenceServiceClass.spec) ---------------------------------------


class AdmissionPolicy(Frozen):
    allowed_namespaces: tuple[str, ...] | None = None


class ModelPolicy(Frozen):
    allowed_endpoint_types: tuple[EndpointType, ...] = ()
    max_parameter_count: str | None = None
    allowed_formats: tuple[ModelFormat, ...] | None = None


class AcceleratorPolicy(Frozen):
    allowed_sharing_modes: tuple[SharingMode, ...] = (SharingMode.DEDICATED,)
    allowed_placement_types: tuple[PlacementMode, ...] = (PlacementMode.WHOLE_DEVICE,)
    allowed_device_classes: tuple[str, ...] | None = None
    max_accelerator_count: int = Field(default=1, ge=1)


class HttpsPolicy(Frozen):
    mode: HttpsMode = HttpsMode.CERT_MANAGER
    cluster_issuer_name: str | None = None
    custom_certificate_secret_name: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _flatten_platform_shape(cls, data: Any) -> Any:
        # The class spec mirrors the platform's https block (`certManager.clusterIssuerName`,
        # `customCertificate.secretName`, as in the seeds); keep the flat fields as the noun.
        if not isinstance(data, dict):
            return data
        data = dict(data)
        cert_manager = data.pop("certManager", None) or {}
        custom = data.pop("customCertificate", None) or {}
        if "clusterIssuerName" in cert_manager:
            data.setdefault("clusterIssuerName", cert_manager["clusterIssuerName"])
        if "secretName" in custom:
            data.setdefault("customCertificateSecretName", custom["secretName"])
        return data


class ExposurePolicy(Frozen):
    type: ExposureType = ExposureType.CLUSTER_LOCAL
    # Absent: None inside the cluster, Token outside it (`_token_outside`).
    authentication: Authentication = Authentication.NONE
    https: HttpsPolicy | None = None

    @model_validator(mode="before")
    @classmethod
    def _token_outside(cls, data: Any) -> Any:
        # A class that publishes outside the cluster and says nothing of authentication
        # gets a token, as classless mode's External does: an admin who left the field out
        # did not mean a public endpoint that answers anyone. None is said, not implied.
        if not isinstance(data, dict) or "authentication" in data:
            return data
        if str(data.get("type")) == ExposureType.EXTERNAL.value:
            return {**data, "authentication": Authentication.TOKEN}
        return data

    @property
    def needs_token(self) -> bool:
        """Callers present the order's token, and the runtime is given it as its key."""
        return self.authentication is Authentication.TOKEN


class ScalingPolicy(Frozen):
    allowed_priority_class_names: tuple[str, ...] | None = None
    min_replicas: int = 1
    max_replicas: int = 1


class UpdatePolicy(Frozen):
    strategy: UpdateStrategy = UpdateStrategy.ROLLING_UPDATE


class ClassSpec(Frozen):
    """InferenceServiceClass.spec. Absent blocks are None: their defaults are policy's."""

    admission_policy: AdmissionPolicy | None = None
    model_policy: ModelPolicy | None = None
    accelerator_policy: AcceleratorPolicy | None = None
    exposure_policy: ExposurePolicy | None = None
    scaling_policy: ScalingPolicy | None = None
    update_policy: UpdatePolicy | None = None


# --- outcomes: what policy and planner decide, what events record --------------------


class Outcome(Frozen):
    reason: Reason
    message: str = ""

    @property
    def ok(self) -> bool:
        return CATALOGUE[self.reason].status is ConditionStatus.TRUE


class Constraints(Frozen):
    """`status.constraints`: what the class imposes on replicas and priority."""

    min_replicas: int = 1
    max_replicas: int = 1
    priority_class_name: str | None = None


class EffectivePolicy(Frozen):
    """The policy an order lives under: its class's, or the classless defaults."""

    class_name: str | None  # None in classless mode
    model_policy: ModelPolicy | None  # None: no endpoint-type check (classless)
    accelerator: AcceleratorPolicy
    exposure: ExposurePolicy
    constraints: Constraints
    update_strategy: UpdateStrategy = UpdateStrategy.ROLLING_UPDATE


class ClassOutcome(Outcome):
    policy: EffectivePolicy | None = None


class ModelOutcome(Outcome):
    facts: ModelFacts | None = None
    endpoint_type: EndpointType | None = None  # None in classless mode


class Plan(Frozen):
    """`status.resolved` minus replanCount (a fold), plus the place the plan holds."""

    device_class: str
    accelerator_product_name: str
    accelerator_memory_gib: int
    accelerator_count: int
    placement_mode: PlacementMode
    sharing_mode: SharingMode
    share_percent: int | None = None
    recipe: str
    cpu: str
    memory: str
    model_volume: str
    tool_calling_supported: bool = False
    devices: tuple[str, ...] = ()  # "driver/pool/device" ids of the place the plan holds


class Candidate(Frozen):
    """One option the planner considered, and why it lost (reason None: it won)."""

    device_class: str
    product_name: str | None = None
    placement_mode: PlacementMode | None = None
    sharing_mode: SharingMode | None = None
    accelerator_count: int | None = None
    lost_because: Reason | None = None
    detail: str = ""


class PlanOutcome(Outcome):
    plan: Plan | None = None
    candidates: tuple[Candidate, ...] = ()
    # "namespace/name" of lower-priority ResourceClaims the plan's place needs freed
    # (lowest priority first); the controller preempts their holders before applying.
    reclaims: tuple[str, ...] = ()
