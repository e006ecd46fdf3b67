"""Capacity promised once across priorities: what a take and a give-back hand out is seen
by the next plan (adapters/kubernetes/planning.py, reconciling.py; docs/priority.md).

Against the pass's fake seams: one or two A100s, orders of a low and a high priority
class. Each test hands one device to one order and asserts that no other plan, and no
other victim's give-back, is handed it too.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest

from adapters.kubernetes import errors, queueing
from fsm import events as ev
from tests.adapters.kubernetes.test_capacity_routing import (
    _pod,
    _serving,
    priority_classes,
    rolled_out,
)
from tests.adapters.kubernetes.test_pass import Bed, external_token_class
from tests.support import fakes
from tests.support.planner_inputs import claim


def _unwatched_deployments(bed: Bed) -> dict[str, Any]:
    """The API server's Deployments, as the bed's patches write them (conditional on the
    version asked: 409 otherwise) and live reads see them, their watch events late:
    the cache keeps the older copies. The returned map is the server's, by name."""
    server: dict[str, Any] = {}
    read = bed.writer.get

    def live_get(resource: Any, namespace: str, name: str) -> Any:
        if resource.kind == "Deployment" and name in server:
            return copy.deepcopy(server[name])
        return read(resource, namespace, name)

    def unwatched_patch(resource: Any, namespace: str, name: str, body: Any) -> Any:
        live = copy.deepcopy(server.get(name) or bed.child(resource.kind, name))
        asked = body["metadata"].get("resourceVersion")
        if asked and asked != live["metadata"]["resourceVersion"]:
            raise errors.APIConflictError("the object has been modified", status=409)
        merged = fakes._merge_patch(live, body)
        merged["metadata"]["resourceVersion"] = str(next(fakes._RV))
        server[name] = merged
        return copy.deepcopy(merged)

    bed.writer.get = live_get  # type: ignore[method-assign]
    bed.writer.patch = unwatched_patch  # type: ignore[method-assign]
    return server


def _taken(tmp_path: Path) -> tuple[Bed, str, str]:
    """One A100: `victim` (low) served on it, `taker` (high) took it, the victim's pod
    and claim went, and the taker serves there."""
    bed = Bed(tmp_path, a100s=1)
    priority_classes(bed)
    victim = bed.order("victim", klass="low")
    bed.settle(victim)
    _serving(bed, victim, "victim", "gpu-0")
    bed.settle(victim)
    taker = bed.order("taker", klass="high")
    bed.settle(taker, passes=1)
    assert _replicas(bed, "victim") == 0
    _gone(bed, "victim")
    bed.settle(victim)
    _serving(bed, taker, "taker", "gpu-0")
    bed.settle(taker)
    return bed, victim, taker


def _cached(bed: Bed, kind: str, name: str) -> dict[str, Any]:
    informer = {"ResourceClaim": bed.world.resource_claims, "Pod": bed.world.pods}[kind]
    obj = informer.get_by_name("support", name)
    assert obj is not None, (kind, name)
    return obj


def _gone(bed: Bed, *names: str) -> None:
    """The pods and claims of the orders `names` are gone (their grace periods over)."""
    for name in names:
        fakes.delete(bed.world, _cached(bed, "Pod", f"{name}-0"))
        fakes.delete(bed.world, _cached(bed, "ResourceClaim", f"{name}-gpu"))


def _replicas(bed: Bed, name: str) -> int:
    deployment = bed.child("Deployment", name)
    assert deployment is not None
    return int(deployment["spec"]["replicas"])


@pytest.mark.parametrize("leader", ["same", "new"])
def test_a_device_given_back_is_not_promised_to_the_next_plan(tmp_path: Path, leader: str) -> None:
    """The taker is deleted and its A100 frees; the victim's pass scales it back up. A
    newcomer planned before the victim's next pass counted the victim's demand from the
    replicas that pass had seen (zero: it holds no place) and was given the A100 too.
    A new leader, whose log says zero, counts what the Deployment asks for as well."""
    bed, victim, taker = _taken(tmp_path)
    newcomer = bed.order("newcomer", klass="low")
    bed.settle(newcomer, passes=1)
    assert [e.reason.value for e in bed.events(newcomer, ev.PlanFailed)] == ["NoCapacity"]

    fakes.delete(bed.world, bed.world.orders.get(taker))
    _gone(bed, "taker")
    bed.settle(taker, passes=1)
    bed.settle(victim, passes=1)
    assert _replicas(bed, "victim") == 1, "given back"
    if leader == "new":
        bed.reconciler = bed.new_reconciler()
    bed.settle(newcomer, passes=1)
    assert not bed.events(newcomer, ev.PlanComputed)
    bed.log.close()


