"""Capacity events wake only the orders they can affect (issue 11: O(affected), not O(N)).

Against the pass's fake seams: five orders serving on five A100s (plan in force, pod on
a node, claim allocated) and a sixth that found no capacity. A ResourceClaim event must
wake its own order and the one waiting, a ResourceSlice event the waiting one; before,
each woke all six, so a rollout of N orders cost O(N²) passes. Counts, not times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.kubernetes.arbiter import Arbiter
from adapters.kubernetes.rendering import UID_LABEL
from adapters.kubernetes.world import BY_UNBOUND
from fsm import decide
from fsm import events as ev
from fsm.placement import inventory
from tests.adapters.kubernetes.test_pass import Bed, external_token_class, order
from tests.support import fakes
from tests.support.planner_inputs import A100, claim, gpu, model, priority_class, resource_slice

SERVING = 5
# A class's scaling policy whose orders run at the seed's high priority.
HIGH_PRIORITY = {
    "minReplicas": 1,
    "maxReplicas": 1,
    "allowedPriorityClassNames": ["inference-high"],
}


def rolled_out(deployment: dict[str, Any], replicas: int) -> dict[str, Any]:
    """`deployment` with the status of a rollout complete at `replicas` available."""
    deployment["status"] = {
        "replicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "updatedReplicas": replicas,
        "observedGeneration": deployment["metadata"]["generation"],
    }
    return deployment


def _serving(bed: Bed, uid: str, name: str, device: str, node: str = "node-a") -> None:
    """The order's Deployment rolled out, its one pod on `node`, its claim allocated."""
    deployment = bed.child("Deployment", name)
    assert deployment is not None
    fakes.put(bed.world, rolled_out(deployment, 1))
    fakes.put(bed.world, _pod(uid, name, node=node))
    fakes.put(bed.world, claim(f"{name}-gpu", node, device, holder=uid, namespace="support"))


def priority_classes(bed: Bed, *, low_replicas: int = 1, high_replicas: int = 1) -> None:
    """Classes `low` (PriorityClass inference-low, 100) and `high` (inference-high, 1000),
    each with a fixed number of replicas."""
    for name, value in (("inference-low", 100), ("inference-high", 1000)):
        fakes.put(bed.world, priority_class(name, value))
    for name, priority, replicas in (
        ("low", "inference-low", low_replicas),
        ("high", "inference-high", high_replicas),
    ):
        klass = external_token_class(name)
        klass["spec"]["scalingPolicy"] = {
            "minReplicas": replicas,
            "maxReplicas": replicas,
            "allowedPriorityClassNames": [priority],
        }
        fakes.put(bed.world, klass)


def _pod(uid: str, name: str, node: str | None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-0", "namespace": "support", "labels": {UID_LABEL: uid}},
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if node else "False"}]},
    }


def test_a_capacity_event_wakes_only_the_orders_it_can_affect(tmp_path: Path) -> None:
    bed = Bed(tmp_path, a100s=SERVING)
    woken: list[str] = []
    bed.world.watch_changes(woken.extend, bed.reconciler.waiting_for_capacity)
    serving = []
    for i in range(SERVING):
        uid = bed.order(f"llm-{i}")
        bed.settle(uid)
        _serving(bed, uid, f"llm-{i}", f"gpu-{i}")
        bed.settle(uid)
        serving.append(uid)
    waiter = bed.order("waiter")
    bed.settle(waiter)
    (verdict,) = bed.events(waiter, ev.PlanFailed)
    assert verdict.reason.value == "NoCapacity"
    assert bed.reconciler.waiting_for_capacity() == {waiter}

    woken.clear()
    fakes.put(
        bed.world, claim("llm-0-gpu", "node-a", "gpu-0", holder=serving[0], namespace="support")
    )
    assert sorted(woken) == sorted([serving[0], waiter])  # before: all six

    woken.clear()
    fakes.put(bed.world, resource_slice("node-b", gpu("gpu-b0", A100, "80Gi")))
    assert woken == [waiter]

    # The new device frees the waiter: once planned and rolled out it waits no more.
    bed.settle(waiter)
    assert bed.events(waiter, ev.PlanComputed)
    assert waiter not in bed.reconciler.waiting_for_capacity()
    bed.log.close()


