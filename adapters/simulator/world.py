"""The simulator's view of the cluster: one store, kept current by watches, with indexes.

The scheduler and kubelet stand-ins read the cluster from here, never by listing: the
`Simulator` runs one `Informer` (adapters/kubernetes/watching) per kind it reads and
hands every event to `Store.apply`, which replaces that one object, keeps the indexes
and ledgers the parts need (claims by owning and by reserving pod, pods by node and by
owner, the devices and node resources held) and returns what changed, so the caller
enqueues work for that object only. A change to one pod or claim costs work in
proportion to that change, not to the cluster.

Read your own writes: what the simulator writes is stored at once (`wrote`), and watch
events older than that write are skipped until the write's own event (same
resourceVersion, compared for equality only) or a deletion arrives. Watch order makes
every event before it older. A write whose event came first (or that changed nothing, so
its RV is one already seen) is not stored: the store is that new already. A LIST
requested after our write completed shows it or newer, whatever the RV, and is taken (a
re-list after `410 Gone` or an API server's restart: the watch that would have brought
our write's event is gone); what a LIST requested while our write was in flight shows at
another version is read again (`doubtful`); a bound (`_WRITE_MEMORY`) covers the rest. A
write whose result shows someone else's change made between our read and our write (the
object newly deleting, its labels or annotations other than the simulator's own changed)
is handed back as news (`revealed`): that change's event, older than our write, will be
skipped, and a pod left terminating or a fail knob left unread would stay so. Stored
objects are the API's JSON and are never mutated once stored, so readers may hold them
without copying.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from adapters.kubernetes.rest import Resource
from adapters.simulator import allocation
from adapters.simulator.kube import JSON
from fsm.quantity import QuantityError, parse_quantity

__all__ = [
    "CLAIMS",
    "CLASSES",
    "DEPLOYMENTS",
    "KINDS",
    "NODES",
    "PODS",
    "REPLICA_SETS",
    "SLICES",
    "Change",
    "Store",
    "is_ready_node",
    "key",
    "pod_requests",
]

NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod")
CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")
SLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False)
CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
KINDS = (NODES, PODS, CLAIMS, SLICES, CLASSES, DEPLOYMENTS, REPLICA_SETS)

_TERMINAL = ("Succeeded", "Failed")
_WRITE_MEMORY = 10.0  # seconds a write of ours masks older events at most
_RECENT = 8  # RVs remembered per object, to know a write's event came before the write


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _changed_by_others(old: JSON | None, new: JSON, own_annotations: frozenset[str]) -> bool:
    """What a write's result shows that our write did not do and the simulator acts on:
    a deletion begun, labels or annotations (the fail knob) other than its own changed.
    Status and the binding are what its writes change; the rest of a pod is immutable."""
    if _deleting(new) and not (old is not None and _deleting(old)):
        return True
    if old is None:
        return False  # not held before: the caller acts on the whole object anyway
    was, now = old["metadata"], new["metadata"]
    if (was.get("labels") or {}) != (now.get("labels") or {}):
        return True
    before, after = was.get("annotations") or {}, now.get("annotations") or {}
    return any(
        before.get(name) != after.get(name)
        for name in before.keys() | after.keys()
        if name not in own_annotations
    )


def key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def is_ready_node(node: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or ()
    )


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """The pod's effective requests: containers summed, init containers as a maximum."""
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or ():
        for name, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            try:
                total[name] = total.get(name, Fraction(0)) + parse_quantity(str(amount))
            except QuantityError:
                continue
    for container in spec.get("initContainers") or ():
        for name, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            try:
                total[name] = max(total.get(name, Fraction(0)), parse_quantity(str(amount)))
            except QuantityError:
                continue
    return total


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def _owner_uids(obj: Mapping[str, Any], kind: str | None = None) -> list[str]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return [str(r["uid"]) for r in refs if r.get("uid") and (kind is None or r.get("kind") == kind)]