def test_one_free_device_is_given_back_to_one_victim(tmp_path: Path) -> None:
    """Two victims of one taker; the taker is deleted before its pods were placed, and a
    batch job's claim takes one of the two A100s. Each victim's give-back saw the other's
    as no demand (its pass had not seen it yet), and both were given the one free A100."""
    bed = Bed(tmp_path, a100s=2)
    priority_classes(bed, high_replicas=2)
    victims = {name: bed.order(name, klass="low") for name in ("v1", "v2")}
    for device, (name, uid) in enumerate(victims.items()):
        bed.settle(uid)
        _serving(bed, uid, name, f"gpu-{device}")
        bed.settle(uid)
    taker = bed.order("taker", klass="high")
    bed.settle(taker, passes=2)
    assert [_replicas(bed, name) for name in victims] == [0, 0]
    _gone(bed, *victims)
    for uid in victims.values():
        bed.settle(uid)
    fakes.delete(bed.world, bed.world.orders.get(taker))
    bed.settle(taker, passes=1)
    fakes.put(bed.world, claim("batch-job", "node-a", "gpu-1", namespace="batch"))

    for uid in victims.values():
        bed.settle(uid, passes=1)
    assert sorted(_replicas(bed, name) for name in victims) == [0, 1]
    bed.log.close()


def test_a_device_being_freed_for_one_taker_is_not_promised_to_another(tmp_path: Path) -> None:
    """h1 takes the low order's replica: its Deployment is scaled to 0, its pod is in its
    grace period and its claim still allocated. h2, planned meanwhile at h1's priority,
    saw h1's plan hold nothing (the device was not free) and was planned onto the same
    device, freeing the same claim; its take then took nothing."""
    bed = Bed(tmp_path, a100s=1)
    priority_classes(bed)
    low = bed.order("low", klass="low")
    bed.settle(low)
    _serving(bed, low, "low", "gpu-0")
    bed.settle(low)
    h1 = bed.order("h1", klass="high")
    bed.settle(h1, passes=1)
    assert [e.reclaims for e in bed.events(h1, ev.PlanComputed)] == [("support/low-gpu",)]
    assert _replicas(bed, "low") == 0

    h2 = bed.order("h2", klass="high")
    bed.settle(h2)
    assert not bed.events(h2, ev.PlanComputed)
    assert [e.reason.value for e in bed.events(h2, ev.PlanFailed)] == ["NoCapacity"]
    assert len(bed.events(low, ev.CapacityTaken)) == 1
    # The claim gone, h1's pod is given the device: h2 still waits.
    _gone(bed, "low")
    bed.settle(low)
    _serving(bed, h1, "h1", "gpu-0")
    bed.settle(h1)
    bed.settle(h2)
    assert not bed.events(h2, ev.PlanComputed)
    bed.log.close()


def test_a_device_given_back_is_counted_before_the_watch_brings_the_scale(
    tmp_path: Path,
) -> None:
    """The API server takes the give-back's scale and its watch event is late (a busy
    server, a watch reconnecting). Waiting for it under the planning lock held every plan
    up to the wait's bound and then handed the device out again all the same: the scale
    is counted as written, whatever the cache says yet; the victim's next pass, decided
    from the older copy, is refused (409) and waits for the watch; and once the cache
    moves on, the note gives way to it."""
    bed, victim, taker = _taken(tmp_path)
    fakes.delete(bed.world, bed.world.orders.get(taker))
    _gone(bed, "taker")
    bed.settle(taker, passes=1)
    server = _unwatched_deployments(bed)
    started = time.monotonic()
    bed.settle(victim, passes=1)
    assert time.monotonic() - started < 1.0  # nothing waits for the watch
    assert server["victim"]["spec"]["replicas"] == 1 and _replicas(bed, "victim") == 0
    bed.reconciler.reconcile(victim)  # decided again from the older copy: 409, no raise
    newcomer = bed.order("newcomer", klass="low")
    bed.settle(newcomer, passes=1)
    assert not bed.events(newcomer, ev.PlanComputed)
    # The cache moves past the give-back (here an HPA's later scale to 0 arrives first):
    # counted as the cache says, the note forgotten.
    later = copy.deepcopy(server["victim"])
    later["spec"]["replicas"] = 0
    later["metadata"]["resourceVersion"] = str(next(fakes._RV))
    fakes.put(bed.world, later)
    bed.settle(newcomer, passes=1)
    (planned,) = bed.events(newcomer, ev.PlanComputed)
    assert planned.plan.devices
    bed.log.close()


def _pod_named(uid: str, pod: str, node: str) -> dict[str, Any]:
    p = _pod(uid, "x", node)
    p["metadata"]["name"] = pod
    return p


