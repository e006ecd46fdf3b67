"""The user guide's probe paths, end to end: a failing API before the first Ready, after
it, and the recovery; and a runtime that goes down after Ready.

The simulator's failure knob (annotation `simulator.ai-inference.deckhouse.io/fail` on
the runtime Deployment) makes the stub answer every `/v1` request with HTTP 500 while
the pod itself stays Ready — an API that fails in a process that lives, which only the
controller's own probe can tell. The ModuleConfig sets probe.intervalSeconds to 1 for
the test (and is restored after), so three failures take seconds, not half a minute.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from adapters.kubernetes.acting import NO_REPLICA_ANSWERS
from adapters.platform import LocalPlatform
from adapters.simulator.kubelet import FAIL_ANNOTATION
from adapters.simulator.stub import CRASH
from fsm import events as ev
from fsm.explain import history_rows
from fsm.reasons import CATALOGUE, Phase, Reason

# admin_fixture and orders_fixture are the `admin` and `orders` fixtures, imported for pytest.
from tests.e2e.capacity import (
    CLASS,
    L4,
    MODEL,
    PLANNED,
    QWEN_SMALL,
    READY,
    WORKLOAD,
    class_ready,
    class_spec,
    events_of,
    extra_capacity,
    gpu_node,
    hf,
    module_settings,
    product_class,
)
from tests.e2e.conftest import Admin, Orders, conditions, wait_for

pytestmark = pytest.mark.cluster


def set_fail_knob(admin: Admin, name: str, value: str | None) -> None:
    """The stub's failure knob on the order's Deployment (None removes it)."""
    admin.apps.patch_namespaced_deployment(
        name, "support", {"metadata": {"annotations": {FAIL_ANNOTATION: value}}}
    )


def reached(
    who: Orders, name: str, phase: str, condition: tuple[str, str, str], *, timeout: float = 60
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = who.get("support", name)
        status = (obj or {}).get("status") or {}
        if status.get("phase") == phase and condition in conditions(obj or {"status": status}):
            return obj
        return None

    return wait_for(check, timeout=timeout, what=f"support/{name} {phase} {condition}")


def test_probe_failures_before_and_after_ready_and_recovery(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    name = "probe-paths"
    cordoned = gpu_node("e2e-probe", [(L4, "24Gi")], cordoned=True)
    device_class = product_class("e2e-probe-l4", L4)
    fast = {"probe": {"intervalSeconds": 1, "timeoutSeconds": 1}}
    with (
        module_settings(platform, fast),
        extra_capacity(platform, [cordoned], [device_class]) as publish,
    ):
        admin.create_class("e2e-probe", class_spec(["e2e-probe-l4"]))
        class_ready(platform, "e2e-probe")
        # The node is cordoned until the knob is on, so the very first probe already fails.
        uid = orders(name, {"inferenceServiceClassName": "e2e-probe", "model": hf(QWEN_SMALL)})
        wait_for(lambda: admin.deployment("support", name), timeout=30, what="the Deployment")
        set_fail_knob(admin, name, "500")
        publish([gpu_node("e2e-probe", [(L4, "24Gi")])], [device_class])

        # 1. Failing before the first Ready: Pending, HealthCheckFailed.
        obj = reached(alice, name, "Pending", ("Ready", "False", "HealthCheckFailed"))
        assert conditions(obj) == [
            CLASS,
            MODEL,
            PLANNED,
            WORKLOAD,
            ("Ready", "False", "HealthCheckFailed"),
            ("ScalingHealthy", "Unknown", "NotServing"),
        ]
        assert "HTTP 500" in obj["status"]["conditions"][4]["message"]
        assert obj["status"]["endpoint"]["type"] == "ClusterLocal"
        assert obj["status"]["resolved"]["deviceClass"] == "e2e-probe-l4"
        assert not events_of(platform, uid, ev.ProbeSucceeded)

        # 2. The API answers: Ready.
        set_fail_knob(admin, name, None)
        obj = reached(alice, name, "Ready", ("Ready", "True", "EndpointServing"))
        assert conditions(obj) == READY

        # 3. Persistent failures after Ready: Failed, ServiceUnhealthy.
        set_fail_knob(admin, name, "500")
        obj = reached(alice, name, "Failed", ("Ready", "False", "ServiceUnhealthy"))
        assert conditions(obj) == [
            CLASS,
            MODEL,
            PLANNED,
            WORKLOAD,
            ("Ready", "False", "ServiceUnhealthy"),
            ("ScalingHealthy", "Unknown", "NotServing"),
        ]
        message = obj["status"]["conditions"][4]["message"]
        assert message.startswith("Probes failed 3 times in a row") and "HTTP 500" in message
        # The pod itself never stopped being Ready: only the API failed.
        assert all(
            any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            for p in admin.pods("support", uid)
        )

        # 4. The endpoint recovers: Ready again, the streak forgotten.
        set_fail_knob(admin, name, None)
        obj = reached(alice, name, "Ready", ("Ready", "True", "EndpointServing"))
        assert conditions(obj) == READY
        assert (
            obj["status"]["conditions"][4]["message"] == CATALOGUE[Reason.ENDPOINT_SERVING].meaning
        )
        streak = events_of(platform, uid, ev.ProbeFailed)
        assert len(streak) >= 4  # one before the first Ready, three after it


def test_a_runtime_down_after_ready_is_failed_not_pending(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """The runtime's pods leave Ready (the knob's "crash": /health fails too) after the
    order served: Failed with ServiceUnhealthy, WorkloadReady True with RolledOut, and
    never Pending on the way; a replica back makes it Ready."""
    name = "runtime-down"
    device_class = product_class("e2e-down-l4", L4)
    fast = {"probe": {"intervalSeconds": 1, "timeoutSeconds": 1}}
    with (
        module_settings(platform, fast),
        extra_capacity(platform, [gpu_node("e2e-down", [(L4, "24Gi")])], [device_class]),
    ):
        admin.create_class("e2e-down", class_spec(["e2e-down-l4"]))
        class_ready(platform, "e2e-down")
        uid = orders(name, {"inferenceServiceClassName": "e2e-down", "model": hf(QWEN_SMALL)})
        reached(alice, name, "Ready", ("Ready", "True", "EndpointServing"))
        wait_for(
            lambda: events_of(platform, uid, ev.WorkloadRolledOut),
            timeout=30,
            what="the rollout recorded",
        )

        set_fail_knob(admin, name, CRASH)
        obj = reached(alice, name, "Failed", ("Ready", "False", "ServiceUnhealthy"))
        assert conditions(obj) == [
            CLASS,
            MODEL,
            PLANNED,
            ("WorkloadReady", "True", "RolledOut"),
            ("Ready", "False", "ServiceUnhealthy"),
            ("ScalingHealthy", "Unknown", "NotServing"),
        ]
        assert obj["status"]["conditions"][3]["message"].startswith("0/1 replicas available")
        assert NO_REPLICA_ANSWERS in obj["status"]["conditions"][4]["message"]
        assert not any(
            any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            for p in admin.pods("support", uid)
        )
        # The phases the log's history passed through since the first Ready.
        rows = history_rows(r.event for r in platform.log.read(uid))
        phases = [row.phase_after for row in rows]
        after_ready = phases[phases.index(Phase.READY) :]
        assert Phase.PENDING not in after_ready and after_ready[-1] is Phase.FAILED
        # kubectl describe warns of both: the replicas lost, and the service failing.
        listed = client.CoreV1Api(platform.api("admin")).list_namespaced_event(
            "support", field_selector=f"involvedObject.uid={uid}"
        )
        warned = {e.reason for e in listed.items if e.type == "Warning"}
        assert {"RolledOut", "ServiceUnhealthy"} <= warned

        set_fail_knob(admin, name, None)
        obj = reached(alice, name, "Ready", ("Ready", "True", "EndpointServing"))
        assert conditions(obj) == READY
