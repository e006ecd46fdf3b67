"""The ai-models catalog reader: status mapping, the direct read, the settings gate."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from adapters.models.catalog import (
    CatalogReader,
    catalog_gate,
    catalog_target,
    facts_from_catalog,
    foreign_model_refusal,
)
from adapters.models.lookup import ModelFound, ModelUnavailable
from fsm import policy
from fsm.reasons import Reason
from fsm.values import (
    CatalogKind,
    ClassSpec,
    EndpointType,
    ModelFormat,
    ModelRef,
    ModelSource,
    Quantization,
)

FIXTURE = Path(__file__).parents[3] / "adapters" / "simulator" / "catalog_models.yaml"


def catalog_objects() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(FIXTURE.read_text()) if doc]


def by_name(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(o for o in catalog_objects() if o["metadata"]["name"] == name))


CLUSTER_MODEL = "qwen2-5-8b-instruct-awq"


def test_the_seeds_cluster_model_resolves() -> None:
    result = facts_from_catalog(by_name(CLUSTER_MODEL))
    assert isinstance(result, ModelFound)
    facts = result.facts
    assert facts.source is ModelSource.AI_MODELS
    assert facts.name == CLUSTER_MODEL
    assert (facts.format, facts.quantization) == (ModelFormat.SAFETENSORS, Quantization.AWQ)
    assert facts.endpoint_types == (EndpointType.CHAT,)
    assert facts.supports_tool_calling is True
    assert facts.parameter_count == 7_615_616_512
    assert facts.weights_bytes == 5_582_868_480
    assert facts.context_window_tokens == 32768
    assert facts.revision is not None and facts.revision.startswith("sha256:")


def test_every_fixture_object_maps_to_an_answer() -> None:
    objects = catalog_objects()
    assert {o["kind"] for o in objects} == {"Model", "ClusterModel"}
    outcomes = {o["metadata"]["name"]: facts_from_catalog(o) for o in objects}
    assert isinstance(outcomes["bge-m3"], ModelFound)
    assert outcomes["bge-m3"].facts.endpoint_types == (EndpointType.EMBEDDINGS,)
    publishing = outcomes["qwen2-5-0-5b-instruct"]
    assert isinstance(publishing, ModelUnavailable)
    assert publishing.reason is Reason.MODEL_NOT_READY


def ready(**resolved: Any) -> dict[str, Any]:
    obj = by_name(CLUSTER_MODEL)
    obj["status"]["resolved"] = resolved
    return obj


def with_status(**status: Any) -> dict[str, Any]:
    obj = by_name(CLUSTER_MODEL)
    obj["status"] = status
    return obj


def with_status_value(status: Any) -> dict[str, Any]:
    obj = by_name(CLUSTER_MODEL)
    obj["status"] = status
    return obj


def with_ready_condition(status: str, reason: str, message: str) -> dict[str, Any]:
    obj = by_name(CLUSTER_MODEL)
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": status, "reason": reason, "message": message}
    ]
    return obj


def stale() -> dict[str, Any]:
    obj = by_name(CLUSTER_MODEL)
    obj["metadata"]["generation"] = 2
    return obj


FAILURES = [
    ("no-status", with_status(), Reason.MODEL_NOT_READY, "phase (none yet)"),
    ("publishing", with_status(phase="Publishing"), Reason.MODEL_NOT_READY, "phase Publishing"),
    ("failed", with_status(phase="Failed", conditions=[
        {"type": "Ready", "status": "False", "message": "download refused"}]),
     Reason.MODEL_NOT_READY, "phase Failed, not Ready: download refused"),
    ("ready-phase-false-condition", with_ready_condition("False", "Republishing", "new digest"),
     Reason.MODEL_NOT_READY, "Ready condition is False (Republishing: new digest)"),
    ("stale-generation", stale(), Reason.MODEL_NOT_READY, "generation 2"),
    ("ready-without-resolved", with_status(phase="Ready"), Reason.MODEL_METADATA_INVALID,
     "no status.resolved"),
    ("unknown-format", ready(format="Pickle"), Reason.MODEL_METADATA_INVALID, "format 'Pickle'"),
    ("unknown-quantization", ready(format="Safetensors", quantization="HQQ"),
     Reason.MODEL_METADATA_INVALID, "quantization 'HQQ'"),
    ("count-not-a-number", ready(parameterCount="8B"), Reason.MODEL_METADATA_INVALID,
     "parameterCount '8B'"),
    ("count-negative", ready(parameterCount=-1), Reason.MODEL_METADATA_INVALID, "negative"),
    ("types-not-a-list", ready(supportedEndpointTypes="Chat"), Reason.MODEL_METADATA_INVALID,
     "supportedEndpointTypes is not a list"),
    # Hostile input (issue #10): "²".isdigit() is true, yet int("²") raises.
    ("count-superscript", ready(parameterCount="²"), Reason.MODEL_METADATA_INVALID,
     "parameterCount '²' is not a count"),
    ("count-5000-digits", ready(parameterCount="9" * 5000), Reason.MODEL_METADATA_INVALID,
     "(5000 digits) is larger than any count"),
    ("count-beyond-int64", ready(parameterCount=2**64), Reason.MODEL_METADATA_INVALID,
     "larger than any count"),
    ("status-a-string", with_status_value("Ready"), Reason.MODEL_METADATA_INVALID,
     "status that is not an object (str)"),
    ("status-a-list", with_status_value(["Ready"]), Reason.MODEL_METADATA_INVALID,
     "status that is not an object (list)"),
    ("conditions-a-number", with_status(phase="Publishing", conditions=7), Reason.MODEL_NOT_READY,
     "phase Publishing"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "reason", "says"), [row[1:] for row in FAILURES], ids=[row[0] for row in FAILURES]
)
def test_catalog_objects_that_give_no_facts(obj: dict[str, Any], reason: Reason, says: str) -> None:
    result = facts_from_catalog(obj)
    assert isinstance(result, ModelUnavailable)
    assert result.reason is reason
    assert says in result.message
    assert f"ClusterModel '{CLUSTER_MODEL}'" in result.message


MAPPINGS = [
    ("minimal", ready(architecture="Qwen2ForCausalLM"), ModelFormat.UNKNOWN, Quantization.NONE,
     (), None, False),
    ("gguf-level-is-gguf", ready(format="GGUF", quantization="Q4_K_M"), ModelFormat.GGUF,
     Quantization.GGUF, (), None, False),
    ("case-insensitive", ready(format="safetensors", quantization="awq",
                               supportedEndpointTypes=["chat", "Embeddings"]),
     ModelFormat.SAFETENSORS, Quantization.AWQ, (EndpointType.CHAT, EndpointType.EMBEDDINGS),
     None, False),
    ("unknown-types-skipped", ready(supportedEndpointTypes=["Chat", "Completion"],
                                    supportedFeatures=["ToolCalling", "Vision"]),
     ModelFormat.UNKNOWN, Quantization.NONE, (EndpointType.CHAT,), None, True),
    ("count-as-string", ready(parameterCount="494032768"), ModelFormat.UNKNOWN,
     Quantization.NONE, (), 494_032_768, False),
    # A Go controller's zero value: not known, never a model of no parameters.
    ("count-zero-is-unknown", ready(parameterCount=0), ModelFormat.UNKNOWN,
     Quantization.NONE, (), None, False),
    ("count-zero-string-is-unknown", ready(parameterCount="0"), ModelFormat.UNKNOWN,
     Quantization.NONE, (), None, False),
]  # fmt: skip


def test_names_past_any_real_ones_length_are_not_recorded() -> None:
    """The catalog copies a repo's metadata into the Model's status: an architecture of a
    megabyte would be an event of a megabyte for each order, held in memory."""
    found = facts_from_catalog(ready(architecture="X" * 1_000_000))
    assert isinstance(found, ModelFound) and found.facts.architecture is None
    found = facts_from_catalog(ready(architecture="Qwen2ForCausalLM"))
    assert isinstance(found, ModelFound) and found.facts.architecture == "Qwen2ForCausalLM"


@pytest.mark.parametrize("count", [0, "0"], ids=["int", "string"])
def test_a_count_of_zero_is_judged_by_the_size_as_a_missing_one_is(count: object) -> None:
    """parameterCount 0 passed a class's maxParameterCount for a 70B model, which the
    same object without the field was refused by, on its size."""
    klass = policy.effective_policy(
        "small",
        ClassSpec.model_validate(
            {"modelPolicy": {"allowedEndpointTypes": ["Chat"], "maxParameterCount": "8B"}}
        ),
    )
    verdicts = []
    for given_count in (None, count):
        obj = ready(supportedEndpointTypes=["Chat"])
        if given_count is not None:
            obj["status"]["resolved"]["parameterCount"] = given_count
        obj["status"].setdefault("artifact", {})["sizeBytes"] = 141_000_000_000
        found = facts_from_catalog(obj)
        assert isinstance(found, ModelFound), found
        verdicts.append(policy.resolve_model(klass, found.facts).reason)
    assert verdicts == [Reason.PARAMETER_COUNT_NOT_ALLOWED] * 2


@pytest.mark.parametrize(
    ("obj", "fmt", "quant", "types", "params", "tools"),
    [row[1:] for row in MAPPINGS],
    ids=[row[0] for row in MAPPINGS],
)
def test_catalog_status_mapping(
    obj: dict[str, Any],
    fmt: ModelFormat,
    quant: Quantization,
    types: tuple[EndpointType, ...],
    params: int | None,
    tools: bool,
) -> None:
    result = facts_from_catalog(obj)
    assert isinstance(result, ModelFound), result
    facts = result.facts
    assert (facts.format, facts.quantization, facts.endpoint_types) == (fmt, quant, types)
    assert (facts.parameter_count, facts.supports_tool_calling) == (params, tools)


# --- the direct read ---------------------------------------------------------------------


class FakeCustomObjects:
    """The CustomObjectsApi seam: serves the fixture, records what was asked."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.failure = failure
        self.asked: list[tuple[str | None, str, str]] = []
        self.objects = {
            (o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in catalog_objects()
        }

    def _get(self, namespace: str | None, plural: str, name: str, kwargs: dict[str, Any]) -> Any:
        assert kwargs["_request_timeout"] > 0
        self.asked.append((namespace, plural, name))
        if self.failure is not None:
            raise self.failure
        if (namespace, name) not in self.objects:
            raise ApiException(status=404, reason="Not Found")
        return self.objects[(namespace, name)]

    def get_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, **kwargs: Any
    ) -> Any:
        assert (group, version) == ("ai.deckhouse.io", "v1alpha1")
        return self._get(None, plural, name, kwargs)

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **kwargs: Any
    ) -> Any:
        assert (group, version) == ("ai.deckhouse.io", "v1alpha1")
        return self._get(namespace, plural, name, kwargs)


