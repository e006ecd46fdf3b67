"""An order whose plan was dropped (its device class tried, no plan replacing it) runs no
workload: its pods, left waiting for that class's devices, took the next one to free
while the planner promised it to another order, and the exhausted order never learnt it
had it (ResourceClaimExhausted for good, every other order NoCapacity)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from fsm import events as ev
from tests.adapters.kubernetes.test_pass import NOW, Bed, external_token_class
from tests.support import fakes
from tests.support.planner_inputs import A100, claim, gpu, resource_slice


def _deleted(bed: Bed, obj: dict[str, Any]) -> None:
    """Gone on the server: its DELETED event carries a newer resourceVersion."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = str(next(fakes._RV))
    fakes.drop(bed.world, obj)


def _waiting_pod(uid: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-0",
            "namespace": "support",
            "uid": f"{name}-pod",
            "labels": {"ai.deckhouse.io/inference-service-uid": uid},
            "creationTimestamp": NOW.isoformat().replace("+00:00", "Z"),
        },
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: 1 cannot allocate all claims.",
                }
            ],
        },
    }


def test_an_exhausted_orders_workload_is_released_and_its_device_promised_once(
    tmp_path: Path,
) -> None:
    bed = Bed(tmp_path, a100s=1)
    bed.reconciler.allocation_grace_seconds = 0
    x = bed.order("x")
    bed.settle(x, passes=1)
    assert bed.child("Deployment", "x") is not None
    # A workload that is no order's holds the only A100: x's pod waits past the grace.
    fakes.put(bed.world, claim("batch-job", "node-a", "gpu-0", namespace="batch"))
    fakes.put(bed.world, _waiting_pod(x, "x"))
    bed.settle(x)
    assert [e.reason.value for e in bed.events(x, ev.PlanFailed)] == ["ResourceClaimExhausted"]
    assert bed.child("Deployment", "x") is None  # its pod goes with it
    deletes = bed.writer.calls[("delete", "Deployment")]
    bed.settle(x)
    assert bed.writer.calls[("delete", "Deployment")] == deletes  # released once
    # The batch job ends: the A100 is free, and promised once.
    batch = bed.world.resource_claims.get_by_name("batch", "batch-job")
    assert batch is not None
    _deleted(bed, batch)
    _deleted(bed, bed.world.pods.get_by_name("support", "x-0") or {})
    y = bed.order("y")
    bed.settle(y, passes=1)
    (planned,) = bed.events(y, ev.PlanComputed)
    assert planned.plan.devices
    bed.log.close()


def test_the_claims_a_released_workload_gives_back_are_no_new_capacity(tmp_path: Path) -> None:
    """Two replicas: one allocated (still loading), one waiting for a device the scheduler
    will not give (its node cordoned). Past the grace the class is tried and the workload
    released, which frees the order's own claim: counted as the class offering more, it
    was tried again at once, the workload made again and released again, for ever."""
    bed = Bed(tmp_path, a100s=1)
    fakes.put(bed.world, resource_slice("node-b", gpu("gpu-1", A100, "80Gi")))
    klass = external_token_class("two")
    klass["spec"]["scalingPolicy"] = {"minReplicas": 2, "maxReplicas": 2}
    fakes.put(bed.world, klass)
    bed.reconciler.allocation_grace_seconds = 0
    x = bed.order("x", klass="two")
    bed.settle(x, passes=1)
    own = fakes.put(bed.world, claim("x-gpu", "node-a", "gpu-0", holder=x, namespace="support"))
    loading = _waiting_pod(x, "x")
    loading["metadata"].update(name="x-1", uid="x-1-pod")
    loading["spec"] = {"nodeName": "node-a"}
    loading["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    fakes.put(bed.world, loading)
    fakes.put(bed.world, _waiting_pod(x, "x"))
    bed.settle(x)
    assert bed.child("Deployment", "x") is None
    # The garbage collector takes the pods, and the loading pod's claim with them.
    for pod in ("x-0", "x-1"):
        _deleted(bed, bed.world.pods.get_by_name("support", pod) or {})
    _deleted(bed, own)
    bed.settle(x)
    assert bed.child("Deployment", "x") is None
    assert not bed.events(x, ev.DeviceClassRetried)
    assert len(bed.events(x, ev.PlanComputed)) == 1
    bed.log.close()
