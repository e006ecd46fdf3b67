"""The simulator's store: events in, one object changed, indexes and ledgers kept; its own
writes read back ahead of their events; and the readiness prober that settles."""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

from adapters.simulator import kubelet
from adapters.simulator.stub import Stub
from adapters.simulator.world import CLAIMS, CLASSES, NODES, PODS, Store

DEVICE = {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0", "request": "gpu"}
SHARED = {**DEVICE, "device": "gpu-1", "shareID": "s", "consumedCapacity": {"memory": "8Gi"}}


def pod(
    uid: str, rv: str, *, node: str | None = None, cpu: str = "1", **meta: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": {
            "uid": uid,
            "name": f"p-{uid}",
            "namespace": "ns",
            "resourceVersion": rv,
            **meta,
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def claim(
    uid: str, rv: str, *, owner: str, results: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if results is not None:
        status = {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": owner}],
        }
    return {
        "metadata": {
            "uid": uid,
            "name": f"c-{uid}",
            "namespace": "ns",
            "resourceVersion": rv,
            "ownerReferences": [{"kind": "Pod", "uid": owner, "controller": True, "name": "p"}],
        },
        "spec": {},
        "status": status,
    }


def test_an_event_changes_one_object_and_says_what_it_was() -> None:
    store = Store()
    added = store.apply(PODS, "ADDED", pod("a", "1"))
    assert added is not None and added.old is None and added.uid == "a"
    changed = store.apply(PODS, "MODIFIED", pod("a", "2", node="n1"))
    assert changed is not None and changed.old is not None
    assert changed.old["metadata"]["resourceVersion"] == "1"
    assert store.apply(PODS, "MODIFIED", pod("a", "2", node="n1")) is None  # a re-list: no news
    assert store.get_by_name(PODS, "ns", "p-a") == pod("a", "2", node="n1")
    gone = store.apply(PODS, "DELETED", pod("a", "3", node="n1"))
    assert gone is not None and gone.new is None
    assert store.get(PODS, "a") is None and store.get_by_name(PODS, "ns", "p-a") is None


def test_events_older_than_our_write_are_skipped_until_its_own_arrives() -> None:
    store = Store()
    store.apply(PODS, "ADDED", pod("a", "1"))
    store.wrote(PODS, pod("a", "5", node="n1"))
    # An event the watch had not yet delivered when we wrote: older than what we hold.
    assert store.apply(PODS, "MODIFIED", pod("a", "4")) is None
    assert store.get(PODS, "a") == pod("a", "5", node="n1")
    assert store.apply(PODS, "MODIFIED", pod("a", "5", node="n1")) is None  # our own
    later = store.apply(PODS, "MODIFIED", pod("a", "6", node="n1", labels={"x": "y"}))
    assert later is not None  # someone else's, after ours: taken
    assert store.get(PODS, "a") == pod("a", "6", node="n1", labels={"x": "y"})


def test_a_list_requested_after_our_write_is_taken_whatever_its_version() -> None:
    """After an API server's restart the watch that would have brought our write's event
    is gone, and a re-list is all there is: begun after our write, it shows it or newer
    (seen: a pod left terminating, its deletion in a re-list skipped as older)."""
    store = Store()
    store.apply(PODS, "ADDED", pod("a", "1", node="n1"))
    before = time.monotonic()  # a LIST requested while our write was in flight
    store.wrote(PODS, pod("a", "5", node="n1"))
    after = time.monotonic()
    assert store.apply(PODS, "MODIFIED", pod("a", "4", node="n1"), listed_at=before) is None
    assert store.doubtful() == [(PODS, "a")]  # older or newer: to be read again
    assert store.doubtful() == []  # told once
    deleting = pod("a", "7", node="n1", deletionTimestamp="2026-12-06T11:50:00Z")
    taken = store.apply(PODS, "MODIFIED", deleting, listed_at=after)
    assert taken is not None and taken.new == deleting and store.get(PODS, "a") == deleting
    # Our write's mask is spent: later watch events are taken as they come.
    assert store.apply(PODS, "MODIFIED", pod("a", "8", node="n1")) is not None
    store.wrote(PODS, pod("a", "10", node="n1"))
    assert store.apply(PODS, "MODIFIED", pod("a", "9", node="n1")) is None
    assert store.doubtful() == []  # a watch event before our write's own is older, surely


def test_a_deletion_our_write_brings_back_is_news_though_its_event_is_skipped() -> None:
    """Deleted between our read and our write: the deletion's event is older than our
    write and skipped, our write's own event is ours; only the write's result tells."""
    store = Store()
    store.apply(PODS, "ADDED", pod("a", "1", node="n1"))
    deleting = {"deletionTimestamp": "2026-12-06T09:23:56Z"}
    store.wrote(PODS, pod("a", "3", node="n1", **deleting))
    (news,) = store.revealed()
    assert news.uid == "a" and news.new == pod("a", "3", node="n1", **deleting)
    assert store.revealed() == []  # told once
    assert store.apply(PODS, "MODIFIED", pod("a", "2", node="n1", **deleting)) is None
    assert store.apply(PODS, "MODIFIED", pod("a", "3", node="n1", **deleting)) is None
    # Known deleting before our write (its event came first): nothing to tell again.
    store.wrote(PODS, pod("a", "4", node="n1", **deleting))
    store.apply(PODS, "ADDED", pod("b", "1", node="n1"))
    store.wrote(PODS, pod("b", "2", node="n1"))  # an ordinary write: nothing to tell
    assert store.revealed() == []


def test_a_knob_or_label_our_write_brings_back_is_news_but_our_own_annotation_is_not() -> None:
    """Someone else's annotation (the fail knob) or label set between our read and our
    write is in the write's result only; the annotation our write set is ours."""
    endpoint, knob = kubelet.ENDPOINT_ANNOTATION, kubelet.FAIL_ANNOTATION
    store = Store((endpoint,))
    store.apply(PODS, "ADDED", pod("a", "1", node="n1"))
    store.wrote(PODS, pod("a", "2", node="n1", annotations={endpoint: "http://127.0.0.1:1"}))
    assert store.revealed() == []
    store.wrote(PODS, pod("a", "4", node="n1", annotations={endpoint: "x", knob: "500"}))
    (news,) = store.revealed()
    assert news.uid == "a" and news.old is not None and news.new is not None
    assert news.new["metadata"]["annotations"][knob] == "500"
    assert store.apply(PODS, "MODIFIED", pod("a", "3", node="n1")) is None  # the knob's own
    store.wrote(PODS, pod("a", "6", node="n1", annotations={endpoint: "x"}))  # knob removed
    assert [c.uid for c in store.revealed()] == ["a"]
    store.wrote(PODS, pod("a", "8", node="n1", annotations={endpoint: "x"}, labels={"k": "v"}))
    assert [c.uid for c in store.revealed()] == ["a"]
    store.wrote(PODS, pod("a", "9", node="n1", annotations={endpoint: "x"}, labels={"k": "v"}))
    assert store.revealed() == []  # nothing of anyone else's changed


def test_a_write_whose_event_came_first_masks_nothing() -> None:
    store = Store()
    store.apply(PODS, "ADDED", pod("a", "1"))
    store.apply(PODS, "MODIFIED", pod("a", "2", labels={"x": "y"}))
    store.wrote(PODS, pod("a", "2", labels={"x": "y"}))  # or a write that changed nothing
    bound = store.apply(PODS, "MODIFIED", pod("a", "3", node="n1"))
    assert bound is not None and store.get(PODS, "a") == pod("a", "3", node="n1")
    store.apply(PODS, "MODIFIED", pod("a", "4", node="n1"))
    store.wrote(PODS, pod("a", "3", node="n1"))  # its event and a newer one came first
    assert store.get(PODS, "a") == pod("a", "4", node="n1")


def test_allocated_claims_hold_devices_until_deallocated_or_deleted() -> None:
    store = Store()
    store.apply(CLAIMS, "ADDED", claim("c1", "1", owner="a"))
    assert not store.usage.in_use("gpu.nvidia.com/n1/gpu-0")
    store.apply(CLAIMS, "MODIFIED", claim("c1", "2", owner="a", results=[DEVICE]))
    store.apply(CLAIMS, "ADDED", claim("c2", "3", owner="b", results=[SHARED]))
    store.apply(CLAIMS, "ADDED", claim("c3", "4", owner="c", results=[SHARED]))
    assert store.usage.in_use("gpu.nvidia.com/n1/gpu-0")
    assert store.usage.consumed["gpu.nvidia.com/n1/gpu-1"] == {"memory": Fraction(16 * 2**30)}
    assert store.claims_by_pod.get("a") == {"c1"}
    assert store.claims_by_reserver.get("b") == {"c2"}

    store.apply(CLAIMS, "MODIFIED", claim("c1", "5", owner="a"))  # deallocated
    store.apply(CLAIMS, "DELETED", claim("c2", "6", owner="b", results=[SHARED]))
    assert not store.usage.in_use("gpu.nvidia.com/n1/gpu-0")
    assert store.usage.consumed["gpu.nvidia.com/n1/gpu-1"] == {"memory": Fraction(8 * 2**30)}
    store.apply(CLAIMS, "DELETED", claim("c3", "7", owner="c", results=[SHARED]))
    assert not store.usage.in_use("gpu.nvidia.com/n1/gpu-1")
    assert store.claims_by_reserver.get("b") == set()


def test_a_bound_pod_holds_its_node_from_our_binding_until_it_goes() -> None:
    store = Store()
    store.apply(PODS, "ADDED", pod("a", "1", cpu="2"))
    first = store.get(PODS, "a")
    assert first is not None and store.is_pending(first)
    store.assume_bound(first, "n1")
    assert not store.is_pending(first)  # our binding, before its event
    assert store.node_load("n1") == (1, {"cpu": Fraction(2)})
    store.apply(PODS, "MODIFIED", pod("a", "2", node="n1", cpu="2"))
    store.apply(PODS, "ADDED", pod("b", "3", node="n1", cpu="1"))
    assert store.node_load("n1") == (2, {"cpu": Fraction(3)})
    assert store.pods_by_node.get("n1") == {"a", "b"}
    store.apply(PODS, "DELETED", pod("a", "4", node="n1", cpu="2"))
    assert store.node_load("n1") == (1, {"cpu": Fraction(1)})
    assert not store.pod_live("a") and store.pod_live("b")


def test_the_inventory_is_rebuilt_only_after_a_slice_or_class_changes() -> None:
    store = Store()
    first = store.inventory()
    store.apply(PODS, "ADDED", pod("a", "1"))
    store.apply(NODES, "ADDED", {"metadata": {"uid": "n", "name": "n1", "resourceVersion": "1"}})
    assert store.inventory() is first
    store.apply(
        CLASSES,
        "ADDED",
        {"metadata": {"uid": "d", "name": "x", "resourceVersion": "2"}, "spec": {}},
    )
    assert store.inventory() is not first


def test_a_readiness_prober_settles_and_counts_its_thresholds() -> None:
    with Stub(served_names=["m"], api_key="k") as stub:
        probe = {
            "httpGet": {
                "path": "/v1/models",
                "httpHeaders": [{"name": "Authorization", "value": "Bearer k"}],
            },
            "failureThreshold": 3,
        }
        prober = kubelet._Prober(stub, probe)
        assert prober.run() and prober.ready  # one success: Ready, and settled
        stub.failure = "500"
        assert [prober.run() for _ in range(3)] == [False, False, True]
        assert not prober.ready  # after the third failure, and settled again
        stub.failure = "timeout"  # held: a failed probe at once, no thread waits
        assert prober.run() and not prober.ready
        stub.failure = None
        assert prober.run() and prober.ready
        assert prober.probes == 6
        assert stub.requests == ()  # judged in-process: no HTTP request was made
