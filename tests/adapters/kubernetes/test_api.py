"""The order API as users meet it: what the server refuses, prunes, explains and prints.

The source/ref union is refused at write time by the 1.20 server's OpenAPI checks, each
refusal naming the offending field; the CEL overlay (crds/cel/) says the same in plain
words on servers with CEL, which the 1.20 server cannot run, so its rules are evaluated
here with cel-python against the same table, and its patches are dry-run against the CRDs
the server holds.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import celpy
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters.kubernetes.manifests import load_documents, manifest_files
from adapters.models.huggingface import is_repo_id
from adapters.resources import resource_dir
from fsm.placement.recipes import PLACEHOLDERS, RecipeError, parse_recipe
from fsm.policy import validate_class
from fsm.reasons import ClassReason
from fsm.values import ClassSpec

GROUP, VERSION, PLURAL = "ai.deckhouse.io", "v1alpha1", "inferenceservices"
CRDS = resource_dir("crds")
SCHEMA_ROOT = "/spec/versions/0/schema/openAPIV3Schema"
HF_NAME = "Qwen/Qwen2.5-7B-Instruct"
HF: dict[str, Any] = {"src": "HuggingFace", "ref": {"name": HF_NAME}}

ACCEPTED = [
    pytest.param({"model": HF}, id="hf"),
    pytest.param(
        {"model": {**HF, "authSecretRef": {"name": "hf-token", "key": "token"}}}, id="hf-gated"
    ),
    pytest.param(
        {"model": {"src": "ai-models", "ref": {"name": "qwen2-5", "kind": "ClusterModel"}}},
        id="cluster-model",
    ),
    pytest.param(
        {"model": {"src": "ai-models", "ref": {"name": "qwen", "kind": "Model", "namespace": "a"}}},
        id="model-in-another-namespace",
    ),
    pytest.param({"inferenceServiceClassName": "default-llm", "model": HF}, id="with-class"),
    pytest.param(
        {"model": {"src": "HuggingFace", "ref": {"name": "a" * 96 + "/" + "b" * 96}}},
        id="hf-96-character-parts",
    ),
    pytest.param(
        {"model": {"src": "HuggingFace", "ref": {"name": "org_1/a-.-b_"}}},
        id="hf-single-separators-and-underscore-end",
    ),
]

# (spec, what the server's message names, what a failing CEL rule's message names; None:
# the OpenAPI enum/required alone refuse it and no CEL rule is needed)
REFUSED = [
    pytest.param(
        {"model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5", "kind": "Model"}}},
        '"spec.model.ref.kind" must not validate',
        "spec.model.ref.kind",
        id="hf-ref-with-kind",
    ),
    pytest.param(
        {"model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5", "namespace": "a"}}},
        '"spec.model.ref.namespace" must not validate',
        "spec.model.ref.namespace",
        id="hf-ref-with-namespace",
    ),
    pytest.param(
        {"model": {"src": "ai-models", "ref": {"name": "qwen2-5"}}},
        "spec.model.ref.kind: Required value",
        "spec.model.ref.kind",
        id="ai-models-ref-without-kind",
    ),
    pytest.param(
        {
            "model": {
                "src": "ai-models",
                "ref": {"name": "qwen2-5", "kind": "ClusterModel", "namespace": "a"},
            }
        },
        '"spec.model.ref.namespace" must not validate',
        "spec.model.ref.namespace",
        id="namespace-with-cluster-model",
    ),
    pytest.param(
        {"model": {"src": "git", "ref": {"name": "Qwen/Qwen2.5"}}},
        'spec.model.src: Unsupported value: "git"',
        None,
        id="unknown-src",
    ),
    pytest.param(
        {"model": {"src": "HuggingFace", "ref": {"name": "qwen2.5-7b"}}},
        'spec.model.ref.name: Invalid value: "qwen2.5-7b"',
        "spec.model.ref.name",
        id="hf-name-not-org-name",
    ),
    *[
        pytest.param(
            {"model": {"src": "HuggingFace", "ref": {"name": name}}},
            f'spec.model.ref.name: Invalid value: "{name}"',
            rule,
            id=f"hf-name-{what}",
        )
        # Ids in org/name form that the hub refuses (huggingface.repo_id_problem).
        for name, rule, what in [
            ("org/model--v2", "must not contain '--' or '..'", "double-hyphen"),
            ("org/a..b", "must not contain '--' or '..'", "double-dot"),
            ("my--org/model", "must not contain '--' or '..'", "double-hyphen-in-org"),
            ("org/" + "m" * 97, "at most 96 characters", "97-character-part"),
            ("org/model-", "must end with a letter, digit or '_'", "hyphen-end"),
            ("org/_model", "must start with a letter or digit", "underscore-start"),
            ("org/caf\u00e9", "only ASCII letters", "non-ascii"),
        ]
    ],
    pytest.param(
        {"model": {"src": "HuggingFace", "ref": {"name": "org/model.git"}}},
        '"spec.model.ref.name" must not validate',
        "must not end in '.git'",
        id="hf-name-git-end",
    ),
    pytest.param(
        {
            "model": {
                "src": "ai-models",
                "ref": {"name": "qwen2-5", "kind": "ClusterModel"},
                "authSecretRef": {"name": "hf-token"},
            }
        },
        '"spec.model.authSecretRef" must not validate',
        "spec.model.authSecretRef",
        id="ai-models-with-hub-token",
    ),
    pytest.param(
        {"inferenceServiceClassName": "default-llm"},
        "spec.model: Required value",
        None,
        id="missing-model",
    ),
]


def _order(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": spec,
    }


# --- the CEL overlay, evaluated offline ----------------------------------------------


def _overlay(crd: str) -> list[dict[str, Any]]:
    return list(json.loads((CRDS / "cel" / f"{crd}.json").read_text(encoding="utf-8")))


def _object_path(pointer: str) -> list[str]:
    """`.../properties/spec/properties/model/x-kubernetes-validations` -> [spec, model]."""
    parts = pointer.removeprefix(SCHEMA_ROOT).strip("/").split("/")
    assert parts[-1] == "x-kubernetes-validations", pointer
    steps = parts[:-1]
    assert steps[0::2] == ["properties"] * (len(steps) // 2), pointer
    return steps[1::2]


def cel_refusals(crd: str, obj: dict[str, Any]) -> list[str]:
    """The messages of the overlay's rules `obj` breaks, as a CEL-enabled server would."""
    env = celpy.Environment()
    messages = []
    for op in _overlay(crd):
        node: Any = obj
        for step in _object_path(op["path"]):
            node = node.get(step) if isinstance(node, dict) else None
        if node is None:
            continue  # the server evaluates a rule only where its field is set
        for rule in op["value"]:
            verdict = env.program(env.compile(rule["rule"])).evaluate(
                {"self": celpy.json_to_cel(node)}
            )
            assert isinstance(verdict, celpy.celtypes.BoolType), (rule["rule"], verdict)
            if not verdict:
                messages.append(rule["message"])
    return messages


