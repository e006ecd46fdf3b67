"""Slow calls off the reconcile workers: probes and model-hub lookups on a bounded pool.

A pass must not wait on the network of one tenant while other tenants' orders queue
behind it (a hung endpoint holds a probe for about twice its timeout). So the pass starts
the call here and goes on; when the call ends, its result is kept under its key and the
order is woken (`wake(uid)`), and the order's next pass takes the result — once. At most
one call per key runs at a time, and the pool bounds how many run at all.

`inline=True` runs each call at once on the caller's thread: the pass's unit tests use
it to stay deterministic.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["Background"]

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (what, order UID)


class Background:
    def __init__(
        self, wake: Callable[[str], None], *, workers: int = 8, inline: bool = False
    ) -> None:
        self._wake = wake
        self._inline = inline
        self._pool = None if inline else ThreadPoolExecutor(workers, "background")
        self._lock = threading.Lock()
        self._running: set[Key] = set()
        self._done: dict[Key, Any] = {}

    def take(self, key: Key) -> tuple[bool, Any]:
        """(True, result) for a finished call, handed out once; else (False, None)."""
        with self._lock:
            if key in self._done:
                return True, self._done.pop(key)
        return False, None

    def busy(self, key: Key) -> bool:
        with self._lock:
            return key in self._running

    def start(self, key: Key, call: Callable[[], Any]) -> None:
        """Run `call` unless one runs under `key` already; its result is kept for `take`."""
        with self._lock:
            if key in self._running:
                return
            self._running.add(key)
        if self._pool is None:
            self._finish(key, call)
            return
        future: Future[None] = self._pool.submit(self._finish, key, call)
        future.add_done_callback(_report)

    def _finish(self, key: Key, call: Callable[[], Any]) -> None:
        try:
            result = call()
        finally:
            with self._lock:
                self._running.discard(key)
        with self._lock:
            self._done[key] = result
        if not self._inline:
            self._wake(key[1])

    def forget(self, uid: str) -> None:
        """Drop what was kept for an order that is gone."""
        with self._lock:
            for key in [k for k in self._done if k[1] == uid]:
                del self._done[key]

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _report(future: Future[None]) -> None:
    error = future.exception()
    if error is not None:  # the order is not woken: its requeue asks again
        log.error("a background call failed: %s", error)
