"""The controller's Prometheus metrics: what they are, and the hooks that feed them.

A platform team watches a controller the way controller-runtime taught it to: passes and
their duration by outcome, the work queue's depth and latency, watch restarts — and for
this one also the event log (appends and their latency: every decision waits for one),
the orders by phase and by reason, the probes, the planner's verdicts and leadership.
Every name is `ai_inference_*`; deploy/monitoring/ alerts and charts on them, and a test
checks that each name those files use is defined here.

The instrumented modules call the small functions below (`queue_added`, `watch_restarted`,
`probed`, `leading`, ...) so they need not know prometheus_client. The pass itself is
measured by `reconcile_pass()`; the orders' gauges are computed at scrape time from the
controller's cache (`register_orders`), so they are never stale and cost nothing between
scrapes. Everything lives in one registry, `REGISTRY`, served by `serve()` on the metrics
port (8080 by default in `ai-inference controller`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    exposition,
    gc_collector,
    platform_collector,
    process_collector,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = [
    "REGISTRY",
    "MetricsServer",
    "PassRecord",
    "appended",
    "exposed_labels",
    "leading",
    "probed",
    "queue_added",
    "queue_depth",
    "queue_retried",
    "queue_taken",
    "reconcile_pass",
    "register_orders",
    "serve",
    "watch_restarted",
]

REGISTRY = CollectorRegistry(auto_describe=True)
process_collector.ProcessCollector(registry=REGISTRY)
platform_collector.PlatformCollector(registry=REGISTRY)
gc_collector.GCCollector(registry=REGISTRY)

# Passes run from milliseconds (nothing changed) to seconds (a probe, a slow API server).
_PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

PASSES = Counter(
    "ai_inference_reconcile",
    "Reconcile passes, by kind of key (order, class, settings, recipe) and outcome "
    "(done, requeue, retry, terminal, error).",
    ["kind", "outcome"],
    registry=REGISTRY,
)
PASS_SECONDS = Histogram(
    "ai_inference_reconcile_duration_seconds",
    "Duration of a reconcile pass, by kind and outcome.",
    ["kind", "outcome"],
    buckets=_PASS_BUCKETS,
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "ai_inference_workqueue_depth",
    "Keys ready to be worked on now (not counting those in a pass or waiting for a timer).",
    ["queue"],
    registry=REGISTRY,
)
QUEUE_ADDS = Counter(
    "ai_inference_workqueue_adds",
    "Keys made ready in the work queue.",
    ["queue"],
    registry=REGISTRY,
)
QUEUE_WAIT = Histogram(
    "ai_inference_workqueue_queue_duration_seconds",
    "Time a key waited in the work queue between becoming ready and a worker taking it.",
    ["queue"],
    buckets=_FAST_BUCKETS,
    registry=REGISTRY,
)
QUEUE_RETRIES = Counter(
    "ai_inference_workqueue_retries",
    "Keys put back with backoff after a failed pass.",
    ["queue"],
    registry=REGISTRY,
)
WATCH_RESTARTS = Counter(
    "ai_inference_watch_restarts",
    "Watch streams started again, by resource and why: ended (the server's timeout), "
    "gone (410, re-listed), throttled (429), error, watchdog (silent too long).",
    ["resource", "reason"],
    registry=REGISTRY,
)
LOG_APPENDS = Counter(
    "ai_inference_log_appends",
    "Appends to the event log, by result: ok, conflict, stale_epoch, deleted, unavailable, error.",
    ["result"],
    registry=REGISTRY,
)
LOG_APPEND_SECONDS = Histogram(
    "ai_inference_log_append_duration_seconds",
    "Duration of one append to the event log (a decision waits for it before acting).",
    buckets=_FAST_BUCKETS,
    registry=REGISTRY,
)
LOG_EVENTS = Counter(
    "ai_inference_log_events",
    "Events appended to the event log, by event type.",
    ["type"],
    registry=REGISTRY,
)
LOG_UNREACHABLE = Gauge(
    "ai_inference_log_unreachable",
    "1 while the event log does not answer and orders wait for it (the log gate is "
    "closed: one probe asks for the log, no pass runs), else 0.",
    registry=REGISTRY,
)
SETTINGS_REFUSED = Gauge(
    "ai_inference_settings_refused",
    "1 while the settings of a ModuleConfig (ai-inference, or global's exposure block) "
    "are refused and the previous ones stay in force, else 0.",
    ["module_config"],
    registry=REGISTRY,
)
RECIPE_REFUSED = Gauge(
    "ai_inference_recipe_refused",
    "1 while a LaunchRecipe is refused by the controller (its schema admits it, the "
    "controller's own rules do not): no order is planned on it, else 0.",
    ["launch_recipe"],
    registry=REGISTRY,
)
PLANNER_VERDICTS = Counter(
    "ai_inference_planner_verdicts",
    "The planner's verdicts recorded in the log: Planned, or the reason no plan was found "
    "(a verdict equal to the one before is not recorded again).",
    ["verdict"],
    registry=REGISTRY,
)
PROBES = Counter(
    "ai_inference_probes",
    "Probes of orders' inference APIs, by result (ok, failed) and HTTP code ('none': no "
    "HTTP answer).",
    ["result", "code"],
    registry=REGISTRY,
)
PROBE_SECONDS = Histogram(
    "ai_inference_probe_duration_seconds",
    "Duration of one probe of an order's inference API, by result.",
    ["result"],
    buckets=_FAST_BUCKETS,
    registry=REGISTRY,
)
LEADER = Gauge(
    "ai_inference_leader",
    "1 while this process holds the controller's Lease, else 0.",
    registry=REGISTRY,
)
LEADER_EPOCH = Gauge(
    "ai_inference_leader_epoch",
    "The leader epoch of this process's current term (0 before the first term).",
    registry=REGISTRY,
)
LEADER_CHANGES = Counter(
    "ai_inference_leader_transitions",
    "Times this process started (acquired) or stopped (lost) leading.",
    ["change"],
    registry=REGISTRY,
)

# The orders' gauges, computed at scrape time by _OrdersCollector.
ORDERS = "ai_inference_orders"
ORDERS_BY_REASON = "ai_inference_orders_by_reason"
ORDER_NOT_READY = "ai_inference_order_not_ready_seconds"


# -- the pass -------------------------------------------------------------------------------

_OUTCOMES = {"Done": "done", "RequeueAfter": "requeue", "Retry": "retry", "Terminal": "terminal"}


@dataclass
class PassRecord:
    """What `reconcile_pass` reports; set `outcome` to the pass's queueing.Outcome."""

    outcome: object = None


