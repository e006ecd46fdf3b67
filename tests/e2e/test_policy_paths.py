"""The user guide's policy paths, end to end: what a class (or no class) decides.

Each test orders as the namespace user would (alice, under her own RBAC, in `support`;
the admin where alice has no rights, in `analytics`) and reads the answer only from the
order's status — phase, the six conditions in order, and the status fields the guide
names. Classes come from examples/ and are removed afterwards unless they were there
before; every order has its own name and is deleted at the end.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters import metrics
from adapters.kubernetes.manifests import Applier, load_documents
from adapters.platform import LocalPlatform
from adapters.probes.targets import SIMULATOR_ENDPOINT_ANNOTATION
from adapters.resources import resource_dir
from tests.e2e.capacity import module_config
from tests.e2e.conftest import (
    GROUP,
    VERSION,
    Orders,
    conditions,
    delete_and_wait,
    forced_passes,
    wait_for,
)

pytestmark = pytest.mark.cluster

__all__: list[str] = []

QWEN_AWQ = "Qwen/Qwen2.5-32B-Instruct-AWQ"
QWEN_SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
QWEN_7B = "Qwen/Qwen2.5-7B-Instruct"
LLAMA_GATED = "meta-llama/Llama-3.1-8B"
# The stand-in hub's accounts (adapters/simulator/hub_models.yaml): alice is granted the
# gated model, bob is a valid account without the grant.
ALICE_HF_TOKEN = "hf_standin_alice_0123456789abcdefghijkl"
BOB_HF_TOKEN = "hf_standin_bob_0123456789abcdefghijklmno"
CLASSES = "inferenceserviceclasses"
TOKEN_CLASSES = {"default-llm", "llm-strict", "llm-chat-external"}  # authentication: Token

Chain = list[tuple[str, str, str]]
_READINESS = [
    ("ClassResolved", "ClassAdmitted"),
    ("ModelResolved", "ModelResolved"),
    ("Planned", "PlanComputed"),
    ("WorkloadReady", "WorkloadAvailable"),
    ("Ready", "EndpointServing"),
]
# SPEC §6: a condition after one that is not True names what it waits for.
_AWAITING = {
    "ModelResolved": "AwaitingClass",
    "Planned": "AwaitingModel",
    "WorkloadReady": "AwaitingPlan",
    "Ready": "AwaitingWorkload",
}


def ready_chain(class_reason: str = "ClassAdmitted") -> Chain:
    head = [("ClassResolved", "True", class_reason)]
    rest = [(t, "True", r) for t, r in _READINESS[1:]]
    return [*head, *rest, ("ScalingHealthy", "True", "ScalingWithinBounds")]


def blocked_chain(at: str, reason: str) -> Chain:
    """The conditions of an order held at `at` with `reason`: True before, Unknown after."""
    types = [t for t, _ in _READINESS]
    i = types.index(at)
    out: Chain = [(t, "True", r) for t, r in _READINESS[:i]]
    out.append((at, "False", reason))
    out += [(t, "Unknown", _AWAITING[t]) for t in types[i + 1 :]]
    return [*out, ("ScalingHealthy", "Unknown", "NotServing")]


def hf(model: str, **auth: str) -> dict[str, Any]:
    """A HuggingFace model block; `auth` is the authSecretRef (name, key)."""
    block: dict[str, Any] = {"src": "HuggingFace", "ref": {"name": model}}
    if auth:
        block["authSecretRef"] = auth
    return block


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture
def admin(platform: LocalPlatform) -> client.ApiClient:
    return platform.api("admin")


@pytest.fixture
def classes(admin: client.ApiClient) -> Iterator[Callable[[str], None]]:
    """Apply an examples/ class by name; removed afterwards unless it was there before."""
    custom = client.CustomObjectsApi(admin)
    added: list[str] = []

    def apply(name: str) -> None:
        try:
            custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            added.append(name)
        Applier(admin).apply_all(load_documents([resource_dir("examples") / f"class-{name}.yaml"]))

        # Every example class is valid here (llm-strict's device class is one the
        # simulator publishes): the controller says so in the class's own Ready condition.
        def valid() -> bool:
            obj = custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, name)
            found = [
                (c["status"], c["reason"])
                for c in (obj.get("status") or {}).get("conditions") or []
                if c["type"] == "Ready"
            ]
            return found == [("True", "Valid")]

        wait_for(valid, timeout=30, what=f"class {name} Ready")

    yield apply
    for name in added:
        _delete_class(custom, name)


@pytest.fixture
def orders(platform: LocalPlatform, admin_orders: Orders) -> Iterator[Callable[[str, str], None]]:
    """Remember (namespace, name) of every order a test makes; delete them, pods and all."""
    made: list[tuple[str, str]] = []
    yield lambda namespace, name: made.append((namespace, name))
    for namespace, name in made:
        delete_and_wait(platform, admin_orders, namespace, name)


def _delete_class(custom: client.CustomObjectsApi, name: str) -> None:
    try:
        custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _create(
    orders: Callable[[str, str], None],
    who: Orders,
    namespace: str,
    name: str,
    spec: dict[str, Any],
) -> None:
    orders(namespace, name)
    who.create(namespace, name, spec)


def _stub_url(platform: LocalPlatform, namespace: str, uid: str) -> str:
    core = client.CoreV1Api(platform.api("admin"))
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"ai.deckhouse.io/inference-service-uid={uid}"
    )
    return next(
        str(p.metadata.annotations[SIMULATOR_ENDPOINT_ANNOTATION])
        for p in pods.items
        if (p.metadata.annotations or {}).get(SIMULATOR_ENDPOINT_ANNOTATION)
    )


def _runtime(platform: LocalPlatform, namespace: str, name: str) -> Any:
    apps = client.AppsV1Api(platform.api("admin"))
    deployment = apps.read_namespaced_deployment(name, namespace)
    return deployment, next(
        c for c in deployment.spec.template.spec.containers if c.name == "runtime"
    )


def _settle(platform: LocalPlatform, uid: str) -> None:
    """A pass over the order, to its end."""
    forced_passes(platform, uid, passes=1)


def _secrets(platform: LocalPlatform, namespace: str) -> set[str]:
    core = client.CoreV1Api(platform.api("admin"))
    return {s.metadata.name for s in core.list_namespaced_secret(namespace).items}


@contextmanager
def _user_secret(core: client.CoreV1Api, name: str, data: dict[str, str]) -> Iterator[None]:
    body = client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data=data)
    core.create_namespaced_secret("support", body)
    try:
        yield
    finally:
        core.delete_namespaced_secret(name, "support")


# --- 1. classless -------------------------------------------------------------------------


def test_classless_order_is_ready_and_outlives_default_llm(
    platform: LocalPlatform, alice: Orders, admin: client.ApiClient, orders: Any
) -> None:
    name = "pp-classless"
    _create(orders, alice, "support", name, {"model": hf(QWEN_AWQ)})
    obj = alice.wait_phase("support", name, "Ready")
    status = obj["status"]
    assert conditions(obj) == ready_chain("ClasslessDefaults")
    assert "model" not in status  # the endpoint type is not checked without a class
    assert status["endpoint"] == {
        "url": f"https://{name}-support.example.com",
        "type": "External",
        "toolCallingSupported": True,
    }
    assert status["authSecretName"] == f"{name}-auth"
    assert status["constraints"] == {"minReplicas": 1, "maxReplicas": 1}
    assert status["resolved"]["placementMode"] == "WholeDevice"
    assert status["resolved"]["sharingMode"] == "Dedicated"

    core = client.CoreV1Api(platform.api("alice"))
    token = base64.b64decode(core.read_namespaced_secret(f"{name}-auth", "support").data["token"])
    url = _stub_url(platform, "support", obj["metadata"]["uid"])
    auth = {"Authorization": f"Bearer {token.decode()}"}
    assert httpx.get(f"{url}/v1/models", headers=auth, timeout=5).status_code == 200
    assert httpx.get(f"{url}/v1/models", timeout=5).status_code == 401

    # SPEC §4: the classless defaults are built in, not read from default-llm.
    custom = client.CustomObjectsApi(admin)
    uid = obj["metadata"]["uid"]
    try:
        _delete_class(custom, "default-llm")
        wait_for(
            lambda: platform.controller.cache.classes.get_by_name(None, "default-llm") is None,
            timeout=10,
            what="the controller to see default-llm gone",
        )
        _settle(platform, uid)
        after = alice.get("support", name)
        assert after is not None and after["status"] == status
        assert platform.controller.reconciler.state_of(uid).policy is not None
    finally:
        Applier(admin).apply_all(
            load_documents([resource_dir("deploy") / "classes" / "default-llm.yaml"])
        )


# --- 2. a class published inside the cluster, without a token -----------------------------


def test_cluster_local_class_without_token_serves_without_a_header(
    platform: LocalPlatform, alice: Orders, classes: Any, orders: Any
) -> None:
    classes("llm-internal")
    name = "pp-internal"
    spec = {"inferenceServiceClassName": "llm-internal", "model": hf(QWEN_SMALL)}
    _create(orders, alice, "support", name, spec)
    obj = alice.wait_phase("support", name, "Ready")
    status = obj["status"]
    assert conditions(obj) == ready_chain()
    assert status["model"] == {"endpointType": "Chat"}
    assert status["endpoint"]["type"] == "ClusterLocal"
    assert status["endpoint"]["url"] == f"http://{name}.support.svc.cluster.local"
    assert "authSecretName" not in status
    # No scalingPolicy, no acceleratorPolicy: one replica on one whole dedicated device.
    assert status["constraints"] == {"minReplicas": 1, "maxReplicas": 1}
    assert status["resolved"]["placementMode"] == "WholeDevice"
    assert status["resolved"]["sharingMode"] == "Dedicated"

    assert f"{name}-auth" not in _secrets(platform, "support")
    _, runtime = _runtime(platform, "support", name)
    assert "VLLM_API_KEY" not in {e.name for e in runtime.env or []}
    url = _stub_url(platform, "support", obj["metadata"]["uid"])
    answer = httpx.get(f"{url}/v1/models", timeout=5)
    assert answer.status_code == 200 and answer.json()["data"][0]["id"] == QWEN_SMALL


# --- 3. a gated HuggingFace model and the user's token Secret -----------------------------


def test_gated_model_takes_hf_token_from_the_named_secret_and_key(
    platform: LocalPlatform, alice: Orders, orders: Any
) -> None:
    core = client.CoreV1Api(platform.api("alice"))
    default_key, other_key = "pp-gated-default-key", "pp-gated-other-key"
    # The Secret does not exist yet, then it lacks the key: the user's to fix, then Ready.
    _create(
        orders,
        alice,
        "support",
        default_key,
        {"inferenceServiceClassName": "default-llm", "model": hf(LLAMA_GATED, name="pp-hf")},
    )
    _create(
        orders,
        alice,
        "support",
        other_key,
        {
            "inferenceServiceClassName": "default-llm",
            "model": hf(LLAMA_GATED, name="pp-hf", key="hf"),
        },
    )
    missing = alice.wait_phase("support", default_key, "Pending", reason="AuthSecretNotFound")
    assert conditions(missing) == blocked_chain("ModelResolved", "AuthSecretNotFound")
    assert "resolved" not in missing["status"] and "url" not in missing["status"]["endpoint"]

    with _user_secret(core, "pp-hf", {"token": ALICE_HF_TOKEN}):
        no_key = alice.wait_phase("support", other_key, "Pending", reason="AuthSecretKeyMissing")
        assert conditions(no_key) == blocked_chain("ModelResolved", "AuthSecretKeyMissing")
        assert "'hf'" in no_key["status"]["conditions"][1]["message"]
        core.patch_namespaced_secret(
            "pp-hf", "support", {"data": {"hf": base64.b64encode(ALICE_HF_TOKEN.encode()).decode()}}
        )
        for name, key in ((default_key, "token"), (other_key, "hf")):
            obj = alice.wait_phase("support", name, "Ready")
            assert conditions(obj) == ready_chain()
            assert obj["status"]["model"] == {"endpointType": "Chat"}
            _, runtime = _runtime(platform, "support", name)
            env = {e.name: e for e in runtime.env}
            ref = env["HF_TOKEN"].value_from.secret_key_ref
            assert (ref.name, ref.key) == ("pp-hf", key)
            assert env["HF_TOKEN"].value is None  # by reference: the token never enters the spec
        # Deleting the orders removes what they own; the user's HF Secret is the user's.
        before = core.read_namespaced_secret("pp-hf", "support")
        for name in (default_key, other_key):
            delete_and_wait(platform, alice, "support", name)
        after = core.read_namespaced_secret("pp-hf", "support")
        assert after.data == before.data and not after.metadata.owner_references
        assert after.metadata.resource_version == before.metadata.resource_version


@pytest.mark.parametrize(
    ("suffix", "token"),
    [
        pytest.param("bob", BOB_HF_TOKEN, id="token-without-grant"),
        pytest.param("bad", "hf_not_a_token_at_all_000000000000", id="invalid-token"),
        pytest.param("none", None, id="no-secret-named"),
    ],
)
def test_gated_model_without_a_granted_token_is_access_denied(
    platform: LocalPlatform, alice: Orders, orders: Any, suffix: str, token: str | None
) -> None:
    core = client.CoreV1Api(platform.api("alice"))
    name = f"pp-gated-denied-{suffix}"
    with _user_secret(core, f"{name}-hf", {"token": token or "unused"}):
        auth = {"name": f"{name}-hf"} if token else {}
        spec = {"inferenceServiceClassName": "default-llm", "model": hf(LLAMA_GATED, **auth)}
        _create(orders, alice, "support", name, spec)
        obj = alice.wait_phase("support", name, "Pending", reason="ModelAccessDenied", timeout=30)
        assert conditions(obj) == blocked_chain("ModelResolved", "ModelAccessDenied")
        assert LLAMA_GATED in obj["status"]["conditions"][1]["message"]
        if token:  # a Secret's value reaches neither the status nor the event log
            assert token not in str(obj)
            assert token not in str([r.event for r in platform.log.read(obj["metadata"]["uid"])])


# --- 4. the ai-models catalog, and the catalog turned off ---------------------------------


@pytest.mark.parametrize(
    ("namespace", "class_name", "ref", "annotation", "endpoint_type"),
    [
        pytest.param(
            "support",
            "default-llm",
            {"kind": "ClusterModel", "name": "qwen2-5-8b-instruct-awq"},
            "ai.deckhouse.io/clustermodel",
            "Chat",
            id="cluster-model",
        ),
        pytest.param(
            "analytics",
            "embeddings-only",
            {"kind": "Model", "name": "bge-m3"},
            "ai.deckhouse.io/model",
            "Embeddings",
            id="namespaced-model",
        ),
    ],
)
def test_catalog_order_is_ready_with_the_catalog_annotation(
    platform: LocalPlatform,
    alice: Orders,
    admin_orders: Orders,
    classes: Any,
    orders: Any,
    namespace: str,
    class_name: str,
    ref: dict[str, str],
    annotation: str,
    endpoint_type: str,
) -> None:
    if class_name != "default-llm":
        classes(class_name)
    # alice may order only in support; analytics is the admin's here.
    who = alice if namespace == "support" else admin_orders
    name = f"pp-catalog-{ref['kind'].lower()}"
    spec = {"inferenceServiceClassName": class_name, "model": {"src": "ai-models", "ref": ref}}
    _create(orders, who, namespace, name, spec)
    obj = who.wait_phase(namespace, name, "Ready")
    assert conditions(obj) == ready_chain()
    assert obj["status"]["model"] == {"endpointType": endpoint_type}
    deployment, runtime = _runtime(platform, namespace, name)
    assert deployment.spec.template.metadata.annotations[annotation] == ref["name"]
    # The catalog hands the model over by annotation: nothing is fetched from a hub.
    assert not {"HF_TOKEN", "HF_ENDPOINT"} & {e.name for e in runtime.env or []}


def test_a_model_in_another_tenants_namespace_is_refused_and_never_echoed(
    alice: Orders, orders: Any
) -> None:
    # bge-m3 exists as a Model in analytics; alice orders it from support.
    spec = {
        "inferenceServiceClassName": "default-llm",
        "model": {
            "src": "ai-models",
            "ref": {"kind": "Model", "name": "bge-m3", "namespace": "analytics"},
        },
    }
    _create(orders, alice, "support", "pp-foreign-model", spec)
    obj = alice.wait_phase(
        "support", "pp-foreign-model", "Pending", reason="ModelNamespaceForbidden"
    )
    assert conditions(obj) == blocked_chain("ModelResolved", "ModelNamespaceForbidden")
    assert "ClusterModel" in obj["status"]["conditions"][1]["message"]
    # Nothing of analytics' Model reaches alice: no contract, no facts, no plan.
    assert "model" not in obj["status"] and "resolved" not in obj["status"]
    assert "Embeddings" not in str(obj["status"])


def test_catalog_turned_off_refuses_catalog_orders_until_it_is_back(
    platform: LocalPlatform, alice: Orders, admin: client.ApiClient, orders: Any
) -> None:
    spec = {
        "inferenceServiceClassName": "default-llm",
        "model": {
            "src": "ai-models",
            "ref": {"kind": "ClusterModel", "name": "qwen2-5-8b-instruct-awq"},
        },
    }
    served, late = "pp-catalog-served", "pp-catalog-late"
    _create(orders, alice, "support", served, spec)
    before = alice.wait_phase("support", served, "Ready")["status"]
    with module_config(admin, "ai-inference", {"catalog": {"mode": "None"}}):
        wait_for(
            lambda: not platform.controller.settings().catalog_enabled,
            timeout=10,
            what="the controller to read catalog.mode None",
        )
        _create(orders, alice, "support", late, spec)
        for name in (served, late):
            obj = alice.wait_phase("support", name, "Pending", reason="CatalogDisabled", timeout=30)
            assert conditions(obj) == blocked_chain("ModelResolved", "CatalogDisabled")
            assert "catalog.mode" in obj["status"]["conditions"][1]["message"]
            assert "model" not in obj["status"]  # no contract while the model is unresolved
        assert "resolved" not in obj["status"] and "url" not in obj["status"]["endpoint"]
    # The ModuleConfig is gone: defaults again, and both orders resolve as they are.
    for name in (late, served):
        obj = alice.wait_phase("support", name, "Ready")
        assert conditions(obj) == ready_chain()
    assert obj["status"]["resolved"] == before["resolved"]  # the plan it held, not a replan
    assert obj["status"]["resolved"]["replanCount"] == 0


# --- 5. the class refuses -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "class_name", "model", "at", "reason"),
    [
        pytest.param(
            "analytics",
            "embeddings-only",
            hf(QWEN_SMALL),
            "ModelResolved",
            "EndpointTypePolicyConflict",
            id="chat-model-embeddings-class",
        ),
        pytest.param(
            "support",
            "llm-strict",
            hf(QWEN_7B),
            "ModelResolved",
            "ParameterCountNotAllowed",
            id="7b-model-1b-class",
        ),
        pytest.param(
            "analytics",
            "llm-internal",
            hf(QWEN_SMALL),
            "ClassResolved",
            "NamespaceNotAdmitted",
            id="namespace-not-admitted",
        ),
        pytest.param(
            "support",
            "no-such-class",
            hf(QWEN_SMALL),
            "ClassResolved",
            "ClassNotFound",
            id="class-not-found",
        ),
    ],
)
def test_class_policy_refuses_with_the_reason_the_guide_names(
    alice: Orders,
    admin_orders: Orders,
    classes: Any,
    orders: Any,
    namespace: str,
    class_name: str,
    model: dict[str, Any],
    at: str,
    reason: str,
) -> None:
    if class_name != "no-such-class":
        classes(class_name)
    who = alice if namespace == "support" else admin_orders
    name = f"pp-refused-{reason.lower()}"
    _create(orders, who, namespace, name, {"inferenceServiceClassName": class_name, "model": model})
    obj = who.wait_phase(namespace, name, "Pending", reason=reason, timeout=30)
    status = obj["status"]
    assert conditions(obj) == blocked_chain(at, reason)
    assert class_name in status["conditions"][0]["message"]
    assert "resolved" not in status and "model" not in status
    if at == "ClassResolved":  # no policy: nothing of the class is shown
        assert "endpoint" not in status and "constraints" not in status
        assert "authSecretName" not in status
    else:  # the class is known: its exposure, bounds and token (iff it requires one) are
        assert "url" not in status["endpoint"] and "constraints" in status
        token = class_name in TOKEN_CLASSES
        assert status.get("authSecretName") == (f"{name}-auth" if token else None)
    assert status["observedGeneration"] == 1


# --- 6. the namespace user's rights -------------------------------------------------------


def test_namespace_user_orders_and_reads_but_never_sees_classes(
    platform: LocalPlatform, alice: Orders, orders: Any
) -> None:
    api = platform.api("alice")
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    name = "pp-rbac"
    _create(
        orders,
        alice,
        "support",
        name,
        {"inferenceServiceClassName": "default-llm", "model": hf(QWEN_SMALL)},
    )
    obj = alice.wait_phase("support", name, "Ready")
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, "support", "inferenceservices")
    assert name in [o["metadata"]["name"] for o in listed["items"]]
    through_status = custom.get_namespaced_custom_object_status(
        GROUP, VERSION, "support", "inferenceservices", name
    )
    assert through_status["status"]["phase"] == "Ready"
    secret = core.read_namespaced_secret(obj["status"]["authSecretName"], "support")
    assert base64.b64decode(secret.data["token"])

    forbidden: list[Callable[[], Any]] = [
        lambda: custom.list_cluster_custom_object(GROUP, VERSION, CLASSES),
        lambda: custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, "default-llm"),
        lambda: custom.list_cluster_custom_object(GROUP, VERSION, "launchrecipes"),
        lambda: alice.create("analytics", name, {"model": hf(QWEN_SMALL)}),
        lambda: custom.list_namespaced_custom_object(
            GROUP, VERSION, "analytics", "inferenceservices"
        ),
        lambda: custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, "support", "inferenceservices", name, {"status": {"phase": "Ready"}}
        ),
    ]
    for call in forbidden:
        with pytest.raises(ApiException) as refused:
            call()
        assert refused.value.status == 403


RECIPES = "launchrecipes"


def _told_on_recipe(admin: client.ApiClient, name: str) -> list[tuple[str, str, str, int]]:
    """(reason, type, message, count) of the Events about LaunchRecipe `name`."""
    return [
        (e.reason, e.type, e.message, e.count)
        for e in client.CoreV1Api(admin).list_namespaced_event("default").items
        if (e.involved_object.kind, e.involved_object.name) == ("LaunchRecipe", name)
    ]


def _recipe_refused_gauge(name: str) -> float | None:
    return metrics.REGISTRY.get_sample_value("ai_inference_recipe_refused", {"launch_recipe": name})


def test_a_recipe_the_controller_refuses_says_so_on_itself(
    platform: LocalPlatform, admin: client.ApiClient
) -> None:
    """vLLM tool calling without a parser is a CEL rule, which this server (1.20) does not
    check: the recipe is admitted and the controller refuses it. The administrator learns
    it on the recipe — one Warning naming the field, not one per edit that keeps the
    fault, a Normal once an edit makes it usable — and from a gauge that goes with it."""
    custom = client.CustomObjectsApi(admin)
    name = "e2e-refused-recipe"
    recipe = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LaunchRecipe",
        "metadata": {"name": name},
        "spec": {
            "runtime": "vLLM",
            "image": "registry.example/vllm:e2e",
            "placementModes": ["WholeDevice"],
            "productNames": ["no device of the simulator's"],  # never planned on here
            "formats": ["Safetensors"],
            "quantizations": ["None"],
            "endpointTypes": ["Chat"],
            "toolCalling": {"enabled": True},
            "args": ["--model={modelPath}"],
        },
    }
    custom.create_cluster_custom_object(GROUP, VERSION, RECIPES, recipe)
    try:
        refused = wait_for(
            lambda: [e for e in _told_on_recipe(admin, name) if e[0] == "RecipeRefused"] or None,
            what="the RecipeRefused Event",
        )
        ((_, kind, message, count),) = refused
        assert kind == "Warning" and count == 1
        assert "toolCalling" in message and "needs toolCalling.parser" in message, message
        assert _recipe_refused_gauge(name) == 1
        assert platform.controller.reconciler.planning.recipe(name) is None

        # The same fault under another edit: not told again.
        custom.patch_cluster_custom_object(
            GROUP, VERSION, RECIPES, name, {"spec": {"preference": -7}}
        )
        cache = platform.controller.cache.recipes
        wait_for(
            lambda: (
                (cache.get_by_name(None, name) or {}).get("spec", {}).get("preference") == -7
                or None
            ),
            what="the second edit in the cache",
        )
        custom.patch_cluster_custom_object(
            GROUP, VERSION, RECIPES, name, {"spec": {"toolCalling": {"parser": "hermes"}}}
        )
        wait_for(
            lambda: [e for e in _told_on_recipe(admin, name) if e[0] == "RecipeAccepted"] or None,
            what="the RecipeAccepted Event",
        )
        told = _told_on_recipe(admin, name)
        assert [(e[0], e[1], e[3]) for e in told] == [
            ("RecipeRefused", "Warning", 1),
            ("RecipeAccepted", "Normal", 1),
        ], told
        assert _recipe_refused_gauge(name) == 0
        assert platform.controller.reconciler.planning.recipe(name) is not None
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, RECIPES, name)
    wait_for(
        lambda: _recipe_refused_gauge(name) is None or None,
        what="the gauge of the deleted recipe gone",
    )
