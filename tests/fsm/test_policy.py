"""Class validation, class resolution, classless mode, defaults and the model policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fsm import policy
from fsm.reasons import ClassReason, ConditionStatus, Reason
from fsm.values import (
    Authentication,
    ClassSpec,
    EndpointType,
    ExposureType,
    HttpsMode,
    ModelFormat,
    PlacementMode,
    Quantization,
    SharingMode,
)
from tests.support.planner_inputs import SEED_CLASSES, model, seed_class

PRIORITY_CLASSES = ("inference-low", "inference-normal", "inference-high")
DEVICE_CLASSES = ("gpu.nvidia.com", "mig.nvidia.com", "nvidia-t4-mps-physical")
CHAT, EMBED, RERANK = EndpointType.CHAT, EndpointType.EMBEDDINGS, EndpointType.RERANK
CHAT_ONLY: dict[str, Any] = {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}}


def _spec(**blocks: Any) -> ClassSpec:
    return ClassSpec.model_validate({**CHAT_ONLY, **blocks})


def _validate(spec: ClassSpec) -> policy.ClassValidity:
    return policy.validate_class(
        spec, priority_classes=PRIORITY_CLASSES, device_classes=DEVICE_CLASSES
    )


# --- the class's own Ready condition ----------------------------------------------------


@pytest.mark.parametrize("name", sorted(SEED_CLASSES))
def test_every_seed_class_is_valid(name: str) -> None:
    validity = _validate(seed_class(name))
    assert validity.ready, validity.message
    assert (validity.reason, validity.status) == (ClassReason.VALID, ConditionStatus.TRUE)


@pytest.mark.parametrize(
    ("spec", "reason", "names"),
    [
        pytest.param(
            {"modelPolicy": {"allowedEndpointTypes": []}},
            ClassReason.NO_ENDPOINT_TYPES,
            "allowedEndpointTypes",
            id="empty-endpoint-types",
        ),
        pytest.param(
            {"modelPolicy": None},
            ClassReason.NO_ENDPOINT_TYPES,
            "allowedEndpointTypes",
            id="no-model-policy",
        ),
        pytest.param(
            {"modelPolicy": {"allowedEndpointTypes": ["Chat"], "maxParameterCount": "huge"}},
            ClassReason.INVALID_PARAMETER_COUNT,
            "'huge'",
            id="unparsable-count",
        ),
        pytest.param(
            {
                "modelPolicy": {"allowedEndpointTypes": ["Chat"], "maxParameterCount": "9" * 5000},
            },
            ClassReason.INVALID_PARAMETER_COUNT,
            "more digits than any parameter count",
            id="5000-digit-count",
        ),
        pytest.param(
            {"scalingPolicy": {"minReplicas": 3, "maxReplicas": 2}},
            ClassReason.INVALID_REPLICA_BOUNDS,
            "minReplicas=3 maxReplicas=2",
            id="min-above-max",
        ),
        pytest.param(
            {"scalingPolicy": {"minReplicas": 0, "maxReplicas": 2}},
            ClassReason.INVALID_REPLICA_BOUNDS,
            "minReplicas=0",
            id="zero-min",
        ),
        pytest.param(
            {"scalingPolicy": {"minReplicas": 1, "maxReplicas": 3_000_000_000}},
            ClassReason.INVALID_REPLICA_BOUNDS,
            "maxReplicas=3000000000: both must be between 1 and 2147483647",
            id="max-beyond-int32",
        ),
        pytest.param(
            {"scalingPolicy": {"minReplicas": 2**31}},
            ClassReason.INVALID_REPLICA_BOUNDS,
            "minReplicas=2147483648",
            id="min-only-beyond-int32",
        ),
        pytest.param(
            {"acceleratorPolicy": {"maxAcceleratorCount": 2**31}},
            ClassReason.INVALID_ACCELERATOR_COUNT,
            "maxAcceleratorCount=2147483648: must be at most 2147483647",
            id="accelerator-count-beyond-int32",
        ),
        pytest.param(
            {"modelPolicy": {"allowedEndpointTypes": ["Chat"], "allowedFormats": []}},
            ClassReason.EMPTY_ALLOW_LIST,
            "modelPolicy.allowedFormats is empty",
            id="empty-formats",
        ),
        pytest.param(
            {"acceleratorPolicy": {"allowedSharingModes": []}},
            ClassReason.EMPTY_ALLOW_LIST,
            "acceleratorPolicy.allowedSharingModes is empty",
            id="empty-sharing-modes",
        ),
        pytest.param(
            {"acceleratorPolicy": {"allowedPlacementTypes": []}},
            ClassReason.EMPTY_ALLOW_LIST,
            "acceleratorPolicy.allowedPlacementTypes is empty",
            id="empty-placement-types",
        ),
        pytest.param(
            {"acceleratorPolicy": {"allowedDeviceClasses": []}},
            ClassReason.EMPTY_ALLOW_LIST,
            "acceleratorPolicy.allowedDeviceClasses is empty",
            id="empty-device-classes",
        ),
        pytest.param(
            {
                "scalingPolicy": {
                    "allowedPriorityClassNames": ["inference-normal", "inference-urgent"]
                }
            },
            ClassReason.PRIORITY_CLASS_NOT_FOUND,
            "inference-urgent",
            id="missing-priority-class",
        ),
        pytest.param(
            {"acceleratorPolicy": {"allowedDeviceClasses": ["nvidia-h100"]}},
            ClassReason.DEVICE_CLASS_NOT_FOUND,
            "nvidia-h100",
            id="missing-device-class",
        ),
        pytest.param(
            {"exposurePolicy": {"type": "External", "https": {"mode": "CertManager"}}},
            ClassReason.ISSUER_MISSING,
            "clusterIssuerName",
            id="cert-manager-without-issuer",
        ),
        pytest.param(
            {"exposurePolicy": {"type": "External", "https": {"mode": "CustomCertificate"}}},
            ClassReason.CERTIFICATE_SECRET_UNNAMED,
            "secretName",
            id="custom-certificate-without-secret",
        ),
        pytest.param(
            {
                "exposurePolicy": {
                    "type": "External",
                    "https": {
                        "mode": "CustomCertificate",
                        "customCertificate": {"secretName": "../../victim/secrets/tls"},
                    },
                }
            },
            ClassReason.INVALID_CERTIFICATE_SECRET_NAME,
            "'../../victim/secrets/tls' is not the name of a Secret",
            id="custom-certificate-secret-name-is-a-path",
        ),
        pytest.param(
            {
                "exposurePolicy": {
                    "type": "External",
                    "https": {
                        "mode": "CertManager",
                        "certManager": {"clusterIssuerName": "letsencrypt\nx-evil: 1"},
                    },
                }
            },
            ClassReason.INVALID_ISSUER_NAME,
            "is not the name of a ClusterIssuer",
            id="issuer-name-with-a-newline",
        ),
    ],
)
def test_each_class_problem_has_its_reason(
    spec: dict[str, Any], reason: ClassReason, names: str
) -> None:
    validity = _validate(_spec(**spec))
    assert not validity.ready
    assert (validity.reason, validity.status) == (reason, ConditionStatus.FALSE)
    assert names in validity.message  # the admin is told which field and value


def test_all_problems_are_reported_first_one_names_the_reason() -> None:
    spec = ClassSpec.model_validate(
        {
            "scalingPolicy": {"minReplicas": 5, "maxReplicas": 1},
            "acceleratorPolicy": {"allowedDeviceClasses": ["gone"]},
        }
    )
    validity = _validate(spec)
    assert [p.reason for p in validity.problems] == [
        ClassReason.NO_ENDPOINT_TYPES,
        ClassReason.INVALID_REPLICA_BOUNDS,
        ClassReason.DEVICE_CLASS_NOT_FOUND,
    ]
    assert validity.reason is ClassReason.NO_ENDPOINT_TYPES and "gone" in validity.message


@pytest.mark.parametrize(
    "blocks",
    [
        {"scalingPolicy": {"minReplicas": 2**31 - 1, "maxReplicas": 2**31 - 1}},
        {"acceleratorPolicy": {"maxAcceleratorCount": 2**31 - 1}},
        {"acceleratorPolicy": {"allowedDeviceClasses": None, "allowedSharingModes": ["Shared"]}},
        {"modelPolicy": {"allowedEndpointTypes": ["Chat"], "allowedFormats": None}},
    ],
    ids=["int32-max-replicas", "int32-max-accelerators", "absent-device-classes", "absent-formats"],
)
def test_the_largest_bounds_and_absent_lists_are_valid(blocks: dict[str, Any]) -> None:
    # Absent (or null) lists mean the default, any DeviceClass or any format (docs/policy.md).
    assert _validate(_spec(**blocks)).ready


def test_a_min_only_scaling_block_means_at_least_that_many() -> None:
    spec = _spec(scalingPolicy={"minReplicas": 2})
    assert _validate(spec).ready
    assert policy.constraints_of(spec.scaling_policy, ()).max_replicas == 2


# --- resolving the order's class --------------------------------------------------------


def _resolve(name: str | None, namespace: str, spec: ClassSpec | None) -> Any:
    return policy.resolve_class(
        name, namespace, spec, priority_classes=PRIORITY_CLASSES, device_classes=DEVICE_CLASSES
    )


@pytest.mark.parametrize(
    ("class_name", "namespace", "spec", "reason"),
    [
        pytest.param(
            "llm-internal",
            "support",
            seed_class("llm-internal"),
            Reason.CLASS_ADMITTED,
            id="admitted",
        ),
        pytest.param("default-llm", "support", None, Reason.CLASS_NOT_FOUND, id="not-found"),
        pytest.param(
            "broken",
            "support",
            _spec(modelPolicy={"allowedEndpointTypes": []}),
            Reason.CLASS_NOT_READY,
            id="not-ready",
        ),
        pytest.param(
            "llm-internal",
            "analytics",
            seed_class("llm-internal"),
            Reason.NAMESPACE_NOT_ADMITTED,
            id="namespace-not-admitted",
        ),
        pytest.param(
            "open", "anywhere", _spec(), Reason.CLASS_ADMITTED, id="no-admission-block-admits-all"
        ),
        pytest.param(
            "open",
            "anywhere",
            _spec(admissionPolicy={}),
            Reason.CLASS_ADMITTED,
            id="empty-admission-block-admits-all",
        ),
        pytest.param(
            "closed",
            "support",
            _spec(admissionPolicy={"allowedNamespaces": []}),
            Reason.NAMESPACE_NOT_ADMITTED,
            id="empty-list-admits-none",
        ),
        pytest.param(None, "anywhere", None, Reason.CLASSLESS_DEFAULTS, id="classless"),
    ],
)
def test_resolve_class(
    class_name: str | None, namespace: str, spec: ClassSpec | None, reason: Reason
) -> None:
    outcome = _resolve(class_name, namespace, spec)
    assert outcome.reason is reason
    assert outcome.ok is (reason in {Reason.CLASS_ADMITTED, Reason.CLASSLESS_DEFAULTS})
    assert (outcome.policy is not None) is outcome.ok
    assert outcome.message


def test_not_ready_says_what_is_wrong_with_the_class() -> None:
    outcome = _resolve(
        "strict", "support", _spec(acceleratorPolicy={"allowedDeviceClasses": ["x"]})
    )
    assert "DeviceClassNotFound" in outcome.message
    assert "DeviceClass x does not exist" in outcome.message


# --- classless mode (SPEC §4) and the defaults of absent blocks -------------------------


def test_classless_mode_is_built_in() -> None:
    # Even if a default-llm object exists and says otherwise, classless mode ignores it.
    elsewhere = _spec(exposurePolicy={"type": "ClusterLocal", "authentication": "None"})
    outcome = _resolve(None, "any-namespace", elsewhere)
    effective = outcome.policy
    assert effective is not None and effective.class_name is None
    assert effective.exposure.type is ExposureType.EXTERNAL
    assert effective.exposure.authentication is Authentication.TOKEN
    assert effective.exposure.https is not None
    assert effective.exposure.https.mode is HttpsMode.CERT_MANAGER
    assert effective.model_policy is None  # no endpoint-type check
    assert effective == policy.classless_policy()


@pytest.mark.parametrize(
    "effective",
    [
        pytest.param(policy.classless_policy(), id="classless"),
        pytest.param(policy.effective_policy("bare", _spec()), id="class-without-blocks"),
    ],
)
def test_absent_blocks_have_the_same_defaults_with_or_without_a_class(effective: Any) -> None:
    assert (effective.constraints.min_replicas, effective.constraints.max_replicas) == (1, 1)
    assert effective.constraints.priority_class_name is None
    assert effective.accelerator.allowed_placement_types == (PlacementMode.WHOLE_DEVICE,)
    assert effective.accelerator.allowed_sharing_modes == (SharingMode.DEDICATED,)
    assert effective.accelerator.max_accelerator_count == 1


def test_a_class_without_exposure_block_is_cluster_local_without_token() -> None:
    effective = policy.effective_policy("bare", _spec())
    assert (effective.exposure.type, effective.exposure.authentication) == (
        ExposureType.CLUSTER_LOCAL,
        Authentication.NONE,
    )


@pytest.mark.parametrize(
    ("block", "authentication"),
    [
        ({"type": "External"}, Authentication.TOKEN),
        ({"type": "External", "authentication": "None"}, Authentication.NONE),
        ({"type": "External", "authentication": "Token"}, Authentication.TOKEN),
        ({"type": "ClusterLocal"}, Authentication.NONE),
        ({}, Authentication.NONE),
    ],
    ids=["external", "external-none-said", "external-token", "cluster-local", "empty"],
)
def test_a_class_published_outside_without_a_word_on_authentication_takes_a_token(
    block: dict[str, Any], authentication: Authentication
) -> None:
    """A public endpoint that answers anyone is said, never implied: an External class
    that leaves authentication out gets Token, as classless mode's External does."""
    effective = policy.effective_policy("c", _spec(exposurePolicy=block))
    assert effective.exposure.authentication is authentication


