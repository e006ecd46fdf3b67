"""The controller's main loop: caches, work queues, workers, the leader epoch.

`ai-inference controller` and the demo build a `Controller` and `start()` it. Watches
feed the cache; every change enqueues the UIDs of the orders it can affect; workers run
`Reconciler.reconcile(uid)` one UID at a time; classes have a queue and a worker of
their own (their status is a separate, cheap pass keyed by name); a StreamConflict
(another writer moved the stream) drops the in-memory state so the retry re-reads the
log; while the log is unreachable, orders wait at one gate (log_gate.py) and are
enqueued again together when it answers. Every append is stamped with this process's
leader epoch, claimed in the log at start, so an older controller's appends are refused.
Every write goes through one `Writer`.

Leadership never wedges: a leader whose caches do not sync or whose log fails at
take-over, or that meets a newer epoch in the log (StaleEpoch), gives the Lease up and
sets `lost`; `ai-inference controller` then exits non-zero and liveness fails. `stop()`
(SIGTERM) releases the Lease so a standby leads within a renewal round. `still_leading()`
is the check before each write: the Writer's client (`write_api`, fencing.py) makes it
before every request that is not a read, so no write of an old leader lands.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient

from adapters import logs, metrics
from adapters.kubernetes import (
    certificates,
    classes,
    fencing,
    global_settings,
    oldservers,
    queueing,
    refusal_report,
)
from adapters.kubernetes.background import Background
from adapters.kubernetes.global_settings import GLOBAL_NAME
from adapters.kubernetes.leader import Elector
from adapters.kubernetes.log_gate import LogGate
from adapters.kubernetes.reconciling import MODULE_NAMESPACE, Reconciler
from adapters.kubernetes.rendering import PROXY_ENV
from adapters.kubernetes.settings import MODULE_NAME, Settings, SettingsError, Source
from adapters.kubernetes.watching import Timeouts
from adapters.kubernetes.world import SETTINGS_SOURCES, ClusterCache
from adapters.kubernetes.writing import Writer
from adapters.models import HubResolver, HubSettings
from adapters.probes.targets import ServiceTarget, TargetResolver
from fsm.placement import recipes
from fsm.state import DEVICE_ALLOCATION_GRACE_SECONDS
from fsm.values import HttpsMode
from store import EventLog, StaleEpoch, StoreUnavailable, StoreUnusable, StreamConflict

__all__ = [
    "LEASE_NAME",
    "LEASE_NAMESPACE",
    "Controller",
    "LeadershipLost",
    "own_namespace",
    "runtime_proxy_env",
    "utc_now",
]

# Where the Lease is when the controller runs in the module's namespace; it is always in
# the controller's own namespace, where its Role grants Leases (deploy/rbac).
LEASE_NAMESPACE = MODULE_NAMESPACE
LEASE_NAME = "ai-inference-controller"
# Repeated background calls (probes) due around the same second start together: warm
# code, half the CPU a probe (background.py). A probe runs at most half of it off time.
BACKGROUND_GRAIN_SECONDS = 1.0
# A pass that met a renewal late past its deadline, this process still leading, runs again
# after this long (the elector renews every 2 s).
LATE_RENEWAL_RETRY = 1.0
# Passes wait on the API server far more than they compute: with two, 500 new orders took
# 1.34 times a bare client's time; with four, 100 took 1.02 (docs/performance-journal.md).
DEFAULT_WORKERS = 4

log = logging.getLogger(__name__)


class LeadershipLost(RuntimeError):
    """This process stopped leading, or took the Lease but could not work; exit non-zero."""


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
        settings: Source | None = None,
        targets: TargetResolver | None = None,
        workers: int = DEFAULT_WORKERS,
        hpa_api_version: str | None = None,
        clock: Callable[[], datetime] = utc_now,
        sync_timeout: float = 60.0,
        allocation_grace_seconds: float = DEVICE_ALLOCATION_GRACE_SECONDS,
        leader_election: bool = True,
        identity: str | None = None,
        discovery_period: float = 30.0,
        namespace: str | None = None,
        watch_timeouts: Timeouts | None = None,
        secret_refresh: float = 30.0,
    ) -> None:
        api = _pooled(api, size=32 + workers)
        # None: the one the server serves (an old server has no autoscaling/v2).
        hpa_api_version = hpa_api_version or oldservers.hpa_api_version(api)
        self.namespace = namespace or own_namespace()
        # `discovery_period`: how often a kind the cluster does not serve is looked for;
        # `watch_timeouts`: the watches' three timeouts (watching.Timeouts' defaults);
        # `secret_refresh`: how often a Secret an order names is read again
        # (secret_lookup.py).
        self.cache = ClusterCache(
            api,
            hpa_api_version=hpa_api_version,
            discovery_period=discovery_period,
            timeouts=watch_timeouts,
            secret_refresh=secret_refresh,
        )
        # Every Kubernetes write of the controller goes through the Writer, and its client
        # refuses any request but a read once still_leading() is false.
        self.write_api = fencing.fenced(api, self.still_leading)
        self.writer = Writer(self.write_api)
        # What the controller refuses of an administrator's objects, told on each.
        self._reports = {
            report.subject.key_prefix: report
            for report in (
                refusal_report.RefusalReport(refusal_report.SETTINGS, self.cache, self.writer),
                refusal_report.RefusalReport(refusal_report.RECIPES, self.cache, self.writer),
            )
        }
        self._settings_report = self._reports[refusal_report.SETTINGS.key_prefix]
        self._recipe_report = self._reports[refusal_report.RECIPES.key_prefix]
        self._log = log_store
        # `settings`: the file and flags (settings.Source); `hub_endpoint` is one more
        # flag on top. A ModuleConfig, once seen, replaces the file (not the flags).
        source = settings or Source()
        if hub_endpoint:
            source = source.overridden({"huggingFace": {"endpoint": hub_endpoint}})
        self._source = source
        self._global: dict[str, Any] = {}  # the global exposure block in force
        # The last ModuleConfig taken (None: none seen, the file's settings are in force).
        self._module_in_force: dict[str, Any] | None = None
        self._settings = source.resolve(None)
        self._settings_lock = threading.Lock()
        self._hub = HubResolver(HubSettings(endpoint=self._settings.hugging_face.endpoint))
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
            # The proxy this process was given (its pod's env), for the runtimes' downloads.
            proxy_env=runtime_proxy_env(os.environ),
            rewrite=oldservers.rewrite_for(api),
            allocation_grace_seconds=allocation_grace_seconds,
            # Probes and hub lookups off the workers, on a pool each; an answer wakes its order.
            background=Background(
                self.queue.add, workers=max(4, 2 * workers), grain=BACKGROUND_GRAIN_SECONDS
            ),
            namespace=self.namespace,
        )
        self.cache.certificate_sources = self._certificate_sources
        self._clock = clock
        # While the log is down, orders wait at one gate and one probe asks for it; a log
        # that answers but cannot be used ends leadership, as a take-over's failure does.
        # The probe asks as an append would: a read-only node answers reads, and the gate
        # opened and closed twice a second against it.
        self.log_gate = LogGate(log_store.writable_epoch, self.queue.add, give_up=self._abdicate)
        self._workers = queueing.Workers(self.queue, self._pass, workers=workers)
        self._class_workers = queueing.Workers(self.class_queue, self._class_pass, workers=1)
        self._stopping = False
        self._unmeter = [
            log_store.observe_appends(metrics.appended),
            metrics.register_orders(self._orders_for_metrics),
        ]
        self.leading = threading.Event()
        self.lost = threading.Event()  # leadership was lost: the process must stop
        self.failure: str | None = None  # why it was lost, for the exit message
        self._elector = (
            Elector(
                client.CoordinationV1Api(api),
                namespace=self.namespace,
                name=LEASE_NAME,
                identity=identity or own_identity(os.environ),
                on_started=self._lead,
                on_stopped=self._lose,
                # Asked as an append asks: a database that takes reads but no writes
                # let a standby take the Lease, fail its claim and exit, again and again.
                epoch_floor=log_store.writable_epoch,
            )
            if leader_election
            else None
        )

    # -- settings --------------------------------------------------------------------------

    def settings(self) -> Settings:
        with self._settings_lock:
            return self._settings

    @property
    def hub_endpoint(self) -> str:
        """The hub the resolver asks now (the settings' `huggingFace.endpoint`)."""
        return self._hub.settings.endpoint

    def _certificate_sources(self) -> set[str]:
        specs = [obj.get("spec") or {} for obj in self.cache.classes.objects(copy_=False)]
        custom = self.settings().https.custom_certificate
        return certificates.sources(
            self.namespace,
            None if custom.platform_wide else custom.secret_name,  # never copied: not read
            specs,
            settings_namespace=custom.secret_namespace,
        )

    def _reload_settings(self) -> None:
        # The global block first: a bad one keeps the last good one (not the defaults),
        # and does not hold back a good edit of the module's own settings.
        self._global, problem = global_settings.reload(self._global, self.cache.global_settings())
        if problem:
            log.error("ModuleConfig global rejected: %s", problem)
        self._settings_report.verdict(GLOBAL_NAME, problem or None)
        module = self.cache.module_settings()
        refused: str | None = None
        try:
            fresh = self._source.resolve(module, self._global)
            self._module_in_force = module
        except SettingsError as exc:
            # Keep the last good module settings (the message names the bad fields), but
            # under the global block as it is now: a global edit still takes effect.
            log.error("ModuleConfig ai-inference rejected, keeping previous settings: %s", exc)
            refused = str(exc)
        self._settings_report.verdict(MODULE_NAME, refused)
        for name in SETTINGS_SOURCES:
            self.class_queue.add(refusal_report.SETTINGS.key_prefix + name)
        if refused is not None:
            try:
                fresh = self._source.resolve(self._module_in_force, self._global)
            except SettingsError:
                return

        with self._settings_lock:
            previous, self._settings = self._settings, fresh
        custom = fresh.https.custom_certificate
        platform_wide = custom.platform_wide and fresh.https.mode is HttpsMode.CUSTOM_CERTIFICATE
        if platform_wide and previous.https != fresh.https:
            # Said once a block in force (a start, an edit): an upgrade from a release that
            # copied it removes the copies, and the administrator reads why here.
            log.warning(
                "the platform's global https certificate (%s/%s) is not copied into "
                "tenants' namespaces: External orders without a class certificate are "
                "served on the ingress controller's default certificate (set "
                "IngressNginxController spec.defaultSSLCertificate, or name a "
                "certificate in ModuleConfig ai-inference)",
                custom.secret_namespace,
                custom.secret_name,
            )
        # The resolver and the rendered workload (HF_ENDPOINT) read the same hub.
        self._hub.use_endpoint(fresh.hugging_face.endpoint)

    def _settings_changed(self, _event: str, obj: dict[str, Any]) -> None:
        if (obj.get("metadata") or {}).get("name") in SETTINGS_SOURCES:
            self._reload_settings()

    def _recipe_changed(self, event: str, obj: dict[str, Any]) -> None:
        # Judged by the planner's own parser, so what is told is what planning does.
        name = str((obj.get("metadata") or {}).get("name") or "")
        if not name:
            return
        if event == "DELETED":
            self._recipe_report.forget(name)
            return
        try:
            recipes.parse_recipe(obj)
            problem = None
        except recipes.RecipeError as exc:
            problem = str(exc)
        self._recipe_report.verdict(name, problem)
        self.class_queue.add(refusal_report.RECIPES.key_prefix + name)

    # -- running ---------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self._epoch

    def start(self, *, wait: float | None = 60.0) -> None:
        """Campaign for the Lease (or lead at once without election), then run.

        Returns once this process leads and its caches are synced. Raises TimeoutError if
        that does not happen within `wait` seconds (None: a standby waits for ever), and
        LeadershipLost if this process took the Lease but could not work (caches that do
        not sync, an unreachable log): it has released the Lease, and should exit non-zero.
        """
        if self._elector is None:
            self._run(self._log.epoch() + 1)
        else:
            self._elector.start()
        deadline = None if wait is None else time.monotonic() + wait
        while not self.leading.wait(0.1):
            if self.lost.is_set():
                raise LeadershipLost(self.failure or "leadership lost before the caches synced")
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"did not become leader within {wait}s")

    def still_leading(self) -> bool:
        """Whether this process may write now: consult it before every Kubernetes write.

        False once the Lease is lost, a newer epoch appeared in the log, or the last
        renewal is older than the renew deadline (checked now, not at the next renewal
        round), so a pass in flight gives up instead of writing as an old leader.
        """
        if not self.leading.is_set() or self.lost.is_set():
            return False
        return self._elector is None or self._elector.holds_lease()

    def alive(self) -> bool:
        """Liveness: False once this process cannot work and must be restarted."""
        return not self.lost.is_set()

    def _lead(self, epoch: int) -> None:
        # The elector's thread must not block: caches sync on a thread of their own.
        threading.Thread(target=self._run, args=(epoch,), name="lead", daemon=True).start()

    def _halt_work(self) -> None:
        self.leading.clear()
        self.queue.shutdown()
        self.class_queue.shutdown()

    def _lose(self) -> None:
        self._halt_work()
        if self._stopping:
            return  # we released the Lease ourselves: a clean stop, not a loss
        log.error("leadership lost: stopping the workers (the process should exit)")
        self.failure = self.failure or "the Lease was lost"
        self.lost.set()

    def _abdicate(self, reason: str) -> None:
        """Stop leading on our own: no more passes, and the Lease released for a standby.

        The release runs on a thread of its own: this may be called from a worker, and
        stopping the elector waits for its loop.
        """
        log.error("giving up leadership: %s", reason)
        self.failure = self.failure or reason
        self._halt_work()
        self.lost.set()
        if self._elector is not None:
            threading.Thread(target=self._elector.stop, name="abdicate", daemon=True).start()

    def _run(self, epoch: int) -> None:
        try:
            self._take_over(epoch)
        except Exception as exc:
            # The log or the API server failed us at take-over. Holding the Lease without
            # working would wedge the module: release it and let a standby (or our restart)
            # try. Only the type and message: a driver's repr may carry a connection URL.
            self._abdicate(f"take-over failed: {type(exc).__name__}: {exc}")

    def _take_over(self, epoch: int) -> None:
        self._epoch = self._log.claim_epoch(epoch)
        # The log was found readable when this process opened it, maybe long ago as a
        # standby; a newer release may have led since and written events this one cannot
        # fold. Checked after the claim: no append of an older epoch lands from then on.
        self._log.check_readable()
        # Settings first: the orders a settings change enqueues must find them in force.
        self.cache.module_configs.add_handler(self._settings_changed)
        self.cache.recipes.add_handler(self._recipe_changed)
        self.cache.watch_changes(
            self._enqueue,
            self.reconciler.waiting_for_capacity,
            status_echo=self.writer.is_status_echo,
        )
        self.reconciler.demand_freed = lambda: self._enqueue(
            self.cache.capacity_watchers(self.reconciler.waiting_for_capacity)
        )
        # A class's own Ready condition depends on it and on the priority/device classes.
        self.cache.classes.add_handler(lambda _e, obj: self._enqueue_class(obj))
        for informer in (self.cache.priority_classes, self.cache.device_classes):
            informer.add_handler(lambda _e, _o: self._enqueue_classes())
        self.cache.start()
        if not self.cache.wait_synced(self._sync_timeout):
            behind = ", ".join(self.cache.unsynced()) or "?"
            raise LeadershipLost(f"caches did not sync in {self._sync_timeout:.0f}s: {behind}")
        if self.lost.is_set():
            return  # the Lease went while we synced
        self._reload_settings()
        self._enqueue(self.cache.orders.uids())
        # Orders deleted while no leader watched: no DELETED event will ever come for
        # them (this process never saw them), so a pass over each finds it gone and
        # closes its stream; else the log would keep them live for good.
        self._enqueue(self.reconciler.gone_while_away())
        self._enqueue_classes()
        # Leading before the workers start: a pass asks still_leading() first.
        self.leading.set()
        self._workers.start()
        self._class_workers.start()
        log.info("controller leading with epoch %d", self._epoch)

    def stop(self) -> None:
        """Stop working, then release the Lease at once (a standby takes over in seconds,
        not after the Lease expires), then stop the caches."""
        self._stopping = True
        self.leading.clear()
        self._workers.stop()
        self._class_workers.stop()
        self.log_gate.stop()
        self.reconciler.background.stop()
        self.reconciler.prober.close()
        if self._elector is not None:
            self._elector.stop()
        self.cache.stop()
        for unmeter in self._unmeter:
            unmeter()

    def _orders_for_metrics(self) -> list[dict[str, Any]]:
        # Only a leader's cache runs; a standby reports no orders, so replicas never
        # count one twice.
        return self.cache.orders.objects(copy_=False) if self.leading.is_set() else []

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

    def _class_pass(self, key: str) -> queueing.Outcome:
        """A class's status, or what the controller concluded of a ModuleConfig's
        settings or of a LaunchRecipe (refusal_report.py): the cluster-wide objects it
        reports on."""
        if not self.still_leading():
            return self._may_not_write()
        prefix, _, name = key.rpartition("/")
        report = self._reports.get(prefix + "/") if prefix else None
        kind = "class" if report is None else report.subject.pass_kind
        with metrics.reconcile_pass(kind) as record:
            record.outcome = queueing.Done()
            try:
                if report is not None:
                    report.tell(name)
                else:
                    classes.reconcile_class(key, self.cache, self.writer, self._clock)
            except fencing.NotLeading as exc:
                log.info("%s pass over %s stopped before a write: %s", kind, key, exc)
                record.outcome = self._may_not_write()
        return record.outcome

    def _may_not_write(self) -> queueing.Outcome:
        """The outcome of a pass that may not write now. Leadership gone: dropped, the
        next leader re-reads everything. Still leading, with the last renewal late past
        the deadline: looked at again soon. A renewal that then succeeds keeps this
        process leading, and a dropped pass would wait for the resync (300 s)."""
        if self._stopping or self.lost.is_set() or not self.leading.is_set():
            return queueing.Done()
        return queueing.RequeueAfter(LATE_RENEWAL_RETRY)

    def _pass(self, uid: str) -> queueing.Outcome:
        """One pass, timed and counted by outcome; its log records name the order."""
        if not self.still_leading():
            return self._may_not_write()
        if self.log_gate.park_if_closed(uid):
            return queueing.Done()  # the log is down: enqueued again once it answers
        meta = (self.cache.orders.get(uid, copy_=False) or {}).get("metadata") or {}
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
            # Someone else moved a stream this pass appended to: read it again. Not always
            # this order's: a take appends to its victim's too (Reconciler._take).
            self.reconciler.forget(uid)
            if exc.uid != uid:
                self.reconciler.forget(exc.uid)
                # Its own pass re-reads it and arms again what forgetting dropped (probes).
                self.queue.add(exc.uid)
            return queueing.Retry(exc)
        except fencing.NotLeading as exc:
            log.info("pass over %s stopped before a write: %s", uid, exc)
            return self._may_not_write()
        except StoreUnavailable as exc:
            self.log_gate.failed(uid, exc)  # parked: enqueued again once the log answers
            return queueing.Done()
        except StoreUnusable as exc:
            return self._log_unusable(uid, exc)
        except StaleEpoch as exc:
            # A newer controller appends to the log: end leadership as a lost Lease would.
            self._abdicate(f"a newer controller leads ({exc})")
            return queueing.Terminal(exc)

    def _log_unusable(self, uid: str, exc: StoreUnusable) -> queueing.Outcome:
        """A pass met a log that answers but refused it. Either no append can be made (a
        table dropped, a privilege revoked, a corrupt file: leadership ends, as when the
        gate's probe meets it, and the restart says why) or only this order's cannot (its
        own data: retried on its own backoff, the others go on — one order must not end
        every order's leader). An append rehearsed without the order's data tells which.
        Before, every pass failed and retried for ever behind a leader that looked alive."""
        try:
            self._log.writable_epoch()
        except StoreUnavailable as down:
            self.log_gate.failed(uid, down)
            return queueing.Done()
        except StoreUnusable as unusable:
            self._abdicate(f"the event log cannot be written: {unusable}")
            return queueing.Terminal(unusable)
        return queueing.Retry(exc)