@pytest.mark.parametrize("crd", sorted(p.stem for p in (CRDS / "cel").glob("*.json")))
def test_overlay_paths_exist_in_the_crd(crd: str) -> None:
    (doc,) = load_documents([CRDS / f"{crd}.yaml"])
    for op in _overlay(crd):
        assert op["op"] == "add"
        node: Any = doc
        for step in op["path"].strip("/").split("/")[:-1]:
            node = node[int(step)] if isinstance(node, list) else node[step]
        assert isinstance(node, dict) and node.get("type") == "object", op["path"]
        assert all(r["message"] for r in op["value"])


@pytest.mark.parametrize("spec", ACCEPTED)
def test_cel_accepts_what_openapi_accepts(spec: dict[str, Any]) -> None:
    assert cel_refusals("inferenceservices.ai.deckhouse.io", _order("x", spec)) == []


@pytest.mark.parametrize(("spec", "server_says", "cel_says"), REFUSED)
def test_cel_refuses_naming_the_field(
    spec: dict[str, Any], server_says: str, cel_says: str | None
) -> None:
    refusals = cel_refusals("inferenceservices.ai.deckhouse.io", _order("x", spec))
    if cel_says is None:
        assert refusals == []
    else:
        assert any(cel_says in m for m in refusals), refusals