@pytest.mark.parametrize(
    ("names", "existing", "chosen"),
    [
        pytest.param(
            ["inference-normal", "inference-high"],
            PRIORITY_CLASSES,
            "inference-normal",
            id="first-listed",
        ),
        pytest.param(
            ["inference-urgent", "inference-high"],
            PRIORITY_CLASSES,
            "inference-high",
            id="first-that-exists",
        ),
        pytest.param(
            ["inference-urgent"], PRIORITY_CLASSES, "inference-urgent", id="none-exists-names-first"
        ),
        pytest.param(None, PRIORITY_CLASSES, None, id="no-list"),
    ],
)
def test_priority_class_choice(
    names: list[str] | None, existing: tuple[str, ...], chosen: str | None
) -> None:
    spec = _spec(
        scalingPolicy={"allowedPriorityClassNames": names, "minReplicas": 1, "maxReplicas": 3}
    )
    constraints = policy.constraints_of(spec.scaling_policy, existing)
    assert constraints.priority_class_name == chosen
    assert (constraints.min_replicas, constraints.max_replicas) == (1, 3)


def test_seed_constraints() -> None:
    strict = policy.effective_policy("llm-strict", seed_class("llm-strict"), PRIORITY_CLASSES)
    assert strict.constraints.model_dump() == {
        "min_replicas": 1,
        "max_replicas": 4,
        "priority_class_name": "inference-normal",
    }
    internal = policy.effective_policy("llm-internal", seed_class("llm-internal"))
    assert (internal.constraints.max_replicas, internal.accelerator) == (
        1,
        policy.DEFAULT_ACCELERATOR,
    )


