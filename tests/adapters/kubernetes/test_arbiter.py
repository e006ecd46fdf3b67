"""What a victim's give-back waits for (adapters/kubernetes/arbiter.py), read from the cache."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.kubernetes.arbiter import Arbiter
from adapters.kubernetes.rendering import UID_LABEL
from fsm.identity import OrderRef
from fsm.placement import arbitration
from fsm.placement.arbitration import OrderView, Ruling
from fsm.reasons import Reason
from fsm.state import ClassJudgement, OrderState
from tests.support import fakes, strategies
from tests.support.planner_inputs import (
    A100,
    GPU_CLASS,
    T4,
    T4_ONLY,
    claim,
    device_class,
    gpu,
    resource_slice,
    snapshot,
)

A100_ONLY = f"{GPU_CLASS} && device.attributes['gpu.nvidia.com'].productName == '{A100}'"
SNAP = snapshot(
    [device_class("a100s", A100_ONLY), device_class("t4s", T4_ONLY)],
    [
        resource_slice("node-a100", gpu("a0", A100, "80Gi"), gpu("a1", A100, "80Gi")),
        resource_slice("node-t4", gpu("t0", T4, "16Gi")),
    ],
    [claim("v-0", "node-a100", "a0", holder="v"), claim("h-0", "node-t4", "t0", holder="h")],
    priorities={"v": 100, "h": 1000},
)
V_PLAN = strategies.plan("a100s", devices=("gpu.nvidia.com/node-a100/a0",)).model_copy(
    update={"accelerator_product_name": A100, "accelerator_memory_gib": 80}
)


def _waiting_pod(uid: str, namespace: str = "team", priority: int = 1000) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{uid}-7f9-x", "namespace": namespace, "labels": {UID_LABEL: uid}},
        "spec": {"priority": priority},
        "status": {"phase": "Pending"},
    }


def _order(uid: str, namespace: str = "team") -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": uid, "namespace": namespace, "uid": uid},
        "spec": {},
    }


def _arbiter(
    states: dict[str, OrderState], pod: dict[str, Any] | None = None, order: bool = True
) -> Arbiter:
    world = fakes.world()
    fakes.put(world, pod or _waiting_pod("h"))
    if order:
        fakes.put(world, _order("h"))
    return Arbiter(
        None,  # type: ignore[arg-type]  # reads only the cache here
        world,
        snapshot=lambda _uid: SNAP,
        allocated=lambda: SNAP,
        could_reclaim=lambda: lambda _name: False,
        states=lambda: states,
    )


def test_a_give_back_waits_only_for_higher_pods_that_want_the_victims_devices() -> None:
    """H (priority 1000, T4s only) has a pod waiting for a T4. V's replica, taken on an
    A100, waited for it to be placed: for ever, while H's growth was blocked, with an
    A100 free. A pod whose plan could take V's devices, or whose plan is unknown,
    still goes first."""
    on_t4s = strategies.plan("t4s", devices=("gpu.nvidia.com/node-t4/t0",)).model_copy(
        update={"accelerator_product_name": T4, "accelerator_memory_gib": 16}
    )
    h_on_t4s = OrderState().model_copy(update={"plan": on_t4s})
    assert not _arbiter({"h": h_on_t4s})._higher_priority_waits(100, SNAP, V_PLAN)
    h_on_a100s = OrderState().model_copy(update={"plan": V_PLAN})
    assert _arbiter({"h": h_on_a100s})._higher_priority_waits(100, SNAP, V_PLAN)
    assert _arbiter({})._higher_priority_waits(100, SNAP, V_PLAN)  # H's plan not known
    assert not _arbiter({})._higher_priority_waits(1000, SNAP, V_PLAN)  # not higher


def test_a_give_back_does_not_wait_for_a_higher_pod_that_cannot_use_the_room() -> None:
    """H's replica needs both A100s of the node, one of them V's last replica holds:
    H fits nowhere, so V taking back the free A100 costs H nothing. Waiting for H, V
    stayed down beside it for good (found with the bed's scheduler placing pods where no
    plan said). Nor does a give-back wait for an order whose plan was dropped (its class
    tried): it pursues no device."""
    two = V_PLAN.model_copy(
        update={
            "accelerator_count": 2,
            "devices": ("gpu.nvidia.com/node-a100/a0", "gpu.nvidia.com/node-a100/a1"),
        }
    )
    h_needs_both = OrderState().model_copy(update={"plan": two})
    assert not _arbiter({"h": h_needs_both})._higher_priority_waits(100, SNAP, V_PLAN)
    h_dropped = OrderState().model_copy(update={"plan": None, "plan_in_force": None})
    assert not _arbiter({"h": h_dropped})._higher_priority_waits(100, SNAP, V_PLAN)


def test_a_give_back_waits_for_no_pod_that_is_not_a_pending_replica_of_an_order() -> None:
    """The order label is anyone's to write on a pod of their own. A tenant's
    unschedulable pod labelled as no order, at a priority of its choosing, held every
    give-back in the cluster; so did one labelled as an order of another namespace, or
    one claiming a priority its order has not."""
    h_on_a100s = OrderState().model_copy(update={"plan": V_PLAN})
    assert _arbiter({"h": h_on_a100s})._higher_priority_waits(100, SNAP, V_PLAN)
    no_order = _waiting_pod("not-an-order")
    assert not _arbiter({}, no_order)._higher_priority_waits(100, SNAP, V_PLAN)
    assert not _arbiter({}, order=False)._higher_priority_waits(100, SNAP, V_PLAN)
    elsewhere = _waiting_pod("h", namespace="tenant")
    assert not _arbiter({"h": h_on_a100s}, elsewhere)._higher_priority_waits(100, SNAP, V_PLAN)
    # H at inference-low (100): its pod's 1000 is the pod's own word.
    low = h_on_a100s.model_copy(update={"klass": _judged("inference-low")})
    assert not _arbiter({"h": low})._higher_priority_waits(100, SNAP, V_PLAN)
    high = h_on_a100s.model_copy(update={"klass": _judged("inference-high")})
    assert _arbiter({"h": high})._higher_priority_waits(100, SNAP, V_PLAN)


def _judged(priority: str) -> ClassJudgement:
    policy = strategies.policy(priority=priority)
    return ClassJudgement(
        class_name="c", reason=Reason.CLASS_ADMITTED, message="", policy=policy, generation=1
    )


def test_a_replacement_of_an_evicted_replica_still_holds_the_give_back() -> None:
    """An evicted replica stays on its node, Failed, until the pod collector takes it:
    counted as placed, its order looked satisfied, and the victim took back the device
    its replacement waits for."""
    h_on_a100s = OrderState().model_copy(update={"plan": V_PLAN})
    arbiter = _arbiter({"h": h_on_a100s})
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "h", "namespace": "team", "labels": {UID_LABEL: "h"}},
        "spec": {"replicas": 1},
    }
    evicted = _waiting_pod("h") | {"status": {"phase": "Failed", "reason": "Evicted"}}
    evicted["metadata"] = evicted["metadata"] | {"name": "h-7f9-old"}
    evicted["spec"] = evicted["spec"] | {"nodeName": "node-a100"}
    fakes.put(arbiter._world, deployment)
    fakes.put(arbiter._world, evicted)
    assert arbiter._higher_priority_waits(100, SNAP, V_PLAN)


def test_an_evicted_replica_does_not_count_toward_its_orders_minimum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its own order counted the evicted replica, still on its node, as placed: with its
    replacement waiting, the minimum looked met, and nothing lower was ever reclaimed
    for it (evicted pods stay until the pod collector's threshold, often for good)."""
    state = strategies.run(*strategies.SERVING)  # support/support-llm, one replica
    order = OrderRef(name="support-llm", namespace="support", uid="o-1")
    world = fakes.world()
    labels = {UID_LABEL: order.uid}
    meta = {"name": order.name, "namespace": order.namespace, "labels": labels}
    fakes.put(
        world, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                "spec": {"replicas": 1}}
    )  # fmt: skip
    evicted = _waiting_pod(order.uid, namespace="support")
    evicted["metadata"]["name"] = "support-llm-7f9-old"
    evicted["spec"] = {"nodeName": "node-a100"}
    evicted["status"] = {"phase": "Failed", "reason": "Evicted"}
    fakes.put(world, evicted)
    fakes.put(world, _waiting_pod(order.uid, namespace="support"))  # its replacement
    seen: list[OrderView] = []
    monkeypatch.setattr(arbitration, "rule", lambda view, *_args: seen.append(view) or Ruling(None))
    arbiter = Arbiter(
        None,  # type: ignore[arg-type]  # no record on the Deployment: no live read
        world,
        snapshot=lambda _uid: SNAP,
        allocated=lambda: SNAP,
        could_reclaim=lambda: lambda _name: True,
        states=lambda: {order.uid: state},
    )
    arbiter.ruling(order, state, strategies.at(30))
    assert [(view.bound, view.waiting) for view in seen] == [(0, True)]
