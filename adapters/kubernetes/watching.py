"""Informers: a local cache of one kind, kept current by LIST-then-WATCH, feeding handlers.

The controller's loop makes one `Informer` per kind it reads (orders, classes, children),
adds a handler that enqueues UIDs, and reads the cache in its passes. Its LISTs go
through `rest`, as every other request of the adapter does.

What the watch loop does, and why (ENGINEERING.md items 1-9):

- LIST first (paged), then WATCH from the list's `resourceVersion` with
  `allowWatchBookmarks=true`; never from an object's RV, which would resurrect deletions.
- The last RV is taken from every event, BOOKMARK included; RVs are opaque strings and
  are only ever compared for equality.
- `410 Gone` (the RV was compacted) re-LISTs and diffs against the cache: what vanished
  is emitted as a synthetic DELETED, what changed as ADDED/MODIFIED.
- Three timeouts: the server's `timeoutSeconds` (drawn from a range, so many informers
  do not reconnect together), the client's read timeout (a dead network otherwise hangs
  a read forever), and an inactivity watchdog (any event, bookmarks too, resets it) that
  stops a silent stream with `Watch.stop()`. On a 1.20 server, which sends a bookmark only
  just before `timeoutSeconds`, a quiet watch is simply resumed from its RV every ~70 s.
- Failures reconnect after a jittered exponential backoff (0.8 s doubling to 30 s); 429
  is a back-off (honouring Retry-After), not a failure.
- One thread per watch, plus one watchdog thread per informer.
- A kind that may be missing (another module's CRD, DRA on an older server) is
  `optional`: a 404 LIST leaves the cache empty and synced, and the LIST is tried again
  periodically, so the kind is picked up once its CRD appears (and emptied if it goes).

Deserialisation: objects stay plain dicts (the cache, the diff and the handlers never
need generated models, and custom resources have none). We keep the client's `Watch`
with `return_type="object"`, which yields dicts, so `Watch` still tracks the RV and
turns ERROR events into exceptions (its `deserialize=False` mode would crash on ERROR
events), but parse each event once (`_ParsedOnce`): its own unmarshalling parses every
object twice. The list function handed to
`Watch.stream` is built from `Resource` paths, so core kinds and custom resources take
the same code path.

Read your own writes: after a write, call `wait_for_rv(uid, written_rv)` (or `fresh`)
before acting on the cache. It returns once the watch delivered that RV for the object,
the object was deleted, or a LIST that began after the write completed.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import watch
from kubernetes.client import ApiClient

from adapters import metrics
from adapters.kubernetes import compacting, errors, queueing, rest
from adapters.kubernetes.cache_index import Indexer, NameIndex, ValueIndex
from adapters.kubernetes.rest import Obj, Resource

__all__ = [
    "RESYNC",
    "CacheBehind",
    "Handler",
    "Indexer",
    "Informer",
    "InformerStats",
    "Obj",
    "Timeouts",
    "by_label",
    "by_owner_uid",
]

log = logging.getLogger(__name__)

# Our own generator, so jittered timeouts never perturb the process-wide one.
_JITTER = random.Random()  # noqa: S311 - jitter, not secrets

Handler = Callable[[str, Obj], None]

RESYNC = "RESYNC"  # the event type of a periodic resync: every cached object again
_RECENT_RVS = 16  # RVs an object passed through remembered for read-your-writes
# For how long: a writer waits for its own write right after it returns (5 s at most),
# so an object settled longer than this is known by the RV it has, and a cache of
# thousands of settled objects keeps no RV memory at all.
_RECENT_RV_SECONDS = 30.0
_GONE_MEMORY = 10_000  # deleted UIDs remembered for read-your-writes
# Objects per LIST page. A page is parsed whole before its objects are trimmed: 500
# Deployments were ~17 MB at once, and every informer lists at the same time at a start.
_PAGE = 100


def by_owner_uid(obj: Obj) -> list[str]:
    """Index: the UIDs of the object's owners."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [str(ref["uid"]) for ref in refs if ref.get("uid")]


def by_label(key: str) -> Indexer:
    """Index: the value of one label (objects without it are not indexed)."""

    def index(obj: Obj) -> list[str]:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return [str(labels[key])] if key in labels else []

    return index


