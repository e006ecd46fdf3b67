"""The user guide's capacity paths, end to end: waiting for room, device classes that do
not hold an order, a class that cannot be judged, replans of a serving order.

Every test publishes its own node and DeviceClass beside the default capacity (through
`platform.simulator.set_capacity`) and orders under its own class that names only that
DeviceClass, so other tests' orders never land on it and it never lands on theirs; the
default capacity is restored afterwards. A node and a class are named after the test, so
a workload still being garbage-collected cannot reach the next test's devices.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.platform import LocalPlatform
from fsm import events as ev
from tests.e2e.capacity import (
    CLASS,
    GROWTH,
    L4,
    L40S,
    MODEL,
    PLANNED,
    QWEN_7B,
    QWEN_SMALL,
    READY,
    SERVING,
    WORKLOAD,
    class_ready,
    class_spec,
    events_of,
    extra_capacity,
    gpu_node,
    hf,
    module_settings,
    product_class,
    wait_order,
    waiting,
)
from tests.e2e.conftest import CLASSES, GROUP, VERSION, Admin, Orders, conditions, wait_for

pytestmark = pytest.mark.cluster

# --- 1. NoCapacity, then Ready when capacity appears -------------------------------------


def test_order_waits_with_no_capacity_and_is_ready_once_capacity_appears(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    node = gpu_node("e2e-nocap", [(L4, "24Gi")])
    device_class = product_class("e2e-nocap-l4", L4)
    with extra_capacity(platform, [node], [device_class]) as publish:
        admin.create_class("e2e-nocap", class_spec(["e2e-nocap-l4"]))
        class_ready(platform, "e2e-nocap")
        publish([], [device_class])  # the node goes: the class selects nothing now

        orders(
            "cap-nocapacity", {"inferenceServiceClassName": "e2e-nocap", "model": hf(QWEN_SMALL)}
        )
        obj = alice.wait_phase("support", "cap-nocapacity", "Pending", reason="NoCapacity")
        assert conditions(obj) == [
            CLASS,
            MODEL,
            ("Planned", "False", "NoCapacity"),
            ("WorkloadReady", "Unknown", "AwaitingPlan"),
            ("Ready", "Unknown", "AwaitingWorkload"),
            ("ScalingHealthy", "Unknown", "NotServing"),
        ]
        planned = obj["status"]["conditions"][2]
        assert (
            "e2e-nocap-l4" in planned["message"] or "no allowed DeviceClass" in planned["message"]
        )
        assert "resolved" not in obj["status"]
        assert "toolCallingSupported" not in obj["status"].get("endpoint", {})
        assert obj["status"]["constraints"] == {"minReplicas": 1, "maxReplicas": 1}
        assert admin.deployment("support", "cap-nocapacity") is None

        publish([node], [device_class])  # capacity appears: the order is planned again
        obj = alice.wait_phase("support", "cap-nocapacity", "Ready", timeout=60)
        assert conditions(obj) == READY
        resolved = obj["status"]["resolved"]
        assert resolved["deviceClass"] == "e2e-nocap-l4"
        assert resolved["acceleratorProductName"] == L4
        assert resolved["acceleratorMemoryGiB"] == 24
        assert (resolved["placementMode"], resolved["sharingMode"]) == ("WholeDevice", "Dedicated")
        # replanCount counts the verdicts once a plan had been computed
        # (docs/state-machine.md): waiting for the first plan recalculated nothing.
        assert resolved["replanCount"] == 0
        assert obj["status"]["endpoint"]["type"] == "ClusterLocal"
        assert "authSecretName" not in obj["status"]


# --- 2. ResourceClaimExhausted -----------------------------------------------------------


def test_device_classes_that_never_allocate_are_tried_one_by_one_then_exhausted(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """A cordoned node publishes its devices in slices (the planner sees room) but the
    scheduler places nothing there: each class gets its grace period, is marked tried,
    and the order replans on the next; with all tried it is ResourceClaimExhausted."""
    grace = 3.0
    node = gpu_node("e2e-cordoned", [(L4, "24Gi"), (L40S, "48Gi")], cordoned=True)
    classes = [product_class("e2e-exh-l4", L4), product_class("e2e-exh-l40s", L40S)]
    reconciler = platform.controller.reconciler
    before = reconciler.allocation_grace_seconds
    reconciler.allocation_grace_seconds = grace
    try:
        with extra_capacity(platform, [node], classes):
            admin.create_class("e2e-exhausted", class_spec(["e2e-exh-l4", "e2e-exh-l40s"]))
            class_ready(platform, "e2e-exhausted")
            uid = orders(
                "cap-exhausted",
                {"inferenceServiceClassName": "e2e-exhausted", "model": hf(QWEN_SMALL)},
            )
            # First the class's first choice, waiting for its devices.
            obj = alice.wait_phase(
                "support", "cap-exhausted", "Pending", reason="DevicesNotAllocated"
            )
            assert obj["status"]["resolved"]["deviceClass"] == "e2e-exh-l4"
            assert conditions(obj)[3] == ("WorkloadReady", "False", "DevicesNotAllocated")

            obj = alice.wait_phase(
                "support", "cap-exhausted", "Pending", reason="ResourceClaimExhausted", timeout=60
            )
            assert conditions(obj) == [
                CLASS,
                MODEL,
                ("Planned", "False", "ResourceClaimExhausted"),
                ("WorkloadReady", "Unknown", "AwaitingPlan"),
                ("Ready", "Unknown", "AwaitingWorkload"),
                ("ScalingHealthy", "Unknown", "NotServing"),
            ]
            message = obj["status"]["conditions"][2]["message"]
            assert "e2e-exh-l4" in message and "e2e-exh-l40s" in message
            assert "resolved" not in obj["status"]

            tried = events_of(platform, uid, ev.DeviceClassTried)
            assert [e.device_class for e in tried] == ["e2e-exh-l4", "e2e-exh-l40s"]
            # Each class had its own grace period, counted from its own plan's rollout.
            assert tried[1].observed_at - tried[0].observed_at >= timedelta(seconds=grace)
            plans = [e.plan.device_class for e in events_of(platform, uid, ev.PlanComputed)]
            assert plans == ["e2e-exh-l4", "e2e-exh-l40s"]
            # No plan, no workload: a pod left waiting would take the next device to free.
            wait_for(
                lambda: admin.deployment("support", "cap-exhausted") is None or None,
                timeout=30,
                what="the exhausted order's Deployment deleted",
            )
    finally:
        reconciler.allocation_grace_seconds = before


def test_a_device_class_that_never_allocates_gives_way_to_the_next_one_that_does(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """The first class's devices sit on a cordoned node; the second's on a node the
    scheduler uses. The replan onto the second changes only the claim, not the runtime:
    the pods must still roll, or the one waiting keeps asking for the first class."""
    grace = 3.0
    cordoned = gpu_node("e2e-fb-cordoned", [(L4, "24Gi")], cordoned=True)
    open_node = gpu_node("e2e-fb-open", [(L40S, "48Gi")])
    classes = [product_class("e2e-fb-l4", L4), product_class("e2e-fb-l40s", L40S)]
    reconciler = platform.controller.reconciler
    before = reconciler.allocation_grace_seconds
    reconciler.allocation_grace_seconds = grace
    try:
        with extra_capacity(platform, [cordoned, open_node], classes):
            admin.create_class("e2e-fallback", class_spec(["e2e-fb-l4", "e2e-fb-l40s"]))
            class_ready(platform, "e2e-fallback")
            uid = orders(
                "cap-fallback",
                {"inferenceServiceClassName": "e2e-fallback", "model": hf(QWEN_SMALL)},
            )
            obj = alice.wait_phase("support", "cap-fallback", "Ready", timeout=90)
            assert conditions(obj) == READY
            assert obj["status"]["resolved"]["deviceClass"] == "e2e-fb-l40s"
            tried = events_of(platform, uid, ev.DeviceClassTried)
            assert [e.device_class for e in tried] == ["e2e-fb-l4"]
    finally:
        reconciler.allocation_grace_seconds = before


# --- 3. PlacementUndecidable -------------------------------------------------------------


def test_class_whose_device_selector_cannot_be_evaluated_is_placement_undecidable(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    # An attribute no device publishes: in CEL an unknown key is a runtime error, so the
    # class cannot be judged — nothing to wait for, the administrator must fix it.
    admin.create_device_class(
        "e2e-undecidable", ["device.attributes['gpu.nvidia.com'].noSuchAttribute == 'x'"]
    )
    wait_for(
        lambda: platform.controller.cache.device_classes.get_by_name(None, "e2e-undecidable"),
        timeout=10,
        what="the DeviceClass in the controller's cache",
    )
    admin.create_class("e2e-undecidable", class_spec(["e2e-undecidable"]))
    class_ready(platform, "e2e-undecidable")
    orders(
        "cap-undecidable", {"inferenceServiceClassName": "e2e-undecidable", "model": hf(QWEN_SMALL)}
    )
    obj = alice.wait_phase("support", "cap-undecidable", "Pending", reason="PlacementUndecidable")
    assert conditions(obj) == [
        CLASS,
        MODEL,
        ("Planned", "False", "PlacementUndecidable"),
        ("WorkloadReady", "Unknown", "AwaitingPlan"),
        ("Ready", "Unknown", "AwaitingWorkload"),
        ("ScalingHealthy", "Unknown", "NotServing"),
    ]
    message = obj["status"]["conditions"][2]["message"]
    assert message.startswith("nothing to try") and "e2e-undecidable" in message
    assert "noSuchAttribute" in message
    assert "resolved" not in obj["status"]
    assert admin.deployment("support", "cap-undecidable") is None


# --- 4. editing the model of a Ready order replans it --------------------------------------


def test_editing_the_model_of_a_ready_order_replans_and_reapplies(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    node = gpu_node("e2e-replan", [(L4, "24Gi"), (L4, "24Gi")])
    with extra_capacity(platform, [node], [product_class("e2e-replan-l4", L4)]):
        admin.create_class("e2e-replan", class_spec(["e2e-replan-l4"]))
        class_ready(platform, "e2e-replan")
        uid = orders(
            "cap-replan", {"inferenceServiceClassName": "e2e-replan", "model": hf(QWEN_SMALL)}
        )
        obj = alice.wait_phase("support", "cap-replan", "Ready")
        assert conditions(obj) == READY
        first = obj["status"]["resolved"]
        assert first["replanCount"] == 0 and obj["status"]["observedGeneration"] == 1
        assert f"--served-model-name={QWEN_SMALL}" in admin.runtime_args("support", "cap-replan")

        alice.patch_spec("support", "cap-replan", {"model": hf(QWEN_7B)})

        def replanned_and_serving(o: dict[str, Any] | None) -> bool:
            status = (o or {}).get("status") or {}
            pods = admin.pods("support", uid)
            return (
                status.get("phase") == "Ready"
                and status.get("observedGeneration") == 2
                and (status.get("resolved") or {}).get("replanCount") == 1
                and bool(pods)
                # The old pod is gone: only the re-applied workload serves.
                and all(
                    f"--served-model-name={QWEN_7B}" in (p.spec.containers[0].args or [])
                    for p in pods
                )
            )

        obj = wait_order(alice, "cap-replan", replanned_and_serving, timeout=90)
        assert conditions(obj) == READY
        resolved = obj["status"]["resolved"]
        assert resolved["deviceClass"] == "e2e-replan-l4"
        # The new model is ~15 GB: more host memory and a bigger volume than the old one.
        assert resolved["memory"] != first["memory"]
        assert resolved["modelVolume"] != first["modelVolume"]
        assert all(c["observedGeneration"] == 2 for c in obj["status"]["conditions"])
        assert f"--served-model-name={QWEN_7B}" in admin.runtime_args("support", "cap-replan")
        assert len(events_of(platform, uid, ev.PlanComputed)) == 2
        assert len(events_of(platform, uid, ev.WorkloadApplied)) == 2


def test_a_replan_onto_another_device_class_makes_the_claim_template_anew(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """A claim template's spec is immutable (the bed refuses its change as 1.34 does:
    adapters/cluster/admission.py): a plan that asks for other devices deletes the
    template and makes it anew, while the Deployment rolls in place."""
    nodes = [gpu_node("e2e-move-a", [(L4, "24Gi")]), gpu_node("e2e-move-b", [(L40S, "48Gi")])]
    classes = [product_class("e2e-move-l4", L4), product_class("e2e-move-l40s", L40S)]
    custom = admin.custom

    def template() -> dict[str, Any]:
        return dict(
            custom.get_namespaced_custom_object(
                "resource.k8s.io", "v1", "support", "resourceclaimtemplates", "cap-move"
            )
        )

    with extra_capacity(platform, nodes, classes):
        admin.create_class("e2e-move", class_spec(["e2e-move-l4"]))
        class_ready(platform, "e2e-move")
        orders("cap-move", {"inferenceServiceClassName": "e2e-move", "model": hf(QWEN_SMALL)})
        alice.wait_phase("support", "cap-move", "Ready")
        before = template()
        deployment_uid = admin.deployment("support", "cap-move").metadata.uid

        custom.patch_cluster_custom_object(
            GROUP,
            VERSION,
            CLASSES,
            "e2e-move",
            {"spec": {"acceleratorPolicy": {"allowedDeviceClasses": ["e2e-move-l40s"]}}},
        )

        def moved(o: dict[str, Any] | None) -> bool:
            status = (o or {}).get("status") or {}
            return (
                status.get("phase") == "Ready"
                and (status.get("resolved") or {}).get("deviceClass") == "e2e-move-l40s"
            )

        wait_order(alice, "cap-move", moved, timeout=90)
        after = template()
        assert after["metadata"]["uid"] != before["metadata"]["uid"]
        (request,) = after["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == "e2e-move-l40s"
        assert admin.deployment("support", "cap-move").metadata.uid == deployment_uid


# --- 5. a failed replan keeps the plan in force --------------------------------------------


def test_failed_replan_of_a_ready_order_keeps_serving_on_the_plan_in_force(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """One device: the order's own place is not offered to its replan (SPEC §3.1), so
    the bigger model finds no room and the order keeps serving the model it runs."""
    node = gpu_node("e2e-inforce", [(L4, "24Gi")])
    with extra_capacity(platform, [node], [product_class("e2e-inforce-l4", L4)]):
        admin.create_class("e2e-inforce", class_spec(["e2e-inforce-l4"]))
        class_ready(platform, "e2e-inforce")
        uid = orders(
            "cap-inforce", {"inferenceServiceClassName": "e2e-inforce", "model": hf(QWEN_SMALL)}
        )
        obj = alice.wait_phase("support", "cap-inforce", "Ready")
        held = obj["status"]["resolved"]

        alice.patch_spec("support", "cap-inforce", {"model": hf(QWEN_7B)})
        obj = wait_order(
            alice, "cap-inforce", waiting("Ready", condition="Planned", reason="LaunchPlanInForce")
        )
        assert conditions(obj) == [
            CLASS,
            MODEL,
            ("Planned", "True", "LaunchPlanInForce"),
            WORKLOAD,
            SERVING,
            GROWTH,
        ]
        message = obj["status"]["conditions"][2]["message"]
        assert message.startswith("Recalculation failed (NoCapacity)")
        assert "e2e-inforce-l4" in message
        status = obj["status"]
        assert status["observedGeneration"] == 2
        # The plan in force is the one it holds; only the count of recalculations moved.
        assert status["resolved"] == {**held, "replanCount": 1}
        assert f"--served-model-name={QWEN_SMALL}" in admin.runtime_args("support", "cap-inforce")
        assert len(events_of(platform, uid, ev.WorkloadApplied)) == 1
        assert len(events_of(platform, uid, ev.PlanFailed)) == 1

        # The edit undone: the plan in force was computed for that spec, so it answers it
        # again; nothing rolls, where a replan (never offered the order's own place, the
        # only L4 here) would have failed again.
        pods_before = {p.metadata.uid for p in admin.pods("support", uid)}
        alice.patch_spec("support", "cap-inforce", {"model": hf(QWEN_SMALL)})

        def answered(o: dict[str, Any] | None) -> bool:
            status = (o or {}).get("status") or {}
            return status.get("observedGeneration") == 3 and conditions(o or {}) == READY

        obj = wait_order(alice, "cap-inforce", answered)
        planned_now = obj["status"]["conditions"][2]
        assert planned_now["observedGeneration"] == 3
        assert "plan in force" in planned_now["message"]
        # The failed recalculation counts; the plan in force chosen again does not.
        assert obj["status"]["resolved"] == {**held, "replanCount": 1}
        assert {p.metadata.uid for p in admin.pods("support", uid)} == pods_before
        assert len(events_of(platform, uid, ev.WorkloadApplied)) == 1


# --- 7. priority: preemption, ScaleUpBlocked, capacity given back ------------------------


def scale(admin: Admin, name: str, replicas: int) -> None:
    """Set the runtime's replicas, as the class's HPA would (the local control plane runs
    no HPA controller and no metrics)."""
    admin.apps.patch_namespaced_deployment(name, "support", {"spec": {"replicas": replicas}})


def available(admin: Admin, name: str) -> int:
    deployment = admin.deployment("support", name)
    return int((deployment.status.available_replicas or 0) if deployment is not None else 0)


def test_capacity_moves_to_higher_priority_orders_and_comes_back(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """Two devices. A low-priority order runs two replicas; a high-priority order takes
    one of them (the low one serves on, Degraded); the high one cannot grow into the low
    one's last replica (its minimum): Degraded, ScaleUpBlocked; a second high-priority
    order's minimum takes that replica too (the low one is Pending at zero); the
    replicas come back, one by one, as the high-priority orders go."""
    node = gpu_node("e2e-prio", [(L4, "24Gi"), (L4, "24Gi")])
    scaling = {"minReplicas": 1, "maxReplicas": 2}
    fast = {"probe": {"intervalSeconds": 1, "timeoutSeconds": 1}}
    with (
        module_settings(platform, fast),
        extra_capacity(platform, [node], [product_class("e2e-prio-l4", L4)]),
    ):
        for name, priority in (
            ("e2e-prio-low", "inference-low"),
            ("e2e-prio-high", "inference-high"),
        ):
            admin.create_class(
                name,
                class_spec(
                    ["e2e-prio-l4"], scaling={**scaling, "allowedPriorityClassNames": [priority]}
                ),
            )
            class_ready(platform, name)
        low_spec = {"inferenceServiceClassName": "e2e-prio-low", "model": hf(QWEN_SMALL)}
        high_spec = {"inferenceServiceClassName": "e2e-prio-high", "model": hf(QWEN_SMALL)}

        # The low-priority order grows to both devices.
        low = orders("prio-low", low_spec)
        alice.wait_phase("support", "prio-low", "Ready")
        scale(admin, "prio-low", 2)
        wait_for(lambda: available(admin, "prio-low") == 2, timeout=30, what="two low replicas")
        obj = alice.wait_phase("support", "prio-low", "Ready")
        assert obj["status"]["constraints"]["priorityClassName"] == "inference-low"

        # 1. A high-priority order's minimum takes one low replica; the low one serves on.
        high = orders("prio-high", high_spec)
        obj = alice.wait_phase("support", "prio-high", "Ready")
        assert conditions(obj) == READY
        assert obj["status"]["constraints"]["priorityClassName"] == "inference-high"
        assert "needs lower-priority claim(s) freed" in obj["status"]["conditions"][2]["message"]
        assert events_of(platform, high, ev.PlanComputed)[0].reclaims
        taken_by_high = ("ScalingHealthy", "False", "CapacityTakenByPriority")
        obj = wait_order(
            alice,
            "prio-low",
            waiting("Degraded", condition="ScalingHealthy", reason="CapacityTakenByPriority"),
        )
        assert conditions(obj) == [CLASS, MODEL, PLANNED, WORKLOAD, SERVING, taken_by_high]
        message = obj["status"]["conditions"][5]["message"]
        assert message.startswith("1 replica(s) taken by support/prio-high (inference-high)")
        assert admin.deployment("support", "prio-low").spec.replicas == 1
        [taken] = events_of(platform, low, ev.CapacityTaken)
        assert (taken.taken_by, taken.priority_class_name, taken.replicas) == (
            "support/prio-high",
            "inference-high",
            1,
        )

        # 2. The high one wants a second replica: only the low one's minimum is left.
        scale(admin, "prio-high", 2)
        obj = wait_order(
            alice,
            "prio-high",
            waiting("Degraded", condition="ScalingHealthy", reason="ScaleUpBlocked"),
        )
        assert conditions(obj) == [
            CLASS,
            MODEL,
            PLANNED,
            WORKLOAD,
            SERVING,
            ("ScalingHealthy", "False", "ScaleUpBlocked"),
        ]
        assert (
            "no lower-priority replica above its minimum"
            in obj["status"]["conditions"][5]["message"]
        )
        assert admin.deployment("support", "prio-low").spec.replicas == 1  # nothing taken
        assert available(admin, "prio-high") == 1  # it serves: its endpoint answers
        scale(admin, "prio-high", 1)
        obj = alice.wait_phase("support", "prio-high", "Ready")
        assert conditions(obj) == READY
        assert len(events_of(platform, high, ev.ScalingBlocked)) == 1
        assert len(events_of(platform, high, ev.ScalingRecovered)) == 1

        # 3. A second high-priority order's minimum takes the last low replica.
        orders("prio-high2", high_spec)
        alice.wait_phase("support", "prio-high2", "Ready")
        obj = wait_order(
            alice,
            "prio-low",
            waiting("Pending", condition="WorkloadReady", reason="PreemptedByPriority"),
        )
        assert conditions(obj) == [
            CLASS,
            MODEL,
            PLANNED,
            ("WorkloadReady", "False", "PreemptedByPriority"),
            ("Ready", "Unknown", "AwaitingWorkload"),
            ("ScalingHealthy", "Unknown", "NotServing"),
        ]
        message = obj["status"]["conditions"][3]["message"]
        assert message.startswith("2 replica(s) taken by support/prio-high, support/prio-high2")
        assert admin.deployment("support", "prio-low").spec.replicas == 0

        # 4. The high-priority orders go: the low one gets its replicas back.
        alice.delete("support", "prio-high2")
        obj = wait_order(
            alice,
            "prio-low",
            waiting("Degraded", condition="ScalingHealthy", reason="CapacityTakenByPriority"),
            timeout=60,
        )
        assert conditions(obj) == [CLASS, MODEL, PLANNED, WORKLOAD, SERVING, taken_by_high]
        assert obj["status"]["conditions"][5]["message"].startswith(
            "1 replica(s) taken by support/prio-high (inference-high)"
        )
        alice.delete("support", "prio-high")
        wait_for(lambda: available(admin, "prio-low") == 2, timeout=60, what="both low replicas")
        obj = alice.wait_phase("support", "prio-low", "Ready")
        assert conditions(obj) == READY
        deployment = admin.deployment("support", "prio-low")
        assert deployment.spec.replicas == 2
        assert "ai.deckhouse.io/capacity-taken" not in (deployment.metadata.annotations or {})
        assert len(events_of(platform, low, ev.ScalingRecovered)) == 1
