"""The controller's view of Secrets: its own token Secrets and those orders name, nothing else.

Against the session cluster, with the controller's own identity (its RBAC from deploy/):
a tenant's unrelated Secret never enters any cache, a named one is read by name, and a
named Secret created after the order that names it reaches that order as a change.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters.kubernetes import kinds
from adapters.kubernetes.rendering import UID_LABEL
from adapters.kubernetes.world import ClusterCache
from tests.support.polling import eventually

pytestmark = pytest.mark.cluster

NS = "support"
GROUP, VERSION = "ai.deckhouse.io", "v1alpha1"


@pytest.fixture
def names() -> dict[str, str]:
    tag = uuid.uuid4().hex[:6]
    return {k: f"{k}-{tag}" for k in ("unrelated", "hf", "late", "token", "order")}


@pytest.fixture
def core(cluster: Any, names: dict[str, str]) -> Iterator[client.CoreV1Api]:
    api = client.CoreV1Api(cluster.api_client("admin"))
    yield api
    for key in ("unrelated", "hf", "late", "token"):
        try:
            api.delete_namespaced_secret(names[key], NS)
        except ApiException as exc:
            assert exc.status == 404
    try:
        client.CustomObjectsApi(cluster.api_client("admin")).delete_namespaced_custom_object(
            GROUP, VERSION, NS, "inferenceservices", names["order"]
        )
    except ApiException as exc:
        assert exc.status == 404


def _secret(name: str, value: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "data": {"token": base64.b64encode(value.encode()).decode()},
    }


@pytest.fixture
def cache(cluster: Any) -> Iterator[ClusterCache]:
    world = ClusterCache(
        cluster.api_client("controller"), hpa_api_version="autoscaling/v2beta2", secret_refresh=0.3
    )
    changed: list[str] = []
    world.watch_changes(changed.extend)
    world.changed = changed  # type: ignore[attr-defined]
    world.start()
    assert world.wait_synced(30), world.unsynced()
    yield world
    world.stop()


def _order(cluster: Any, name: str) -> dict[str, Any]:
    return dict(
        client.CustomObjectsApi(cluster.api_client("admin")).create_namespaced_custom_object(
            GROUP, VERSION, NS, "inferenceservices",
            {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
                "metadata": {"name": name},
                "spec": {"model": {"src": "HuggingFace", "ref": {"name": "org/m"}}},
            },
        )
    )  # fmt: skip


def test_secrets_no_order_names_never_enter_the_cache(
    cluster: Any, cache: ClusterCache, core: client.CoreV1Api, names: dict[str, str]
) -> None:
    core.create_namespaced_secret(NS, _secret(names["unrelated"], "tenant-private-value"))
    order = _order(cluster, names["order"])
    names["token"] = f"{names['order']}-auth"  # the fixture deletes it by this name
    owner = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
        "name": names["order"], "uid": order["metadata"]["uid"], "controller": True,
    }  # fmt: skip
    body = _secret(names["token"], "ours", {UID_LABEL: order["metadata"]["uid"]})
    body["metadata"]["ownerReferences"] = [owner]
    token = core.create_namespaced_secret(NS, body)
    # The order's token Secret arrives through the watch...
    eventually(lambda: cache.token_secrets.get_by_name(NS, names["token"]), what="token cached")
    reads = cache.secrets.reads
    assert cache.secrets.get_by_name(NS, names["token"])["metadata"]["uid"] == token.metadata.uid
    assert cache.secrets.reads == reads  # ...so reading it costs no request
    # ...while the tenant's other Secret is held by no informer (before: every Secret was).
    time.sleep(1.0)
    for informer in cache.informers:
        assert informer.get_by_name(NS, names["unrelated"]) is None, informer.name
    assert cache.secrets.cached_keys() == []


def test_a_secret_labelled_by_a_tenant_is_held_as_its_name_and_owner_only(
    cache: ClusterCache, core: client.CoreV1Api, names: dict[str, str]
) -> None:
    """Any tenant may give a Secret the order label: held whole, 200 such Secrets of
    930 KiB took the controller from 148 to 335 MiB, on its way to its memory limit; so
    did 40 of 10,000 labels each, to 267 MiB."""
    padding = {f"pad.example.com/k{i}": "v" * 63 for i in range(2_000)}
    body = _secret(names["hf"], "x" * 600_000, {UID_LABEL: "not-an-order", **padding})
    body["metadata"]["annotations"] = {"padding": "y" * 200_000}
    core.create_namespaced_secret(NS, body)
    held = eventually(
        lambda: cache.token_secrets.get_by_name(NS, names["hf"]), what="the Secret cached"
    )
    assert "data" not in held and not held["metadata"]["annotations"]
    assert held["metadata"]["labels"] == {UID_LABEL: "not-an-order"}
    # Named by an order (its HF token), it is read by name, whole: not the trimmed copy.
    reads = cache.secrets.reads
    named = cache.secrets.get_by_name(NS, names["hf"])
    assert base64.b64decode(named["data"]["token"]) == b"x" * 600_000
    assert cache.secrets.reads == reads + 1


def test_a_named_secret_is_read_by_name_and_its_later_creation_wakes_the_order(
    cluster: Any, cache: ClusterCache, core: client.CoreV1Api, names: dict[str, str]
) -> None:
    core.create_namespaced_secret(NS, _secret(names["hf"], "hf_value"))
    secret = cache.secrets.get_by_name(NS, names["hf"])
    assert base64.b64decode(secret["data"]["token"]) == b"hf_value"
    reads = cache.secrets.reads
    assert cache.secrets.get_by_name(NS, names["hf"]) == secret
    assert cache.secrets.reads == reads  # the TTL cache answered

    order = client.CustomObjectsApi(cluster.api_client("admin")).create_namespaced_custom_object(
        GROUP, VERSION, NS, "inferenceservices",
        {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
            "metadata": {"name": names["order"]},
            "spec": {"model": {"src": "HuggingFace", "ref": {"name": "org/gated"},
                               "authSecretRef": {"name": names["late"]}}},
        },
    )  # fmt: skip
    uid = order["metadata"]["uid"]
    eventually(lambda: cache.orders.get(uid), what="the order cached")
    assert cache.secrets.get_by_name(NS, names["late"]) is None  # not there yet
    cache.changed.clear()  # type: ignore[attr-defined]
    core.create_namespaced_secret(NS, _secret(names["late"], "hf_late"))
    # A refresh re-reads the Secrets orders name and routes the change to the order.
    eventually(lambda: uid in cache.changed, what="the order woken")  # type: ignore[attr-defined]
    late = cache.secrets.get_by_name(NS, names["late"])
    assert late is not None and base64.b64decode(late["data"]["token"]) == b"hf_late"
    # A Secret no order names is dropped at the next refresh.
    eventually(
        lambda: (NS, names["hf"]) not in cache.secrets.cached_keys(),
        what="the unnamed Secret dropped",
    )
    assert (NS, names["late"]) in cache.secrets.cached_keys()


@pytest.mark.parametrize(
    "name",
    ["../../other/secrets/{victim}", "..%2F..%2Fother%2Fsecrets%2F{victim}", "..", "."],
    ids=["dot-segments", "pre-quoted", "dot-dot", "dot"],
)
def test_a_name_that_is_a_path_reads_no_other_namespaces_secret(
    cluster: Any, cache: ClusterCache, names: dict[str, str], name: str
) -> None:
    """A class's customCertificate.secretName is a name the controller reads with its own
    rights: `../../victim/secrets/tls` was folded by urllib3 into another namespace's
    Secret, and its TLS key copied next to the order, where its tenant could read it.
    Every name is one path segment: such a name is no Secret at all."""
    admin = client.CoreV1Api(cluster.api_client("admin"))
    other = f"other-{names['hf']}"
    admin.create_namespace({"metadata": {"name": other}})
    try:
        admin.create_namespaced_secret(other, _secret(names["hf"], "other-tenants-key"))
        path_name = name.replace("other", other).format(victim=names["hf"])
        assert cache.secrets.get_by_name("support", path_name) is None
    finally:
        admin.delete_namespace(other)


@pytest.mark.parametrize(
    ("name", "segment"),
    [
        ("tls.example", "tls.example"),
        ("../../other/secrets/tls", "..%2F..%2Fother%2Fsecrets%2Ftls"),
        ("..", "%2E%2E"),
        ("a?b#c", "a%3Fb%23c"),
    ],
)
def test_a_name_in_a_path_is_one_segment_whatever_it_holds(name: str, segment: str) -> None:
    """Below the names checked at their source, the path itself: no name is read as
    more than one segment (a query, a fragment, or a way up), whoever checked it."""
    assert kinds.SECRETS.object_path("ns", name) == f"/api/v1/namespaces/ns/secrets/{segment}"
