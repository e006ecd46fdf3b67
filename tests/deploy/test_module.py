"""The Deckhouse module: deploy/ rendered by a real `helm` as Deckhouse renders it.

Deckhouse renders a module as a chart with its settings (deploy/openapi/config-values.yaml,
defaults filled in) under `aiInference` and the platform's values under `global`;
tests/deploy/deckhouse-values.yaml is that shape, varied here: high availability on and
off, the event log in SQLite or PostgreSQL, the monitoring, VPA and Grafana dashboard APIs
present or absent (`--api-versions`, what `.Capabilities.APIVersions.Has` reads), the
platform's version (which RBACv2 scheme it reads). The rendered objects are checked
against the plain install they must agree with, and applied to the local API server.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest
import yaml

import store
from adapters.kubernetes.settings import HttpsSettings
from fsm.policy import validate_class
from fsm.reasons import ClassReason
from fsm.values import ClassSpec
from tests.deploy.conftest import REPO
from tests.deploy.test_install import container, one

DEPLOY = REPO / "deploy"
CRDS = REPO / "crds"
NAMESPACE = "d8-ai-inference"
VALUES = Path(__file__).with_name("deckhouse-values.yaml")
STANDINS = Path(__file__).with_name("standin-crds.yaml")
HELM = os.environ.get("HELM") or str(Path(sys.executable).with_name("helm"))
POSTGRES = "postgresql+psycopg://ai-inference@postgres.d8-ai-inference.svc:5432/ai_inference"

PODMONITOR = "monitoring.coreos.com/v1/PodMonitor"
PROMETHEUSRULE = "monitoring.coreos.com/v1/PrometheusRule"
VPA = "autoscaling.k8s.io/v1/VerticalPodAutoscaler"
DASHBOARD = "deckhouse.io/v1/GrafanaDashboardDefinition"
MONITORING = (PODMONITOR, PROMETHEUSRULE)
EVERYTHING = (*MONITORING, VPA, DASHBOARD)
Doc = dict[str, Any]


def _fill_defaults(schema: Doc, value: Doc) -> Doc:
    """What Deckhouse does to settings before the templates see them: a property absent
    with a default gets it, and objects present get their own properties' defaults."""
    for name, prop in (schema.get("properties") or {}).items():
        if name not in value and "default" in prop:
            value[name] = copy.deepcopy(prop["default"])
        if isinstance(value.get(name), dict):
            _fill_defaults(prop, value[name])
    return value


def deckhouse_values(*, ha: bool = False, store: str | None = None, version: str = "1.74.0") -> Doc:
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    settings: Doc = {"store": {"url": store}} if store else {}
    schema = yaml.safe_load((DEPLOY / "openapi" / "config-values.yaml").read_text("utf-8"))
    jsonschema.validate(settings, schema)  # Deckhouse refuses a ModuleConfig that does not
    values["aiInference"] = {**_fill_defaults(schema, settings), "internal": {}}
    values["global"]["highAvailability"] = ha
    values["global"]["deckhouseVersion"] = version
    return values


