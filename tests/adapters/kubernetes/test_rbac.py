"""Who may do what, as the real API server's RBAC decides from deploy/rbac/.

alice is a namespace user bound in `support` to the editor role: she manages orders and
Secrets there and nothing elsewhere, and never reads classes (cluster-scoped: a
RoleBinding cannot grant them). The controller's ServiceAccount gets exactly what it
watches and writes. The user and cluster-editor levels are checked with
SubjectAccessReviews for users bound by the test itself.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.cluster

GROUP, VERSION = "ai.deckhouse.io", "v1alpha1"
AI, DRA = "ai.deckhouse.io", "resource.k8s.io"
HF = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-7B-Instruct"}}


def _order(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"model": HF},
    }


# --- alice, as herself ---------------------------------------------------------------


@pytest.fixture(scope="module")
def alice(cluster: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(cluster.api_client("alice"))


def test_alice_manages_orders_in_her_namespace(alice: client.CustomObjectsApi) -> None:
    name = f"alice-{uuid.uuid4().hex[:6]}"
    alice.create_namespaced_custom_object(
        GROUP, VERSION, "support", "inferenceservices", _order(name)
    )
    try:
        listed = alice.list_namespaced_custom_object(GROUP, VERSION, "support", "inferenceservices")
        assert name in {o["metadata"]["name"] for o in listed["items"]}
        alice.patch_namespaced_custom_object(
            GROUP, VERSION, "support", "inferenceservices", name,
            {"spec": {"inferenceServiceClassName": "default-llm"}},
        )  # fmt: skip
    finally:
        alice.delete_namespaced_custom_object(GROUP, VERSION, "support", "inferenceservices", name)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(
            lambda api: api.list_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses"),
            id="list-classes",
        ),
        pytest.param(
            lambda api: api.get_cluster_custom_object(
                GROUP, VERSION, "inferenceserviceclasses", "default-llm"
            ),
            id="get-class",
        ),
        pytest.param(
            lambda api: api.list_cluster_custom_object(GROUP, VERSION, "launchrecipes"),
            id="list-recipes",
        ),
        pytest.param(
            lambda api: api.list_namespaced_custom_object(
                GROUP, VERSION, "analytics", "inferenceservices"
            ),
            id="list-orders-elsewhere",
        ),
        pytest.param(
            lambda api: api.create_namespaced_custom_object(
                GROUP, VERSION, "analytics", "inferenceservices", _order("elsewhere")
            ),
            id="create-order-elsewhere",
        ),
        pytest.param(
            lambda api: api.list_cluster_custom_object(GROUP, VERSION, "inferenceservices"),
            id="list-orders-cluster-wide",
        ),
        pytest.param(
            lambda api: api.patch_namespaced_custom_object_status(
                GROUP, VERSION, "support", "inferenceservices", "any", {"status": {}}
            ),
            id="write-order-status",
        ),
    ],
)
def test_alice_is_forbidden(alice: client.CustomObjectsApi, call: Any) -> None:
    with pytest.raises(ApiException) as denied:
        call(alice)
    assert denied.value.status == 403


def test_alice_reads_and_writes_secrets_in_her_namespace(cluster: Any) -> None:
    admin = client.CoreV1Api(cluster.api_client("admin"))
    core = client.CoreV1Api(cluster.api_client("alice"))
    token = f"order-{uuid.uuid4().hex[:6]}-auth"
    admin.create_namespaced_secret(
        "support", {"metadata": {"name": token}, "stringData": {"token": "t"}}
    )
    hf = f"hf-{uuid.uuid4().hex[:6]}"
    try:
        assert core.read_namespaced_secret(token, "support").data["token"]
        core.create_namespaced_secret(
            "support", {"metadata": {"name": hf}, "stringData": {"token": "x"}}
        )
        with pytest.raises(ApiException) as denied:
            core.list_namespaced_secret("analytics")
        assert denied.value.status == 403
    finally:
        admin.delete_namespaced_secret(token, "support")
        admin.delete_namespaced_secret(hf, "support")


# --- the controller, by SelfSubjectAccessReview --------------------------------------

# (verb, group, resource, namespace or None for cluster-wide)
CONTROLLER_MAY = [
    ("watch", AI, "inferenceservices", None),
    ("patch", AI, "inferenceservices/status", "support"),
    ("update", AI, "inferenceservices/finalizers", "support"),
    ("list", AI, "inferenceserviceclasses", None),
    ("patch", AI, "inferenceserviceclasses/status", None),
    ("watch", AI, "launchrecipes", None),
    ("get", AI, "models", "support"),
    ("watch", AI, "clustermodels", None),
    ("watch", "deckhouse.io", "moduleconfigs", None),
    ("list", DRA, "deviceclasses", None),
    ("watch", DRA, "resourceslices", None),
    ("watch", DRA, "resourceclaims", None),
    ("create", DRA, "resourceclaimtemplates", "support"),
    ("delete", DRA, "resourceclaimtemplates", "support"),
    ("list", "scheduling.k8s.io", "priorityclasses", None),
    ("watch", "", "pods", None),
    ("create", "", "secrets", "support"),
    ("get", "", "secrets", "analytics"),
    # Pruning: the order's own token Secret when its class stops requiring a token.
    ("delete", "", "secrets", "support"),
    ("patch", "", "services", "support"),
    ("patch", "apps", "deployments", "support"),
    ("delete", "networking.k8s.io", "ingresses", "support"),
    ("patch", "autoscaling", "horizontalpodautoscalers", "support"),
    ("create", "", "events", "support"),
    ("update", "coordination.k8s.io", "leases", "d8-ai-inference"),
]  # fmt: skip
CONTROLLER_MAY_NOT = [
    ("create", "cert-manager.io", "certificates", "support"),
    ("create", AI, "inferenceservices", "support"),
    ("update", AI, "inferenceservices", "support"),
    ("delete", AI, "inferenceservices", "support"),
    ("patch", AI, "inferenceserviceclasses", None),
    ("create", AI, "launchrecipes", None),
    ("patch", AI, "models", "support"),
    ("patch", "deckhouse.io", "moduleconfigs", None),
    ("patch", DRA, "resourceclaims", "support"),
    ("patch", DRA, "resourceslices", None),
    ("update", "", "secrets", "support"),
    ("patch", "", "secrets", "support"),
    ("delete", "", "pods", "support"),
    ("create", "", "pods", "support"),
    ("list", "", "nodes", None),
    ("create", "scheduling.k8s.io", "priorityclasses", None),
    ("update", "coordination.k8s.io", "leases", "support"),
    ("delete", "coordination.k8s.io", "leases", "d8-ai-inference"),
    ("patch", "coordination.k8s.io", "leases", "d8-ai-inference"),
    ("watch", "coordination.k8s.io", "leases", "d8-ai-inference"),
    ("create", "rbac.authorization.k8s.io", "rolebindings", "support"),
    # Every write but the Lease's is an apply, a patch, a create or a delete: no PUT.
    ("update", AI, "inferenceservices/status", "support"),
    ("update", AI, "inferenceserviceclasses/status", None),
    ("update", "apps", "deployments", "support"),
    ("update", "", "services", "support"),
    ("update", "networking.k8s.io", "ingresses", "support"),
    ("update", "autoscaling", "horizontalpodautoscalers", "support"),
    ("update", DRA, "resourceclaimtemplates", "support"),
]  # fmt: skip


def _label(row: tuple[str, str, str, str | None]) -> str:
    verb, group, resource, namespace = row
    return f"{verb}-{group or 'core'}-{resource}-{namespace or 'cluster'}".replace("/", "-")


def _attributes(row: tuple[str, str, str, str | None]) -> dict[str, Any]:
    verb, group, resource, namespace = row
    name, _, sub = resource.partition("/")
    attributes: dict[str, Any] = {"verb": verb, "group": group, "resource": name}
    if sub:
        attributes["subresource"] = sub
    if namespace:
        attributes["namespace"] = namespace
    return attributes


def _controller_can(cluster: Any, row: tuple[str, str, str, str | None]) -> bool:
    api = client.AuthorizationV1Api(cluster.api_client("controller"))
    review = api.create_self_subject_access_review(
        {"spec": {"resourceAttributes": _attributes(row)}}
    )
    return bool(review.status.allowed)


@pytest.mark.parametrize("row", CONTROLLER_MAY, ids=[_label(r) for r in CONTROLLER_MAY])
def test_controller_may(cluster: Any, row: tuple[str, str, str, str | None]) -> None:
    assert _controller_can(cluster, row)


@pytest.mark.parametrize("row", CONTROLLER_MAY_NOT, ids=[_label(r) for r in CONTROLLER_MAY_NOT])
def test_controller_may_not(cluster: Any, row: tuple[str, str, str, str | None]) -> None:
    assert not _controller_can(cluster, row)


# --- the user and cluster-editor levels, for users bound here ------------------------


@pytest.fixture(scope="module")
def bound(cluster: Any) -> Iterator[dict[str, str]]:
    """bob: user level in analytics (RoleBinding); carol: cluster-editor (ClusterRoleBinding)."""
    rbac = client.RbacAuthorizationV1Api(cluster.api_client("admin"))
    suffix = uuid.uuid4().hex[:6]
    users = {"bob": f"bob-{suffix}", "carol": f"carol-{suffix}"}

    def binding(user: str, role: str) -> dict[str, Any]:
        return {
            "metadata": {"name": f"{user}-ai-inference"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }

    rbac.create_namespaced_role_binding(
        "analytics", binding(users["bob"], "d8:user-authz:ai-inference:user")
    )
    rbac.create_cluster_role_binding(
        binding(users["carol"], "d8:user-authz:ai-inference:cluster-editor")
    )
    # The authorizer reads bindings from its informer cache: wait until both are in force,
    # so that a "no" below is RBAC's answer, not a binding not seen yet.
    probes = [
        (users["bob"], ("get", AI, "inferenceservices", "analytics")),
        (users["carol"], ("get", AI, "inferenceserviceclasses", None)),
    ]
    deadline = time.monotonic() + 30
    while not all(_allowed(cluster, user, row) for user, row in probes):
        assert time.monotonic() < deadline, "RoleBindings not in force after 30 s"
        time.sleep(0.2)
    yield users
    rbac.delete_namespaced_role_binding(f"{users['bob']}-ai-inference", "analytics")
    rbac.delete_cluster_role_binding(f"{users['carol']}-ai-inference")


def _allowed(cluster: Any, user: str, row: tuple[str, str, str, str | None]) -> bool:
    api = client.AuthorizationV1Api(cluster.api_client("admin"))
    review = api.create_subject_access_review(
        {"spec": {"user": user, "resourceAttributes": _attributes(row)}}
    )
    return bool(review.status.allowed)


LEVELS = [
    ("bob", ("list", AI, "inferenceservices", "analytics"), True),
    ("bob", ("get", AI, "inferenceservices/status", "analytics"), True),
    ("bob", ("create", AI, "inferenceservices", "analytics"), False),
    ("bob", ("get", "", "secrets", "analytics"), False),
    ("bob", ("list", AI, "inferenceservices", "support"), False),
    ("bob", ("list", "", "events", "analytics"), True),  # the Events tell the order's why
    ("bob", ("get", "events.k8s.io", "events", "analytics"), True),
    ("bob", ("create", "", "events", "analytics"), False),
    ("bob", ("list", "", "events", "support"), False),
    ("carol", ("create", AI, "inferenceserviceclasses", None), True),
    ("carol", ("delete", AI, "launchrecipes", None), True),
    ("carol", ("get", AI, "inferenceserviceclasses/status", None), True),
    ("carol", ("patch", AI, "inferenceserviceclasses/status", None), False),
    ("carol", ("get", "", "secrets", "support"), False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("who", "row", "allowed"),
    LEVELS,
    ids=[f"{who}-{_label(row)}" for who, row, _ in LEVELS],
)
def test_access_levels(
    cluster: Any,
    bound: dict[str, str],
    who: str,
    row: tuple[str, str, str, str | None],
    allowed: bool,
) -> None:
    assert _allowed(cluster, bound[who], row) is allowed
