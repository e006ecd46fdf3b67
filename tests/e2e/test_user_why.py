"""A namespace user sees why her order waits without any access to the event log.

The decision (docs/observability.md): the status's conditions carry the reason and a
one-line message of what holds the order, and a Kubernetes Event per condition change
tells the story in `kubectl describe` — both readable with the module's user roles
alone. alice's order names a class that does not exist; as alice, under her RBAC, she
reads the reason in the status, in the Events, and in `kubectl describe`.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.cluster

NAME = "why-llm"


def test_alice_reads_why_in_status_events_and_describe(platform, alice, cluster) -> None:
    alice.create(
        "support",
        NAME,
        {
            "inferenceServiceClassName": "no-such-class",
            "model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-32B-Instruct-AWQ"}},
        },
    )
    try:
        obj = alice.wait_phase("support", NAME, "Pending", reason="ClassNotFound")
        held = next(c for c in obj["status"]["conditions"] if c["status"] != "True")
        assert (held["type"], held["reason"]) == ("ClassResolved", "ClassNotFound")
        assert "no-such-class" in held["message"]

        core = client.CoreV1Api(platform.api("alice"))
        selector = f"involvedObject.name={NAME},involvedObject.kind=InferenceService"

        def told() -> list[client.CoreV1Event]:
            listed = core.list_namespaced_event("support", field_selector=selector)
            return [e for e in listed.items if e.reason == "ClassNotFound"]

        (event,) = wait_for(told, timeout=30, what="alice can read the ClassNotFound Event")
        assert event.type == "Warning"
        assert event.involved_object.uid == obj["metadata"]["uid"]
        assert (
            event.message.startswith("ClassResolved=False: ") and "no-such-class" in event.message
        )

        described = cluster.kubectl("alice", "describe", "inferenceservice", NAME, "-n", "support")
        assert "ClassNotFound" in described.stdout
        assert (
            "Events:" in described.stdout
            and "<none>" not in described.stdout.split("Events:", 1)[1]
        )
    finally:
        alice.delete("support", NAME)