def _looking_at_each_state(bed: Bed) -> set[str]:
    """What `waiting_for_capacity` answers, found as it was before its sets: every
    order's state looked at, one by one."""
    reconciler, states = bed.reconciler, bed.reconciler.states()
    unbound = bed.world.pods.index_values(BY_UNBOUND)
    could_reclaim = reconciler.planning.could_reclaim()
    found = {uid for uid in bed.world.orders.uids() if uid not in states}
    found |= {uid for uid, state in states.items() if decide.waits_for_capacity(state)}
    pods = {uid for uid, state in states.items() if decide.pods_wait_for_devices(state)}
    for uid in (pods | set(unbound)) - found:
        state = states.get(uid)
        if state is None or Arbiter.capacity_may_matter(state, could_reclaim):
            found.add(uid)
    return found


def _routed(bed: Bed) -> set[str]:
    """The orders a capacity event wakes by their states, checked against a look at each."""
    found = bed.reconciler.waiting_for_capacity(bed.world.pods.index_values(BY_UNBOUND))
    assert found == _looking_at_each_state(bed)
    return found


def test_a_pod_not_on_a_node_is_woken_by_capacity_only_where_the_arbiter_may_act(
    tmp_path: Path,
) -> None:
    """An order whose pod waits for the scheduler decides nothing new on a capacity
    change, unless the arbiter may: to reclaim (a lower priority exists) or to grow (a
    replica serves). Woken by every claim event, a rollout's waiting orders took a pass
    each per allocation anywhere in the cluster."""
    bed = Bed(tmp_path, a100s=3)
    fakes.put(bed.world, priority_class("inference-high", 1000))
    urgent = external_token_class("urgent")
    urgent["spec"]["scalingPolicy"] = HIGH_PRIORITY
    fakes.put(bed.world, urgent)
    woken: list[str] = []
    bed.world.watch_changes(woken.extend, bed.reconciler.waiting_for_capacity)
    placed, pending = bed.order("llm-0"), bed.order("llm-1")
    for uid in (placed, pending):
        bed.settle(uid)
    _serving(bed, placed, "llm-0", "gpu-0")
    fakes.put(bed.world, _pod(pending, "llm-1", node=None))  # the scheduler has not placed it
    bed.settle(placed)
    bed.settle(pending)
    assert bed.reconciler.waiting_for_capacity() == set()  # both planned, none failed
    assert _routed(bed) == set()  # and so by a look at each state

    woken.clear()
    fakes.put(bed.world, claim("other", "node-a", "gpu-1", namespace="x"))
    assert woken == []  # one priority and nothing serving: no ruling can change

    # The waiting one placed too (on the last device): a higher plan now finds no waiting
    # place to take first (56f3f45), only running replicas.
    _serving(bed, pending, "llm-1", "gpu-2")
    bed.settle(pending)
    high = bed.order("llm-2", klass="urgent")
    bed.settle(high)
    policy = bed.reconciler.states()[high].policy
    assert policy is not None and policy.constraints.priority_class_name == "inference-high"
    fakes.put(bed.world, _pod(high, "llm-2", node=None))
    bed.settle(high)
    woken.clear()
    fakes.put(bed.world, claim("other", "node-a", "gpu-2", namespace="x"))
    # It may take from the two below it, and took the first serving one's replica: that
    # one is woken as an order whose replicas a higher priority took; the other serves,
    # and growth is judged while a replica serves.
    assert sorted(woken) == sorted([high, placed, pending])
    assert _routed(bed) == {high, placed, pending}  # placed: a higher priority took from it
    taken = bed.child("Deployment", "llm-0")
    assert (
        taken is not None and "ai.deckhouse.io/capacity-taken" in taken["metadata"]["annotations"]
    )
    # The taker by UID only: the victim's tenant reads its own Deployment.
    record = taken["metadata"]["annotations"]["ai.deckhouse.io/capacity-taken"]
    assert "llm-2" not in record and f"uid:{high}" in record

    deployment = bed.child("Deployment", "llm-1")
    assert deployment is not None
    deployment["spec"]["replicas"] = 2
    deployment["status"] = {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1}
    fakes.put(bed.world, deployment)
    bed.settle(pending)
    woken.clear()
    fakes.put(bed.world, claim("other", "node-a", "gpu-1", namespace="x"))
    # One serves and wants more (growth); the high one and the one it took from, as before.
    assert sorted(woken) == sorted([pending, high, placed])
    assert _routed(bed) == {pending, high, placed}
    bed.log.close()