def _uid_and_rv(obj: Any) -> tuple[str, str]:
    if isinstance(obj, Mapping):
        meta = obj.get("metadata") or {}
        uid, rv = meta.get("uid"), meta.get("resourceVersion")
    else:
        meta = getattr(obj, "metadata", None)
        uid, rv = getattr(meta, "uid", None), getattr(meta, "resource_version", None)
    if not uid or not rv:
        raise ValueError(f"not a written object (no uid and resourceVersion): {obj!r:.80}")
    return str(uid), str(rv)


# How often a watchdog looks at its stream, at most: a silent stream is stopped within this
# of its inactivity timeout. Each informer has one, all idle most of the time: at 1 s,
# seventeen of them waking every second were 0.14 % of a core, nearly a tenth of the idle
# controller's CPU.
WATCHDOG_TICK = 5.0


@dataclass(frozen=True)
class Timeouts:
    """The three timeouts of a watch, in seconds; `inactivity=None` disables the watchdog."""

    server: tuple[float, float] = (300.0, 600.0)  # timeoutSeconds, drawn uniformly
    connect: float = 10.0
    read: float = 90.0  # per socket read of a stream; the watchdog normally acts first
    inactivity: float | None = 70.0
    list_read: float = 60.0


@dataclass
class InformerStats:
    """Counters for logs, metrics and tests."""

    lists: int = 0
    opened: int = 0  # watch streams whose response headers came back
    watches: int = 0  # watch streams that ended
    events: int = 0
    unread: int = 0  # events that changed only what the cache does not keep: not told
    bookmarks: int = 0
    gone: int = 0
    synthetic_deletions: int = 0
    watchdog_stops: int = 0
    errors: int = 0
    throttled: int = 0
    resyncs: int = 0


def _same_but_version(old: Obj, new: Obj) -> bool:
    """Equal in all the cache keeps of them (both trimmed), the resourceVersion apart.

    Such an event changed only what no reader of the cache reads (a Deployment's
    conditions, a claim's reservations): telling the handlers would wake passes that
    find nothing new, as controller-runtime's predicates spare a controller."""
    if old.keys() != new.keys():
        return False
    for key, value in new.items():
        if key != "metadata":
            if old[key] != value:
                return False
            continue
        before = old[key]
        if not isinstance(value, dict) or not isinstance(before, dict):
            return False
        if before.keys() != value.keys():
            return False
        if any(before[k] != v for k, v in value.items() if k != "resourceVersion"):
            return False
    return True


class CacheBehind(TimeoutError):
    """The cache did not catch up with a write within the bound; requeue and try later."""


class _ParsedOnce(watch.Watch):  # type: ignore[misc]  # the client is untyped
    """The client's `Watch`, each event's JSON parsed once.

    Its own `unmarshal_event` parses a line, then, for `return_type="object"`, dumps the
    object back to JSON and parses it again to make `object` — a second copy of
    `raw_object` nobody here reads: half a watch's CPU during a rollout, and a transient
    copy of every object. `stream` still sees what it needs: `raw_object` (ERROR events
    become exceptions from it) and the tracked resource version.
    """

    def unmarshal_event(self, data: str, return_type: Any) -> dict[str, Any] | None:
        if not data or data.isspace():
            return None
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            return None
        if not isinstance(event, dict):
            return None
        obj = event.get("object")
        event["raw_object"] = event["object"] = obj
        if event.get("type") != "ERROR" and isinstance(obj, dict):
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = rv
        return event


@dataclass
class _Stream:
    watch: watch.Watch
    last_activity: float
    stopped_by_watchdog: bool = False


