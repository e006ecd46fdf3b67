"""The shipped YAML: CRDs, stand-in CRDs, deploy/ and examples/.

Offline, the files are held to the conventions the API and the platform ask for (a
description on every field, no preserved unknown fields, the printer columns, the
module's labels, the controller's hardening, settings schema and settings reader in
agreement). Against the real API server every CRD is Established and structural, and
every example and every file of deploy/ is accepted by a server-side dry run.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes import client

from adapters.kubernetes.manifests import load_documents, manifest_files
from adapters.kubernetes.settings import Settings, SettingsError
from adapters.resources import resource_dir
from fsm.values import Authentication, ClassSpec, EndpointType, ExposureType, HttpsMode

Doc = dict[str, Any]

CRDS = resource_dir("crds")
STANDINS = resource_dir("tests/crds")
DEPLOY = resource_dir("deploy")
EXAMPLES = resource_dir("examples")
JUNCTORS = ("allOf", "anyOf", "oneOf", "not")


def _crds(folder: Path) -> dict[str, Doc]:
    docs = load_documents(manifest_files(folder))
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}


OWN = _crds(CRDS)
STANDIN = _crds(STANDINS)


def _schema(crd: Doc) -> Doc:
    (version,) = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def _fields(node: Doc, path: str = "") -> Iterator[tuple[str, Doc]]:
    """Every field of a structural schema, skipping value validations in junctors."""
    for name, child in (node.get("properties") or {}).items():
        where = f"{path}.{name}" if path else name
        yield where, child
        if where != "metadata":
            yield from _fields(child, where)
    items = node.get("items")
    if isinstance(items, dict):
        # The items of a list of scalars are not fields of their own (explain shows none).
        if items.get("type") == "object":
            yield f"{path}[]", items
        yield from _fields(items, f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield f"{path}{{}}", node["additionalProperties"]
        yield from _fields(node["additionalProperties"], f"{path}{{}}")


def _walk(node: Any) -> Iterator[Doc]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


# --- the project's CRDs --------------------------------------------------------------


def test_the_three_kinds_are_there() -> None:
    kinds = {(d["spec"]["names"]["kind"], d["spec"]["scope"]) for d in OWN.values()}
    assert kinds == {
        ("InferenceService", "Namespaced"),
        ("InferenceServiceClass", "Cluster"),
        ("LaunchRecipe", "Cluster"),
    }


@pytest.mark.parametrize("name", sorted(OWN))
def test_own_crd_carries_module_labels_and_names(name: str) -> None:
    crd = OWN[name]
    assert crd["metadata"]["labels"] == {"module": "ai-inference", "heritage": "deckhouse"}
    assert crd["spec"]["group"] == "ai.deckhouse.io"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
    names = crd["spec"]["names"]
    assert names["categories"] == ["ai"]
    assert names["shortNames"] and "isvc" not in names["shortNames"]  # KServe's


@pytest.mark.parametrize("name", sorted(OWN))
def test_every_field_is_described(name: str) -> None:
    undescribed = [
        path
        for path, field in _fields(_schema(OWN[name]))
        if path != "metadata" and not field.get("description")
    ]
    assert undescribed == []


@pytest.mark.parametrize("name", sorted(OWN))
def test_no_unknown_fields_are_preserved(name: str) -> None:
    assert not any("x-kubernetes-preserve-unknown-fields" in node for node in _walk(OWN[name]))


@pytest.mark.parametrize("name", sorted(OWN))
def test_no_cel_inline(name: str) -> None:
    # A 1.20 server refuses them under server-side apply: they live in crds/cel/.
    assert not any("x-kubernetes-validations" in node for node in _walk(OWN[name]))


@pytest.mark.parametrize(
    ("name", "columns"),
    [
        pytest.param(
            "inferenceservices.ai.deckhouse.io",
            [
                ("Phase", ".status.phase"),
                ("Class", ".spec.inferenceServiceClassName"),
                ("Model", ".spec.model.ref.name"),
                ("Endpoint Type", ".status.model.endpointType"),
                ("URL", ".status.endpoint.url"),
                ("Age", ".metadata.creationTimestamp"),
            ],
            id="order",
        ),
        pytest.param(
            "inferenceserviceclasses.ai.deckhouse.io",
            [
                ("Ready", '.status.conditions[?(@.type=="Ready")].status'),
                ("Age", ".metadata.creationTimestamp"),
            ],
            id="class",
        ),
        pytest.param(
            "launchrecipes.ai.deckhouse.io",
            [("Runtime", ".spec.runtime"), ("Age", ".metadata.creationTimestamp")],
            id="recipe",
        ),
    ],
)
def test_printer_columns(name: str, columns: list[tuple[str, str]]) -> None:
    (version,) = OWN[name]["spec"]["versions"]
    got = [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert got == columns


@pytest.mark.parametrize(
    ("name", "status"),
    [
        pytest.param("inferenceservices.ai.deckhouse.io", True, id="order"),
        pytest.param("inferenceserviceclasses.ai.deckhouse.io", True, id="class"),
        pytest.param("launchrecipes.ai.deckhouse.io", False, id="recipe"),
    ],
)
def test_status_subresource(name: str, status: bool) -> None:
    (version,) = OWN[name]["spec"]["versions"]
    assert ("status" in (version.get("subresources") or {})) is status
    assert ("status" in _schema(OWN[name])["properties"]) is status


def test_order_status_has_every_field_of_the_spec() -> None:
    status = _schema(OWN["inferenceservices.ai.deckhouse.io"])["properties"]["status"]
    paths = {p for p, _ in _fields(status)}
    for field in (
        "phase", "observedGeneration", "conditions", "model.endpointType", "endpoint.url",
        "endpoint.type", "endpoint.toolCallingSupported", "authSecretName",
        "constraints.minReplicas", "constraints.maxReplicas", "constraints.priorityClassName",
        *(
            f"resolved.{f}"
            for f in (
                "deviceClass", "acceleratorProductName", "acceleratorMemoryGiB",
                "acceleratorCount", "placementMode", "sharingMode", "sharePercent", "recipe",
                "cpu", "memory", "modelVolume", "replanCount",
            )
        ),
    ):  # fmt: skip
        assert field in paths, field


# --- stand-ins -----------------------------------------------------------------------


STANDIN_SHAPES = [
    ("deviceclasses.resource.k8s.io", "resource.k8s.io", "v1", "DeviceClass", "Cluster"),
    ("resourceslices.resource.k8s.io", "resource.k8s.io", "v1", "ResourceSlice", "Cluster"),
    ("resourceclaims.resource.k8s.io", "resource.k8s.io", "v1", "ResourceClaim", "Namespaced"),
    (
        "resourceclaimtemplates.resource.k8s.io", "resource.k8s.io", "v1",
        "ResourceClaimTemplate", "Namespaced",
    ),
    ("models.ai.deckhouse.io", "ai.deckhouse.io", "v1alpha1", "Model", "Namespaced"),
    ("clustermodels.ai.deckhouse.io", "ai.deckhouse.io", "v1alpha1", "ClusterModel", "Cluster"),
    ("moduleconfigs.deckhouse.io", "deckhouse.io", "v1alpha1", "ModuleConfig", "Cluster"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "group", "version", "kind", "scope"),
    STANDIN_SHAPES,
    ids=[row[3] for row in STANDIN_SHAPES],
)
def test_standin_shapes(name: str, group: str, version: str, kind: str, scope: str) -> None:
    crd = STANDIN[name]
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"], crd["spec"]["scope"]) == (
        group,
        kind,
        scope,
    )
    assert [v["name"] for v in crd["spec"]["versions"]] == [version]
    if group.endswith(".k8s.io"):
        assert crd["metadata"]["annotations"]["api-approved.kubernetes.io"].startswith("https://")


def test_claim_template_holds_a_claim_spec() -> None:
    claim = _schema(STANDIN["resourceclaims.resource.k8s.io"])["properties"]["spec"]
    template = _schema(STANDIN["resourceclaimtemplates.resource.k8s.io"])
    inner = template["properties"]["spec"]["properties"]["spec"]
    assert _without_descriptions(inner) == _without_descriptions(claim)


def test_model_and_cluster_model_share_their_status() -> None:
    model = _schema(STANDIN["models.ai.deckhouse.io"])["properties"]["status"]
    cluster = _schema(STANDIN["clustermodels.ai.deckhouse.io"])["properties"]["status"]
    assert model == cluster
    assert {"phase", "resolved", "artifact", "conditions"} <= set(model["properties"])


# --- deploy/ -------------------------------------------------------------------------


def _deploy(path: str) -> list[Doc]:
    return load_documents([DEPLOY / path])


def test_module_descriptor_matches_the_namespace() -> None:
    module = yaml.safe_load((DEPLOY / "module.yaml").read_text(encoding="utf-8"))
    (namespace,) = _deploy("namespace.yaml")
    assert module["name"] == "ai-inference"
    assert module["namespace"] == namespace["metadata"]["name"] == "d8-ai-inference"
    assert module["stage"] in {"Experimental", "Preview", "General Availability", "Deprecated"}
    assert set(module["descriptions"]) == {"en", "ru"}


@pytest.mark.parametrize(
    ("name", "level"),
    [
        ("d8:user-authz:ai-inference:user", "User"),
        ("d8:user-authz:ai-inference:editor", "Editor"),
        ("d8:user-authz:ai-inference:cluster-editor", "ClusterEditor"),
    ],
    ids=["user", "editor", "cluster-editor"],
)
def test_user_authz_roles_carry_their_level(name: str, level: str) -> None:
    roles = {d["metadata"]["name"]: d for d in _deploy("rbac/user-roles.yaml")}
    annotations = roles[name]["metadata"]["annotations"]
    assert annotations == {"user-authz.deckhouse.io/access-level": level}


@pytest.mark.parametrize(
    ("name", "label"),
    [("ai-inference:view", "aggregate-to-view"), ("ai-inference:edit", "aggregate-to-edit")],
    ids=["view", "edit"],
)
def test_plain_cluster_roles_aggregate_orders_only(name: str, label: str) -> None:
    roles = {d["metadata"]["name"]: d for d in _deploy("rbac/user-roles.yaml")}
    role = roles[name]
    assert role["metadata"]["labels"][f"rbac.authorization.k8s.io/{label}"] == "true"
    assert "annotations" not in role["metadata"]
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert resources <= {"inferenceservices", "inferenceservices/status"}


def test_default_class_is_the_shipped_one() -> None:
    (obj,) = _deploy("classes/default-llm.yaml")
    assert obj["metadata"]["name"] == "default-llm"
    spec = ClassSpec.model_validate(obj["spec"])
    assert spec.admission_policy is None  # every namespace
    assert spec.model_policy is not None
    assert spec.model_policy.allowed_endpoint_types == (EndpointType.CHAT,)
    assert spec.exposure_policy is not None
    assert spec.exposure_policy.type is ExposureType.EXTERNAL
    assert spec.exposure_policy.authentication is Authentication.TOKEN
    assert spec.exposure_policy.https is not None
    assert spec.exposure_policy.https.mode is HttpsMode.CERT_MANAGER
    assert spec.exposure_policy.https.cluster_issuer_name == "letsencrypt"
    assert spec.scaling_policy is not None
    assert (spec.scaling_policy.min_replicas, spec.scaling_policy.max_replicas) == (1, 2)
    assert spec.accelerator_policy is not None
    assert spec.accelerator_policy.max_accelerator_count == 1
    assert set(spec.accelerator_policy.allowed_placement_types) == {"WholeDevice", "Partition"}
    assert set(spec.accelerator_policy.allowed_sharing_modes) == {"Dedicated", "Shared"}


def test_controller_deployment_follows_platform_conventions() -> None:
    docs = {d["kind"]: d for d in _deploy("controller.yaml")}
    deployment, pdb = docs["Deployment"], docs["PodDisruptionBudget"]
    meta = deployment["metadata"]
    assert meta["namespace"] == "d8-ai-inference"
    assert {"module": "ai-inference", "heritage": "deckhouse"}.items() <= meta["labels"].items()
    spec = deployment["spec"]
    assert spec["revisionHistoryLimit"] <= 2
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "ai-inference"
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["args"][:2] == ["controller", "--store"]
    hardening = container["securityContext"]
    assert hardening["readOnlyRootFilesystem"] is True
    assert hardening["allowPrivilegeEscalation"] is False
    assert hardening["capabilities"]["drop"] == ["ALL"]
    assert all(p["containerPort"] > 1024 for p in container["ports"])
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    labels = spec["template"]["metadata"]["labels"]
    assert pdb["metadata"]["namespace"] == "d8-ai-inference"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert spec["selector"]["matchLabels"].items() <= labels.items()


# --- settings schema and settings reader agree ---------------------------------------

CONFIG_VALUES = yaml.safe_load((DEPLOY / "openapi/config-values.yaml").read_text("utf-8"))
# Every settings block is read by the settings reader (store too: a ModuleConfig that
# sets it must be accepted, though the Deployment renders it into --store).
NOT_READ_BY_SETTINGS: set[str] = set()


def _defaults(schema: Doc) -> Any:
    if schema.get("type") != "object" or "properties" not in schema:
        return copy.deepcopy(schema.get("default"))
    out = {}
    for name, child in schema["properties"].items():
        value = _defaults(child)
        if value is not None and value != {}:
            out[name] = value
    return out


def test_settings_schema_names_what_the_reader_reads() -> None:
    schema_keys = set(CONFIG_VALUES["properties"]) - NOT_READ_BY_SETTINGS
    reader_keys = {f.alias or name for name, f in Settings.model_fields.items()}
    assert schema_keys == reader_keys


def test_settings_schema_defaults_are_the_readers() -> None:
    defaults = _defaults(CONFIG_VALUES)
    for key in NOT_READ_BY_SETTINGS:
        defaults.pop(key, None)
    assert Settings.from_settings(defaults) == Settings()


@pytest.mark.parametrize(
    "key",
    sorted(
        k
        for k, v in CONFIG_VALUES["properties"].items()
        if "x-examples" in v and k not in NOT_READ_BY_SETTINGS
    ),
)
def test_settings_schema_examples_are_read(key: str) -> None:
    """Each example of the module's settings schema is taken whole, as written."""
    for example in CONFIG_VALUES["properties"][key]["x-examples"]:
        read = Settings.from_settings({key: example})
        assert read.model_dump(by_alias=True, exclude_unset=True, mode="json") == {key: example}