# --- the model under the policy ---------------------------------------------------------

QWEN_7B = model("Qwen/Qwen2.5-7B-Instruct", params=7.6, weights_gb=15.2)
QWEN_05B = model("Qwen/Qwen2.5-0.5B-Instruct", params=0.49, weights_gb=0.99)
BGE = model("BAAI/bge-m3", params=0.568, weights_gb=2.27, types=[EMBED], dtype="float32")
RERANKER = model("BAAI/bge-reranker-v2-m3", params=0.568, weights_gb=2.27, types=[RERANK])
GGUF = model(
    "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
    weights_gb=0.49,
    fmt=ModelFormat.GGUF,
    quant=Quantization.GGUF,
)
UNSIZED = model("someone/mystery", dtype=None)
MULTI = model("Alibaba-NLP/gte-Qwen2-1.5B-instruct", params=1.5, types=[EMBED, CHAT, RERANK])


def _under(blocks: dict[str, Any]) -> Any:
    return policy.effective_policy("c", ClassSpec.model_validate(blocks))


@pytest.mark.parametrize(
    ("model_policy", "facts", "reason", "endpoint"),
    [
        pytest.param(
            {"allowedEndpointTypes": ["Chat"]}, QWEN_7B, Reason.MODEL_RESOLVED, CHAT, id="chat"
        ),
        pytest.param(
            {"allowedEndpointTypes": ["Embeddings"]},
            BGE,
            Reason.MODEL_RESOLVED,
            EMBED,
            id="embeddings",
        ),
        pytest.param(
            {"allowedEndpointTypes": ["Rerank", "Embeddings"]},
            MULTI,
            Reason.MODEL_RESOLVED,
            EMBED,
            id="embeddings-before-rerank",
        ),
        pytest.param(
            {"allowedEndpointTypes": ["Rerank", "Chat", "Embeddings"]},
            MULTI,
            Reason.MODEL_RESOLVED,
            CHAT,
            id="chat-preferred",
        ),
        pytest.param(
            {"allowedEndpointTypes": ["Chat"]},
            BGE,
            Reason.ENDPOINT_TYPE_POLICY_CONFLICT,
            None,
            id="conflict",
        ),
        pytest.param(
            {"allowedEndpointTypes": ["Chat"]},
            model("x/unknown", types=[]),
            Reason.ENDPOINT_TYPE_POLICY_CONFLICT,
            None,
            id="nothing-known-conflicts",
        ),
        pytest.param(
            {"allowedEndpointTypes": ["Chat"], "allowedFormats": ["Safetensors"]},
            GGUF,
            Reason.FORMAT_NOT_ALLOWED,
            None,
            id="format-not-allowed",
        ),
        pytest.param(
            {"allowedEndpointTypes": ["Chat"], "maxParameterCount": "1B"},
            QWEN_7B,
            Reason.PARAMETER_COUNT_NOT_ALLOWED,
            None,
            id="too-many-parameters",
        ),
        pytest.param(
            {"allowedEndpointTypes": ["Chat"], "maxParameterCount": "1B"},
            model("x/big", weights_gb=15.2),
            Reason.PARAMETER_COUNT_NOT_ALLOWED,
            None,
            id="too-many-estimated-from-size",
        ),
        pytest.param(
            {"allowedEndpointTypes": ["Chat"], "maxParameterCount": "1B"},
            QWEN_05B,
            Reason.MODEL_RESOLVED,
            CHAT,
            id="within-count",
        ),
        pytest.param(
            {"allowedEndpointTypes": ["Chat"], "maxParameterCount": "1B"},
            UNSIZED,
            Reason.MODEL_RESOLVED,
            CHAT,
            id="unknown-count-passes",
        ),
    ],
)
def test_resolve_model(
    model_policy: dict[str, Any], facts: Any, reason: Reason, endpoint: EndpointType | None
) -> None:
    outcome = policy.resolve_model(_under({"modelPolicy": model_policy}), facts)
    assert (outcome.reason, outcome.endpoint_type) == (reason, endpoint)
    assert outcome.facts == facts and outcome.message