@contextmanager
def reconcile_pass(kind: str = "order") -> Iterator[PassRecord]:
    """Time one pass; counted by its outcome, or as `error` if it raised.

    with metrics.reconcile_pass("order") as record:
        record.outcome = reconciler.reconcile(uid)
    """
    record = PassRecord()
    started = time.perf_counter()
    outcome = "error"
    try:
        yield record
        outcome = _OUTCOMES.get(type(record.outcome).__name__, "error")
    finally:
        PASSES.labels(kind, outcome).inc()
        PASS_SECONDS.labels(kind, outcome).observe(time.perf_counter() - started)


# -- hooks of the instrumented modules ------------------------------------------------------


def queue_added(queue: str) -> None:
    QUEUE_ADDS.labels(queue).inc()


def queue_taken(queue: str, waited: float) -> None:
    QUEUE_WAIT.labels(queue).observe(max(0.0, waited))


def queue_depth(queue: str, depth: int) -> None:
    QUEUE_DEPTH.labels(queue).set(depth)


def queue_retried(queue: str) -> None:
    QUEUE_RETRIES.labels(queue).inc()


def watch_restarted(resource: str, reason: str) -> None:
    WATCH_RESTARTS.labels(resource, reason).inc()


def probed(*, ok: bool, status_code: int | None, seconds: float) -> None:
    result = "ok" if ok else "failed"
    PROBES.labels(result, str(status_code) if status_code else "none").inc()
    PROBE_SECONDS.labels(result).observe(seconds)