def helm_template(
    values: Doc, api_versions: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    flags = [arg for api in api_versions for arg in ("--api-versions", api)]
    return subprocess.run(
        [HELM, "template", "ai-inference", str(DEPLOY), "--namespace", NAMESPACE,
         "--values", "-", *flags],
        input=yaml.safe_dump(values),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )  # fmt: skip


def render(values: Doc, api_versions: tuple[str, ...] = ()) -> list[Doc]:
    result = helm_template(values, api_versions)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def plain(path: str | Path) -> list[Doc]:
    """The objects of a file of deploy/ (or of any path given whole)."""
    return [d for d in yaml.safe_load_all((DEPLOY / path).read_text("utf-8")) if d]


def kinds(docs: list[Doc]) -> set[str]:
    return {d["kind"] for d in docs}


# --- shapes ------------------------------------------------------------------------------

SHAPES = [
    pytest.param(ha, apis, id=f"ha={'on' if ha else 'off'}-{label}")
    for ha in (False, True)
    for label, apis in (
        ("bare", ()),
        ("monitoring", MONITORING),
        ("vpa", (VPA,)),
        ("all", EVERYTHING),
    )
]


@pytest.mark.parametrize(("ha", "apis"), SHAPES)
def test_renders_the_module_with_what_the_cluster_serves(ha: bool, apis: tuple[str, ...]) -> None:
    docs = render(deckhouse_values(ha=ha, store=POSTGRES), apis)
    for doc in docs:
        meta = doc["metadata"]
        assert doc["apiVersion"] and meta["name"], doc
        assert meta["labels"]["heritage"] == "deckhouse", meta["name"]
        assert meta["labels"]["module"] == "ai-inference", meta["name"]
        if doc["kind"] not in CLUSTER_SCOPED_KINDS:
            assert meta["namespace"] == NAMESPACE, f"{doc['kind']} {meta['name']}"
    # The monitoring only with the Prometheus Operator's API, the VPA only with its own.
    assert ("PodMonitor" in kinds(docs)) == (PODMONITOR in apis)
    assert ("PrometheusRule" in kinds(docs)) == (PROMETHEUSRULE in apis)
    dashboards = [d for d in docs if "grafana-dashboard" in str(d["metadata"]["labels"])]
    dashboards += [d for d in docs if d["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert len(dashboards) == (1 if PODMONITOR in apis else 0)
    if DASHBOARD in apis:
        (dashboard,) = dashboards
        assert dashboard["kind"] == "GrafanaDashboardDefinition"
        shipped = (DEPLOY / "monitoring/grafana-dashboards/ai-inference.json").read_text("utf-8")
        assert yaml.safe_load(dashboard["spec"]["definition"]) == yaml.safe_load(shipped)
    vpas = [d for d in docs if d["kind"] == "VerticalPodAutoscaler"]
    assert len(vpas) == (1 if VPA in apis else 0)
    for vpa in vpas:
        assert vpa["spec"]["targetRef"]["name"] == "ai-inference-controller"
        assert vpa["spec"]["updatePolicy"]["updateMode"] != "Auto"
    # The module's CRDs are not templates (Deckhouse installs crds/ itself), so nothing
    # rendered here may define one.
    assert "CustomResourceDefinition" not in kinds(docs)


CLUSTER_SCOPED_KINDS = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "InferenceServiceClass",
    "LaunchRecipe", "GrafanaDashboardDefinition",
}  # fmt: skip


def test_monitoring_is_the_plain_monitoring() -> None:
    docs = render(deckhouse_values(), MONITORING)
    for path in ("monitoring/podmonitor.yaml", "monitoring/prometheusrule.yaml"):
        (shipped,) = plain(path)
        assert one(docs, shipped["kind"]) == shipped


def test_the_deployment_follows_the_platform() -> None:
    docs = render(deckhouse_values())
    deployment = one(docs, "Deployment", "ai-inference-controller")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["revisionHistoryLimit"] <= 2
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    main = container(deployment)
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert all(p["containerPort"] > 1024 for p in main["ports"])
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # The image is the digest Deckhouse built, pulled with the platform's credentials.
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    images = values["global"]["modulesImages"]
    digest = images["digests"]["aiInference"]["controller"]
    assert main["image"] == f"{images['registry']['base']}@{digest}"
    assert pod["imagePullSecrets"] == [{"name": "deckhouse-registry"}]
    secret = one(docs, "Secret", "deckhouse-registry")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["data"][".dockerconfigjson"] == images["registry"]["dockercfg"]
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_a_module_from_its_own_source_pulls_from_its_own_registry() -> None:
    """A ModuleSource gives the module a registry of its own (`aiInference.registry`):
    the image is there, under the module's name, with its credentials, as lib-helm's
    helm_lib_module_image has it. The platform's registry never holds that digest."""
    values = deckhouse_values()
    values["aiInference"]["registry"] = {
        "base": "modules.example.org/deckhouse/",
        "dockercfg": "eyJhdXRocyI6e319",  # {"auths":{}}
    }
    docs = render(values)
    digest = values["global"]["modulesImages"]["digests"]["aiInference"]["controller"]
    deployment = one(docs, "Deployment", "ai-inference-controller")
    assert container(deployment)["image"] == (
        f"modules.example.org/deckhouse/ai-inference@{digest}"
    )
    secret = one(docs, "Secret", "deckhouse-registry")
    assert secret["data"][".dockerconfigjson"] == "eyJhdXRocyI6e319"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "deckhouse-registry"}]