@pytest.mark.parametrize("facts", [QWEN_7B, BGE, RERANKER, GGUF, UNSIZED], ids=lambda f: f.name)
def test_classless_checks_no_endpoint_type_and_publishes_none(facts: Any) -> None:
    outcome = policy.resolve_model(policy.classless_policy(), facts)
    assert (outcome.reason, outcome.endpoint_type) == (Reason.MODEL_RESOLVED, None)


@pytest.mark.parametrize(
    ("class_name", "facts", "reason", "endpoint"),
    [
        pytest.param("llm-internal", QWEN_7B, Reason.MODEL_RESOLVED, CHAT, id="internal-chat"),
        pytest.param(
            "llm-internal",
            BGE,
            Reason.ENDPOINT_TYPE_POLICY_CONFLICT,
            None,
            id="internal-embeddings",
        ),
        pytest.param("llm-chat-external", GGUF, Reason.MODEL_RESOLVED, CHAT, id="external-gguf"),
        pytest.param(
            "llm-strict", QWEN_7B, Reason.PARAMETER_COUNT_NOT_ALLOWED, None, id="strict-7b"
        ),
        pytest.param("llm-strict", QWEN_05B, Reason.MODEL_RESOLVED, CHAT, id="strict-half-b"),
        pytest.param(
            "embeddings-only", BGE, Reason.MODEL_RESOLVED, EMBED, id="embeddings-only-embeddings"
        ),
        pytest.param(
            "embeddings-only",
            QWEN_7B,
            Reason.ENDPOINT_TYPE_POLICY_CONFLICT,
            None,
            id="embeddings-only-chat",
        ),
    ],
)
def test_seed_classes_decide_the_documented_contract(
    class_name: str, facts: Any, reason: Reason, endpoint: EndpointType | None
) -> None:
    effective = policy.effective_policy(class_name, seed_class(class_name), PRIORITY_CLASSES)
    outcome = policy.resolve_model(effective, facts)
    assert (outcome.reason, outcome.endpoint_type) == (reason, endpoint)


# --- the shipped manifests agree with the seeds -----------------------------------------

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(SEED_CLASSES))
def test_the_examples_carry_the_seed_classes(name: str) -> None:
    path = REPO / "examples" / f"class-{name}.yaml"
    assert path.exists(), f"the seed's class {name} is not in examples/"
    shipped = next(d for d in yaml.safe_load_all(path.read_text()) if d)
    assert ClassSpec.model_validate(shipped["spec"]) == seed_class(name)


def test_the_shipped_default_class_is_valid_and_matches_classless_exposure() -> None:
    path = REPO / "deploy" / "classes" / "default-llm.yaml"
    assert path.exists(), "the module ships default-llm in deploy/classes/"
    spec = ClassSpec.model_validate(yaml.safe_load(path.read_text())["spec"])
    assert _validate(spec).ready
    shipped = policy.effective_policy("default-llm", spec).exposure
    built_in = policy.CLASSLESS_EXPOSURE
    assert (shipped.type, shipped.authentication) == (built_in.type, built_in.authentication)
    assert shipped.https is not None and built_in.https is not None
    assert shipped.https.mode is built_in.https.mode