def own_namespace() -> str:
    """The controller's own namespace, where its Lease is and CustomCertificate Secrets
    are read: the pod's (POD_NAMESPACE, from the downward API), else the module's."""
    return os.environ.get("POD_NAMESPACE") or MODULE_NAMESPACE


def own_identity(environ: Mapping[str, str]) -> str:
    """The controller's name in the Lease: its pod's (POD_NAME, from the downward API), as
    `kubectl get pods` shows it, else the host's; with the process id, so two controllers
    on one host (a developer's, the tests') are two candidates."""
    return f"{environ.get('POD_NAME') or socket.gethostname()}-{os.getpid()}"


def runtime_proxy_env(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The proxy variables of `environ` the runtimes may be given. A proxy URL with
    credentials (`http://user:password@proxy:3128`, as the cluster's proxy settings may
    hold) is the cluster's egress password: rendered into a tenant's Deployment, anyone
    who reads Deployments or Pods in that namespace, and the runtime itself, would read
    it. Such a variable is left out, and the log says so (without the URL)."""
    out: list[tuple[str, str]] = []
    for name in PROXY_ENV:
        value = environ.get(name)
        if not value:
            continue
        if name.upper() != "NO_PROXY" and "@" in value.split("://", 1)[-1].split("/", 1)[0]:
            log.warning(
                "%s carries credentials: not given to the runtimes (they download directly)",
                name,
            )
            continue
        out.append((name, value))
    return tuple(out)