def catalog_ref(kind: CatalogKind, name: str, namespace: str | None = None) -> ModelRef:
    return ModelRef(src=ModelSource.AI_MODELS, name=name, kind=kind, namespace=namespace)


def test_reader_reads_a_cluster_model() -> None:
    api = FakeCustomObjects()
    result = CatalogReader(api).read(
        catalog_ref(CatalogKind.CLUSTER_MODEL, CLUSTER_MODEL), "support"
    )
    assert isinstance(result, ModelFound)
    assert api.asked == [(None, "clustermodels", CLUSTER_MODEL)]


def test_a_model_namespace_defaults_to_the_orders() -> None:
    api = FakeCustomObjects()
    result = CatalogReader(api).read(catalog_ref(CatalogKind.MODEL, "bge-m3"), "analytics")
    assert isinstance(result, ModelFound)
    assert api.asked == [("analytics", "models", "bge-m3")]


def test_a_model_in_another_namespace_is_refused_unread() -> None:
    api = FakeCustomObjects()
    result = CatalogReader(api).read(
        catalog_ref(CatalogKind.MODEL, "bge-m3", "analytics"), "support"
    )
    assert isinstance(result, ModelUnavailable)
    assert result.reason is Reason.MODEL_NAMESPACE_FORBIDDEN
    assert "'analytics'" in result.message and "ClusterModel" in result.message
    assert api.asked == []  # another tenant's object is never read