def _hub_name_checks() -> list[tuple[str, bool]]:
    """(pattern, whether it must match) of every `allOf` member checking a HuggingFace
    ref.name in the order CRD, as the 1.20 server evaluates them."""
    (doc,) = load_documents([CRDS / "inferenceservices.ai.deckhouse.io.yaml"])
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    model = schema["properties"]["spec"]["properties"]["model"]
    checks = []
    for member in model["allOf"]:
        rule, otherwise = member["anyOf"]
        name = rule.get("properties", {}).get("ref", {}).get("properties", {}).get("name")
        if otherwise != {"properties": {"src": {"enum": ["ai-models"]}}} or name is None:
            continue
        checks += [(name["pattern"], True)] if "pattern" in name else []
        checks += [(name["not"]["pattern"], False)] if "not" in name else []
    return checks


_HUB_NAME_CHECKS = _hub_name_checks()
# Pieces that make the edges common: separators side by side, parts of 96 and 97.
_HUB_NAME = st.lists(
    st.sampled_from(["a", "Z", "0", "_", "-", ".", "/", "é", ".git", "a" * 48]), max_size=9
).map("".join)


@settings(max_examples=500)
@given(_HUB_NAME)
def test_the_crd_the_cel_rules_and_the_resolver_take_the_same_hub_ids(name: str) -> None:
    # An id the CRD admits but the resolver refused got ModelNotFound "expected
    # 'org/name'" for a name in org/name form ('org/model--v2').
    openapi = 1 <= len(name) <= 253 and all(
        bool(re.search(pattern, name)) is must for pattern, must in _HUB_NAME_CHECKS
    )
    order = _order("x", {"model": {"src": "HuggingFace", "ref": {"name": name}}})
    cel = not cel_refusals("inferenceservices.ai.deckhouse.io", order)
    assert openapi is cel is is_repo_id(name), name


def _recipe_arg_pattern() -> str:
    (doc,) = load_documents([CRDS / "launchrecipes.ai.deckhouse.io.yaml"])
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return str(schema["properties"]["spec"]["properties"]["args"]["items"]["pattern"])


_RECIPE_ARG = st.lists(
    st.sampled_from(
        ["a", "=", "{", "}", "{{", "}}", ":d", "!r", "[0]", "maxNumSeqs", *sorted(PLACEHOLDERS)]
    ),
    max_size=8,
).map("".join)


@settings(max_examples=500)
@given(_RECIPE_ARG)
def test_the_recipe_crd_and_the_parser_take_the_same_args(arg: str) -> None:
    # A recipe admitted with an argument the parser refuses (`{maxNumSeqs}`) left every
    # order on it without a renderable workload.
    admitted = re.fullmatch(_recipe_arg_pattern(), arg) is not None
    spec = {
        "runtime": "vLLM",
        "image": "i",
        "placementModes": ["WholeDevice"],
        "formats": ["Safetensors"],
        "quantizations": ["None"],
        "endpointTypes": ["Chat"],
        "args": [arg],
    }
    try:
        parse_recipe({"metadata": {"name": "r"}, "spec": spec})
        parsed = True
    except RecipeError:
        parsed = False
    assert admitted is parsed, arg


@pytest.mark.cluster
def test_server_refuses_a_recipe_arg_naming_an_unknown_placeholder(
    custom: client.CustomObjectsApi,
) -> None:
    (recipe,) = _by_kind(_shipped("deploy/recipes"), "LaunchRecipe")[:1]
    args = [*recipe["spec"].get("args", []), "--max-num-seqs={maxNumSeqs}"]
    body = {**recipe, "spec": {**recipe["spec"], "args": args}}
    with pytest.raises(ApiException) as refused:
        custom.create_cluster_custom_object(GROUP, VERSION, "launchrecipes", body, dry_run="All")
    assert "spec.args" in _server_message(refused.value)


def _shipped(folder: str) -> list[dict[str, Any]]:
    return load_documents(manifest_files(resource_dir(folder)))


def _by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize(
    ("crd", "kind"),
    [
        ("inferenceserviceclasses.ai.deckhouse.io", "InferenceServiceClass"),
        ("launchrecipes.ai.deckhouse.io", "LaunchRecipe"),
        ("inferenceservices.ai.deckhouse.io", "InferenceService"),
    ],
    ids=["classes", "recipes", "orders"],
)
def test_cel_accepts_every_shipped_object(crd: str, kind: str) -> None:
    shipped = _by_kind(_shipped("examples") + _shipped("deploy/classes"), kind)
    shipped += _by_kind(_shipped("deploy/recipes"), kind)
    assert shipped
    for obj in shipped:
        assert cel_refusals(crd, obj) == [], obj["metadata"]["name"]