def test_without_pull_credentials_no_pull_secret_is_made() -> None:
    """No dockercfg anywhere (a public registry): the chart rendered a Secret holding
    `.dockerconfigjson: null`, which the API server refuses, and with it the release."""
    values = deckhouse_values()
    del values["global"]["modulesImages"]["registry"]["dockercfg"]
    docs = render(values)
    assert not [
        d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "deckhouse-registry"
    ]
    deployment = one(docs, "Deployment", "ai-inference-controller")
    assert "imagePullSecrets" not in deployment["spec"]["template"]["spec"]


def test_an_image_without_a_digest_is_refused() -> None:
    values = deckhouse_values()
    values["global"]["modulesImages"]["digests"] = {}
    result = helm_template(values)
    assert result.returncode != 0
    assert "global.modulesImages.digests.aiInference.controller is not set" in result.stderr


# The fields where the module's Deployment and the plain one must say the same.
AGREE = (
    "args", "env", "ports", "livenessProbe", "readinessProbe", "securityContext",
    "volumeMounts", "resources", "imagePullPolicy", "name",
)  # fmt: skip


def test_the_container_agrees_with_the_plain_install() -> None:
    (shipped,) = [d for d in plain("controller.yaml") if d["kind"] == "Deployment"]
    rendered = one(render(deckhouse_values()), "Deployment", "ai-inference-controller")
    ours, theirs = container(rendered), container(shipped)
    for field in AGREE:
        assert ours[field] == theirs[field], field
    ours_pod, theirs_pod = rendered["spec"]["template"]["spec"], shipped["spec"]["template"]["spec"]
    for field in (
        "securityContext",
        "serviceAccountName",
        "priorityClassName",
        "enableServiceLinks",
    ):
        assert ours_pod[field] == theirs_pod[field], field
    assert rendered["spec"]["selector"] == shipped["spec"]["selector"]
    volumes = {v["name"]: v for v in ours_pod["volumes"]}
    assert volumes["tmp"] == {v["name"]: v for v in theirs_pod["volumes"]}["tmp"]


def test_sqlite_keeps_one_writer_on_a_claim_that_outlives_the_module() -> None:
    # High availability asked for, but a SQLite file has one writer: one replica.
    docs = render(deckhouse_values(ha=True))
    deployment = one(docs, "Deployment", "ai-inference-controller")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "affinity" not in deployment["spec"]["template"]["spec"]
    claim = one(docs, "PersistentVolumeClaim")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
    # Disabling the module deletes its release; the history must stay.
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # The same claim install/sqlite makes.
    (sqlite_claim,) = plain(REPO / "install/sqlite/events-pvc.yaml")
    assert claim["metadata"]["name"] == sqlite_claim["metadata"]["name"]
    assert claim["spec"] == sqlite_claim["spec"]


def test_the_controller_goes_out_through_the_clusters_proxy() -> None:
    """The hub resolver (and, through the controller, the runtimes' downloads) reach the
    hub by the cluster's egress proxy, as lib-helm gives it to a module's pods; the
    cluster's own names and subnets stay off it. No proxy configured, no variable."""
    values = deckhouse_values()
    plain_env = {e["name"] for e in container(one(render(values), "Deployment"))["env"]}
    assert not {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} & plain_env
    values["global"]["clusterConfiguration"] = {
        "clusterDomain": "cluster.local",
        "podSubnetCIDR": "10.111.0.0/16",
        "serviceSubnetCIDR": "10.222.0.0/16",
        "proxy": {
            "httpProxy": "http://proxy.internal:3128",
            "httpsProxy": "http://proxy.internal:3128",
            "noProxy": ["registry.internal"],
        },
    }
    env = {e["name"]: e.get("value") for e in container(one(render(values), "Deployment"))["env"]}
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://proxy.internal:3128"
    assert env["HTTP_PROXY"] == env["http_proxy"] == "http://proxy.internal:3128"
    assert env["NO_PROXY"] == env["no_proxy"]
    assert env["NO_PROXY"].split(",") == [
        "127.0.0.1",
        "169.254.169.254",
        "cluster.local",
        "10.111.0.0/16",
        "10.222.0.0/16",
        "registry.internal",
    ]