def test_a_model_in_the_orders_own_namespace_named_explicitly_is_read() -> None:
    api = FakeCustomObjects()
    result = CatalogReader(api).read(
        catalog_ref(CatalogKind.MODEL, "bge-m3", "analytics"), "analytics"
    )
    assert isinstance(result, ModelFound)
    assert api.asked == [("analytics", "models", "bge-m3")]


@pytest.mark.parametrize(
    ("kind", "ref_namespace", "refused"),
    [
        (CatalogKind.MODEL, None, False),
        (CatalogKind.MODEL, "support", False),
        (CatalogKind.MODEL, "analytics", True),
        (CatalogKind.CLUSTER_MODEL, None, False),
    ],
)
def test_foreign_model_refusal(kind: CatalogKind, ref_namespace: str | None, refused: bool) -> None:
    verdict = foreign_model_refusal(catalog_ref(kind, "m", ref_namespace), "support")
    assert (verdict is not None) is refused


@pytest.mark.parametrize(
    ("failure", "reason", "says"),
    [
        (None, Reason.MODEL_NOT_FOUND, "does not exist"),
        (ApiException(status=403, reason="Forbidden"), Reason.MODEL_SOURCE_UNREACHABLE, "RBAC"),
        (ApiException(status=500, reason="Boom"), Reason.MODEL_SOURCE_UNREACHABLE, "HTTP 500"),
        (urllib3.exceptions.ProtocolError("Connection aborted."),
         Reason.MODEL_SOURCE_UNREACHABLE, "did not answer"),
    ],
    ids=["missing", "forbidden", "server-error", "connection-lost"],
)  # fmt: skip
def test_reader_failures(failure: Exception | None, reason: Reason, says: str) -> None:
    api = FakeCustomObjects(failure)
    result = CatalogReader(api).read(catalog_ref(CatalogKind.CLUSTER_MODEL, "no-such-model"), "x")
    assert isinstance(result, ModelUnavailable)
    assert (result.reason, says in result.message) == (reason, True)


