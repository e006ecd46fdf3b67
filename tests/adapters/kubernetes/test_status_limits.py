"""A status the API server takes however long the messages the controller is given.

Condition messages quote what they are given (a catalog's condition, every name a class
misses), and the CRDs cap a message at 32768 characters: a status holding a longer one
was refused whole (422), so the order showed no status at all. Against the session's API
server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from adapters.kubernetes import classes
from fsm.reasons import ConditionStatus, ConditionType, Reason
from fsm.state import Condition, OrderState
from fsm.status import MESSAGE_LIMIT, render_status

pytestmark = pytest.mark.cluster

GROUP, VERSION = "ai.deckhouse.io", "v1alpha1"
LONG = "a catalog's own condition, quoted whole " * 1_000  # 40,000 characters
NOW = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture
def namespace(cluster: Any) -> Iterator[str]:
    core = client.CoreV1Api(cluster.api_client("admin"))
    name = f"limits-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def test_an_orders_status_with_a_long_message_is_taken(cluster: Any, namespace: str) -> None:
    custom = client.CustomObjectsApi(cluster.api_client("admin"))
    order = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": "long"},
        "spec": {"model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B"}}},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices", order)
    refused = Condition(
        ConditionType.MODEL_RESOLVED, ConditionStatus.FALSE, Reason.MODEL_NOT_READY, LONG, NOW, 1
    )
    status = render_status(OrderState(conditions=(refused,)))
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "inferenceservices", "long", {"status": status}
    )
    stored = custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferenceservices", "long"
    )
    (message,) = [c["message"] for c in stored["status"]["conditions"]]
    assert len(message) == MESSAGE_LIMIT
    assert message.startswith(LONG[:100]) and message.endswith(" more characters)")


def test_a_class_status_naming_many_missing_device_classes_is_taken(cluster: Any) -> None:
    custom = client.CustomObjectsApi(cluster.api_client("admin"))
    name = f"many-{uuid.uuid4().hex[:6]}"
    missing = [f"{i:03d}-" + "d" * 240 for i in range(140)]  # 34,860 characters of names
    klass = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceServiceClass",
        "metadata": {"name": name},
        "spec": {
            "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
            "acceleratorPolicy": {"allowedDeviceClasses": missing},
        },
    }
    made = custom.create_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", klass)
    try:
        status = classes.class_status(made, priority_classes=[], device_classes=[], now=NOW)
        custom.patch_cluster_custom_object_status(
            GROUP, VERSION, "inferenceserviceclasses", name, {"status": status}
        )
        stored = custom.get_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", name)
        (ready,) = stored["status"]["conditions"]
        assert ready["reason"] == "DeviceClassNotFound"
        assert len(ready["message"]) == MESSAGE_LIMIT
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", name)
