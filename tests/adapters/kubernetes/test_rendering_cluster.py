"""The rendered workload against the real API server: accepted, kept, owned, collected.

Each object is server-side applied (the way the controller writes) in a namespace of this
module's own, owned by a real InferenceService, read back, and compared with what was
rendered; deleting the order must let the garbage collector delete them all.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from workload_samples import DOMAIN, FACTS, HF_REF, PLAN, RECIPE, policy

from adapters.kubernetes import converging, oldservers, rendering
from adapters.kubernetes.manifests import FIELD_MANAGER, Applier
from adapters.kubernetes.rendering import OrderRef, render_workload
from adapters.kubernetes.settings import Settings
from adapters.simulator import podclaims
from fsm.placement.recipes import EnvVar, Recipe
from fsm.values import (
    Authentication,
    ExposureType,
    HttpsMode,
    HttpsPolicy,
    PlacementMode,
    SharingMode,
)

pytestmark = pytest.mark.cluster

GROUP, VERSION, PLURAL = "ai.deckhouse.io", "v1alpha1", "inferenceservices"


@pytest.fixture(scope="module")
def api(cluster: Any) -> client.ApiClient:
    return cluster.api_client("admin")


@pytest.fixture(scope="module")
def namespace(api: client.ApiClient) -> Iterator[str]:
    name = f"workload-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def make_order(api: client.ApiClient, namespace: str, name: str) -> OrderRef:
    obj = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": name},
            "spec": {"model": {"src": "HuggingFace", "ref": {"name": HF_REF.name}}},
        },
    )
    meta = obj["metadata"]
    return OrderRef(meta["name"], namespace, meta["uid"], meta["generation"])


def knows_pod_claims(api: client.ApiClient) -> bool:
    """Whether pods take `spec.resourceClaims` (GA with DRA v1 in 1.34)."""
    version = client.VersionApi(api).get_code()
    return (int(version.major), int(version.minor.rstrip("+"))) >= (1, 34)


def served_versions(api: client.ApiClient) -> set[str]:
    groups = client.ApisApi(api).get_api_versions().groups
    return {v.group_version for g in groups for v in g.versions}


def read_back(dynamic: DynamicClient, manifest: dict[str, Any]) -> dict[str, Any]:
    resource = dynamic.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
    meta = manifest["metadata"]
    return dict(resource.get(name=meta["name"], namespace=meta["namespace"]).to_dict())


def our_fields(obj: dict[str, Any]) -> list[dict[str, Any]]:
    entries = obj["metadata"].get("managedFields") or []
    ours = [e for e in entries if e["manager"] == FIELD_MANAGER and e["operation"] == "Apply"]
    assert ours, "applied, yet no managedFields entry of our field manager"
    return ours


def is_subset(wanted: Any, got: Any) -> bool:
    """Everything rendered is in what the server kept (it may add defaults)."""
    if isinstance(wanted, dict):
        return isinstance(got, dict) and all(
            k in got and is_subset(v, got[k]) for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(got, list)
            and len(wanted) == len(got)
            and all(is_subset(w, g) for w, g in zip(wanted, got, strict=True))
        )
    return bool(wanted == got or str(wanted) == str(got))


SHARED_PLAN = PLAN.model_copy(
    update={"sharing_mode": SharingMode.SHARED, "share_percent": 50, "cpu": "2"}
)
PARTITION_PLAN = PLAN.model_copy(
    update={"device_class": "mig.nvidia.com", "placement_mode": PlacementMode.PARTITION}
)
CASES = {
    "external-token-autoscaled-shared": (
        policy(max_replicas=3),
        SHARED_PLAN,
        Settings(publicDomainTemplate=DOMAIN),
    ),
    "cluster-local-no-token-partition": (
        policy(ExposureType.CLUSTER_LOCAL, Authentication.NONE),
        PARTITION_PLAN,
        Settings(publicDomainTemplate=DOMAIN),
    ),
    "external-custom-certificate": (
        policy(https=HttpsPolicy(mode=HttpsMode.CUSTOM_CERTIFICATE)),
        PLAN,
        Settings(
            https={"mode": "CustomCertificate", "customCertificate": {"secretName": "w"}},
            publicDomainTemplate=DOMAIN,
        ),
    ),
}


def _rendered(
    api: client.ApiClient, namespace: str, case: str, name: str, recipe: Recipe
) -> tuple[OrderRef, list[dict[str, Any]]]:
    """An order named `name` made on the server, and its workload for `case` on `recipe`,
    as the server it goes to takes it."""
    pol, plan, settings = CASES[case]
    order = make_order(api, namespace, name)
    manifests = render_workload(
        order,
        plan,
        recipe,
        pol,
        HF_REF,
        settings=settings,
        facts=FACTS,
        hpa_api_version=rendering.hpa_api_version_for(served_versions(api)),
    )
    if not knows_pod_claims(api):
        manifests = [podclaims.for_old_server(m) for m in manifests]
    return order, manifests


@pytest.mark.parametrize("case", list(CASES))
def test_every_rendered_object_is_accepted_and_kept(
    api: client.ApiClient, namespace: str, case: str
) -> None:
    order, manifests = _rendered(api, namespace, case, case, RECIPE)
    applier, dynamic = Applier(api), DynamicClient(api)
    for manifest in manifests:
        applier.apply(manifest)
        kept = read_back(dynamic, manifest)
        assert kept["metadata"]["ownerReferences"] == manifest["metadata"]["ownerReferences"]
        assert kept["metadata"]["labels"] == manifest["metadata"]["labels"]
        assert is_subset(manifest["spec"], kept["spec"]), f"{manifest['kind']} changed"
        if manifest["kind"] == "Deployment":
            claims = podclaims.pod_claims(kept["spec"]["template"])
            assert claims == (podclaims.PodClaim("gpu", template=order.name),)
    # Applying the same manifests again changes nothing of ours. (The resourceVersion is
    # no witness: controllers keep writing status.) Our managedFields entry moves only
    # when our apply changed a field.
    before = {m["kind"]: our_fields(read_back(dynamic, m)) for m in manifests}
    for manifest in manifests:
        applier.apply(manifest)
    after = {m["kind"]: our_fields(read_back(dynamic, m)) for m in manifests}
    assert before == after


@pytest.mark.parametrize("case", list(CASES))
def test_what_the_server_keeps_is_no_drift(
    api: client.ApiClient, namespace: str, case: str
) -> None:
    """The controller's own comparison (converging.drifted) of each rendered object with
    what the server stored: nothing drifted, or every pass would apply it again. The
    server drops what it stores as absent (`omitempty`): a recipe's env entry with an
    empty value was rendered as `value: ""`, never found live, and its Deployment was
    applied on every pass of every order on the recipe."""
    flagged = RECIPE.model_copy(update={"env": (*RECIPE.env, EnvVar(name="VLLM_EMPTY_FLAG"))})
    _, manifests = _rendered(api, namespace, case, f"kept-{case}", flagged)
    applier, dynamic = Applier(api), DynamicClient(api)
    for manifest in manifests:
        applier.apply(manifest)
    live = {converging.key_of(m): read_back(dynamic, m) for m in manifests}
    assert [converging.key_of(m) for m in converging.drifted(manifests, live)] == []


def test_the_controller_writes_the_hpa_api_the_server_serves(api: client.ApiClient) -> None:
    """Asked at start-up (the controller's default): the 1.20 server here serves no
    autoscaling/v2, and an HPA written as v2 would fail every autoscaled order's apply
    after its Deployment was applied without replicas."""
    served = served_versions(api)
    chosen = oldservers.hpa_api_version(api)
    assert chosen in served and chosen == rendering.hpa_api_version_for(served)
    assert chosen == ("autoscaling/v2" if "autoscaling/v2" in served else "autoscaling/v2beta2")


def test_deleting_the_order_collects_its_workload(api: client.ApiClient, namespace: str) -> None:
    order = make_order(api, namespace, "collected")
    manifests = render_workload(
        order,
        PLAN,
        RECIPE,
        policy(),
        HF_REF,
        settings=Settings(publicDomainTemplate=DOMAIN),
        facts=FACTS,
        hpa_api_version=rendering.hpa_api_version_for(served_versions(api)),
    )
    if not knows_pod_claims(api):
        manifests = [podclaims.for_old_server(m) for m in manifests]
    applier, dynamic = Applier(api), DynamicClient(api)
    for manifest in manifests:
        applier.apply(manifest)
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, order.name
    )
    remaining = list(manifests)
    deadline = time.monotonic() + 60
    while remaining and time.monotonic() < deadline:
        time.sleep(0.5)
        still = []
        for manifest in remaining:
            try:
                read_back(dynamic, manifest)
                still.append(manifest)
            except ApiException as err:
                assert err.status == 404
        remaining = still
    assert not remaining, f"not collected: {[m['kind'] for m in remaining]}"