# Deckhouse admits a ModuleConfig by the schema alone; what it admits, the controller must
# take, or the module runs on settings other than the ones the platform accepted.
ADMITTED_AND_TAKEN = [
    {"probe": {"intervalSeconds": 1}},
    {"probe": {"intervalSeconds": 2}},
    {"https": {"mode": "CustomCertificate", "customCertificate": {"secretName": "tls"}}},
    {"https": {"mode": "CertManager", "customCertificate": {}}},
    {"https": {"mode": "Disabled"}},
]
REFUSED_BY_BOTH = [
    {"https": {"mode": "CustomCertificate"}},
    {"https": {"mode": "CustomCertificate", "customCertificate": {}}},
    {"https": {"mode": "CustomCertificate", "customCertificate": {"secretName": ""}}},
    {"https": {"certManager": {"clusterIssuerName": ""}}},
    {"probe": {"timeoutSeconds": 0}},
]


@pytest.mark.parametrize("settings", ADMITTED_AND_TAKEN, ids=str)
def test_settings_the_schema_admits_the_reader_takes(settings: Doc) -> None:
    jsonschema.validate(settings, CONFIG_VALUES)
    Settings.from_settings(settings)


@pytest.mark.parametrize("settings", REFUSED_BY_BOTH, ids=str)
def test_settings_the_reader_refuses_the_schema_refuses(settings: Doc) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(settings, CONFIG_VALUES)
    with pytest.raises(SettingsError):
        Settings.from_settings(settings)


