"""A class edit the planner reads nothing of reaches the serving workload on its place.

With no other device free, a replan for it failed (NoCapacity) and the order stayed on
its old policy: an administrator who withdrew public exposure kept a public Ingress and
its token, one who asked for a token kept an endpoint that answered anyone, and a wider
replica ceiling never reached the HPA. With a free device, the same edit moved the order.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.kubernetes.test_pass import Bed, HeldEndpoint, external_token_class, serving
from tests.support import fakes

PUBLIC = {"type": "External", "authentication": "Token", "https": {"mode": "Disabled"}}
LOCAL = {"type": "ClusterLocal", "authentication": "None"}


def _env(bed: Bed) -> list[str]:
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return [e["name"] for e in container.get("env", [])]


def _devices(bed: Bed) -> list[Any]:
    status = bed.world.orders.get_by_name("support", "llm")["status"]
    return [status["resolved"]["deviceClass"], status["resolved"]["replanCount"]]


def _serving_order(bed: Bed, exposure: dict[str, Any], endpoint: HeldEndpoint) -> str:
    klass = external_token_class()
    klass["spec"]["exposurePolicy"] = exposure
    fakes.put(bed.world, klass)
    uid = bed.order("llm")
    bed.settle(uid)
    serving(bed, uid, endpoint.url)
    bed.settle(uid, passes=3)
    time.sleep(1)  # the first probe's answer
    bed.settle(uid, passes=2)
    assert bed.world.orders.get(uid)["status"]["phase"] == "Ready"
    return uid


def _edit_class(bed: Bed, **spec: Any) -> None:
    klass = copy.deepcopy(bed.world.classes.get_by_name(None, "conv"))
    klass["spec"].update(spec)
    klass["metadata"].pop("resourceVersion", None)
    fakes.put(bed.world, klass)


@pytest.fixture
def endpoint() -> Any:
    held = HeldEndpoint()
    held.release.set()
    yield held
    held.close()


def test_withdrawn_public_exposure_is_withdrawn_with_no_room_elsewhere(
    tmp_path: Path, endpoint: HeldEndpoint
) -> None:
    bed = Bed(tmp_path, a100s=1)
    uid = _serving_order(bed, PUBLIC, endpoint)
    assert bed.child("Ingress", "llm") is not None and "VLLM_API_KEY" in _env(bed)
    before = _devices(bed)
    _edit_class(bed, exposurePolicy=LOCAL)
    bed.settle(uid, passes=4)
    status = bed.world.orders.get(uid)["status"]
    assert bed.child("Ingress", "llm") is None
    assert bed.world.token_secrets.get_by_name("support", "llm-auth") is None
    assert "VLLM_API_KEY" not in _env(bed)
    assert status["endpoint"]["type"] == "ClusterLocal" and "authSecretName" not in status
    planned = next(c for c in status["conditions"] if c["type"] == "Planned")
    assert planned["reason"] == "PlanComputed"
    assert _devices(bed) == before  # the same place, nothing recalculated
    bed.log.close()


def test_a_token_asked_for_is_checked_with_no_room_elsewhere(
    tmp_path: Path, endpoint: HeldEndpoint
) -> None:
    bed = Bed(tmp_path, a100s=1)
    uid = _serving_order(bed, LOCAL, endpoint)
    assert "VLLM_API_KEY" not in _env(bed)
    _edit_class(bed, exposurePolicy=PUBLIC)
    bed.settle(uid, passes=4)
    assert "VLLM_API_KEY" in _env(bed)
    assert bed.world.token_secrets.get_by_name("support", "llm-auth") is not None
    assert bed.world.orders.get(uid)["status"]["authSecretName"] == "llm-auth"
    bed.log.close()


def test_an_exposure_edit_does_not_move_an_order_that_could_move(
    tmp_path: Path, endpoint: HeldEndpoint
) -> None:
    bed = Bed(tmp_path, a100s=2)
    uid = _serving_order(bed, LOCAL, endpoint)
    claim_template = copy.deepcopy(bed.child("ResourceClaimTemplate", "llm"))
    writes = bed.writer.calls[("apply", "ResourceClaimTemplate")]
    _edit_class(bed, exposurePolicy=PUBLIC)
    bed.settle(uid, passes=4)
    assert bed.child("ResourceClaimTemplate", "llm")["spec"] == claim_template["spec"]
    assert bed.writer.calls[("apply", "ResourceClaimTemplate")] == writes
    assert bed.reconciler.state_of(uid).replan_count == 0
    bed.log.close()


def test_a_wider_replica_ceiling_reaches_the_autoscaler(
    tmp_path: Path, endpoint: HeldEndpoint
) -> None:
    bed = Bed(tmp_path, a100s=1)
    uid = _serving_order(bed, PUBLIC, endpoint)
    _edit_class(bed, scalingPolicy={"minReplicas": 1, "maxReplicas": 4})
    bed.settle(uid, passes=4)
    autoscaler = bed.child("HorizontalPodAutoscaler", "llm")
    assert autoscaler is not None and autoscaler["spec"]["maxReplicas"] == 4
    assert bed.world.orders.get(uid)["status"]["constraints"]["maxReplicas"] == 4
    bed.log.close()
