"""The controller's main loop: caches, work queues, workers, the leader epoch.

`ai-inference controller` and the demo build a `Controller` and `start()` it. Watches
feed the cache; every change enqueues the UIDs of the orders it can affect; workers run
`Reconciler.reconcile(uid)` one UID at a time; classes have a queue and a worker of
their own (their status is a separate, cheap pass keyed by name); a StreamConflict
(another writer moved the stream) drops the in-memory state so the retry re-reads the
log. Every append is stamped with this process's leader epoch, claimed in the log at
start, so an older controller's appends are refused. Every write goes through one
`Writer`.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient

from adapters import logs, metrics
from adapters.kubernetes import classes, oldservers, queueing
from adapters.kubernetes.leader import Elector
from adapters.kubernetes.reconciling import Reconciler
from adapters.kubernetes.settings import Settings, SettingsError
from adapters.kubernetes.world import ClusterCache
from adapters.kubernetes.writing import Writer
from adapters.models import HubResolver, HubSettings
from adapters.probes.targets import ServiceTarget, TargetResolver
from fsm.state import DEVICE_ALLOCATION_GRACE_SECONDS
from store import EventLog, StaleEpoch, StreamConflict

__all__ = ["LEASE_NAME", "LEASE_NAMESPACE", "Controller", "utc_now"]

LEASE_NAMESPACE = "d8-ai-inference"
LEASE_NAME = "ai-inference-controller"

log = logging.getLogger(__name__)


def utc_now() -> datetime:
    return datetime.now(UTC)


def _pooled(api: ApiClient, size: int) -> ApiClient:
    """A client whose connection pool fits every watch and every worker at once (the
    default 10 made urllib3 discard connections: "Connection pool is full")."""
    configuration = copy.deepcopy(api.configuration)
    configuration.connection_pool_maxsize = size
    return ApiClient(configuration)


class Controller:
    def __init__(
        self,
        api: ApiClient,
        log_store: EventLog,
        *,
        hub_endpoint: str | None = None,
        targets: TargetResolver | None = None,
        workers: int = 2,
        hpa_api_version: str = "autoscaling/v2",
        clock: Callable[[], datetime] = utc_now,
        sync_timeout: float = 60.0,
        allocation_grace_seconds: float = DEVICE_ALLOCATION_GRACE_SECONDS,
        leader_election: bool = True,
        identity: str | None = None,
    ) -> None:
        api = _pooled(api, size=32 + workers)
        self.cache = ClusterCache(api, hpa_api_version=hpa_api_version)
        self.writer = Writer(api)  # every Kubernetes write of the controller goes here
        self._log = log_store
        self._hub_endpoint = hub_endpoint
        self._settings = Settings()
        self._settings_lock = threading.Lock()
        self._hub = self._make_hub()
        self._epoch = 0
        self._sync_timeout = sync_timeout
        self.queue = queueing.WorkQueue()
        self.class_queue = queueing.WorkQueue(name="classes")
        self.reconciler = Reconciler(
            world=self.cache,
            log_store=log_store,
            epoch=lambda: self._epoch,
            writer=self.writer,
            hub=self._hub,
            targets=targets or ServiceTarget(),
            settings=self.settings,
            clock=clock,
            hpa_api_version=hpa_api_version,
            rewrite=oldservers.rewrite_for(api),
            allocation_grace_seconds=allocation_grace_seconds,
        )
        self._clock = clock
        self._workers = queueing.Workers(self.queue, self._pass, workers=workers)
        self._class_workers = queueing.Workers(self.class_queue, self._class_pass, workers=1)
        self._stopping = False
        self._unmeter = [
            log_store.observe_appends(metrics.appended),
            metrics.register_orders(self._orders_for_metrics),
        ]
        self.leading = threading.Event()
        self.lost = threading.Event()  # leadership was lost: the process must stop
        self._elector = (
            Elector(
                client.CoordinationV1Api(api),
                namespace=LEASE_NAMESPACE,
                name=LEASE_NAME,
                identity=identity or f"{socket.gethostname()}-{os.getpid()}",
                on_started=self._lead,
                on_stopped=self._lose,
                epoch_floor=log_store.epoch,
            )
            if leader_election
            else None
        )

    # -- settings --------------------------------------------------------------------------

    def settings(self) -> Settings:
        with self._settings_lock:
            return self._settings

    def _make_hub(self) -> HubResolver:
        endpoint = self._hub_endpoint or self._settings.hugging_face.endpoint
        return HubResolver(HubSettings(endpoint=endpoint))

    def _reload_settings(self) -> None:
        try:
            fresh = Settings.from_module_config(self.cache.module_settings())
        except SettingsError as exc:
            # Keep working with the last good settings; the message names the bad fields.
            log.error("ModuleConfig ai-inference rejected, keeping previous settings: %s", exc)
            return
        with self._settings_lock:
            self._settings = fresh

    # -- running ---------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self._epoch

    def start(self, *, wait: float | None = 60.0) -> None:
        """Campaign for the Lease (or lead at once without election), then run.

        Returns once this process leads and its caches are synced; raises TimeoutError
        if that does not happen within `wait` seconds.
        """
        if self._elector is None:
            self._run(self._log.epoch() + 1)
        else:
            self._elector.start()
            if not self.leading.wait(wait):
                raise TimeoutError(f"did not become leader within {wait}s")

    def _lead(self, epoch: int) -> None:
        # The elector's thread must not block: caches sync on a thread of their own.
        threading.Thread(target=self._run, args=(epoch,), name="lead", daemon=True).start()

    def _lose(self) -> None:
        if not self._stopping:
            log.error("leadership lost: stopping the workers (the process should exit)")
        self.lost.set()
        self.queue.shutdown()
        self.class_queue.shutdown()

    def _run(self, epoch: int) -> None:
        self._epoch = self._log.claim_epoch(epoch)
        self.cache.watch_changes(self._enqueue)
        # A class's own Ready condition depends on it and on the priority/device classes.
        self.cache.classes.add_handler(lambda _e, obj: self._enqueue_class(obj))
        for informer in (self.cache.priority_classes, self.cache.device_classes):
            informer.add_handler(lambda _e, _o: self._enqueue_classes())
        self.cache.module_configs.add_handler(lambda _e, _o: self._reload_settings())
        self.cache.start()
        if not self.cache.wait_synced(self._sync_timeout):
            log.error("the controller's caches did not sync in %.0fs", self._sync_timeout)
            self._lose()
            return
        self._reload_settings()
        self._enqueue(self.cache.orders.uids())
        self._enqueue_classes()
        self._workers.start()
        self._class_workers.start()
        log.info("controller leading with epoch %d", self._epoch)
        self.leading.set()

    def stop(self) -> None:
        self._stopping = True
        self._workers.stop()
        self._class_workers.stop()
        self.cache.stop()
        if self._elector is not None:
            self._elector.stop()
        for unmeter in self._unmeter:
            unmeter()

    def _orders_for_metrics(self) -> list[dict[str, Any]]:
        # Only a leader's cache runs; a standby reports no orders, so replicas never
        # count one twice.
        return self.cache.orders.objects() if self.leading.is_set() else []

    def _enqueue(self, uids: Iterable[str]) -> None:
        for uid in uids:
            if uid and uid != "None":
                self.queue.add(uid)

    def _enqueue_class(self, obj: dict[str, object]) -> None:
        name = (obj.get("metadata") or {}).get("name")  # type: ignore[attr-defined]
        if name:
            self.class_queue.add(str(name))

    def _enqueue_classes(self) -> None:
        for obj in self.cache.classes.objects():
            self._enqueue_class(obj)

    def _class_pass(self, name: str) -> queueing.Outcome:
        with metrics.reconcile_pass("class") as record:
            classes.reconcile_class(name, self.cache, self.writer, self._clock)
            record.outcome = queueing.Done()
        return record.outcome

    def _pass(self, uid: str) -> queueing.Outcome:
        """One pass, timed and counted by outcome; its log records name the order."""
        meta = (self.cache.orders.get(uid) or {}).get("metadata") or {}
        with (
            logs.about_order(uid=uid, namespace=meta.get("namespace"), name=meta.get("name")),
            metrics.reconcile_pass("order") as record,
        ):
            outcome = self._pass_once(uid)
            record.outcome = outcome
        return outcome

    def _pass_once(self, uid: str) -> queueing.Outcome:
        try:
            return self.reconciler.reconcile(uid)
        except StreamConflict as exc:
            self.reconciler.forget(uid)  # someone else moved the stream: re-read it
            return queueing.Retry(exc)
        except StaleEpoch as exc:
            log.error("a newer controller leads (%s); this one stops writing", exc)
            self.queue.shutdown()
            self.class_queue.shutdown()
            return queueing.Terminal(exc)