@pytest.mark.parametrize("ha", [True, False], ids=["ha", "single"])
def test_postgres_replicas_follow_high_availability(ha: bool) -> None:
    docs = render(deckhouse_values(ha=ha, store=POSTGRES))
    deployment = one(docs, "Deployment", "ai-inference-controller")
    spec, pod = deployment["spec"], deployment["spec"]["template"]["spec"]
    assert "PersistentVolumeClaim" not in kinds(docs)
    main = container(deployment)
    assert main["args"] == ["controller", "--store", POSTGRES]
    env = {e["name"]: e for e in main["env"]}
    assert env["PGPASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "ai-inference-store", "key": "password"}
    }
    if ha:
        # Required anti-affinity: a surge pod may have no node (two schedulable nodes),
        # so one old pod goes first while the other leads, as deckhouse's lib-helm does.
        assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
        assert spec["replicas"] == 2
        (term,) = pod["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    else:
        # A new pod is ready as a standby, then the old one goes.
        assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
        assert spec["replicas"] == 1
        assert "affinity" not in pod


@pytest.mark.parametrize(
    ("module", "platform", "control_plane", "replicas"),
    [
        (None, None, True, 2),  # nothing set: a highly available control plane decides
        (None, None, False, 1),
        (None, True, False, 2),  # the platform's mode, when set, over the discovery
        (None, False, True, 1),
        (False, True, True, 1),  # the module's setting over both
        (True, False, False, 2),
    ],
)
def test_high_availability_as_the_platform_decides_it(
    module: bool | None, platform: bool | None, control_plane: bool, replicas: int
) -> None:
    values = deckhouse_values(store=POSTGRES)
    del values["global"]["highAvailability"]
    if platform is not None:
        values["global"]["highAvailability"] = platform
    values["global"]["discovery"] = {"clusterControlPlaneIsHighlyAvailable": control_plane}
    if module is not None:
        values["aiInference"]["highAvailability"] = module
    deployment = one(render(values), "Deployment", "ai-inference-controller")
    assert deployment["spec"]["replicas"] == replicas


def test_the_module_setting_is_one_deckhouse_accepts() -> None:
    # Set in a ModuleConfig, it passes the schema and reaches the templates.
    values = deckhouse_values(store=POSTGRES)
    assert "highAvailability" not in values["aiInference"]  # no default: the platform's
    schema = yaml.safe_load((DEPLOY / "openapi" / "config-values.yaml").read_text("utf-8"))
    jsonschema.validate({"highAvailability": True}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"highAvailability": "yes"}, schema)


@pytest.mark.parametrize(
    ("url", "admitted"),
    [
        ("sqlite:////var/lib/ai-inference/events.sqlite", True),
        ("postgresql+psycopg://ai@db.example:5432/ai", True),
        ("postgresql://ai@db.example/ai", True),
        ("postgres://ai@db.example/ai", True),
        ("", False),  # the controller exits 2: the pod crash-loops
        ("mysql://root@db/ai", False),
        ("postgresql+psycopg2://ai@db/ai", False),
        ("sqlite:////tmp/events.sqlite", False),  # a read-only root file system
        ("sqlite:///events.sqlite", False),
        ("sqlite://", False),
        # A password would be the pod's argument, read by whoever reads the Deployment.
        ("postgresql+psycopg://ai:S3cretPw@db/ai", False),
        ("postgresql://ai:@db/ai", False),
        ("postgresql://ai@db/ai?sslmode=require&password=S3cretPw", False),
        ("postgresql://ai@db/ai?password=S3cretPw", False),
        ("postgresql://ai@db.example:5432/ai?sslmode=require", True),
        ("postgresql:///ai?host=/run/postgresql", True),  # a Unix socket
        ("postgresql://ai@[fd00::5]:5432/ai", True),  # an IPv6 address
        ("postgresql://ai@[fd00::5/ai", False),
        # The driver's name on the short scheme, and a port that is no number.
        ("postgres+psycopg://ai@db.example:5432/ai", False),
        ("postgresql://ai@db.example:notaport/ai", False),
        ("postgresql://ai@db.example:/ai", False),
    ],
)
def test_the_store_url_the_schema_admits_is_one_the_controller_opens(
    url: str, admitted: bool
) -> None:
    """Refused in the ModuleConfig, a bad URL is said at once by Deckhouse; admitted, it
    crash-looped the controller's pod instead."""
    schema = yaml.safe_load((DEPLOY / "openapi" / "config-values.yaml").read_text("utf-8"))
    settings = {"store": {"url": url}}
    if admitted:
        jsonschema.validate(settings, schema)
        store.normalise_url(url)  # the controller's own check
    else:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(settings, schema)