@pytest.mark.parametrize(
    "path", sorted(p.name for p in EXAMPLES.glob("moduleconfig-*.yaml")), ids=str
)
def test_example_module_configs_are_read(path: str) -> None:
    """Each example ModuleConfig's settings are taken whole, as written."""
    (obj,) = load_documents([EXAMPLES / path])
    read = Settings.from_module_config(obj)
    written = (obj.get("spec") or {}).get("settings") or {}
    assert read.model_dump(by_alias=True, exclude_unset=True, mode="json") == written


# --- against the real API server -----------------------------------------------------


@pytest.mark.cluster
@pytest.mark.parametrize("name", sorted({**OWN, **STANDIN}))
def test_crd_is_established_and_structural(cluster: Any, name: str) -> None:
    crd = client.ApiextensionsV1Api(cluster.api_client("admin")).read_custom_resource_definition(
        name
    )
    conditions = {c.type: c.status for c in crd.status.conditions}
    assert conditions.get("Established") == "True"
    assert "NonStructuralSchema" not in conditions


def _files(folder: Path) -> list[str]:
    return [str(p.relative_to(folder)) for p in manifest_files(folder)]


@pytest.mark.cluster
@pytest.mark.parametrize("path", _files(EXAMPLES), ids=str)
def test_example_is_accepted(cluster: Any, path: str) -> None:
    # A strict client (client-side validation on) and the server's own checks; dry run, so
    # the shared cluster keeps no example ModuleConfig or class other tests would see.
    # Forced: what is asked is whether the server accepts the manifest, not who owns its
    # fields. The module installs priority-classes.yaml itself (e2e's platform), and the
    # 1.20 server then reports kubectl's apply of the same `globalDefault: false` as a
    # conflict with the module's field manager.
    result = cluster.kubectl(
        "admin", "apply", "--server-side", "--force-conflicts", "--dry-run=server",
        "--validate=true", "-f", str(EXAMPLES / path),
    )  # fmt: skip
    assert "(server dry run)" in result.stdout


