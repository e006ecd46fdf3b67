"""Slow calls off the reconcile workers: probes and model-hub lookups on a bounded pool.

A pass must not wait on the network of one tenant while other tenants' orders queue
behind it (a hung endpoint holds a probe for about twice its timeout). So the pass starts
the call here and goes on; when the call ends, its result is kept under its key and the
order is woken (`wake(uid)`), and the order's next pass takes the result — once. At most
one call per key runs at a time, and the pools bound how many run at all: one for the
repeated calls (probes), one for the others (hub lookups), so that neither waits behind
the other's slow network. Within each, tenants (the orders' namespaces) take the threads
in turn and none holds them all (`turns.TenantTurns`): one namespace's hung runtimes or
hub lookups do not hold back another's.

A call that repeats (`repeat`: an order's probe every interval) runs on a timer of its
own, not from a pass: its result is kept and the order woken only when `news(result)`
says the order's log would change; a result that says what the log says already is
dropped and the call runs again `every` seconds later. So an order whose probes keep
answering as before costs a probe per interval and no pass (with hundreds of Ready
orders, the pass per probe was most of the controller's idle CPU). A result kept ends the
repetition: the pass that takes it arms it again with its new state.

Repeats run on a `grain` (the controller's: one second): a time due is rounded to the
nearest multiple of it, so the repeats due around the same tick start together. The probes of
hundreds of Ready orders then run in bursts rather than one every few milliseconds, and
each burst runs the same code while it is warm in the processor's caches: 1.3 ms of CPU
a probe spread out against 0.6 ms in bursts of twenty, on this machine with the builds
of others beside it (`benchmarks/probes.py`). A repeat runs at most half a grain
early or late, and its period stays `every` on average (rounding up would add a grain to
each); one armed to run at once is not held back.

A call that raises breaks its promise to answer (the probe and the hub lookup each
return their failures): it is logged with its key, and no order is left waiting on it. A
one-shot call's result is not kept and its order not woken (the pass that started it asks
again on its requeue); a repeat runs again `every` seconds later, and until one of its
calls returns no pass waits for its answer (`waiting` is false), so the order's status is
published meanwhile.

`inline=True` runs each call at once on the caller's thread (a repeated one only when it
is due at once, and never again): the pass's unit tests use it to stay deterministic.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from adapters.kubernetes.turns import TenantTurns

__all__ = ["Background"]

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (what, order UID)


@dataclass(slots=True)  # one per serving order, between its passes
class _Repeat:
    call: Callable[[], Any]
    every: float
    news: Callable[[Any], bool]
    due: float  # time.monotonic()
    announced: bool  # its next result wakes the order for sure (the pass may wait for it)
    tenant: str = ""  # whose turn it takes on the pool: the order's namespace
    failing: bool = False  # its last call raised: no pass waits for it until one returns


class Background:
    def __init__(
        self,
        wake: Callable[[str], None],
        *,
        workers: int = 8,
        inline: bool = False,
        grain: float = 0.0,
    ) -> None:
        self._wake = wake
        self._inline = inline
        self._grain = grain
        # Repeats (probes) and one-shot calls (hub lookups) on pools of their own: on one,
        # a hub that held every lookup for its timeout after a start held the probes of
        # every tenant behind them (a due probe ran 30 s late with 48 lookups waiting).
        self._pool = None if inline else TenantTurns(workers, "background")
        self._once = None if inline else TenantTurns(workers, "background-once")
        self._lock = threading.Condition()
        self._running: set[Key] = set()
        self._done: dict[Key, Any] = {}
        self._repeats: dict[Key, _Repeat] = {}
        self._announced: set[Key] = set()  # repeats whose next result is news for sure
        self._heap: list[tuple[float, int, Key]] = []
        self._order = itertools.count()
        self._stopped = False
        self._timer: threading.Thread | None = None

    def take(self, key: Key) -> tuple[bool, Any]:
        """(True, result) for a finished call, handed out once; else (False, None)."""
        with self._lock:
            if key in self._done:
                return True, self._done.pop(key)
        return False, None

    def busy(self, key: Key) -> bool:
        with self._lock:
            return key in self._running

    def waiting(self, uid: str) -> bool:
        """Whether a call for order `uid` runs, or is armed, whose end will wake the
        order: a one-shot call running, or an announced repeat (running or due: the
        timer may not have picked it up yet)."""
        with self._lock:
            for key in self._running:
                if key[1] == uid and key not in self._repeats:
                    return True
            return any(key[1] == uid for key in self._announced)

    def start(self, key: Key, call: Callable[[], Any], *, tenant: str = "") -> None:
        """Run `call` unless one runs under `key` already; its result is kept for `take`.
        `tenant`: whose turn it takes (the order's namespace)."""
        with self._lock:
            if key in self._running:
                return
            self._running.add(key)
        if self._once is None:
            self._finish(key, call)
            return
        self._once.submit(tenant, partial(self._finish, key, call))

    def _finish(self, key: Key, call: Callable[[], Any]) -> None:
        try:
            try:
                result = call()
            finally:
                with self._lock:
                    self._running.discard(key)
        except Exception as error:
            if self._inline:
                raise  # the pass's tests see it
            # Nothing is kept and the order is not woken: the pass that started the call
            # asks again on its requeue (a woken pass would ask at once, in a loop).
            _log_failure(key, error)
            return
        with self._lock:
            self._done[key] = result
        if not self._inline:
            self._wake(key[1])

    # -- repeated calls ------------------------------------------------------------------

    def repeat(
        self,
        key: Key,
        call: Callable[[], Any],
        *,
        every: float,
        first_after: float,
        news: Callable[[Any], bool],
        announced: bool = False,
        tenant: str = "",
    ) -> None:
        """Run `call` every `every` seconds, the first time in `first_after` seconds.

        Armed again (the next pass's call, with its state): the call, interval and
        judgement are replaced, the time it is due is kept. `announced`: its next result
        is news whatever it says (`waiting` then counts it) — unless its last call raised:
        until a call returns, no pass waits for one (see `_repeat_failed`)."""
        now = time.monotonic()
        with self._lock:
            old = self._repeats.get(key)
            due = old.due if old is not None else self._on_grain(now, first_after)
            failing = old is not None and old.failing
            announced = announced and not failing
            self._repeats[key] = _Repeat(call, every, news, due, announced, tenant, failing)
            if announced:
                self._announced.add(key)
            else:
                self._announced.discard(key)
            if old is not None and old.due == due:
                return
            if self._inline:
                run = due <= now
            else:
                heapq.heappush(self._heap, (due, next(self._order), key))
                self._ensure_timer()
                self._lock.notify_all()
                return
        if run:
            del self._repeats[key]  # inline: once, never again
            self._announced.discard(key)
            self._fire(key, _Repeat(call, every, news, due, announced, tenant))

    def _on_grain(self, now: float, after: float) -> float:
        """When a repeat `after` seconds from `now` is due: at once, or on the grain."""
        if after <= 0:
            return now
        if self._grain <= 0:
            return now + after
        return round((now + after) / self._grain) * self._grain

    def repeating(self, key: Key) -> bool:
        with self._lock:
            return key in self._repeats

    def cancel(self, key: Key) -> None:
        """Stop repeating `key` (a call running finishes; its result is dropped)."""
        with self._lock:
            self._repeats.pop(key, None)
            self._announced.discard(key)

    def _ensure_timer(self) -> None:
        if self._timer is None and not self._stopped:
            self._timer = threading.Thread(target=self._tick, name="background-timer", daemon=True)
            self._timer.start()

    def _tick(self) -> None:
        while True:
            with self._lock:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._lock.wait(timeout)
                if self._stopped:
                    return
                due, _, key = heapq.heappop(self._heap)
                repeat = self._repeats.get(key)
                if repeat is None or repeat.due != due or key in self._running:
                    continue  # cancelled, re-armed at another time, or still running
                self._running.add(key)
            assert self._pool is not None
            self._pool.submit(repeat.tenant, partial(self._fire_running, key, repeat))

    def _fire(self, key: Key, repeat: _Repeat) -> None:
        with self._lock:
            if key in self._running:
                return
            self._running.add(key)
        self._fire_running(key, repeat)

    def _fire_running(self, key: Key, repeat: _Repeat) -> None:
        try:
            try:
                result = repeat.call()
            finally:
                with self._lock:
                    self._running.discard(key)
        except Exception as error:
            if self._inline:
                raise  # the pass's tests see it; an inline repeat runs once anyway
            self._repeat_failed(key, error)
            return
        with self._lock:
            current = self._repeats.get(key)
            if current is not repeat and current is not None:
                # Re-armed while it ran: judge by the newer state, keep the newer timing.
                repeat = current
            elif current is None and not self._inline:
                return  # cancelled while it ran
            if not repeat.news(result):
                if current is not None:
                    current.failing = False
                    current.due = self._on_grain(time.monotonic(), current.every)
                    heapq.heappush(self._heap, (current.due, next(self._order), key))
                    self._lock.notify_all()
                return
            self._repeats.pop(key, None)  # the pass that takes it arms it again
            self._announced.discard(key)
            self._done[key] = result
        if not self._inline:
            self._wake(key[1])

    def _repeat_failed(self, key: Key, error: Exception) -> None:
        """A repeated call raised (its promise is to return): logged, and it runs again
        `every` seconds later. Before, its timer entry was spent and never put back, and
        arming it again kept the time it was due: it never ran again (an order Ready
        with a dead runtime); announced, its order waited for its answer for ever and
        never published a status. So a pass waiting for it is woken, and until a call
        returns no pass waits for one: the order's status goes out meanwhile."""
        _log_failure(key, error)
        with self._lock:
            current = self._repeats.get(key)
            if current is None:
                return  # cancelled while it ran
            waited = key in self._announced
            self._announced.discard(key)
            current.announced = False
            current.failing = True
            current.due = self._on_grain(time.monotonic(), current.every)
            heapq.heappush(self._heap, (current.due, next(self._order), key))
            self._lock.notify_all()
        if waited:
            self._wake(key[1])

    def forget(self, uid: str) -> None:
        """Drop what was kept, and what repeats, for an order that is gone."""
        with self._lock:
            for key in [k for k in self._done if k[1] == uid]:
                del self._done[key]
            for key in [k for k in self._repeats if k[1] == uid]:
                del self._repeats[key]
                self._announced.discard(key)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify_all()
        for pool in (self._pool, self._once):
            if pool is not None:
                pool.stop()


def _log_failure(key: Key, error: BaseException) -> None:
    log.error("a background call failed (%s of %s): %s: %s", *key, type(error).__name__, error)
