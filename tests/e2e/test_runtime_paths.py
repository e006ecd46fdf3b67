"""A runtime that cannot start says so, and who can act on it; fixed, the order goes on.

Its recipe's image comes from a registry the cluster cannot reach (the simulator's
kubelet refuses to pull any image of `unpullable.invalid/`): the pod waits in
ImagePullBackOff for ever. Before, the order read `WorkloadReady=False RolloutInProgress`
("waiting is the right answer") with no Event, however long it waited.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters.platform import LocalPlatform
from adapters.simulator.kubelet import EXIT_ENV, UNPULLABLE_REGISTRY
from fsm import events as ev
from tests.e2e.capacity import (
    QWEN_SMALL,
    class_ready,
    class_spec,
    events_of,
    extra_capacity,
    gpu_node,
    hf,
    product_class,
    wait_order,
    waiting,
)
from tests.e2e.conftest import Admin, Orders, forced_passes, wait_for

pytestmark = pytest.mark.cluster

GROUP, VERSION = "ai.deckhouse.io", "v1alpha1"
A30 = "NVIDIA A30"  # no other test's device class selects it
IMAGE = f"{UNPULLABLE_REGISTRY}vllm:e2e"


def _recipe(name: str) -> dict[str, Any]:
    """The shipped vLLM recipe for the A30 only, preferred, from an unreachable registry."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LaunchRecipe",
        "metadata": {"name": name},
        "spec": {
            "runtime": "vLLM",
            "image": IMAGE,
            "placementModes": ["WholeDevice"],
            "productNames": [A30],
            "formats": ["Safetensors"],
            "quantizations": ["None"],
            "endpointTypes": ["Chat"],
            "toolCalling": {"enabled": True, "parser": "hermes"},
            "args": [
                "--model={modelPath}",
                "--served-model-name={servedModelName}",
                "--port={port}",
                "--tensor-parallel-size={tensorParallelSize}",
                "--gpu-memory-utilization={gpuMemoryUtilization}",
            ],
            "port": 8000,
            "preference": 100,
        },
    }


@contextmanager
def _runtime_that_cannot_start(
    platform: LocalPlatform,
    alice: Orders,
    admin: Admin,
    orders: Any,
    name: str,
    recipe: dict[str, Any],
) -> Iterator[tuple[str, str]]:
    """Order `rt-{name}` under a class of its own whose A30 node only `recipe` can run
    on: yields the order's UID and its WorkloadReady message once that says
    RuntimeNotStarting. Then the administrator deletes the recipe, and the order moves
    to the shipped one and is Ready."""
    order = f"rt-{name}"
    node = gpu_node(f"e2e-{name}", [(A30, "24Gi")])
    with extra_capacity(platform, [node], [product_class(f"e2e-{name}-a30", A30)]):
        admin.custom.create_cluster_custom_object(GROUP, VERSION, "launchrecipes", recipe)
        try:
            admin.create_class(f"e2e-{name}", class_spec([f"e2e-{name}-a30"]))
            class_ready(platform, f"e2e-{name}")
            uid = orders(
                order, {"inferenceServiceClassName": f"e2e-{name}", "model": hf(QWEN_SMALL)}
            )
            obj = wait_order(
                alice,
                order,
                waiting("Pending", condition="WorkloadReady", reason="RuntimeNotStarting"),
                timeout=90,
            )
            (cond,) = [c for c in obj["status"]["conditions"] if c["type"] == "WorkloadReady"]
            yield uid, cond["message"]
        finally:
            try:
                admin.custom.delete_cluster_custom_object(
                    GROUP, VERSION, "launchrecipes", recipe["metadata"]["name"]
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
        alice.wait_phase("support", order, "Ready", timeout=120)


@pytest.mark.timeout(240)
def test_a_runtime_whose_image_cannot_be_pulled_says_so_to_the_admin(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    recipe = _recipe("e2e-unpullable")
    with _runtime_that_cannot_start(platform, alice, admin, orders, "pull", recipe) as (
        uid,
        message,
    ):
        assert message == f'container "runtime": ImagePullBackOff (image "{IMAGE}")'
        told = client.CoreV1Api(platform.api("admin")).list_namespaced_event(
            "support", field_selector=f"involvedObject.uid={uid}"
        )
        warned = [e for e in told.items if e.reason == "RuntimeNotStarting"]
        assert [e.type for e in warned] == ["Warning"]  # someone must act: the admin
        # The pull is retried on the kubelet's back-off; the order says it once.
        assert forced_passes(platform, uid) == 0
    image = admin.deployment("support", "rt-pull").spec.template.spec.containers[0].image
    assert image != IMAGE


@pytest.mark.timeout(240)
def test_a_runtime_that_exits_as_it_starts_says_its_last_exit_once(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """A runtime killed for memory as it loads the model restarts on a growing back-off,
    each restart a new pod status with a new back-off in its message. The order says
    CrashLoopBackOff and the last exit once, not once per restart."""
    recipe = _recipe("e2e-exits")
    recipe["spec"]["image"] = "vllm/vllm-openai:v0.9.2"
    recipe["spec"]["env"] = [{"name": EXIT_ENV, "value": "OOMKilled"}]
    with _runtime_that_cannot_start(platform, alice, admin, orders, "exits", recipe) as (
        uid,
        message,
    ):
        assert message == 'container "runtime": CrashLoopBackOff (last exit: OOMKilled)'
        observed = len(events_of(platform, uid, ev.WorkloadObserved))

        def restarts() -> int:
            return max(
                (
                    s.restart_count
                    for p in admin.pods("support", uid)
                    for s in p.status.container_statuses or ()
                ),
                default=0,
            )

        seen = restarts()
        wait_for(lambda: restarts() >= seen + 2 or None, timeout=30, what="two more restarts")
        assert forced_passes(platform, uid) == 0
        assert len(events_of(platform, uid, ev.WorkloadObserved)) == observed


@pytest.mark.timeout(240)
def test_pods_the_namespace_refuses_say_why_not_a_rollout_to_wait_for(
    platform: LocalPlatform, alice: Orders, orders: Any
) -> None:
    """A LimitRange (a ResourceQuota, an admission webhook alike) refuses the runtime's
    pods: no pod comes to say anything, and the order said "0/1 replicas available", a
    rollout to wait for, for ever. The Deployment's ReplicaFailure says why."""
    core = client.CoreV1Api(platform.api("admin"))
    limit = {
        "metadata": {"name": "e2e-container-memory"},
        "spec": {"limits": [{"type": "Container", "max": {"memory": "1Gi"}}]},
    }
    core.create_namespaced_limit_range("support", limit)
    try:
        orders("rt-refused", {"inferenceServiceClassName": "default-llm", "model": hf(QWEN_SMALL)})
        obj = wait_order(
            alice,
            "rt-refused",
            waiting("Pending", condition="WorkloadReady", reason="RuntimeNotStarting"),
            timeout=90,
        )
        (cond,) = [c for c in obj["status"]["conditions"] if c["type"] == "WorkloadReady"]
        assert cond["message"].startswith(
            "the runtime's pods cannot be created: a pod is forbidden: maximum memory usage "
            "per Container is 1Gi"
        )
    finally:
        core.delete_namespaced_limit_range("e2e-container-memory", "support")