def test_capacity_is_parsed_once_per_change_not_once_per_pass(tmp_path: Path) -> None:
    bed = Bed(tmp_path, a100s=SERVING)
    uids = [bed.order(f"llm-{i}") for i in range(SERVING)]
    for i, uid in enumerate(uids):
        bed.settle(uid)
        fakes.put(bed.world, _pod(uid, f"llm-{i}", node=None))  # pods waiting: capacity read
    planning = bed.reconciler.planning
    before = planning.parses
    for uid in uids * 3:
        bed.reconciler.reconcile(uid)
    assert planning.parses == before  # fifteen passes, nothing changed: no parse
    fakes.put(bed.world, claim("llm-0-gpu", "node-a", "gpu-0", holder=uids[0], namespace="support"))
    for uid in uids:
        bed.reconciler.reconcile(uid)
    free = planning.free_units("gpu.nvidia.com")
    assert free == (SERVING - 1) * 100  # the new capacity is what is read
    assert planning.parses == before + 1  # one claim changed: parsed once, shared by all
    bed.log.close()


def test_pods_waiting_at_one_priority_build_no_demand_snapshot(tmp_path: Path) -> None:
    """The arbiter judged every pass of an order whose pod waits from a demand snapshot
    (every other waiting plan placed again: 9 % of the controller's CPU in a rollout of
    500). With nothing of lower priority to free and no replica available, it needs none."""
    bed = Bed(tmp_path, a100s=SERVING)
    fakes.put(bed.world, priority_class("inference-high", 1000))
    uids = [bed.order(f"llm-{i}") for i in range(SERVING)]
    for i, uid in enumerate(uids):
        bed.settle(uid)
        fakes.put(bed.world, _pod(uid, f"llm-{i}", node=None))
    planning = bed.reconciler.planning
    before = planning.snapshots
    for uid in uids * 3:
        bed.reconciler.reconcile(uid)
    assert planning.snapshots == before  # fifteen passes of waiting pods: no snapshot
    # The question it asks instead: would an order of a higher priority free anything?
    could_reclaim = planning.could_reclaim()
    assert not could_reclaim(None)  # all five at the default priority
    assert could_reclaim("inference-high")  # the five are lower
    assert not could_reclaim("no-such-class")  # unknown: reclaims nothing
    bed.log.close()


def test_the_priorities_in_use_follow_the_kept_states(tmp_path: Path) -> None:
    """`could_reclaim` asks which priority classes the orders name on every capacity
    event: the reconciler keeps them as it keeps the states (it read every state's
    policy each time), through a class edit and a deletion."""
    bed = Bed(tmp_path, a100s=3)
    fakes.put(bed.world, priority_class("inference-high", 1000))
    urgent = external_token_class("urgent")
    urgent["spec"]["scalingPolicy"] = HIGH_PRIORITY
    fakes.put(bed.world, urgent)
    low, high = bed.order("llm-0"), bed.order("llm-1", "urgent")
    for uid in (low, high):
        bed.settle(uid)

    def in_use() -> list[str | None]:
        found = bed.reconciler.priorities_in_use()
        every = {
            s.policy.constraints.priority_class_name
            for s in bed.reconciler.states().values()
            if s.policy
        }
        assert set(found) == every and len(found) == len(every)  # as reading every state
        return sorted(found, key=str)

    assert in_use() == [None, "inference-high"]
    could_reclaim = bed.reconciler.planning.could_reclaim()
    assert could_reclaim("inference-high") and not could_reclaim(None)
    order = bed.world.orders.get(low)
    assert order is not None
    fakes.drop(bed.world, order)
    bed.settle(low)
    assert in_use() == ["inference-high"]
    assert not bed.reconciler.planning.could_reclaim()("inference-high")  # none below it
    del urgent["spec"]["scalingPolicy"]  # the class names no priority any more
    fakes.put(bed.world, urgent)
    bed.settle(high)
    assert in_use() == [None]
    bed.log.close()


