"""A small, thread-safe, size-bounded cache whose entries expire, and calls shared while
they run.

The hub resolver answers the same question (this model, this revision, this token) on
every reconcile pass of every order naming the model; the cache turns those repeats into
no HTTP at all. Keys never hold a token: `token_fingerprint` gives a keyed hash of it,
with a key that lives only in this process, so even the cache's keys cannot be matched
against a list of known tokens.

The cache helps only once an answer is in it. Hundreds of orders naming one model at a
controller's start ask together, and each lookup thread found the cache empty: the hub
was asked the same question once per thread of the pool. `Flights` lets the first ask
and the others wait for its answer, as Go's singleflight does.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

__all__ = ["Flights", "TtlCache", "token_fingerprint"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_PROCESS_KEY = os.urandom(32)
ANONYMOUS = "anonymous"


def token_fingerprint(token: str | None, *, key: bytes = _PROCESS_KEY) -> str:
    """A stable-within-the-process stand-in for a token, safe to keep and compare."""
    if not token:
        return ANONYMOUS
    return hmac.new(key, token.encode(), hashlib.sha256).hexdigest()[:32]


class TtlCache(Generic[K, V]):
    """Entries live `ttl` seconds of `clock`; the oldest go first beyond `maxsize`."""

    def __init__(self, clock: Callable[[], float], *, maxsize: int = 1024) -> None:
        self._clock = clock
        self._maxsize = maxsize
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            expires, value = entry
            if self._clock() >= expires:
                del self._entries[key]
                return None
            return value

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (self._clock() + ttl, value)
            while len(self._entries) > self._maxsize:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class Flights(Generic[K, V]):
    """At most one call per key at a time: who asks while it runs gets its answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[K, Future[V]] = {}
        self._waiting: dict[K, int] = {}

    def share(self, key: K, call: Callable[[], V]) -> V:
        """`call()`'s value, or that of the call for `key` already running (its exception
        too). A caller that comes after the call ended makes a call of its own: `call`
        should look at the cache the ended one filled."""
        with self._lock:
            running = self._running.get(key)
            leads = running is None
            if running is None:
                running = self._running[key] = Future()
            else:
                self._waiting[key] = self._waiting.get(key, 0) + 1
        if not leads:
            return running.result()
        try:
            value = call()
        except BaseException as exc:
            running.set_exception(exc)
            raise
        finally:
            with self._lock:
                del self._running[key]
                self._waiting.pop(key, None)
        running.set_result(value)
        return value

    def waiting(self, key: K) -> int:
        """Callers waiting for the running call for `key` (0 when none runs)."""
        with self._lock:
            return self._waiting.get(key, 0)

    def __len__(self) -> int:
        with self._lock:
            return len(self._running)