@pytest.mark.parametrize(
    ("crd", "obj", "says"),
    [
        pytest.param(
            "inferenceserviceclasses.ai.deckhouse.io",
            {"spec": {"scalingPolicy": {"minReplicas": 3, "maxReplicas": 2}}},
            "minReplicas must not exceed",
            id="class-min-above-max",
        ),
        pytest.param(
            "inferenceserviceclasses.ai.deckhouse.io",
            {"spec": {"exposurePolicy": {"https": {"mode": "CustomCertificate"}}}},
            "customCertificate.secretName",
            id="class-custom-certificate-without-secret",
        ),
        pytest.param(
            "launchrecipes.ai.deckhouse.io",
            {"spec": {"runtime": "vLLM", "toolCalling": {"enabled": True}}},
            "toolCalling.parser",
            id="recipe-vllm-tools-without-parser",
        ),
    ],
)
def test_cel_refuses_admin_mistakes(crd: str, obj: dict[str, Any], says: str) -> None:
    (refusal,) = cel_refusals(crd, obj)
    assert says in refusal


@pytest.mark.parametrize(
    "scaling",
    [{"minReplicas": 2}, {"maxReplicas": 3}, {"minReplicas": 2, "maxReplicas": 2}, {}],
    ids=str,
)
def test_cel_takes_the_replica_bounds_the_controller_takes(scaling: dict[str, Any]) -> None:
    # minReplicas alone means "at least that many": maxReplicas follows it (fsm/policy.py).
    spec = ClassSpec.model_validate({"scalingPolicy": scaling})
    validity = validate_class(spec, priority_classes=(), device_classes=())
    assert ClassReason.INVALID_REPLICA_BOUNDS not in {p.reason for p in validity.problems}
    obj = {"spec": {"scalingPolicy": scaling}}
    assert cel_refusals("inferenceserviceclasses.ai.deckhouse.io", obj) == []


# --- against the real API server -----------------------------------------------------


@pytest.fixture(scope="module")
def custom(cluster: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(cluster.api_client("admin"))


@pytest.fixture(scope="module")
def namespace(cluster: Any) -> Iterator[str]:
    core = client.CoreV1Api(cluster.api_client("admin"))
    name = f"api-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _server_message(err: ApiException) -> str:
    return str(json.loads(err.body)["message"])


@pytest.mark.cluster
@pytest.mark.parametrize("spec", ACCEPTED)
def test_server_accepts_a_valid_union(
    custom: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]
) -> None:
    stored = custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, _order("accepted", spec), dry_run="All"
    )
    assert stored["spec"]["model"]["ref"] == spec["model"]["ref"]


@pytest.mark.cluster
@pytest.mark.parametrize(("spec", "server_says", "cel_says"), REFUSED)
def test_server_refuses_a_broken_union_naming_the_field(
    custom: client.CustomObjectsApi,
    namespace: str,
    spec: dict[str, Any],
    server_says: str,
    cel_says: str | None,
) -> None:
    # The Python client validates nothing itself: this is the server's refusal.
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _order("broken", spec), dry_run="All"
        )
    assert refused.value.status == 422
    assert server_says in _server_message(refused.value)