class Informer:
    """A cache of one kind (optionally one namespace, selectors) kept by list-then-watch."""

    def __init__(
        self,
        api: ApiClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: Mapping[str, Indexer] | None = None,
        timeouts: Timeouts | None = None,
        backoff: queueing.Backoff | None = None,
        resync_period: float | None = None,
        name: str | None = None,
        optional: bool = False,
        absent_poll: float = 30.0,
        trim: Callable[[Obj], None] | None = None,
    ) -> None:
        """`optional`: the kind may not be served (its CRD not installed). A LIST answered
        404 then counts as synced and empty, and is tried again every `absent_poll`
        seconds, so a CRD installed later is picked up without a restart. `trim`: drops,
        in place, what no reader of this cache needs, before an object is stored."""
        self.resource = resource
        self.namespace = namespace
        self.name = name or f"{resource.plural}@{namespace or '*'}"
        self.stats = InformerStats()
        self._api = api
        self._selectors: list[tuple[str, str]] = []
        if label_selector:
            self._selectors.append(("labelSelector", label_selector))
        if field_selector:
            self._selectors.append(("fieldSelector", field_selector))
        self._timeouts = timeouts or Timeouts()
        self._backoff = backoff or queueing.Backoff()
        self._resync_period = resync_period
        self._optional = optional
        self._trim = trim
        self._absent_poll = absent_poll
        self.present: bool | None = None  # None until the first LIST answered
        self._handlers: list[Handler] = []
        self._cond = threading.Condition()
        self._objects: dict[str, Obj] = {}
        self._by_name = NameIndex(self._namespace_of_locked)
        self._indexes = {key: ValueIndex(fn) for key, fn in (indexers or {}).items()}
        # By UID, the last noted first: when, and the RVs passed through (recent ones).
        self._seen: OrderedDict[str, tuple[float, tuple[str, ...]]] = OrderedDict()
        self._gone: OrderedDict[str, None] = OrderedDict()
        self._rv: str | None = None
        self._synced = False
        self._lists_started = 0
        self._synced_list = 0  # the sequence number of the last LIST applied
        self._list_began: float | None = None  # see `list_began`
        self._stream: _Stream | None = None
        self._stopped_by_watchdog = False  # the last stream's end: its watchdog's doing
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- reading -------------------------------------------------------------------------

    def has_synced(self) -> bool:
        return self._synced

    def wait_synced(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._synced, timeout)

    @property
    def resource_version(self) -> str | None:
        """The RV the next watch resumes from (the last LIST's or the last event's)."""
        return self._rv

    @property
    def list_began(self) -> float | None:
        """Read by a handler: when (`time.monotonic()`) the LIST whose changes it is being
        handed was requested; None for a watch event. A LIST requested after a write
        completed shows that write or something newer, whatever the RVs say."""
        return self._list_began

    def get(self, uid: str, *, copy_: bool = True) -> Obj | None:
        with self._cond:
            obj = self._objects.get(uid)
            return compacting.copied(obj) if obj is not None and copy_ else obj

    def get_by_name(self, namespace: str | None, name: str, *, copy_: bool = True) -> Obj | None:
        with self._cond:
            uid = self._by_name.get(namespace or "", name)
            obj = self._objects[uid] if uid is not None else None
            return compacting.copied(obj) if obj is not None and copy_ else obj

    def objects(self, *, copy_: bool = True) -> list[Obj]:
        """Every cached object; `copy_=False` hands out the cached objects themselves (the
        cache replaces an object on change, never edits it): read them, never change them."""
        with self._cond:
            if not copy_:
                return list(self._objects.values())
            return [compacting.copied(obj) for obj in self._objects.values()]

    def names(self) -> list[str]:
        """The names of the cached objects (cluster-scoped kinds: their whole identity)."""
        with self._cond:
            return [
                str(meta.get("name"))
                for meta in (o.get("metadata") or {} for o in self._objects.values())
            ]

    def uids(self) -> list[str]:
        with self._cond:
            return list(self._objects)

    def by_index(self, index: str, value: str, *, copy_: bool = True) -> list[Obj]:
        with self._cond:
            uids = self._indexes[index].members(value)
            found = [self._objects[uid] for uid in sorted(uids)]
            return [compacting.copied(obj) for obj in found] if copy_ else found

    def index_values(self, index: str) -> list[str]:
        """Every value some cached object has in `index`."""
        with self._cond:
            return list(self._indexes[index].values)

    def wait_for_rv(self, uid: str, resource_version: str, timeout: float) -> bool:
        """Wait until the cache reflects the write that returned `resource_version`."""
        with self._cond:
            mark = self._lists_started

            def caught_up() -> bool:
                return (
                    uid in self._gone
                    or self._rv_of_locked(uid) == resource_version
                    or resource_version in self._seen.get(uid, (0.0, ()))[1]
                    or self._synced_list > mark
                )

            return self._cond.wait_for(caught_up, timeout)

    def fresh(self, written: Any, timeout: float = 5.0) -> Obj | None:
        """The cached copy of a just-written object, once it is at least that new.

        `written` is what the write returned: a dict, or a generated client model.
        Returns None if the object has been deleted since; raises CacheBehind on timeout.
        """
        uid, rv = _uid_and_rv(written)
        if not self.wait_for_rv(uid, rv, timeout):
            raise CacheBehind(f"{self.name}: {uid} at {rv} not seen after {timeout}s")
        return self.get(uid)

    # -- lifecycle -----------------------------------------------------------------------

    def add_handler(self, handler: Handler) -> None:
        """Call `handler(event_type, obj)` on every change; it runs on the watch thread."""
        self._handlers.append(handler)

    def start(self) -> None:
        if any(thread.is_alive() for thread in self._threads):
            raise RuntimeError(f"{self.name} is already running")
        self._stopping.clear()
        for target, suffix in ((self._run, "watch"), (self._watchdog, "watchdog")):
            thread = threading.Thread(target=target, name=f"{self.name}-{suffix}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        with self._cond:
            stream = self._stream
            self._cond.notify_all()
        if stream is not None:
            stream.watch.stop()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]

    # -- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        need_list = True
        while not self._stopping.is_set():
            delay = 0.0
            try:
                if need_list:
                    self._relist()
                    need_list = False
                healthy = self._watch_once()
                if not self._stopped_by_watchdog:  # the watchdog counted its own stop
                    self._restarted("ended")
                if healthy:
                    failures = 0
                    continue
                failures += 1
                delay = self._backoff.delay(failures)
            except errors.APIGoneError as exc:
                self._restarted("gone")
                self.stats.gone += 1
                log.info("%s: %s; listing again", self.name, exc)
                need_list = True
                failures += 1
                # The first 410 re-lists at once; a loop of them backs off.
                delay = self._backoff.delay(failures - 1)
            except errors.APINotFoundError as exc:
                if not self._optional:
                    self.stats.errors += 1
                    failures += 1
                    delay = self._backoff.delay(failures)
                    log.warning("%s: %s; retrying in %.1fs", self.name, exc, delay)
                else:
                    self._mark_absent()
                    need_list, failures = True, 0
                    delay = self._absent_poll
            except errors.APITooManyRequestsError as exc:
                self._restarted("throttled")
                self.stats.throttled += 1
                failures += 1
                delay = max(self._backoff.delay(failures), exc.retry_after or 0.0)
            except errors.APIError as exc:
                failures += 1
                delay = self._failed(failures, str(exc))
            except Exception:
                failures += 1
                delay = self._failed(failures, "watch loop failed", trace=True)
            if delay:
                self._stopping.wait(delay)

    def _failed(self, failures: int, what: str, *, trace: bool = False) -> float:
        """Count a failed list or watch; the delay before the next try."""
        self._restarted("error")
        self.stats.errors += 1
        delay = self._backoff.delay(failures)
        report = log.exception if trace else log.warning
        report("%s: %s; retrying in %.1fs", self.name, what, delay)
        return delay

    def _restarted(self, reason: str) -> None:
        if not self._stopping.is_set():  # stopping the informer is not a restart
            metrics.watch_restarted(self.resource.plural, reason)

    def _list_all(self) -> tuple[list[Obj], str]:
        items: list[Obj] = []
        rv = ""
        token = ""
        path = self.resource.collection_path(self.namespace)
        timeout = (self._timeouts.connect, self._timeouts.list_read)
        while True:
            query: list[tuple[str, Any]] = [*self._selectors, ("limit", _PAGE)]
            if token:
                query.append(("continue", token))
            page = rest.call(self._api, "GET", path, query=query, timeout=timeout)
            meta = page.get("metadata") or {}
            # Every page of a paged LIST is served at the first page's RV.
            rv = rv or str(meta.get("resourceVersion", ""))
            # Kept as the cache keeps them, page by page: a whole LIST of raw objects
            # at once was the controller's peak at a restart with many orders.
            items.extend(self._prepare(obj) for obj in page.pop("items", None) or [])
            token = str(meta.get("continue") or "")
            if not token:
                return items, rv

    def _relist(self) -> None:
        with self._cond:
            self._lists_started += 1
            seq = self._lists_started
        began = time.monotonic()
        items, rv = self._list_all()
        fresh: dict[str, Obj] = {}
        for obj in items:
            fresh[obj["metadata"]["uid"]] = obj
        changes: list[tuple[str, Obj]] = []
        with self._cond:
            for uid in [u for u in self._objects if u not in fresh]:
                changes.append(("DELETED", self._objects[uid]))
                self._remove_locked(uid)
                self.stats.synthetic_deletions += 1
            for uid, obj in fresh.items():
                old = self._objects.get(uid)
                new_rv = obj["metadata"].get("resourceVersion", "")
                if old is not None and old["metadata"].get("resourceVersion") == new_rv:
                    continue
                changes.append(("ADDED" if old is None else "MODIFIED", obj))
                self._store_locked(obj)
                self._note_rv_locked(uid, new_rv)
            self._rv = rv
            self._synced_list = seq
            if self.present is False:
                log.info("%s: %s is served now", self.name, self.resource.kind)
            self.present = True
            self.stats.lists += 1
            self._cond.notify_all()
        self._list_began = began  # handlers run on this thread, one change at a time
        try:
            for event_type, obj in changes:
                self._emit(event_type, obj)
        finally:
            self._list_began = None
        with self._cond:
            # Synced only once the handlers have had the first LIST, as in client-go.
            self._synced = True
            self._cond.notify_all()

    def _mark_absent(self) -> None:
        """The kind is not served: an empty cache that counts as synced."""
        with self._cond:
            was = self.present
            gone = list(self._objects.values())
            for obj in gone:
                self._remove_locked(obj["metadata"]["uid"])
                self.stats.synthetic_deletions += 1
            self._rv = None
            self.present = False
            self._lists_started += 1
            self._synced_list = self._lists_started
            self._cond.notify_all()
        if was is not False:
            log.info(
                "%s: %s is not served by this cluster; looking again every %.0fs",
                self.name,
                self.resource.kind,
                self._absent_poll,
            )
        for obj in gone:
            self._emit("DELETED", obj)
        with self._cond:
            self._synced = True
            self._cond.notify_all()

    def _list_function(self) -> Callable[..., Any]:
        """A list-or-watch callable in the shape `Watch.stream` expects."""
        names = {
            "resource_version": "resourceVersion",
            "allow_watch_bookmarks": "allowWatchBookmarks",
            "timeout_seconds": "timeoutSeconds",
            "watch": "watch",
        }
        path = self.resource.collection_path(self.namespace)

        def list_or_watch(**kwargs: Any) -> Any:
            timeout = kwargs.pop("_request_timeout", None)
            kwargs.pop("_preload_content", None)  # always streamed
            query = [*self._selectors, *((names[k], v) for k, v in kwargs.items())]
            response = rest.send(self._api, "GET", path, query=query, timeout=timeout)
            self.stats.opened += 1
            return response.response

        return list_or_watch

    def _watch_once(self) -> bool:
        """One watch stream until it ends; True if it was healthy (events, or it lasted)."""
        low, high = self._timeouts.server
        stream = _Stream(_ParsedOnce(return_type="object"), time.monotonic())
        with self._cond:
            if self._stopping.is_set():
                return True
            self._stream = stream
        started, received = time.monotonic(), 0
        try:
            with errors.translating():
                for event in stream.watch.stream(
                    self._list_function(),
                    resource_version=self._rv,
                    allow_watch_bookmarks=True,
                    # Jitter, not secrecy.
                    timeout_seconds=max(1, int(_JITTER.uniform(low, high))),
                    _request_timeout=(self._timeouts.connect, self._timeouts.read),
                ):
                    if self._stopping.is_set():
                        # stop() came before the stream had a response to close (the
                        # client's stream() resets its own stop flag as it starts).
                        stream.watch.stop()
                        break
                    stream.last_activity = time.monotonic()
                    if isinstance(event, dict):
                        received += 1
                        self._apply(str(event["type"]), event["raw_object"])
        except errors.APIConnectionError:
            # Watch.stop() shuts the socket under the read: expected when we stopped it.
            if not (stream.stopped_by_watchdog or self._stopping.is_set()):
                raise
        finally:
            with self._cond:
                self._stream = None
            self._stopped_by_watchdog = stream.stopped_by_watchdog
            self.stats.watches += 1
        return received > 0 or time.monotonic() - started >= 1.0

    def _watchdog(self) -> None:
        inactivity = self._timeouts.inactivity
        period = min([WATCHDOG_TICK, *(t / 4 for t in (inactivity, self._resync_period) if t)])
        last_resync = time.monotonic()
        while not self._stopping.wait(period):
            now = time.monotonic()
            with self._cond:
                stream = self._stream
                self._forget_rvs_locked(now)
            if stream is not None and inactivity and now - stream.last_activity > inactivity:
                if not stream.stopped_by_watchdog:
                    stream.stopped_by_watchdog = True
                    self.stats.watchdog_stops += 1
                    metrics.watch_restarted(self.resource.plural, "watchdog")
                    log.info("%s: silent for %.0fs; restarting the watch", self.name, inactivity)
                # Repeated: a stop before the response headers came back cannot cut the
                # socket (the client has not handed it over yet); the read timeout bounds
                # that window, and the next tick tries again.
                stream.watch.stop()
            if self._resync_period and self._synced and now - last_resync >= self._resync_period:
                last_resync = now
                self.stats.resyncs += 1
                # Each handler gets its own copy (`_emit`): no copy of every object first.
                for obj in self.objects(copy_=False):
                    self._emit(RESYNC, obj)

    # -- the cache -----------------------------------------------------------------------

    def _prepare(self, obj: Obj) -> Obj:
        """The object as the cache keeps it: typed, trimmed, its strings and parts shared."""
        # LIST items carry no apiVersion/kind; watch events do. Make them alike.
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        # Nothing reads the field managers from the cache, and they are often the largest
        # part of an object (controller-runtime's TransformStripManagedFields): with ~9
        # cached objects per order they were much of the controller's memory per order.
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        if self._trim is not None:
            self._trim(obj)
        kept: Obj = compacting.compact(obj)
        return kept

    def _apply(self, event_type: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        rv = str(meta.get("resourceVersion") or "")
        if event_type == "BOOKMARK":
            with self._cond:
                self.stats.bookmarks += 1
                if rv:
                    self._rv = rv
                self._cond.notify_all()
            return
        uid = meta.get("uid")
        if not uid:
            log.warning("%s: %s event without a uid ignored", self.name, event_type)
            return
        obj = self._prepare(obj)
        with self._cond:
            self.stats.events += 1
            news = True
            if event_type == "DELETED":
                self._remove_locked(uid)
            else:
                old = self._objects.get(uid)
                news = old is None or not _same_but_version(old, obj)
                self._store_locked(obj)
                self._note_rv_locked(uid, rv)
            if rv:
                self._rv = rv
            self.stats.unread += not news
            self._cond.notify_all()
        if news:
            self._emit(event_type, obj)

    def _store_locked(self, obj: Obj) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        old = self._objects.get(uid)
        if old is not None:
            self._unindex_locked(uid, old)
        # Back after it left the selection (its label taken off, then put back): no longer
        # gone, or a read of our own write to it passed at once on the older copy.
        self._gone.pop(uid, None)
        self._objects[uid] = obj
        self._by_name.put(meta.get("namespace") or "", meta["name"], uid)
        for index in self._indexes.values():
            for value in index.key(obj):
                index.add(value, uid)

    def _unindex_locked(self, uid: str, obj: Obj) -> None:
        meta = obj["metadata"]
        self._by_name.drop(meta.get("namespace") or "", meta["name"], uid)
        for index in self._indexes.values():
            for value in index.key(obj):
                index.discard(value, uid)

    def _remove_locked(self, uid: str) -> None:
        old = self._objects.pop(uid, None)
        if old is not None:
            self._unindex_locked(uid, old)
            compacting.dropped()
        self._seen.pop(uid, None)
        self._gone[uid] = None
        while len(self._gone) > _GONE_MEMORY:
            self._gone.popitem(last=False)

    def _note_rv_locked(self, uid: str, rv: str) -> None:
        # A tuple, not a deque(maxlen=...): a deque's first block alone is ~600 bytes, and
        # every object changed in the last seconds has its RVs here.
        if rv:
            now = time.monotonic()
            _, rvs = self._seen.pop(uid, (now, ()))
            self._seen[uid] = (now, (*rvs[1 - _RECENT_RVS :], rv))
            self._forget_rvs_locked(now)

    def _forget_rvs_locked(self, now: float) -> None:
        """Drop the RV memory of objects unchanged for `_RECENT_RV_SECONDS` (the oldest
        noted are first: amortized constant time per change)."""
        while self._seen:
            uid, (noted, _) = next(iter(self._seen.items()))
            if now - noted < _RECENT_RV_SECONDS:
                return
            del self._seen[uid]

    def _namespace_of_locked(self, uid: str) -> str:
        return str(self._objects[uid]["metadata"].get("namespace") or "")

    def _rv_of_locked(self, uid: str) -> str | None:
        obj = self._objects.get(uid)
        return None if obj is None else (obj.get("metadata") or {}).get("resourceVersion")

    def _emit(self, event_type: str, obj: Obj) -> None:
        for handler in self._handlers:
            try:
                handler(event_type, compacting.copied(obj))
            except Exception:
                # One bad handler must not stop the watch or starve the others.
                log.exception("%s: handler failed on %s", self.name, event_type)
