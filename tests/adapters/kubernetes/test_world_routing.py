"""Which orders a change wakes: settings, certificate sources, children
(ClusterCache.watch_changes)."""

from __future__ import annotations

import uuid
from typing import Any

from adapters.kubernetes.rendering import UID_LABEL
from adapters.kubernetes.watching import RESYNC
from adapters.kubernetes.world import ClusterCache
from tests.support import fakes


def _order(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "support"},
        "spec": {"model": {"src": "HuggingFace", "ref": {"name": "org/model"}}},
    }


def _named(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    meta = {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": "1"}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta}


def _cache() -> tuple[ClusterCache, list[str], list[str]]:
    cache = fakes.world()
    woken: list[str] = []
    cache.watch_changes(woken.extend)
    uids = sorted(str(fakes.put(cache, _order(n))["metadata"]["uid"]) for n in ("a", "b"))
    woken.clear()
    return cache, woken, uids


def test_our_module_config_and_the_global_one_wake_every_order_others_none() -> None:
    cache, woken, uids = _cache()
    cache.module_configs._apply("MODIFIED", _named("ModuleConfig", "prometheus"))
    assert woken == []  # another module's settings are no news
    for name in ("global", "ai-inference"):
        cache.module_configs._apply("MODIFIED", _named("ModuleConfig", name))
        assert sorted(woken) == uids, name
        woken.clear()


def test_a_certificate_source_is_read_by_name_and_its_change_wakes_every_order() -> None:
    cache, woken, uids = _cache()
    cache.certificate_sources = lambda: {"d8-ai-inference/wild"}
    cache.secrets._apply("MODIFIED", _named("Secret", "wild", "d8-ai-inference"))
    assert sorted(woken) == uids
    woken.clear()
    cache.secrets._apply("MODIFIED", _named("Secret", "unrelated", "support"))
    assert woken == []  # a Secret no order and no setting names wakes nobody
    # The refresh re-reads it while it is named, as the Secrets orders name.
    assert cache.secrets.cached_keys() == [
        ("d8-ai-inference", "wild"),
        ("support", "unrelated"),
    ]
    cache.secrets.read = lambda _ns, _name: None
    cache.secrets.refresh_once()
    assert cache.secrets.cached_keys() == [("d8-ai-inference", "wild")]


def test_an_order_event_that_only_brings_back_our_status_write_wakes_nothing() -> None:
    """Our own status write coming back through the watch is no news to anyone; any
    other version of the order is, and so is its deletion."""
    cache = fakes.world()
    woken: list[str] = []
    written: set[tuple[str, str]] = set()

    def echo(obj: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        return (meta["uid"], meta["resourceVersion"]) in written

    cache.watch_changes(woken.extend, status_echo=echo)
    order = fakes.put(cache, _order("a"))
    uid = order["metadata"]["uid"]
    assert woken == [uid]
    ours = {**order, "status": {"phase": "Pending"}}
    ours["metadata"] = {**order["metadata"], "resourceVersion": "ours"}
    written.add((uid, "ours"))
    woken.clear()
    cache.orders._apply("MODIFIED", ours)
    assert woken == []
    theirs = {**ours, "metadata": {**ours["metadata"], "resourceVersion": "theirs"}}
    cache.orders._apply("MODIFIED", {**theirs, "status": {"phase": "Ready"}})
    assert woken == [uid]  # someone else's write: a pass puts the status back
    woken.clear()
    # A resync hands the same version back: the safety net, never an echo (the write's
    # echo noted after its own event went by would otherwise drop it).
    cache.orders._emit(RESYNC, ours)
    assert woken == [uid]
    woken.clear()
    cache.orders._apply("DELETED", {**ours, "metadata": {**ours["metadata"]}})
    assert woken == [uid]


def test_a_change_to_what_the_cache_does_not_keep_wakes_nothing() -> None:
    """A Deployment's conditions are trimmed from the cache (nothing reads them): a
    status update that changed only them told the handlers nothing they could use."""
    cache, woken, uids = _cache()
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "a", "namespace": "support", "uid": "d-1", "resourceVersion": "1"},
        "spec": {"replicas": 1},
        "status": {"observedGeneration": 1, "replicas": 1, "availableReplicas": 0},
    }
    deployment["metadata"]["labels"] = {UID_LABEL: uids[0]}
    cache.deployments._apply("ADDED", deployment)
    assert woken == [uids[0]]

    def event(rv: str, **status: Any) -> None:
        woken.clear()
        meta = {**deployment["metadata"], "resourceVersion": rv}
        changed = {**deployment["status"], **status}
        cache.deployments._apply("MODIFIED", {**deployment, "metadata": meta, "status": changed})

    event("2", conditions=[{"type": "Progressing", "status": "True"}])
    assert woken == [] and cache.deployments.stats.unread == 1
    event("3", availableReplicas=1)  # what the pass reads
    assert woken == [uids[0]]
    assert cache.deployments.get("d-1", copy_=False)["metadata"]["resourceVersion"] == "3"


def test_a_child_wakes_the_order_its_label_names_and_the_order_that_controls_it() -> None:
    """A child relabelled to another order's UID: the informers still see it (they
    select on the label's presence), and its owner is woken to put the label back, not
    left for the resync minutes later. A child's other owners (a pod's ReplicaSet) are
    no orders."""
    cache, woken, (ours, theirs) = _cache()

    def service(label: str, *owners: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "a",
                "namespace": "support",
                "labels": {UID_LABEL: label},
                "ownerReferences": list(owners),
            },
        }

    def owner(uid: str, kind: str = "InferenceService", controller: bool = True) -> dict[str, Any]:
        group = "ai.deckhouse.io/v1alpha1" if kind == "InferenceService" else "apps/v1"
        return {
            "apiVersion": group,
            "kind": kind,
            "name": "a",
            "uid": uid,
            "controller": controller,
        }

    fakes.put(cache, service(ours, owner(ours)))
    assert woken == [ours]  # once, though named twice
    woken.clear()
    fakes.put(cache, service(theirs, owner(ours)))
    assert sorted(woken) == sorted([ours, theirs])
    woken.clear()
    fakes.put(cache, service(ours, owner(theirs, controller=False), owner("rs-1", "ReplicaSet")))
    assert woken == [ours]