# Values a 1.20 server stored before the CRDs said `maximum` and `minItems` (it does not
# enforce `format: int32`): an HPA got maxReplicas -1294967296, an empty list admitted
# nothing with a misleading message. (class spec, the field the server's refusal names)
CLASS_REFUSED = [
    pytest.param(
        {"scalingPolicy": {"minReplicas": 1, "maxReplicas": 3_000_000_000}},
        "spec.scalingPolicy.maxReplicas",
        id="max-replicas-beyond-int32",
    ),
    pytest.param(
        {"scalingPolicy": {"minReplicas": 2**31}},
        "spec.scalingPolicy.minReplicas",
        id="min-replicas-beyond-int32",
    ),
    pytest.param(
        {"acceleratorPolicy": {"maxAcceleratorCount": 2**31}},
        "spec.acceleratorPolicy.maxAcceleratorCount",
        id="accelerator-count-beyond-int32",
    ),
    pytest.param(
        {"acceleratorPolicy": {"allowedDeviceClasses": []}},
        "spec.acceleratorPolicy.allowedDeviceClasses",
        id="empty-device-classes",
    ),
    pytest.param(
        {"acceleratorPolicy": {"allowedPlacementTypes": []}},
        "spec.acceleratorPolicy.allowedPlacementTypes",
        id="empty-placement-types",
    ),
    pytest.param(
        {"acceleratorPolicy": {"allowedSharingModes": []}},
        "spec.acceleratorPolicy.allowedSharingModes",
        id="empty-sharing-modes",
    ),
    pytest.param(
        {"modelPolicy": {"allowedEndpointTypes": ["Chat"], "allowedFormats": []}},
        "spec.modelPolicy.allowedFormats",
        id="empty-formats",
    ),
]
CLASS_ACCEPTED = [
    pytest.param(
        {"scalingPolicy": {"minReplicas": 2**31 - 1, "maxReplicas": 2**31 - 1}},
        id="int32-max-replicas",
    ),
    pytest.param({"acceleratorPolicy": {"maxAcceleratorCount": 2**31 - 1}}, id="int32-max-count"),
    pytest.param({"acceleratorPolicy": {"maxAcceleratorCount": 2}}, id="lists-absent"),
]