def _controller_pod(claim: Mapping[str, Any]) -> str | None:
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == "Pod":
            return str(ref.get("uid"))
    return None


def _reservers(claim: Mapping[str, Any]) -> list[str]:
    reserved = (claim.get("status") or {}).get("reservedFor") or ()
    return [str(r["uid"]) for r in reserved if r.get("resource") == "pods" and r.get("uid")]


def _results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    return list(found.get("results") or ())


def _occupies(pod: Mapping[str, Any]) -> str | None:
    """The node whose resources the pod holds, if any."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or (pod.get("status") or {}).get("phase") in _TERMINAL:
        return None
    return str(node)


@dataclass(frozen=True, slots=True)
class Change:
    """One applied event: the object before and after (None: absent)."""

    kind: Resource
    old: JSON | None
    new: JSON | None

    @property
    def uid(self) -> str:
        return _uid(self.new or self.old or {})


class _Index:
    def __init__(self) -> None:
        self.values: dict[str, set[str]] = {}

    def put(self, member: str, keys: Iterable[str]) -> None:
        for k in keys:
            self.values.setdefault(k, set()).add(member)

    def drop(self, member: str, keys: Iterable[str]) -> None:
        for k in keys:
            members = self.values.get(k)
            if members is not None:
                members.discard(member)
                if not members:
                    del self.values[k]

    def get(self, k: str) -> set[str]:
        return set(self.values.get(k, ()))


class Store:
    """Objects by kind and UID, their indexes, and what allocated claims and bound pods hold."""

    def __init__(self, own_annotations: Iterable[str] = ()) -> None:
        """`own_annotations`: those the simulator's writes set, never news in a result."""
        self.lock = threading.RLock()
        self._own_annotations = frozenset(own_annotations)
        self._objects: dict[str, dict[str, JSON]] = {k.plural: {} for k in KINDS}
        self._names: dict[str, dict[tuple[str, str], str]] = {k.plural: {} for k in KINDS}
        self._written: dict[str, tuple[str, float]] = {}  # uid -> (our RV, when)
        self._revealed: list[Change] = []  # others' changes our writes brought back
        self._doubtful: list[tuple[Resource, str]] = []  # see `doubtful`
        self._seen: dict[str, deque[str]] = {}  # uid -> RVs its events brought lately
        self.claims_by_pod = _Index()  # controller pod uid -> generated claims
        self.claims_by_reserver = _Index()  # reserving pod uid -> claims
        self.pods_by_owner = _Index()  # owner (ReplicaSet) uid -> pods
        self.sets_by_owner = _Index()  # Deployment uid -> ReplicaSets
        self.pods_by_node = _Index()  # node name -> pods that hold its resources
        self.usage = allocation.Usage()  # what allocated claims hold
        self._claim_results: dict[str, list[Mapping[str, Any]]] = {}
        self._node_of: dict[str, tuple[str, dict[str, Fraction]]] = {}  # pod -> (node, asks)
        self._assumed: dict[str, str] = {}  # pod uid -> node, bound but not yet seen so
        self._inventory: allocation.Inventory | None = None

    # --- reading ------------------------------------------------------------------------

    def get(self, kind: Resource, uid: str) -> JSON | None:
        with self.lock:
            return self._objects[kind.plural].get(uid)

    def get_by_name(self, kind: Resource, namespace: str, name: str) -> JSON | None:
        with self.lock:
            uid = self._names[kind.plural].get((namespace, name))
            return self._objects[kind.plural].get(uid) if uid is not None else None

    def all(self, kind: Resource) -> list[JSON]:
        with self.lock:
            return list(self._objects[kind.plural].values())

    def count(self, kind: Resource) -> int:
        with self.lock:
            return len(self._objects[kind.plural])

    def nodes(self) -> list[JSON]:
        """Every Node, by name (a cluster has few; the scheduler walks them in order)."""
        with self.lock:
            return sorted(self._objects[NODES.plural].values(), key=lambda n: key(n)[1])

    def inventory(self) -> allocation.Inventory:
        """The published devices and classes, rebuilt only after a slice or class changed."""
        with self.lock:
            if self._inventory is None:
                self._inventory = allocation.Inventory.from_objects(
                    self._objects[SLICES.plural].values(), self._objects[CLASSES.plural].values()
                )
            return self._inventory

    def node_load(self, node: str) -> tuple[int, dict[str, Fraction]]:
        """Pods holding the node's resources and what they request in total."""
        with self.lock:
            pods = self.pods_by_node.values.get(node, set())
            total: dict[str, Fraction] = {}
            for uid in pods:
                for name, amount in self._node_of[uid][1].items():
                    total[name] = total.get(name, Fraction(0)) + amount
            return len(pods), total

    def is_pending(self, pod: Mapping[str, Any]) -> bool:
        """Not bound (nor bound by us and not yet seen so), not deleting, not finished."""
        with self.lock:
            return (
                not (pod.get("spec") or {}).get("nodeName")
                and _uid(pod) not in self._assumed
                and not pod["metadata"].get("deletionTimestamp")
                and (pod.get("status") or {}).get("phase", "Pending") not in _TERMINAL
            )

    def pod_live(self, uid: str) -> bool:
        """The pod exists and has not finished: its claims stay reserved."""
        with self.lock:
            pod = self._objects[PODS.plural].get(uid)
            return pod is not None and (pod.get("status") or {}).get("phase") not in _TERMINAL

    # --- writing ------------------------------------------------------------------------

    def apply(
        self, kind: Resource, event_type: str, obj: JSON, *, listed_at: float | None = None
    ) -> Change | None:
        """One watch event, or one change a LIST showed (`listed_at`: when that LIST was
        requested, `time.monotonic()`); None when it changes nothing we keep (older than
        our write)."""
        uid = _uid(obj)
        if not uid:
            return None
        with self.lock:
            if event_type == "DELETED":
                self._written.pop(uid, None)
                self._seen.pop(uid, None)
                old = self._remove(kind, uid)
                return Change(kind, old, None) if old is not None else None
            rv = str(obj["metadata"].get("resourceVersion", ""))
            mine = self._written.get(uid)
            if mine is not None:
                our_rv, when = mine
                # A LIST requested after our write completed shows it or newer (a re-list
                # after an API server restart: the watch that had our write's event is
                # gone); a watch event before our write's own is older.
                listed_after = listed_at is not None and listed_at > when
                if rv != our_rv and not listed_after and time.monotonic() - when < _WRITE_MEMORY:
                    if listed_at is not None:
                        self._doubtful.append((kind, uid))
                    return None  # older than what we wrote: we already act on newer
                del self._written[uid]
                if rv == our_rv:
                    return None  # our own write, stored when we made it
            self._seen.setdefault(uid, deque(maxlen=_RECENT)).append(rv)
            current = self._objects[kind.plural].get(uid)
            if current is not None and current["metadata"].get("resourceVersion") == rv:
                return None  # a resync or re-list: nothing new
            old = self._put(kind, obj)
            return Change(kind, old, obj)

    def wrote(self, kind: Resource, obj: JSON) -> Change:
        """Store what a write of ours returned, ahead of its watch event."""
        uid = _uid(obj)
        rv = str(obj["metadata"].get("resourceVersion", ""))
        with self.lock:
            if rv in self._seen.get(uid, ()):
                # Its event came first (or the write changed nothing): what we hold is
                # that new or newer already.
                return Change(kind, self._objects[kind.plural].get(uid), None)
            self._written[uid] = (rv, time.monotonic())
            old = self._put(kind, obj)
            change = Change(kind, old, obj)
            if _changed_by_others(old, obj, self._own_annotations):
                # Changed by someone else between our read and our write: that event is
                # older than our write, so `apply` will skip it, and this result is all
                # we hear of it. Handed on as news.
                self._revealed.append(change)
            return change

    def revealed(self) -> list[Change]:
        """Others' changes that writes of ours brought back before their own events, each
        once: the caller handles them as it handles the changes `apply` returns."""
        with self.lock:
            taken, self._revealed = self._revealed, []
        return taken

    def doubtful(self) -> list[tuple[Resource, str]]:
        """Objects a LIST requested while our write was in flight showed at another
        version, each once: older or newer than that write, nothing here can tell, and if
        newer no watch event will follow. The caller reads each again, the read requested
        now (after the write), and hands it to `apply` with that read's time."""
        with self.lock:
            taken, self._doubtful = self._doubtful, []
        return taken

    def assume_bound(self, pod: JSON, node: str) -> None:
        """A binding we made: the pod holds the node's resources from now on."""
        uid = _uid(pod)
        with self.lock:
            self._assumed[uid] = node
            self._hold(uid, node, pod_requests(pod))

    # --- the bookkeeping --------------------------------------------------------------

    def _put(self, kind: Resource, obj: JSON) -> JSON | None:
        uid = _uid(obj)
        old = self._objects[kind.plural].get(uid)
        if old is not None:
            self._unindex(kind, uid, old)
        self._objects[kind.plural][uid] = obj
        self._names[kind.plural][key(obj)] = uid
        self._index(kind, uid, obj)
        return old

    def _remove(self, kind: Resource, uid: str) -> JSON | None:
        old = self._objects[kind.plural].pop(uid, None)
        if kind is PODS:  # gone: it holds nothing, whatever we assumed
            self._assumed.pop(uid, None)
            self._release(uid)
        if old is not None:
            self._unindex(kind, uid, old)
            if self._names[kind.plural].get(key(old)) == uid:
                del self._names[kind.plural][key(old)]
        return old

    def _index(self, kind: Resource, uid: str, obj: JSON) -> None:
        if kind is PODS:
            self.pods_by_owner.put(uid, _owner_uids(obj))
            node = _occupies(obj)
            if node is not None:
                self._assumed.pop(uid, None)
                self._hold(uid, node, pod_requests(obj))
            elif uid in self._assumed and (obj.get("status") or {}).get("phase") in _TERMINAL:
                self._assumed.pop(uid)
        elif kind is CLAIMS:
            owner = _controller_pod(obj)
            if owner is not None:
                self.claims_by_pod.put(uid, [owner])
            self.claims_by_reserver.put(uid, _reservers(obj))
            results = _results(obj)
            if results:
                self._claim_results[uid] = results
                self.usage.add(results)
        elif kind is REPLICA_SETS:
            self.sets_by_owner.put(uid, _owner_uids(obj, "Deployment"))
        elif kind in (SLICES, CLASSES):
            self._inventory = None

    def _unindex(self, kind: Resource, uid: str, obj: JSON) -> None:
        if kind is PODS:
            self.pods_by_owner.drop(uid, _owner_uids(obj))
            if uid not in self._assumed:
                self._release(uid)
        elif kind is CLAIMS:
            owner = _controller_pod(obj)
            if owner is not None:
                self.claims_by_pod.drop(uid, [owner])
            self.claims_by_reserver.drop(uid, _reservers(obj))
            held = self._claim_results.pop(uid, None)
            if held:
                self.usage.remove(held)
        elif kind is REPLICA_SETS:
            self.sets_by_owner.drop(uid, _owner_uids(obj, "Deployment"))
        elif kind in (SLICES, CLASSES):
            self._inventory = None

    def _hold(self, uid: str, node: str, asks: dict[str, Fraction]) -> None:
        self._release(uid)
        self._node_of[uid] = (node, asks)
        self.pods_by_node.put(uid, [node])

    def _release(self, uid: str) -> None:
        held = self._node_of.pop(uid, None)
        if held is not None:
            self.pods_by_node.drop(uid, [held[0]])