def test_a_give_back_decided_from_a_read_ahead_of_the_cache_waits_for_it(
    tmp_path: Path,
) -> None:
    """Two give-backs to one victim within one watch lag: the second is decided from a
    live read of the Deployment (the first give-back's write, and a status after it) that
    the cache does not show yet. Carried out, its note (kept while the cache shows the
    version decided from) was dropped by the next snapshot, which counted the victim from
    the older copy: both A100s given back were promised to a newcomer too."""
    bed = Bed(tmp_path, a100s=2)
    priority_classes(bed, low_replicas=2)
    victim = bed.order("victim", klass="low")
    bed.settle(victim)
    dep = bed.child("Deployment", "victim")
    assert dep is not None and dep["spec"]["replicas"] == 2
    fakes.put(bed.world, rolled_out(dep, 2))
    for i in range(2):
        fakes.put(bed.world, _pod_named(victim, f"victim-{i}", "node-a"))
        fakes.put(
            bed.world,
            claim(f"victim-gpu-{i}", "node-a", f"gpu-{i}", holder=victim, namespace="support"),
        )
    bed.settle(victim)
    takers = {}
    for t in ("t1", "t2"):
        uid = bed.order(t, klass="high")
        takers[t] = uid
        bed.settle(uid, passes=1)
        (planned,) = bed.events(uid, ev.PlanComputed)
        dev = planned.plan.devices[0].rsplit("/", 1)[1]
        i = int(dev[-1])
        fakes.delete(bed.world, _cached(bed, "Pod", f"victim-{i}"))
        fakes.delete(bed.world, _cached(bed, "ResourceClaim", f"victim-gpu-{i}"))
        bed.settle(victim)
        fakes.put(bed.world, _pod_named(uid, f"{t}-0", "node-a"))
        fakes.put(bed.world, claim(f"{t}-gpu", "node-a", dev, holder=uid, namespace="support"))
        bed.settle(uid)
    assert _replicas(bed, "victim") == 0

    server = _unwatched_deployments(bed)
    for t, uid in takers.items():
        fakes.delete(bed.world, bed.world.orders.get(uid))
        fakes.delete(bed.world, _cached(bed, "Pod", f"{t}-0"))
        fakes.delete(bed.world, _cached(bed, "ResourceClaim", f"{t}-gpu"))
        bed.settle(uid, passes=1)
        bed.settle(victim, passes=1)
        if t == "t1":
            # The first give-back's replica placed: its pod bound, its claim allocated (the
            # claim watch is current); the deployment controller wrote the Deployment's
            # status on the server, its watch event late like the give-back's.
            (planned,) = bed.events(uid, ev.PlanComputed)
            dev = planned.plan.devices[0].rsplit("/", 1)[1]
            fakes.put(bed.world, _pod_named(victim, "victim-new", "node-a"))
            fakes.put(
                bed.world,
                claim("victim-gpu-new", "node-a", dev, holder=victim, namespace="support"),
            )
            status = copy.deepcopy(server["victim"])
            status["status"] = {
                "replicas": 1,
                "readyReplicas": 1,
                "availableReplicas": 1,
                "updatedReplicas": 1,
            }
            status["metadata"]["resourceVersion"] = str(next(fakes._RV))
            server["victim"] = status
    klass = external_token_class("one")
    klass["spec"]["scalingPolicy"] = {
        "minReplicas": 1,
        "maxReplicas": 1,
        "allowedPriorityClassNames": ["inference-low"],
    }
    fakes.put(bed.world, klass)
    newcomer = bed.order("newcomer", klass="one")
    bed.settle(newcomer, passes=1)
    assert not bed.events(newcomer, ev.PlanComputed)
    bed.log.close()


def test_a_give_back_put_off_for_the_cache_is_decided_again_without_a_wake(
    tmp_path: Path,
) -> None:
    """The live copy of the victim's Deployment is one write ahead of the cache (a status
    condition's time): the give-back waits for the cache. That write's watch event
    changes only what the cache trims and wakes no one: left to it, the victim stayed at
    0, its A100 free, until the resync five minutes on. The pass asks to be run again."""
    bed, victim, taker = _taken(tmp_path)
    deployment = bed.child("Deployment", "victim")
    assert deployment is not None
    cached = fakes.put(bed.world, rolled_out(deployment, 0))
    bed.settle(victim, passes=2)
    ahead = copy.deepcopy(cached)
    ahead["status"]["conditions"] = [
        {"type": "Progressing", "status": "True", "lastUpdateTime": "2026-01-01T00:00:01Z"}
    ]
    ahead["metadata"]["resourceVersion"] = str(next(fakes._RV))
    read = bed.writer.get

    def live_get(resource: Any, namespace: str, name: str) -> Any:
        if resource.kind == "Deployment" and name == "victim":
            return copy.deepcopy(ahead)
        return read(resource, namespace, name)

    bed.writer.get = live_get  # type: ignore[method-assign]
    fakes.delete(bed.world, bed.world.orders.get(taker))
    _gone(bed, "taker")
    bed.settle(taker, passes=1)
    outcome = bed.reconciler.reconcile(victim)
    assert _replicas(bed, "victim") == 0  # put off: the cache is behind the live read
    assert isinstance(outcome, queueing.RequeueAfter) and outcome.seconds <= 2.0
    bed.world.deployments._apply("MODIFIED", copy.deepcopy(ahead))  # late, wakes no one
    bed.reconciler.reconcile(victim)  # the requeue's pass
    assert _replicas(bed, "victim") == 1
    bed.log.close()
