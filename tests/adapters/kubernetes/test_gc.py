"""Deleting an order deletes what it owns: the garbage collector really runs.

The API server alone deletes nothing by ownerReference; kube-controller-manager's garbage
collector does, and it learns of a new CRD only on its discovery resync (about 30 s), so
the test polls with a bound instead of sleeping. A Secret the user made (their HF token)
carries no ownerReference and must survive the order.
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

GROUP, VERSION, PLURAL = "ai.deckhouse.io", "v1alpha1", "inferenceservices"
# Discovery resync (~30 s) plus the collector's own queueing.
BOUND_SECONDS = 120


@pytest.fixture
def namespace(cluster: Any) -> Iterator[str]:
    core = client.CoreV1Api(cluster.api_client("admin"))
    name = f"gc-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _exists(read: Any) -> bool:
    try:
        read()
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def test_deleting_an_order_deletes_what_it_owns(cluster: Any, namespace: str) -> None:
    api = cluster.api_client("admin")
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    order = custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": "owner"},
            "spec": {
                "model": {
                    "src": "HuggingFace",
                    "ref": {"name": "meta-llama/Llama-3.1-8B"},
                    "authSecretRef": {"name": "hf-token"},
                }
            },
        },
    )  # fmt: skip
    owner = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "name": "owner",
        "uid": order["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "owner-auth", "ownerReferences": [owner]},
            "stringData": {"token": "t"},
        },
    )
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "hf-token"}, "stringData": {"token": "hf"}}
    )

    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "owner")

    deadline = time.monotonic() + BOUND_SECONDS
    while _exists(lambda: core.read_namespaced_secret("owner-auth", namespace)):
        assert time.monotonic() < deadline, f"owned Secret still there after {BOUND_SECONDS}s"
        time.sleep(1)
    assert _exists(lambda: core.read_namespaced_secret("hf-token", namespace))
    assert not _exists(
        lambda: custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "owner")
    )