_leader_lock = threading.Lock()
_is_leader = False


def leading(is_leader: bool, epoch: int | None = None) -> None:
    global _is_leader  # one process, one leadership
    with _leader_lock:
        changed, _is_leader = is_leader != _is_leader, is_leader
    LEADER.set(1 if is_leader else 0)
    if epoch is not None:
        LEADER_EPOCH.set(epoch)
    if changed:
        LEADER_CHANGES.labels("acquired" if is_leader else "lost").inc()


def log_unreachable(down: bool) -> None:
    """The log gate closed (True) or opened again (False)."""
    LOG_UNREACHABLE.set(1 if down else 0)


# The store's errors by class name: `store` is imported only by the commands that use it.
_APPEND_ERRORS = {
    "StreamConflict": "conflict",
    "StaleEpoch": "stale_epoch",
    "StreamDeleted": "deleted",
    "StoreUnavailable": "unavailable",
}


def appended(events: Sequence[Any], seconds: float, error: BaseException | None) -> None:
    """The event log's append observer (`EventLog.observe_appends(metrics.appended)`)."""
    if error is not None:
        LOG_APPENDS.labels(_APPEND_ERRORS.get(type(error).__name__, "error")).inc()
        LOG_APPEND_SECONDS.observe(seconds)
        return
    LOG_APPENDS.labels("ok").inc()
    LOG_APPEND_SECONDS.observe(seconds)
    for event in events:
        kind = str(getattr(event, "TYPE", "") or type(event).__name__)
        LOG_EVENTS.labels(kind).inc()
        if kind == "PlanComputed":
            PLANNER_VERDICTS.labels("Planned").inc()
        elif kind == "PlanFailed":
            PLANNER_VERDICTS.labels(str(getattr(event, "reason", "Unknown"))).inc()


# -- the orders, at scrape time --------------------------------------------------------------

OrderSource = Callable[[], Iterable[dict[str, Any]]]


class _OrdersCollector(Collector):
    """Orders by phase and by condition reason, and how long each unready one has waited.

    Read from the controller's cache of InferenceServices (their written status), so a
    standby, whose cache is not running, reports none and replicas never double count.
    """

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self._sources: dict[int, OrderSource] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self._next = 0

    def add(self, source: OrderSource) -> Callable[[], None]:
        with self._lock:
            self._next += 1
            handle = self._next
            self._sources[handle] = source

        def remove() -> None:
            with self._lock:
                self._sources.pop(handle, None)

        return remove

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families([])

    def collect(self) -> Iterable[GaugeMetricFamily]:
        with self._lock:
            sources = list(self._sources.values())
        orders: list[dict[str, Any]] = []
        for source in sources:
            orders.extend(source())
        return self._families(orders)

    def _families(self, orders: list[dict[str, Any]]) -> list[GaugeMetricFamily]:
        by_phase = GaugeMetricFamily(
            ORDERS,
            "InferenceServices by status.phase (NoStatus: not written yet).",
            labels=["phase"],
        )
        by_reason = GaugeMetricFamily(
            ORDERS_BY_REASON,
            "InferenceServices by condition, condition status and reason.",
            labels=["condition", "status", "reason"],
        )
        waiting = GaugeMetricFamily(
            ORDER_NOT_READY,
            "Seconds since each order that is not Ready last changed its Ready condition (a "
            "Degraded one: the condition that degrades it; or since it was created), with its "
            "phase and the reason of its first condition that is not True.",
            labels=["namespace", "name", "phase", "reason"],
        )
        phases: Tally[str] = Tally({"Pending": 0, "Ready": 0, "Degraded": 0, "Failed": 0})
        reasons: Tally[tuple[str, str, str]] = Tally()
        now = self._clock()
        for order in orders:
            meta = order.get("metadata") or {}
            status = order.get("status") if isinstance(order.get("status"), dict) else {}
            assert isinstance(status, dict)
            phase = str(status.get("phase") or "NoStatus")
            phases[phase] += 1
            conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
            for cond in conditions:
                key = (str(cond.get("type")), str(cond.get("status")), str(cond.get("reason")))
                reasons[key] += 1
            if phase == "Ready":
                continue
            blocking = next((c for c in conditions if c.get("status") != "True"), None)
            ready = next((c for c in conditions if c.get("type") == "Ready"), None)
            # A Degraded order is Ready (it serves): since what degrades it began, not
            # since it became Ready (days, read as days of not being Ready).
            anchor = blocking if phase == "Degraded" else ready
            since = _instant((anchor or {}).get("lastTransitionTime")) or _instant(
                meta.get("creationTimestamp")
            )
            if since is None:
                continue
            waiting.add_metric(
                [
                    str(meta.get("namespace", "")),
                    str(meta.get("name", "")),
                    phase,
                    str((blocking or {}).get("reason", "")),
                ],
                max(0.0, (now - since).total_seconds()),
            )
        for phase, count in sorted(phases.items()):
            by_phase.add_metric([phase], count)
        for (condition, cond_status, reason), count in sorted(reasons.items()):
            by_reason.add_metric([condition, cond_status, reason], count)
        return [by_phase, by_reason, waiting]


