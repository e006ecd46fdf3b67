"""Secrets by name, without listing or watching every Secret in the cluster.

A reconcile pass asks `world.secrets.get_by_name(namespace, name)` for two kinds of
Secret, and no others:

- the order's own token Secret `{order}-auth`, which the controller made and labelled
  with the order's UID: a label-selected informer keeps those (and only those) cached;
- a user's Secret named by an order's `spec.model.authSecretRef`: read with one GET when
  a pass first asks, kept for `ttl` seconds, and re-read every `refresh` seconds while an
  order still names it, so a Secret created, rotated or deleted later reaches the orders
  naming it (a handler event, as an informer would send) within one refresh.

Why not an informer per namespace (all of a tenant's Secrets, most of them none of our
business) or one watch per named Secret (two threads each, thousands of them): the GETs
cost one request per distinct named Secret per refresh — orders in a namespace usually
share one HF Secret — and nothing else of a tenant's is ever read. RBAC cannot narrow
`list`/`watch` by label, so the ClusterRole keeps them; the controller simply never
lists unselected. It never updates or patches a Secret.

Who calls it: world.py builds one as `ClusterCache.secrets`; reconciling.py reads it.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kubernetes.client import ApiClient

from adapters.kubernetes import errors, kinds
from adapters.kubernetes.rest import call
from adapters.kubernetes.watching import Handler, Informer, Obj
from fsm.identity import auth_secret_name, custom_tls_secret_name, is_object_name

__all__ = ["NamedSecrets", "own_secret"]

log = logging.getLogger(__name__)


@dataclass
class _Entry:
    obj: Obj | None  # None: the Secret does not exist
    read_at: float


def _rv(obj: Obj | None) -> str | None:
    return None if obj is None else str((obj.get("metadata") or {}).get("resourceVersion"))


class NamedSecrets:
    """`get_by_name` over the controller's token Secrets and the Secrets orders name."""

    def __init__(
        self,
        api: ApiClient,
        *,
        own: Informer,
        named: Callable[[], Iterable[str]],
        ttl: float = 60.0,
        refresh: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`own`: the label-selected informer of our token Secrets. `named`: the
        `namespace/name` keys orders name now (the orders' index)."""
        self._api = api
        self._own = own
        self._named = named
        self._ttl = ttl
        self._refresh = refresh
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._handlers: list[Handler] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.reads = 0  # GETs sent, for tests and metrics
        # The one I/O seam: (namespace, name) -> the Secret or None. A fake world without a
        # server swaps it (tests/support/fakes.py).
        self.read: Callable[[str, str], Obj | None] = self._get

    # -- reading -------------------------------------------------------------------------

    def get_by_name(self, namespace: str | None, name: str) -> Obj | None:
        obj = self._own_copy(namespace, name)
        if obj is not None:
            return obj
        key = (namespace or "", name)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and self._clock() - entry.read_at < self._ttl:
                return copy.deepcopy(entry.obj)
        obj = self._read(key)
        with self._lock:
            old = self._entries.get(key)
            self._entries[key] = _Entry(obj, self._clock())
        if old is not None:
            # A change found here is told as a refresh tells it: the next refresh compares
            # with this copy and finds nothing, and the other orders naming the Secret
            # would wait for the resync.
            self._tell_change(old.obj, obj)
        return copy.deepcopy(obj)

    def _own_copy(self, namespace: str | None, name: str) -> Obj | None:
        """The label-selected cache's copy, when it is one of the controller's own."""
        obj = self._own.get_by_name(namespace, name)
        return obj if obj is not None and own_secret(obj) else None

    def _read(self, key: tuple[str, str]) -> Obj | None:
        if not is_object_name(key[1]):
            return None  # no Secret has it; asked for, it was a path (`../../ns/secrets/x`)
        self.reads += 1
        return self.read(*key)

    def cached_keys(self) -> list[tuple[str, str]]:
        """The users' Secrets held now (tests check nothing else is)."""
        with self._lock:
            return sorted(self._entries)

    def _apply(self, event_type: str, obj: Obj) -> None:
        """Take a Secret as if just read (`DELETED`: as gone), as Informer._apply does for
        a watch event; the pass's fake world (tests/support/fakes.py) feeds it this way."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name")))
        with self._lock:
            self._entries[key] = _Entry(None if event_type == "DELETED" else obj, self._clock())
        self._emit(event_type, obj)

    def _get(self, namespace: str, name: str) -> Obj | None:
        try:
            obj = call(self._api, "GET", kinds.SECRETS.object_path(namespace, name))
        except errors.APINotFoundError:
            return None
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "Secret")
        return obj

    # -- changes -------------------------------------------------------------------------

    def add_handler(self, handler: Handler) -> None:
        """Called on a change of a token Secret or of a named Secret seen by a refresh."""
        self._handlers.append(handler)
        self._own.add_handler(handler)

    def refresh_once(self) -> int:
        """Re-read every cached Secret still named by an order; returns how many changed."""
        named = set(self._named())
        with self._lock:
            for key in [k for k in self._entries if f"{k[0]}/{k[1]}" not in named]:
                del self._entries[key]  # no order names it any more
            keys = list(self._entries)
        changed = 0
        for key in keys:
            if self._own_copy(*key) is not None:
                with self._lock:
                    self._entries.pop(key, None)  # ours now: the informer has it
                continue
            try:
                obj = self._read(key)
            except errors.APIError as exc:
                log.warning("secret %s/%s: %s; keeping the last copy", key[0], key[1], exc)
                continue
            with self._lock:
                old = self._entries.get(key)
                if old is None:
                    continue  # dropped meanwhile
                self._entries[key] = _Entry(obj, self._clock())
            changed += self._tell_change(old.obj, obj)
        return changed

    def _tell_change(self, old: Obj | None, new: Obj | None) -> int:
        """Emit the change from `old` to `new` (copies of one Secret), if any; 1 if told."""
        if _rv(old) == _rv(new):
            return 0
        event = "DELETED" if new is None else ("ADDED" if old is None else "MODIFIED")
        self._emit(event, new if new is not None else old)
        return 1

    def _emit(self, event: str, obj: Obj | None) -> None:
        if obj is None:
            return
        for handler in self._handlers:
            try:
                handler(event, copy.deepcopy(obj))
            except Exception:
                log.exception("secrets: handler failed on %s", event)

    def _loop(self) -> None:
        while not self._stopping.wait(self._refresh):
            try:
                self.refresh_once()
            except Exception:
                log.exception("secrets: refresh failed")

    # -- lifecycle (the own informer is started and stopped with the other informers) ----

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="secrets-refresh", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


def own_secret(obj: Obj) -> bool:
    """Is this one of the Secrets the controller makes for an order, named after the order
    that controls it (its token, its certificate copy)? Anyone who may create a Secret can
    give it the order label; only these are answered from the label-selected cache, which
    keeps of them what the controller reads (world.trim_secret), any other is read by
    name."""
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    return any(
        ref.get("controller")
        and ref.get("kind") == "InferenceService"
        and name
        in (auth_secret_name(str(ref.get("name"))), custom_tls_secret_name(str(ref.get("name"))))
        for ref in meta.get("ownerReferences") or []
    )