def test_a_claim_event_parses_that_claim_again_not_the_slices(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """In a rollout the claims change with every order and the slices hardly ever: each
    kind is parsed again only when it changed (the slices were most of a parse), and of
    the claims only the one that changed (all of them were, O(claims) an allocation)."""
    bed = Bed(tmp_path, a100s=SERVING)
    for index in range(3):
        fakes.put(bed.world, claim(f"other-{index}", "node-a", f"gpu-{index + 1}"))
    uid = bed.order("llm-0")
    bed.settle(uid)
    planning = bed.reconciler.planning
    parsed: list[str] = []
    for name in ("parse_devices", "parse_device_classes"):
        real = getattr(inventory, name)
        monkeypatch.setattr(
            inventory, name, lambda objs, *a, _n=name, _r=real: parsed.append(_n) or _r(objs, *a)
        )
    claims_before = planning.claims_parsed
    fakes.put(bed.world, claim("llm-0-gpu", "node-a", "gpu-0", holder=uid, namespace="support"))
    assert planning.free_units("gpu.nvidia.com") == (SERVING - 4) * 100
    assert planning.free_units("gpu.nvidia.com") == (SERVING - 4) * 100
    assert (parsed, planning.claims_parsed - claims_before) == ([], 1)
    fakes.put(bed.world, resource_slice("node-b", gpu("gpu-b0", A100, "80Gi")))
    assert planning.free_units("gpu.nvidia.com") == (SERVING - 3) * 100
    assert (parsed, planning.claims_parsed - claims_before) == (["parse_devices"], 1)
    bed.log.close()


def test_a_cached_pod_keeps_only_what_the_controller_reads() -> None:
    """Memory per order: a pod's containers, volumes and container statuses were most of
    its size in the cache, and the controller reads only why a container does not start
    (observing.py): its name, image, waiting reason and message, and last exit."""
    world = fakes.world()
    pod = _pod("uid-1", "llm", node="node-a")
    pod["metadata"]["annotations"] = {"example/endpoint": "http://127.0.0.1:1"}
    pod["spec"].update(
        priority=1000, containers=[{"name": "runtime", "image": "vllm", "env": []}], volumes=[]
    )
    running = {
        "name": "runtime",
        "image": "vllm",
        "imageID": "sha256:0123",
        "containerID": "containerd://0123",
        "ready": True,
        "restartCount": 2,
        "state": {"running": {"startedAt": "2026-12-07T10:00:00Z"}},
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
    }
    pod["status"].update(phase="Running", containerStatuses=[running], podIP="1")
    stored = fakes.put(world, pod)
    cached = world.pods.get(stored["metadata"]["uid"], copy_=False)
    assert cached is not None
    assert cached["spec"] == {"nodeName": "node-a", "priority": 1000}
    kept = {
        "name": "runtime",
        "image": "vllm",
        "state": {},
        "lastState": {"terminated": {"reason": "OOMKilled"}},
    }
    assert cached["status"] == {
        "phase": "Running",
        "conditions": pod["status"]["conditions"],
        "containerStatuses": [kept],
    }
    assert cached["metadata"]["annotations"] == pod["metadata"]["annotations"]
    assert world.pods_of("uid-1", "support") == [cached]


def test_a_take_counts_only_the_replicas_that_hold_devices(tmp_path: Path) -> None:
    """A low-priority order wants two replicas: one runs on gpu-0, the other waits (gpu-1
    is someone else's). Freeing gpu-0 for a higher-priority order must scale it to 0: its
    waiting replica holds nothing. Counted from the planner's view, which places that
    replica as demand, it was scaled to 1, the waiting pod went, gpu-0 stayed held, and
    every later take found the order "at" what it held: nothing was ever freed."""
    bed = Bed(tmp_path, a100s=2)
    priority_classes(bed, low_replicas=2)
    victim = bed.order("victim", klass="low")
    bed.settle(victim)
    _serving(bed, victim, "victim", "gpu-0")
    fakes.put(bed.world, _pod(victim, "victim-waiting", node=None))
    fakes.put(bed.world, claim("theirs", "node-a", "gpu-1", holder="someone-else"))
    bed.settle(victim)
    taker = bed.order("taker", klass="high")
    bed.settle(taker, passes=1)
    (taken,) = bed.events(victim, ev.CapacityTaken)
    deployment = bed.child("Deployment", "victim")
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 0, taken
    bed.log.close()


def test_a_take_is_judged_again_when_it_is_made(tmp_path: Path) -> None:
    """A plan names a lower-priority claim to free, and its apply (which makes the take)
    waits: the taker's token Secret name is someone else's. Meanwhile the victim's
    priority rises to the taker's. When the apply goes through, nothing is taken: equal
    priority never preempts, however long ago the plan said otherwise."""
    bed = Bed(tmp_path, a100s=1)
    priority_classes(bed)
    victim = bed.order("victim", klass="low")
    bed.settle(victim)
    _serving(bed, victim, "victim", "gpu-0")
    bed.settle(victim)
    theirs = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "taker-auth", "namespace": "support"},
        "data": {"token": "eA=="},
    }
    fakes.put(bed.world, theirs)
    taker = bed.order("taker", klass="high")
    bed.settle(taker, passes=1)
    (computed,) = bed.events(taker, ev.PlanComputed)
    assert computed.reclaims, "the plan counts on the victim's claim"
    assert not bed.events(victim, ev.CapacityTaken)  # no apply yet, so no take

    fakes.put(bed.world, priority_class("inference-low", 1000))  # now the taker's equal
    fakes.drop(bed.world, theirs)
    bed.settle(taker)
    assert bed.events(taker, ev.WorkloadApplied)
    assert not bed.events(victim, ev.CapacityTaken)
    deployment = bed.child("Deployment", "victim")
    assert deployment is not None and deployment["spec"]["replicas"] == 1
    bed.log.close()


