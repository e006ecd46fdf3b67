"""The user guide's first path: the seed's minimal order reaches Ready and serves.

A namespace user (alice, under her own RBAC) applies the minimal order naming
default-llm; with no other input it gets a Ready endpoint with a token, which the seed's
curl reaches (here: the simulator's stub standing in for the Service) — and nothing
without the token. Deleting the order removes everything it owns.
"""

from __future__ import annotations

import base64

import httpx
import pytest
from kubernetes import client

from adapters.probes.targets import SIMULATOR_ENDPOINT_ANNOTATION
from tests.e2e.conftest import conditions, forced_passes, wait_for

pytestmark = pytest.mark.cluster

QWEN_AWQ = "Qwen/Qwen2.5-32B-Instruct-AWQ"
READY = [
    ("ClassResolved", "True", "ClassAdmitted"),
    ("ModelResolved", "True", "ModelResolved"),
    ("Planned", "True", "PlanComputed"),
    ("WorkloadReady", "True", "WorkloadAvailable"),
    ("Ready", "True", "EndpointServing"),
    ("ScalingHealthy", "True", "ScalingWithinBounds"),
]


def _stub_url(platform, namespace: str, uid: str) -> str:
    core = client.CoreV1Api(platform.api("admin"))
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"ai.deckhouse.io/inference-service-uid={uid}"
    )
    return next(
        p.metadata.annotations[SIMULATOR_ENDPOINT_ANNOTATION]
        for p in pods.items
        if (p.metadata.annotations or {}).get(SIMULATOR_ENDPOINT_ANNOTATION)
    )


def test_minimal_order_reaches_ready_and_serves_with_its_token(platform, alice) -> None:
    alice.create(
        "support",
        "support-llm",
        {
            "inferenceServiceClassName": "default-llm",
            "model": {"src": "HuggingFace", "ref": {"name": QWEN_AWQ}},
        },
    )
    obj = alice.wait_phase("support", "support-llm", "Ready")
    status = obj["status"]
    assert conditions(obj) == READY
    assert status["endpoint"]["url"] == "https://support-llm-support.example.com"
    assert status["endpoint"]["type"] == "External"
    assert status["endpoint"]["toolCallingSupported"] is True
    assert status["authSecretName"] == "support-llm-auth"
    assert status["model"]["endpointType"] == "Chat"
    assert status["observedGeneration"] == 1
    resolved = status["resolved"]
    assert resolved["replanCount"] == 0
    assert resolved["placementMode"] in {"WholeDevice", "Partition"}
    assert resolved["acceleratorMemoryGiB"] >= 20
    assert {
        "deviceClass",
        "acceleratorProductName",
        "recipe",
        "cpu",
        "memory",
        "modelVolume",
    } <= set(resolved)
    assert status["constraints"]["minReplicas"] == 1 and status["constraints"]["maxReplicas"] == 2

    # The seed's curl, as alice: the token from the Secret the status names.
    core = client.CoreV1Api(platform.api("alice"))
    secret = core.read_namespaced_secret(status["authSecretName"], "support")
    token = base64.b64decode(secret.data["token"]).decode()
    assert len(token) >= 43  # 256 bits, URL-safe base64
    url = _stub_url(platform, "support", obj["metadata"]["uid"])
    ok = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {token}"}, timeout=5)
    assert ok.status_code == 200 and ok.json()["data"][0]["id"] == QWEN_AWQ
    chat = httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {token}"},
        json={"model": QWEN_AWQ, "messages": [{"role": "user", "content": "ping"}]},
        timeout=5,
    )
    assert chat.status_code == 200 and chat.json()["choices"]
    assert httpx.get(f"{url}/v1/models", timeout=5).status_code == 401

    # kubectl describe tells the story: an Event per judged condition change.
    events = client.CoreV1Api(platform.api("admin")).list_namespaced_event(
        "support", field_selector=f"involvedObject.uid={obj['metadata']['uid']}"
    )
    told = {e.reason for e in events.items}
    assert {"ClassAdmitted", "ModelResolved", "PlanComputed", "EndpointServing"} <= told
    # A healthy rollout's steps are in the conditions only: no Warning on its way to Ready.
    assert not told & {"RolloutInProgress", "AwaitingFirstProbe"}
    assert [e.reason for e in events.items if e.type == "Warning"] == []

    # Steady state costs no status writes: nothing changes, nothing is appended.
    # Each pass is waited for to its end (an emptied queue meant only that a worker took
    # the key: a check made then passed while the pass went on appending).
    before = platform.log.stream(obj["metadata"]["uid"]).version
    forced_passes(platform, obj["metadata"]["uid"], passes=2)
    assert platform.log.stream(obj["metadata"]["uid"]).version == before

    # Delete: every owned object goes by garbage collection; the stream stays, marked deleted.
    uid = obj["metadata"]["uid"]
    alice.delete("support", "support-llm")
    apps = client.AppsV1Api(platform.api("admin"))
    admin_core = client.CoreV1Api(platform.api("admin"))

    def gone() -> bool:
        left = apps.list_namespaced_deployment(
            "support", label_selector=f"ai.deckhouse.io/inference-service-uid={uid}"
        ).items
        secrets = [s.metadata.name for s in admin_core.list_namespaced_secret("support").items]
        return not left and "support-llm-auth" not in secrets

    wait_for(gone, timeout=90, what="garbage collection of the order's objects")
    wait_for(  # the log records the deletion
        lambda: (i := platform.log.stream(uid)) is not None and i.deleted_at and i, timeout=30
    )