_SECRET = ("customCertificate", "secretName", ClassReason.INVALID_CERTIFICATE_SECRET_NAME)
_ISSUER = ("certManager", "clusterIssuerName", ClassReason.INVALID_ISSUER_NAME)


@pytest.mark.parametrize(
    ("field", "name", "admitted"),
    [
        (_SECRET, "wildcard-tls", True),
        (_SECRET, "tls.example.com", True),
        (_SECRET, "a" * 253, True),
        (_SECRET, "../../victim/secrets/victim-tls", False),  # read with the controller's rights
        (_SECRET, "..", False),
        (_SECRET, "Wildcard-TLS", False),
        (_SECRET, "tls/other", False),
        (_SECRET, "a" * 254, False),
        (_ISSUER, "letsencrypt-staging", True),
        (_ISSUER, "a" * 253, True),
        (_ISSUER, "letsencrypt\nx-evil: 1", False),  # in each order's Ingress annotation
        (_ISSUER, "Letsencrypt", False),
        (_ISSUER, "a" * 254, False),
    ],
)
def test_a_certificate_name_is_one_name_in_the_schema_the_crd_and_the_parsers(
    field: tuple[str, str, ClassReason], name: str, admitted: bool
) -> None:
    """The ModuleConfig's schema, the class CRD's, the settings parser and the class's
    own validation take the same Secret and ClusterIssuer names: a path taken for a
    Secret's was another namespace's TLS key, copied next to an order."""
    block, key, reason = field
    mode = "CustomCertificate" if block == "customCertificate" else "CertManager"
    https = {"mode": mode, block: {key: name}}
    config = yaml.safe_load((DEPLOY / "openapi" / "config-values.yaml").read_text("utf-8"))
    crd = yaml.safe_load((CRDS / "inferenceserviceclasses.ai.deckhouse.io.yaml").read_text())
    class_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    exposure = {"type": "External", "authentication": "None", "https": https}
    klass = {
        "spec": {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}, "exposurePolicy": exposure}
    }
    spec = ClassSpec.model_validate(klass["spec"])
    valid = validate_class(spec, priority_classes=(), device_classes=())
    if admitted:
        jsonschema.validate({"https": https}, config)
        jsonschema.validate(klass, class_schema)
        HttpsSettings.model_validate(https)
        assert valid.ready, valid.message
    else:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"https": https}, config)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(klass, class_schema)
        with pytest.raises(pydantic.ValidationError):
            HttpsSettings.model_validate(https)
        assert valid.reason is reason


# --- RBAC --------------------------------------------------------------------------------


def test_controller_rbac_is_the_plain_install_rbac() -> None:
    docs = render(deckhouse_values())
    for shipped in plain("rbac/controller.yaml"):
        rendered = one(docs, shipped["kind"], shipped["metadata"]["name"])
        assert rendered == shipped
        if shipped["kind"] in {"ClusterRole", "Role"}:
            assert rendered["rules"] == shipped["rules"]


