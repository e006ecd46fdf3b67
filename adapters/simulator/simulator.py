"""The simulator: what a 1.34 cluster with GPUs would show, on the local API server.

`Simulator` composes the parts — `publishing` (Nodes, ResourceSlices, DeviceClasses from
the capacity), `catalog` (ai-models objects), `scheduler` (claims, allocation, binding)
and `kubelet` (Running pods with an OpenAI-compatible stub each) — and drives them by
events, as the real components are: one `Informer` per kind it reads (list, then watch)
feeds a `world.Store`, and each event enqueues work for the object it names on one
work queue, worked by one thread:

    pod/<uid>      a pod changed: schedule it if pending, else run, update or remove it
    claim/<uid>    a claim changed, or the pod holding it went: release what is stale
    probe/<uid>    a readiness probe is due
    reread/<kind>/<uid>
                   read one object again: a LIST requested while our write of it was in
                   flight showed it at another version, older or newer (`Store.doubtful`)
    schedule       try the pending pods (new ones, and the unschedulable when capacity
                   may have been freed: a claim, pod, node, slice or class changed)

So a change to one pod or claim costs work in proportion to that change; with nothing
changing the simulator does nothing. Failed writes are retried with backoff; a watch
that breaks re-lists and the store emits what changed meanwhile.

Used by `ai-inference simulate`, the demo and the integration tests:

    with Simulator(api_client, capacity.load_capacity()) as sim:
        ...                                # pods get scheduled and served
        sim.set_capacity(smaller)          # published before it returns

It talks only to the API server, as the parts of a real cluster would; nothing in the
controller knows it exists, except the endpoint annotation the probe target reads.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from kubernetes import client

from adapters.kubernetes import queueing
from adapters.kubernetes.watching import Informer, InformerStats
from adapters.simulator import capacity as capacity_file
from adapters.simulator import podclaims, world
from adapters.simulator.catalog import CATALOG, CatalogPublisher
from adapters.simulator.kube import JSON, Kube, KubeError
from adapters.simulator.kubelet import ENDPOINT_ANNOTATION, FAIL_ANNOTATION, Kubelet
from adapters.simulator.publishing import Publisher, PublishResult
from adapters.simulator.scheduler import Scheduler
from adapters.simulator.stub import Stub
from adapters.simulator.world import Change, Store

__all__ = ["NODE_SEED_ENV", "Simulator", "SimulatorStats"]

log = logging.getLogger(__name__)

# Run anything that starts a simulator (the suite, the demo) with a scheduler that does
# not follow the planner's placement: AI_INFERENCE_SIM_NODE_SEED=7 make test.
NODE_SEED_ENV = "AI_INFERENCE_SIM_NODE_SEED"
_SCHEDULE = "schedule"
_RELOAD = "reload-capacity"
_RETRY_UNSCHEDULABLE = "retry-unschedulable"
_REREAD = "reread"  # reread/<plural>/<uid>: an object a LIST may have shown older or newer


@dataclass
class SimulatorStats:
    """Work done, for tests and benchmarks: counts, not times."""

    events: int = 0  # watch events that changed the store
    items: int = 0  # work items handled
    failures: int = 0  # work items that failed and were retried


class Simulator:
    def __init__(
        self,
        api_client: client.ApiClient,
        capacity: capacity_file.CapacitySpec | Path | None = None,
        *,
        catalog: Path | None = CATALOG,
        interval: float = 1.0,
        stub_host: str = "127.0.0.1",
        hang_seconds: float = 30.0,
        namespaces: Collection[str] | None = None,
        node_seed: int | None = None,
    ) -> None:
        """`capacity`: a spec, a file (re-read when it changes, checked every `interval`
        seconds; a missing Secret is looked for as often), or None for the default file;
        `catalog`: the ai-models objects to create (None: none); `namespaces`: run only
        the pods there (None: all; tests use it to stay out of each other's way);
        `node_seed`: how the scheduler picks among nodes where a pod fits (None: the
        first by name, where the planner placed it; a seed: a seeded random one, as a
        real scheduler may), by default $AI_INFERENCE_SIM_NODE_SEED (unset: None)."""
        self.kube = Kube(api_client)
        self.interval = interval
        self._path = capacity if isinstance(capacity, Path) else None
        self._mtime = self._path.stat().st_mtime if self._path is not None else 0.0
        self._capacity = (
            capacity
            if isinstance(capacity, capacity_file.CapacitySpec)
            else capacity_file.load_capacity(capacity)
        )
        self._catalog = CatalogPublisher(self.kube, catalog) if catalog is not None else None
        self._publisher = Publisher(self.kube)
        # The annotations our own writes set: a write's result showing them is no news.
        self.store = Store((ENDPOINT_ANNOTATION, podclaims.CLAIM_STATUSES_ANNOTATION))
        self.queue = queueing.WorkQueue()
        if node_seed is None and os.environ.get(NODE_SEED_ENV):
            node_seed = int(os.environ[NODE_SEED_ENV])
        self.scheduler = Scheduler(
            self.kube, self.store, namespaces=namespaces, node_seed=node_seed
        )
        self.kubelet = Kubelet(
            self.kube,
            self.store,
            requeue=self.queue.add_after,
            host=stub_host,
            hang_seconds=hang_seconds,
            namespaces=namespaces,
            retry_seconds=interval,
        )
        self.stats = SimulatorStats()
        # Watches hold their connections for minutes: their own pool, apart from writes.
        watch_config = copy.copy(api_client.configuration)
        watch_config.connection_pool_maxsize = len(world.KINDS) + 2
        self._watch_api = client.ApiClient(watch_config)
        self._informers = [
            Informer(self._watch_api, kind, name=f"simulator {kind.plural}") for kind in world.KINDS
        ]
        for informer in self._informers:
            informer.add_handler(self._handler(informer))
        self._lock = threading.RLock()  # one item at a time, and none mid-publish
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    # --- lifecycle --------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Publish capacity and catalog, fill the store, then work events in a thread."""
        if self._thread is not None:
            return
        self.set_capacity(self._capacity)
        if self._catalog is not None:
            self._catalog.publish()
        for informer in self._informers:
            informer.start()
        for informer in self._informers:
            if not informer.wait_synced(timeout):
                raise TimeoutError(f"{informer.name}: not listed within {timeout}s")
        if self._path is not None:
            self.queue.add_after(_RELOAD, self.interval)
        self._thread = threading.Thread(target=self._loop, name="simulator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the watches, the worker and every stub; published objects stay."""
        self.queue.shutdown()
        for informer in self._informers:
            informer.stop()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.kubelet.stop_all()
        self._watch_api.close()

    def __enter__(self) -> Simulator:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- what callers change and read ---------------------------------------------------

    @property
    def capacity(self) -> capacity_file.CapacitySpec:
        return self._capacity

    def set_capacity(self, spec: capacity_file.CapacitySpec) -> PublishResult:
        """Publish `spec` now (it replaces the current capacity); the watches bring it."""
        with self._lock:
            result = self._publisher.publish(spec)
            self._capacity = spec
        log.info("capacity published: %s", result)
        return result

    def watch_stats(self) -> dict[str, InformerStats]:
        """Each watch's counters, by kind: whether one went quiet, restarted or re-listed."""
        return {informer.resource.plural: informer.stats for informer in self._informers}

    def stub(self, namespace: str, name: str) -> Stub | None:
        """The stub serving a pod now, if it runs."""
        return self.kubelet.stub(namespace, name)

    def run_once(self) -> int:
        """Look at every pod and claim again, and work the queue dry in the caller's
        thread (the level-triggered safety net; events do the same piece by piece).
        Returns the items handled."""
        for pod in self.store.all(world.PODS):
            self.queue.add(f"pod/{pod['metadata']['uid']}")
        for claim in self.store.all(world.CLAIMS):
            self.queue.add(f"claim/{claim['metadata']['uid']}")
        self.scheduler.retry_unschedulable(force=True)
        self.queue.add(_SCHEDULE)
        handled = 0
        while (item := self.queue.get(block=False)) is not None:
            self._work(item)
            handled += 1
        return handled

    # --- events -------------------------------------------------------------------------

    def _handler(self, informer: Informer) -> Callable[[str, JSON], None]:
        kind = informer.resource

        def handle(event_type: str, obj: JSON) -> None:
            change = self.store.apply(kind, event_type, obj, listed_at=informer.list_began)
            if change is not None:
                self.stats.events += 1
                self._enqueue(change)
            for doubtful, uid in self.store.doubtful():
                self.queue.add(f"{_REREAD}/{doubtful.plural}/{uid}")

        return handle

    def _enqueue(self, change: Change) -> None:
        kind, uid = change.kind, change.uid
        if kind is world.PODS:
            self.queue.add(f"pod/{uid}")
            if change.new is None or _finished(change.new):
                for claim in self.store.claims_by_pod.get(uid) | self.store.claims_by_reserver.get(
                    uid
                ):
                    self.queue.add(f"claim/{claim}")
                self._capacity_changed()
        elif kind is world.CLAIMS:
            self.queue.add(f"claim/{uid}")
            self._capacity_changed()
        elif kind in (world.NODES, world.SLICES, world.CLASSES):
            self._capacity_changed()
            if kind is world.NODES:
                name = world.key(change.new or change.old or {})[1]
                for pod in self.store.pods_by_node.get(name):
                    self.queue.add(f"pod/{pod}")
        elif kind is world.DEPLOYMENTS and _knob(change.old) != _knob(change.new):
            for replica_set in self.store.sets_by_owner.get(uid):
                for pod in self.store.pods_by_owner.get(replica_set):
                    self.queue.add(f"pod/{pod}")

    def _capacity_changed(self) -> None:
        with self._lock:
            if self.scheduler.retry_unschedulable():
                self.queue.add(_SCHEDULE)

    # --- the worker ---------------------------------------------------------------------

    def _loop(self) -> None:
        while (item := self.queue.get()) is not None:
            self._work(item)

    def _work(self, item: str) -> None:
        self.stats.items += 1
        try:
            with self._lock:
                self._handle(item)
            self.queue.forget(item)
            self.last_error = None
        except (KubeError, OSError, ValueError) as err:
            # The API server restarting or a conflict: this item again, later; never die.
            self.stats.failures += 1
            self.last_error = f"{item}: {err}"
            log.info("simulator %s failed: %s", item, err)
            self.queue.add_rate_limited(item)
        except Exception as err:  # a bug or an object shaped unlike any we know
            # The cluster would freeze with the thread: keep working, loudly.
            self.stats.failures += 1
            self.last_error = f"{item}: {err!r}"
            log.exception("simulator %s crashed", item)
            self.queue.add_rate_limited(item)
        finally:
            self.queue.done(item)
        for change in self.store.revealed():
            self._enqueue(change)

    def _handle(self, item: str) -> None:
        kind, _, uid = item.partition("/")
        if kind == "pod":
            pod = self.store.get(world.PODS, uid)
            if pod is not None and self.scheduler.wants(pod):
                self.scheduler.enqueue(uid)
                self.queue.add(_SCHEDULE)
            else:
                self.kubelet.sync(uid)
        elif kind == "claim":
            self.scheduler.clean_claim(uid)
        elif kind == "probe":
            self.kubelet.probe(uid)
        elif kind == _REREAD:
            self._reread(*uid.split("/", 1))
        elif item in (_SCHEDULE, _RETRY_UNSCHEDULABLE):
            if item == _RETRY_UNSCHEDULABLE:
                self.scheduler.retry_unschedulable()
            self.scheduler.run()
            retry = self.scheduler.next_retry()
            if retry is not None:  # the earliest backoff's end, whatever else happens
                self.queue.add_after(_RETRY_UNSCHEDULABLE, retry)
        elif item == _RELOAD:
            self._reload_capacity()
            self.queue.add_after(_RELOAD, self.interval)

    def _reread(self, plural: str, uid: str) -> None:
        """Read one object again (`Store.doubtful`): a read requested after our write
        shows it or newer."""
        resource = next(k for k in world.KINDS if k.plural == plural)
        held = self.store.get(resource, uid)
        if held is None:
            return
        namespace, name = world.key(held)
        began = time.monotonic()
        live = self.kube.get(resource.object_path(namespace or None, name))
        if live is None or live["metadata"].get("uid") != uid:
            change = self.store.apply(resource, "DELETED", held)
        else:
            change = self.store.apply(resource, "MODIFIED", live, listed_at=began)
        if change is not None:
            self._enqueue(change)

    def _reload_capacity(self) -> None:
        if self._path is None:
            return
        try:
            mtime = self._path.stat().st_mtime
        except OSError:
            return
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            spec = capacity_file.load_capacity(self._path)
        except capacity_file.CapacityError as err:  # keep what is published; say why
            log.error("capacity file not reloaded: %s", err)
            self.last_error = str(err)
            return
        self.set_capacity(spec)


def _finished(pod: JSON) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _knob(obj: JSON | None) -> str | None:
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(FAIL_ANNOTATION)
    return None if value is None else str(value)
