"""Target resolvers: the Service's DNS name in a cluster, the pod annotation in the simulator."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.kubernetes.rendering import OrderRef
from adapters.probes.targets import (
    SIMULATOR_ENDPOINT_ANNOTATION,
    AnnotatedPodTarget,
    ServiceTarget,
    TargetResolver,
    ready_pods,
)

ORDER = OrderRef("support-llm", "support", "uid-1")


def pod(
    name: str,
    *,
    uid: str = "uid-1",
    ready: bool = True,
    endpoint: str | None = "http://127.0.0.1:40001",
    namespace: str = "support",
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {"ai.deckhouse.io/inference-service-uid": uid},
        "annotations": {SIMULATOR_ENDPOINT_ANNOTATION: endpoint} if endpoint else {},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": metadata,
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_service_target_is_the_cluster_dns_name() -> None:
    resolver: TargetResolver = ServiceTarget()
    assert resolver.resolve(ORDER, []) == "http://support-llm.support.svc:80"


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        ([], None),
        ([pod("a", ready=False)], None),
        ([pod("a", endpoint=None)], None),
        ([pod("a", endpoint="127.0.0.1:4000")], None),
        ([pod("a", uid="someone-else")], None),
        ([pod("a", namespace="analytics")], None),
        ([pod("a", deleting=True)], None),
        ([pod("a", endpoint="http://127.0.0.1:40001/")], "http://127.0.0.1:40001"),
        (
            [pod("b", endpoint="http://127.0.0.1:2"), pod("a", endpoint="http://127.0.0.1:1")],
            "http://127.0.0.1:1",
        ),
        (
            [pod("a", ready=False, endpoint="http://127.0.0.1:1"), pod("b")],
            "http://127.0.0.1:40001",
        ),
        (
            [pod("a", endpoint=None), pod("b", endpoint="http://127.0.0.1:2")],
            "http://127.0.0.1:2",
        ),
    ],
    ids=[
        "no-pods",
        "not-ready",
        "no-annotation",
        "not-a-url",
        "other-order-by-uid",
        "other-namespace",
        "terminating",
        "ready",
        "first-by-name",
        "skips-unready",
        "skips-unannotated",
    ],
)
def test_annotated_pod_target(pods: list[dict[str, Any]], expected: str | None) -> None:
    resolver: TargetResolver = AnnotatedPodTarget()
    assert resolver.resolve(ORDER, pods) == expected


def test_ready_pods_are_the_orders_own_by_uid_not_by_name() -> None:
    same_name_other_order = pod("support-llm-abc", uid="old-uid")
    mine = pod("x-1")
    assert ready_pods(ORDER, [same_name_other_order, mine]) == [mine]