def test_user_authz_roles_are_the_plain_ones_and_only_those() -> None:
    docs = render(deckhouse_values())
    shipped = [
        d for d in plain("rbac/user-roles.yaml")
        if "user-authz.deckhouse.io/access-level" in d["metadata"].get("annotations", {})
    ]  # fmt: skip
    assert [d["metadata"]["name"] for d in shipped] == [
        f"d8:user-authz:ai-inference:{level}" for level in ("user", "editor", "cluster-editor")
    ]
    rendered = [d for d in docs if d["metadata"]["name"].startswith("d8:user-authz:")]
    assert rendered == shipped
    # The plain clusters' aggregation into the built-in roles is not the platform's way.
    names = {d["metadata"]["name"] for d in docs}
    assert not names & {"ai-inference:view", "ai-inference:edit"}


# Deckhouse's access levels in order; a level has every role of the levels before it.
LEVELS = ("User", "PrivilegedUser", "Editor", "Admin", "ClusterEditor", "ClusterAdmin")
NAMESPACE_LEVELS = LEVELS[:4]  # the only ones a namespaced rule (RoleBinding) may grant


def _crd_scopes() -> dict[str, str]:
    scopes = {}
    for path in (REPO / "crds").glob("*.yaml"):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        scopes[crd["spec"]["names"]["plural"]] = crd["spec"]["scope"]
    scopes.update(models="Namespaced", clustermodels="Cluster")  # the ai-models catalog
    return scopes


def _named_resources(role: Doc) -> set[str]:
    return {r.split("/")[0] for rule in role["rules"] for r in rule["resources"]}


def test_namespace_levels_never_name_cluster_scoped_resources() -> None:
    # A ClusterAuthorizationRule may grant a namespace level cluster-wide (a
    # ClusterRoleBinding): a class or recipe rule in such a role would then let an Editor
    # write every class. So only ClusterEditor and above name them.
    cluster_scoped = {name for name, scope in _crd_scopes().items() if scope == "Cluster"}
    assert {"inferenceserviceclasses", "launchrecipes"} <= cluster_scoped
    for role in render(deckhouse_values()):
        level = role["metadata"].get("annotations", {}).get("user-authz.deckhouse.io/access-level")
        if level in NAMESPACE_LEVELS:
            assert not _named_resources(role) & cluster_scoped, role["metadata"]["name"]
        elif level is not None:
            assert level in LEVELS, level


@pytest.mark.parametrize("version", ["1.74.0", "1.80.1"])
def test_no_rule_names_objects_for_verbs_that_cannot_be_limited_by_name(version: str) -> None:
    """Kubernetes cannot restrict create or deletecollection by resourceNames (a create's
    name may be unknown when it is authorized): such a rule grants nothing, and reads as
    if it did."""
    unenforceable = {"create", "deletecollection"}
    found = [
        (doc["metadata"]["name"], rule["resources"], sorted(unenforceable & set(rule["verbs"])))
        for doc in render(deckhouse_values(version=version))
        if doc["kind"] in ("Role", "ClusterRole")
        for rule in doc.get("rules") or ()
        if rule.get("resourceNames") and unenforceable & set(rule["verbs"])
    ]
    assert found == []