def _int32_fields(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if node.get("format") == "int32":
            yield path, node
        for key, value in node.items():
            yield from _int32_fields(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _int32_fields(value, f"{path}/{i}")


@pytest.mark.parametrize("crd", sorted(p.stem for p in CRDS.glob("*.yaml")))
def test_every_int32_field_has_int32_bounds(crd: str) -> None:
    # A 1.20 server does not enforce `format: int32`: only `maximum`/`minimum` keep a value
    # from wrapping when it reaches an int32 field of Kubernetes (an HPA's maxReplicas).
    (doc,) = load_documents([CRDS / f"{crd}.yaml"])
    fields = list(_int32_fields(doc))
    assert fields
    for path, schema in fields:
        assert schema.get("maximum", 2**31) <= 2**31 - 1, path
        assert schema.get("minimum", -(2**31)) >= -(2**31), path


def _class(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    chat = {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceServiceClass",
        "metadata": {"name": name},
        "spec": {**chat, **spec},
    }


@pytest.mark.parametrize(("spec", "field"), CLASS_REFUSED)
def test_the_controller_refuses_what_the_class_schema_refuses(
    spec: dict[str, Any], field: str
) -> None:
    # For a class stored without these checks (an older CRD, a server that skips them).
    validity = validate_class(
        ClassSpec.model_validate(_class("x", spec)["spec"]), priority_classes=(), device_classes=()
    )
    assert not validity.ready
    assert field.rsplit(".", 1)[1] in validity.message, validity.message


@pytest.mark.cluster
@pytest.mark.parametrize(("spec", "field"), CLASS_REFUSED)
def test_server_refuses_out_of_range_classes_naming_the_field(
    custom: client.CustomObjectsApi, spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiException) as refused:
        custom.create_cluster_custom_object(
            GROUP, VERSION, "inferenceserviceclasses", _class("refused", spec), dry_run="All"
        )
    assert refused.value.status == 422
    assert field in _server_message(refused.value)


@pytest.mark.cluster
@pytest.mark.parametrize("spec", CLASS_ACCEPTED)
def test_server_accepts_the_largest_bounds_and_absent_lists(
    custom: client.CustomObjectsApi, spec: dict[str, Any]
) -> None:
    custom.create_cluster_custom_object(
        GROUP, VERSION, "inferenceserviceclasses", _class("accepted", spec), dry_run="All"
    )
    validity = validate_class(
        ClassSpec.model_validate(_class("x", spec)["spec"]), priority_classes=(), device_classes=()
    )
    assert validity.ready, validity.message


@pytest.mark.cluster
@pytest.mark.parametrize("preference", [2**31, -(2**31) - 1], ids=["above", "below"])
def test_server_refuses_a_recipe_preference_beyond_int32(
    custom: client.CustomObjectsApi, preference: int
) -> None:
    (recipe,) = _by_kind(_shipped("deploy/recipes"), "LaunchRecipe")[:1]
    body = {**recipe, "spec": {**recipe["spec"], "preference": preference}}
    with pytest.raises(ApiException) as refused:
        custom.create_cluster_custom_object(GROUP, VERSION, "launchrecipes", body, dry_run="All")
    assert "spec.preference" in _server_message(refused.value)


@pytest.mark.cluster
def test_hub_token_key_defaults_to_token(custom: client.CustomObjectsApi, namespace: str) -> None:
    spec = {"model": {**HF, "authSecretRef": {"name": "hf-token"}}}
    stored = custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, _order("keyless", spec), dry_run="All"
    )
    assert stored["spec"]["model"]["authSecretRef"] == {"name": "hf-token", "key": "token"}


@pytest.mark.cluster
def test_order_name_must_suit_a_service(custom: client.CustomObjectsApi, namespace: str) -> None:
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _order("1st-llm", {"model": HF}), dry_run="All"
        )
    assert "metadata.name" in _server_message(refused.value)


RUNTIME_ORDER = {"model": HF, "runtime": {"image": "vllm/vllm-openai:latest", "replicas": 8}}


@pytest.mark.cluster
def test_lenient_client_gets_unknown_fields_pruned(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    name = "pruned"
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, _order(name, RUNTIME_ORDER)
    )
    try:
        stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        assert stored["spec"] == {"model": HF}
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


@pytest.mark.cluster
def test_strict_client_refuses_unknown_fields(cluster: Any, namespace: str) -> None:
    manifest = yaml.safe_dump({**_order("strict", RUNTIME_ORDER), "metadata": {
        "name": "strict", "namespace": namespace}})  # fmt: skip
    result = cluster.kubectl(
        "admin", "apply", "--validate=true", "-f", "-", input=manifest, check=False
    )
    assert result.returncode != 0
    assert re.search(r'unknown field "(spec\.)?runtime"', result.stderr), result.stderr
    listed = cluster.kubectl("admin", "get", "infs", "-n", namespace, "-o", "name").stdout
    assert "strict" not in listed


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.cluster
def test_explain_documents_the_ref(cluster: Any) -> None:
    (crd,) = load_documents([CRDS / "inferenceservices.ai.deckhouse.io.yaml"])
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    ref = schema["properties"]["spec"]["properties"]["model"]["properties"]["ref"]
    shown = _words(cluster.kubectl("admin", "explain", "inferenceservice.spec.model.ref").stdout)
    assert _words(ref["description"]) in shown
    for field in ("name", "kind", "namespace"):
        assert _words(ref["properties"][field]["description"]) in shown, field


@pytest.mark.cluster
def test_get_shows_the_columns(
    cluster: Any, custom: client.CustomObjectsApi, namespace: str
) -> None:
    name = "columns"
    spec = {"inferenceServiceClassName": "default-llm", "model": HF}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _order(name, spec))
    try:
        url = f"https://{name}-{namespace}.example.com"
        status = {"phase": "Ready", "model": {"endpointType": "Chat"}, "endpoint": {"url": url}}
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": status}
        )
        table = cluster.kubectl("admin", "get", "infs", "-n", namespace).stdout.splitlines()
        header = re.split(r"\s{2,}", table[0].strip())
        assert header == ["NAME", "PHASE", "CLASS", "MODEL", "ENDPOINT TYPE", "URL", "AGE"]
        row = table[1].split()
        assert row[:6] == [name, "Ready", "default-llm", HF_NAME, "Chat", url]
        by_category = cluster.kubectl("admin", "get", "ai", "-n", namespace, "-o", "name").stdout
        assert f"inferenceservice.ai.deckhouse.io/{name}" in by_category.split()
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


@pytest.mark.cluster
def test_status_is_written_only_through_its_subresource(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    name = "status-only"
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        {**_order(name, {"model": HF}), "status": {"phase": "Ready"}},
    )
    try:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, {"status": {"phase": "Failed"}}
        )
        stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        assert "status" not in stored
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


@pytest.mark.cluster
@pytest.mark.parametrize("crd", sorted(p.stem for p in (CRDS / "cel").glob("*.json")))
def test_overlay_patches_the_installed_crd(cluster: Any, crd: str) -> None:
    # A 1.20 server takes the patch (and drops the rules it cannot evaluate); a path the
    # CRD lacks would be refused.
    result = cluster.kubectl(
        "admin", "patch", "crd", crd, "--type=json", "--dry-run=server", "-o", "json",
        "--patch-file", str(CRDS / "cel" / f"{crd}.json"),
    )  # fmt: skip
    assert json.loads(result.stdout)["metadata"]["name"] == crd