def test_catalog_target_for_each_kind() -> None:
    assert catalog_target(catalog_ref(CatalogKind.CLUSTER_MODEL, "m", "ignored"), "ns") == (
        CatalogKind.CLUSTER_MODEL, None, "m",
    )  # fmt: skip
    assert catalog_target(catalog_ref(CatalogKind.MODEL, "m"), "ns") == (
        CatalogKind.MODEL,
        "ns",
        "m",
    )


# --- the module settings gate ------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "disabled"),
    [
        ({"catalog": {"mode": "None"}}, True),
        (yaml.safe_load("catalog:\n  mode: None\n"), True),  # as a ModuleConfig spells it
        ({"catalog": {"mode": "Enabled"}}, False),
        ({"catalog": {}}, False),
        ({}, False),
        (None, False),
    ],
    ids=["none", "none-from-yaml", "other-mode", "empty-block", "no-block", "no-settings"],
)
def test_catalog_gate(settings: dict[str, Any] | None, disabled: bool) -> None:
    gate = catalog_gate(settings)
    if disabled:
        assert gate is not None and gate.reason is Reason.CATALOG_DISABLED
        assert "settings.catalog.mode: None" in gate.message
    else:
        assert gate is None


def test_an_unavailable_result_refuses_a_reason_of_another_condition() -> None:
    with pytest.raises(ValueError, match="not a ModelResolved failure"):
        ModelUnavailable(Reason.NO_CAPACITY, "wrong condition")
    with pytest.raises(ValueError, match="not a ModelResolved failure"):
        ModelUnavailable(Reason.MODEL_RESOLVED, "not a failure")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
RESOLVED_KEYS = st.sampled_from([
    "format", "quantization", "parameterCount", "architecture", "contextWindowTokens",
    "supportedEndpointTypes", "supportedFeatures",
])  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    status=JSON
    | st.fixed_dictionaries(
        {"phase": st.just("Ready")},
        optional={
            "conditions": JSON,
            "observedGeneration": JSON,
            "resolved": JSON | st.dictionaries(RESOLVED_KEYS, JSON),
            "artifact": JSON | st.dictionaries(st.sampled_from(["sizeBytes", "digest"]), JSON),
        },
    )
)
def test_any_catalog_status_gives_an_answer_never_an_exception(status: Any) -> None:
    """Whatever a catalog (of another version, or written by hand) puts in status."""
    obj = by_name(CLUSTER_MODEL)
    obj["status"] = status
    result = facts_from_catalog(obj)
    assert isinstance(result, ModelFound | ModelUnavailable)
    if isinstance(result, ModelUnavailable):
        assert len(result.message) < 2000