@pytest.mark.parametrize(
    ("version", "new"),
    [("1.74.0", False), ("v1.77.3", False), ("1.78.0", True), ("1.80.1", True), ("dev", True)],
)
def test_rbacv2_capabilities_in_the_scheme_the_platform_reads(version: str, new: bool) -> None:
    docs = render(deckhouse_values(version=version))
    roles = {
        d["metadata"]["name"]: d
        for d in docs
        if d["kind"] == "ClusterRole" and "rbac.deckhouse.io/kind" in d["metadata"]["labels"]
    }
    if new:
        names = {
            "namespace": ("d8:namespace-capability:ai-inference:view",
                          "d8:namespace-capability:ai-inference:edit"),
            "system": ("d8:system-capability:ai-inference:view",
                       "d8:system-capability:ai-inference:edit"),
        }  # fmt: skip
    else:
        names = {
            "namespace": ("d8:use:capability:module:ai-inference:view",
                          "d8:use:capability:module:ai-inference:edit"),
            "system": ("d8:manage:permission:module:ai-inference:view",
                       "d8:manage:permission:module:ai-inference:edit"),
        }  # fmt: skip
    assert set(roles) == set(names["namespace"] + names["system"])
    scopes = _crd_scopes()
    for tier, (view, edit) in names.items():
        for name, level in ((view, "viewer"), (edit, "manager")):
            labels = roles[name]["metadata"]["labels"]
            action = name.rsplit(":", 1)[1]
            if new:
                assert labels["rbac.deckhouse.io/kind"] == "capability"
                assert labels["rbac.deckhouse.io/scope"] == tier
                assert (
                    labels["rbac.deckhouse.io/capability"]
                    == f"{tier}-capability.ai-inference.{action}"
                )
                assert "rbac.deckhouse.io/level" not in labels
                annotations = roles[name]["metadata"]["annotations"]
                assert {f"{lang}.meta.deckhouse.io/{what}" for lang in ("en", "ru")
                        for what in ("title", "description")} == set(annotations)  # fmt: skip
            else:
                assert labels["rbac.deckhouse.io/kind"] == (
                    "use" if tier == "namespace" else "manage"
                )
            lineage = [k for k in labels if k.startswith("rbac.deckhouse.io/aggregate-to-")]
            if tier == "namespace":
                # The tenant's side: in a namespace, never cluster-scoped resources.
                key = "namespace" if new else "kubernetes"
                assert lineage == [f"rbac.deckhouse.io/aggregate-to-{key}-as"]
                assert labels[lineage[0]] == level
                assert all(scopes[r] == "Namespaced" for r in _named_resources(roles[name]))
                assert "rbac.deckhouse.io/namespace" not in labels
            else:
                assert lineage == ["rbac.deckhouse.io/aggregate-to-kubernetes-as"]
                assert labels[lineage[0]] == level
                assert labels["rbac.deckhouse.io/namespace"] == NAMESPACE
                if not new:
                    assert labels["rbac.deckhouse.io/level"] == "module"
                config = [r for r in roles[name]["rules"] if "moduleconfigs" in r["resources"]]
                assert [r["resourceNames"] for r in config] == [["ai-inference"]]
    write = {"create", "update", "patch", "delete"}
    view, edit = names["namespace"]
    assert not write & {v for r in roles[view]["rules"] for v in r["verbs"]}
    assert write <= {v for r in roles[edit]["rules"] for v in r["verbs"]}
    view, edit = names["system"]
    assert not write & {v for r in roles[view]["rules"] for v in r["verbs"]}
    assert {"inferenceserviceclasses", "launchrecipes"} <= _named_resources(roles[edit])


# --- against the API server -------------------------------------------------------------


@pytest.fixture(scope="module")
def standin_apis(cluster: Any) -> Iterator[None]:
    cluster.kubectl("admin", "apply", "--server-side", "-f", str(STANDINS))
    names = [f"crd/{d['metadata']['name']}" for d in plain(STANDINS)]
    cluster.kubectl("admin", "wait", "--for", "condition=Established", *names)
    yield
    cluster.kubectl("admin", "delete", "--wait=false", *names)


def _lowered(cluster: Any, docs: list[Doc]) -> list[Doc]:
    served = set(cluster.kubectl("admin", "api-versions").stdout.split())
    out = []
    for rendered in docs:
        doc = rendered
        if doc["kind"] == "PodDisruptionBudget" and doc["apiVersion"] not in served:
            doc = {**doc, "apiVersion": "policy/v1beta1"}  # 1.20: the same fields
        assert doc["apiVersion"] in served, f"{doc['kind']} {doc['apiVersion']}"
        out.append(doc)
    return out


@pytest.mark.cluster
@pytest.mark.parametrize(
    ("ha", "store", "version"),
    [(False, None, "1.74.0"), (True, POSTGRES, "1.78.0")],
    ids=["single-sqlite-legacy-rbac", "ha-postgres-new-rbac"],
)
def test_rendered_module_is_accepted(
    cluster: Any, standin_apis: None, ha: bool, store: str | None, version: str
) -> None:
    docs = _lowered(
        cluster, render(deckhouse_values(ha=ha, store=store, version=version), EVERYTHING)
    )
    assert {"PodMonitor", "PrometheusRule", "VerticalPodAutoscaler",
            "GrafanaDashboardDefinition"} <= kinds(docs)  # fmt: skip
    result = cluster.kubectl(
        "admin", "apply", "--server-side", "--dry-run=server", "-f", "-",
        input=yaml.safe_dump_all(docs),
    )  # fmt: skip
    assert result.stdout.count("(server dry run)") == len(docs), result.stdout