def test_a_replanned_order_holds_its_new_place_while_its_old_pod_holds_the_old(
    tmp_path: Path,
) -> None:
    # The order serves on an L4; edited to a larger model it is replanned onto the A100.
    # Until its new pod has a claim, the one it holds is the old plan's: it reserves the
    # A100 all the same, and a second order finds no room there.
    bed = Bed(tmp_path, a100s=1)
    fakes.put(bed.world, resource_slice("node-b", gpu("l4-0", "NVIDIA L4", "24Gi")))
    bigger = "Qwen/Qwen2.5-14B-Instruct"
    bed.hub.facts[bigger] = model(bigger, params=14, weights_gb=29.6)
    first = bed.order("first")
    bed.settle(first)
    (plan,) = [e.plan for e in bed.events(first, ev.PlanComputed)]
    _, node, device = plan.devices[0].split("/")
    assert device == "l4-0"
    _serving(bed, first, "first", device, node=node)
    bed.settle(first)
    edited = order("first")
    edited["metadata"].update(uid=first, generation=2)
    edited["spec"]["model"]["ref"]["name"] = bigger
    fakes.put(bed.world, edited)
    bed.settle(first)
    replanned = bed.events(first, ev.PlanComputed)[-1].plan
    assert replanned.accelerator_product_name == A100
    second = bed.order("second")
    bed.settle(second, passes=1)
    assert not bed.events(second, ev.PlanComputed)
    assert [e.reason.value for e in bed.events(second, ev.PlanFailed)] == ["NoCapacity"]
    bed.log.close()