def _instant(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


_ORDERS = _OrdersCollector(lambda: datetime.now(UTC))
REGISTRY.register(_ORDERS)


def register_orders(source: OrderSource) -> Callable[[], None]:
    """Count the orders `source()` returns at every scrape; call the result to stop."""
    return _ORDERS.add(source)


# -- serving --------------------------------------------------------------------------------


class MetricsServer:
    """`/metrics` (any path, in fact) in the Prometheus text format, on a thread."""

    def __init__(self, port: int, host: str = "0.0.0.0") -> None:  # noqa: S104 - scraped by pod IP
        self._server, self._thread = exposition.start_http_server(port, host, registry=REGISTRY)
        self.port = int(self._server.server_address[1])

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve(port: int, host: str = "0.0.0.0") -> MetricsServer:  # noqa: S104
    """Start serving the registry on `port` (0: any free port, for tests)."""
    return MetricsServer(port, host)


_DEFINED = (
    PASSES,
    PASS_SECONDS,
    QUEUE_DEPTH,
    QUEUE_ADDS,
    QUEUE_WAIT,
    QUEUE_RETRIES,
    WATCH_RESTARTS,
    LOG_APPENDS,
    LOG_APPEND_SECONDS,
    LOG_EVENTS,
    LOG_UNREACHABLE,
    SETTINGS_REFUSED,
    RECIPE_REFUSED,
    PLANNER_VERDICTS,
    PROBES,
    PROBE_SECONDS,
    LEADER,
    LEADER_EPOCH,
    LEADER_CHANGES,
)
_ORDER_LABELS = {
    ORDERS: ("phase",),
    ORDERS_BY_REASON: ("condition", "status", "reason"),
    ORDER_NOT_READY: ("namespace", "name", "phase", "reason"),
}


def exposed_labels() -> dict[str, frozenset[str]]:
    """Every sample name this module exposes, with its label names — what alert and
    dashboard expressions may name: counters as `_total`, histograms as `_bucket` (with
    `le`), `_sum` and `_count`."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    exposed: dict[str, frozenset[str]] = {}
    for metric in _DEFINED:
        family = next(iter(metric.describe()))
        labels = frozenset(metric._labelnames)  # no public accessor
        for suffix in suffixes.get(family.type, ("",)):
            exposed[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    for name, order_labels in _ORDER_LABELS.items():
        exposed[name] = frozenset(order_labels)
    return exposed