def _can(cluster: Any, user: str, verb: str, resource: str, namespace: str) -> bool:
    result = cluster.kubectl(
        "admin", "auth", "can-i", verb, resource, "--as", user, "-n", namespace, check=False
    )
    assert result.stdout.strip() in {"yes", "no"}, result.stderr
    return result.stdout.strip() == "yes"


def _level(role: Doc) -> str:
    return str(role["metadata"]["annotations"]["user-authz.deckhouse.io/access-level"])


def _binding(user: str, role: str, namespace: str, cluster_wide: bool) -> Doc:
    name = f"{user}-{role.rsplit(':', 1)[1]}"
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding" if cluster_wide else "RoleBinding",
        "metadata": {"name": name} if cluster_wide else {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


@pytest.fixture
def authz_namespace(cluster: Any) -> Iterator[str]:
    name = "authz-levels"
    cluster.kubectl("admin", "create", "namespace", name)
    yield name
    cluster.kubectl("admin", "delete", "namespace", name, "--wait=false")


@pytest.mark.cluster
def test_user_authz_levels_grant_cumulatively(cluster: Any, authz_namespace: str) -> None:
    """Bind the rendered roles as user-authz does: a level gets its role and every lower
    level's, by RoleBinding in a namespace (User…Admin) or ClusterRoleBinding
    (ClusterEditor, or any level a ClusterAuthorizationRule grants cluster-wide)."""
    roles = [
        d for d in render(deckhouse_values())
        if "user-authz.deckhouse.io/access-level" in d["metadata"].get("annotations", {})
    ]  # fmt: skip
    cluster.kubectl(
        "admin", "apply", "--server-side", "--field-manager=test-module", "-f", "-",
        input=yaml.safe_dump_all(roles),
    )  # fmt: skip
    bound: list[str] = []

    def bind(user: str, level: str, cluster_wide: bool) -> None:
        for role in roles:
            if LEVELS.index(_level(role)) > LEVELS.index(level):
                continue
            binding = _binding(user, role["metadata"]["name"], authz_namespace, cluster_wide)
            cluster.kubectl("admin", "apply", "--server-side", "-f", "-", input=yaml.dump(binding))
            if cluster_wide:
                bound.append(binding["metadata"]["name"])

    try:
        bind("authz-user", "User", cluster_wide=False)
        bind("authz-editor", "Editor", cluster_wide=False)
        bind("authz-wide-editor", "Editor", cluster_wide=True)
        bind("authz-cluster-editor", "ClusterEditor", cluster_wide=True)
        ns = authz_namespace
        orders, classes, recipes = (
            f"{plural}.ai.deckhouse.io"
            for plural in ("inferenceservices", "inferenceserviceclasses", "launchrecipes")
        )
        grants = {
            user: (
                _can(cluster, user, "list", orders, ns),
                _can(cluster, user, "create", orders, ns),
                _can(cluster, user, "list", classes, ns),
                _can(cluster, user, "create", classes, ns),
                _can(cluster, user, "delete", recipes, ns),
            )
            for user in ("authz-user", "authz-editor", "authz-wide-editor", "authz-cluster-editor")
        }
        #          read orders, write orders, read classes, write classes, write recipes
        assert grants == {
            "authz-user": (True, False, False, False, False),
            "authz-editor": (True, True, False, False, False),
            # Editor granted cluster-wide still never reaches classes or recipes.
            "authz-wide-editor": (True, True, False, False, False),
            # ClusterEditor has everything below it too: the levels are cumulative.
            "authz-cluster-editor": (True, True, True, True, True),
        }
        # Outside the bound namespace a namespace-level user has nothing.
        assert not _can(cluster, "authz-editor", "list", orders, "default")
    finally:
        if bound:
            cluster.kubectl("admin", "delete", "clusterrolebinding", *bound, check=False)
