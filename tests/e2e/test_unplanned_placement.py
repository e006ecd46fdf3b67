"""Pods land where no plan said, as on a real cluster, and the orders still converge.

The planner names a place for each plan (`Plan.devices`), but nothing pins a pod there:
the claim asks for a device of a class, and a real scheduler picks among the nodes where
it fits by its scores, then at random. The simulator's scheduler walks nodes by name, as
the planner does, so the two always agreed and a controller that relied on its own
placement would pass every other test. Here it picks a seeded random node
(`Scheduler.choose_nodes`): replicas land elsewhere, two-device replicas may find their
planned node half taken, and the capacity counted for waiting plans is off for a while.

What must hold once the bed settles, whatever the seed: every order is Ready, or it
waits, says so in its status, and truly has no room (no node has its replica's devices
free). A waiting order beside free room it could use is a controller that stopped
converging; an order said to be Ready without its pods is a status that lies.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.kubernetes.rendering import UID_LABEL
from adapters.platform import LocalPlatform
from fsm import events as ev
from tests.e2e.capacity import (
    QWEN_7B,
    QWEN_SMALL,
    class_ready,
    class_spec,
    events_of,
    extra_capacity,
    gpu_node,
    hf,
    product_class,
)
from tests.e2e.conftest import Admin, Orders, forced_passes, wait_for

pytestmark = pytest.mark.cluster

A2 = "NVIDIA A2"  # 16 GiB: the 7B model needs two on one node; no other test selects it
NODES = 3
DEVICES_PER_NODE = 2
NAMESPACE = "support"


@pytest.fixture(name="unplanned")
def unplanned_fixture(platform: LocalPlatform) -> Iterator[None]:
    yield
    platform.simulator.scheduler.choose_nodes(None)


def _free_by_node(admin: Admin, nodes: list[str]) -> Counter[str]:
    """Devices of the test's nodes no claim holds, by node, from the claims themselves."""
    held: Counter[str] = Counter()
    claims = admin.custom.list_namespaced_custom_object(
        "resource.k8s.io", "v1", NAMESPACE, "resourceclaims"
    )["items"]
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or ():
            if result.get("pool") in nodes:
                held[result["pool"]] += 1
    return Counter({node: DEVICES_PER_NODE - held[node] for node in nodes})


WAITING = {("Planned", "NoCapacity"), ("WorkloadReady", "DevicesNotAllocated")}


def _settled(
    alice: Orders, admin: Admin, wanted: dict[str, int], nodes: list[str]
) -> dict[str, str] | None:
    """Each order's phase once every one is Ready or waits, saying it waits for devices,
    with no room it could use; None before."""
    free = _free_by_node(admin, nodes)
    phases: dict[str, str] = {}
    for name, devices in wanted.items():
        status = (alice.get(NAMESPACE, name) or {}).get("status") or {}
        phases[name] = status.get("phase", "")
        if phases[name] == "Ready":
            continue
        said = {(c["type"], c["reason"]) for c in status.get("conditions") or ()}
        if phases[name] != "Pending" or not said & WAITING or max(free.values()) >= devices:
            return None
    return phases


def _held(admin: Admin, uid: str) -> set[tuple[str, ...]]:
    """The devices each of the order's claims holds, as the plan names them."""
    claims = admin.custom.list_namespaced_custom_object(
        "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", label_selector=f"{UID_LABEL}={uid}"
    )["items"]
    held = set()
    for claim in claims:
        results = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        devices = [f"{r['driver']}/{r['pool']}/{r['device']}" for r in results.get("results") or ()]
        if devices:
            held.add(tuple(sorted(devices)))
    return held


def _round(platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any, seed: int) -> bool:
    """One seed's orders to where they settle; True when some pod is not where its plan
    said. The orders are deleted before their nodes go."""
    nodes = [f"e2e-unplanned-{seed}-{i}" for i in range(NODES)]
    device_class = f"e2e-unplanned-{seed}-a2"
    klass = f"e2e-unplanned-{seed}"
    capacity = [gpu_node(n, [(A2, "16Gi")] * DEVICES_PER_NODE) for n in nodes]
    with extra_capacity(platform, capacity, [product_class(device_class, A2)]):
        spec = class_spec([device_class])
        spec["acceleratorPolicy"]["maxAcceleratorCount"] = 2
        admin.create_class(klass, spec)
        class_ready(platform, klass)
        platform.simulator.scheduler.choose_nodes(seed)
        # Two one-device orders, then two that need a node's both devices: six devices
        # in all, as many as the nodes hold, so where the first two land decides
        # whether both big ones fit.
        wanted = {
            f"small-{seed}-a": 1,
            f"small-{seed}-b": 1,
            f"big-{seed}-a": 2,
            f"big-{seed}-b": 2,
        }
        uids = {
            name: orders(
                name,
                {
                    "inferenceServiceClassName": klass,
                    "model": hf(QWEN_SMALL if n == 1 else QWEN_7B),
                },
            )
            for name, n in wanted.items()
        }
        phases = wait_for(
            lambda: _settled(alice, admin, wanted, nodes),
            timeout=180,
            what=f"seed {seed}: every order Ready, or waiting for devices with no room to use",
        )
        assert list(phases.values()).count("Ready") >= 3, phases  # one big one may not fit
        for name, uid in uids.items():
            if phases[name] != "Ready":
                # Waiting is quiet: a pass over it changes nothing and writes nothing.
                assert forced_passes(platform, uid) == 0, name

        planned = {
            name: {tuple(sorted(events_of(platform, uid, ev.PlanComputed)[-1].plan.devices))}
            for name, uid in uids.items()
        }
        held = {name: _held(admin, uid) for name, uid in uids.items()}
        for name in wanted:
            alice.delete(NAMESPACE, name)
        wait_for(
            lambda: all(alice.get(NAMESPACE, name) is None for name in wanted),
            timeout=60,
            what=f"seed {seed}: the orders deleted",
        )
        return any(planned[name] != held[name] for name in wanted if held[name])


@pytest.mark.timeout(600)
def test_orders_converge_where_the_scheduler_puts_their_pods(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any, unplanned: None
) -> None:
    # Each pod's node is drawn as it is scheduled, and the pods' order is the bed's
    # timing: one seed lands every pod where its plan said about one time in twenty,
    # three seeds all of them about one in eight thousand.
    astray = [_round(platform, alice, admin, orders, seed) for seed in (1, 2, 3)]
    assert any(astray), "no pod landed off its plan: the test did not test"