def _served(cluster: Any) -> set[str]:
    return set(cluster.kubectl("admin", "api-versions").stdout.split())


# module.yaml and openapi/ are read by Deckhouse itself, not objects of the API; Chart.yaml
# and templates/ are the chart Deckhouse renders (tests/deploy/test_module.py renders it).
# crds/ are the repository's CRDs with CEL rules this 1.20 server refuses: the plain ones
# are applied to it at bootstrap, and tests/deploy/test_module_crds.py holds the module's
# to them.
DEPLOY_MANIFESTS = [
    p
    for p in _files(DEPLOY)
    if p not in {"module.yaml", "Chart.yaml"} and not p.startswith(("openapi", "templates", "crds"))
]


@pytest.mark.cluster
@pytest.mark.parametrize("path", DEPLOY_MANIFESTS, ids=str)
def test_deploy_file_is_accepted(cluster: Any, path: str) -> None:
    served = _served(cluster)
    docs = []
    for original in load_documents([DEPLOY / path]):
        doc = original
        if doc["apiVersion"] not in served and doc["kind"] == "PodDisruptionBudget":
            # policy/v1 arrived in 1.21; the test server has v1beta1 with the same fields.
            doc = {**doc, "apiVersion": "policy/v1beta1"}
        assert doc["apiVersion"] in served, f"{doc['kind']} {doc['apiVersion']}"
        docs.append(doc)
    result = cluster.kubectl(
        "admin", "apply", "--server-side", "--dry-run=server", "-f", "-",
        input=yaml.safe_dump_all(docs),
    )  # fmt: skip
    assert result.stdout.count("(server dry run)") == len(docs)
