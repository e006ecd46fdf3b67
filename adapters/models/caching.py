"""A small, thread-safe, size-bounded cache whose entries expire.

The hub resolver answers the same question (this model, this revision, this token) on
every reconcile pass of every order naming the model; the cache turns those repeats into
no HTTP at all. Keys never hold a token: `token_fingerprint` gives a keyed hash of it,
with a key that lives only in this process, so even the cache's keys cannot be matched
against a list of known tokens.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["TtlCache", "token_fingerprint"]

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
