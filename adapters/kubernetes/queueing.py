"""The controller's work queue: one item per object UID, worked by N threads, with backoff.

Informer handlers `add(uid)`; workers `get()` a UID, run a pass, and hand the pass's
`Outcome` to `settle`, the one place that decides what happens next, as in
controller-runtime:

    Done              forget the failures; nothing is scheduled
    RequeueAfter(s)   forget the failures; run again in s seconds (timers, polling)
    Retry(error)      run again after a per-item exponential backoff (capped)
    Terminal(error)   log and count it, forget it, never retry (a later event re-adds it)

Queue guarantees (after client-go's workqueue): duplicate adds collapse while an item
waits; an item is never handed to two workers at once, and an add while it is being
processed makes it run once more after `done`; the earliest of several `add_after`
deadlines wins. Keys are UIDs, never names: a deleted and recreated object is another order.

Time comes from an injected `Clock` so tests drive delays with a fake clock; `get(block=
False)` and `Workers.process_one` let them step the machinery without threads. `Backoff`
is shared with the watch loop's reconnects.
"""

from __future__ import annotations

import heapq
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from adapters import metrics

__all__ = [
    "Backoff",
    "Clock",
    "Done",
    "MonotonicClock",
    "Outcome",
    "Reconcile",
    "RequeueAfter",
    "Retry",
    "Terminal",
    "WorkQueue",
    "Workers",
    "settle",
]

log = logging.getLogger(__name__)

# Our own generator: jitter must not draw from (and perturb) the process-wide one that
# other code, and property-test frameworks, rely on.
_JITTER = random.Random()  # noqa: S311 - jitter, not secrets


class Clock(Protocol):
    """Monotonic seconds; only differences matter."""

    def now(self) -> float: ...


class MonotonicClock:
    """The real clock."""

    def now(self) -> float:
        return time.monotonic()


@dataclass(frozen=True)
class Backoff:
    """Jittered exponential delays: `initial * factor**(attempt-1)`, capped, plus jitter.

    Jitter only lengthens a delay (by up to `jitter` of it), so many clients that failed
    together spread out instead of retrying in lockstep; the cap still holds.
    """

    initial: float = 0.8
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.25

    def delay(self, attempt: int, rand: Callable[[], float] | None = None) -> float:
        """The wait before try number `attempt + 1` (attempt counts failures, from 1)."""
        if attempt <= 0:
            return 0.0
        # min() before the power keeps huge attempt counts from overflowing.
        base = min(self.cap, self.initial * self.factor ** min(attempt - 1, 64))
        return min(self.cap, base * (1.0 + self.jitter * (rand or _JITTER.random)()))


@dataclass(frozen=True)
class Done:
    """The pass converged; nothing more to do until something changes."""


@dataclass(frozen=True)
class RequeueAfter:
    """Run the item again after `seconds` (a timer: probe interval, grace period)."""

    seconds: float


@dataclass(frozen=True)
class Retry:
    """The pass failed in a way that may pass later; retry with backoff."""

    error: BaseException | None = None


@dataclass(frozen=True)
class Terminal:
    """The pass failed for good; log and count, never retry."""

    error: BaseException


Outcome = Done | RequeueAfter | Retry | Terminal
Reconcile = Callable[[str], Outcome]


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    key: str = field(compare=False)


class WorkQueue:
    """A set-like FIFO of keys with delayed adds and per-key failure counts."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        name: str = "reconcile",
    ) -> None:
        self.name = name  # the `queue` label of its metrics
        self._clock: Clock = clock or MonotonicClock()
        self._backoff = backoff or Backoff(initial=0.5, cap=300.0)
        self._cond = threading.Condition()
        self._ready: deque[str] = deque()
        self._dirty: set[str] = set()  # wants a (further) pass
        self._processing: set[str] = set()
        self._timers: list[_Timer] = []
        self._due: dict[str, float] = {}  # the live deadline per key; stale heap entries skip
        self._failures: dict[str, int] = {}
        self._ready_since: dict[str, float] = {}  # for the queue-latency metric
        self._seq = 0
        self._shutting_down = False

    def add(self, key: str) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: str) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        self._due.pop(key, None)  # an immediate add supersedes a pending timer
        if key not in self._processing:
            self._make_ready_locked(key)

    def _make_ready_locked(self, key: str) -> None:
        self._ready.append(key)
        self._ready_since[key] = self._clock.now()
        metrics.queue_added(self.name)
        metrics.queue_depth(self.name, len(self._ready))
        self._cond.notify()

    def add_after(self, key: str, seconds: float) -> None:
        """Add `key` in `seconds`; an earlier pending deadline for it wins."""
        if seconds <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutting_down:
                return
            due = self._clock.now() + seconds
            current = self._due.get(key)
            if current is not None and current <= due:
                return
            self._due[key] = due
            self._seq += 1
            heapq.heappush(self._timers, _Timer(due, self._seq, key))
            self._cond.notify()

    def add_rate_limited(self, key: str) -> float:
        """Count a failure of `key` and add it after its backoff; returns the delay."""
        with self._cond:
            attempt = self._failures.get(key, 0) + 1
            self._failures[key] = attempt
        delay = self._backoff.delay(attempt)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """Reset the failure count of `key` (its pass succeeded)."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def _promote_due_locked(self) -> float | None:
        """Move due timers to the ready queue; return seconds to the next deadline."""
        now = self._clock.now()
        while self._timers:
            head = self._timers[0]
            if self._due.get(head.key) != head.due:
                heapq.heappop(self._timers)  # superseded or cancelled
                continue
            if head.due > now:
                return head.due - now
            heapq.heappop(self._timers)
            del self._due[head.key]
            self._add_locked(head.key)
        return None

    def get(self, *, block: bool = True, timeout: float | None = None) -> str | None:
        """The next key to work on (now yours until `done`), or None on timeout/shutdown."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                next_due = self._promote_due_locked()
                if self._ready:
                    key = self._ready.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    since = self._ready_since.pop(key, None)
                    if since is not None:
                        metrics.queue_taken(self.name, self._clock.now() - since)
                    metrics.queue_depth(self.name, len(self._ready))
                    return key
                if self._shutting_down or not block:
                    return None
                wait = next_due
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, key: str) -> None:
        """The pass over `key` ended; if it was added meanwhile, it is ready again."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty and not self._shutting_down:
                self._make_ready_locked(key)

    def wake(self) -> None:
        """Re-check deadlines now (a fake clock calls this after moving time)."""
        with self._cond:
            self._cond.notify_all()

    def shutdown(self) -> None:
        """Refuse new adds and release every waiting `get` with None."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def busy(self, key: str) -> bool:
        """`key` waits for a pass or is in one (a timer for it does not count)."""
        with self._cond:
            return key in self._dirty or key in self._processing

    def __len__(self) -> int:
        """Keys ready now (not counting those processing or waiting for a timer)."""
        with self._cond:
            return len(self._ready)

    def pending_timers(self) -> dict[str, float]:
        """Key -> seconds until its timer fires."""
        with self._cond:
            now = self._clock.now()
            return {key: due - now for key, due in self._due.items()}


def settle(queue: WorkQueue, key: str, outcome: Outcome) -> None:
    """Apply a pass's outcome to the queue: the single place every result is decided."""
    match outcome:
        case Done():
            queue.forget(key)
        case RequeueAfter(seconds=seconds):
            queue.forget(key)
            queue.add_after(key, seconds)
        case Retry(error=error):
            delay = queue.add_rate_limited(key)
            metrics.queue_retried(queue.name)
            log.info("retrying %s in %.1fs after: %s", key, delay, error)
        case Terminal(error=error):
            queue.forget(key)
            log.error("giving up on %s: %s", key, error)
    queue.done(key)


class Workers:
    """N threads taking keys from a queue and running `reconcile` on each.

    An exception escaping `reconcile` is a `Retry`, so a bug never kills a worker and
    never leaves an item stuck in processing.
    """

    def __init__(
        self,
        queue: WorkQueue,
        reconcile: Reconcile,
        *,
        workers: int = 2,
        name: str = "reconcile",
        on_outcome: Callable[[str, Outcome], None] | None = None,
    ) -> None:
        if workers < 1:  # none would take anything from the queue, and say nothing
            raise ValueError(f"workers must be at least 1, not {workers}")
        self._queue = queue
        self._reconcile = reconcile
        self._count = workers
        self._name = name
        self._on_outcome = on_outcome
        self._threads: list[threading.Thread] = []
        self.terminal: dict[str, BaseException] = {}  # the last terminal error per key

    def process_one(self, *, block: bool = True, timeout: float | None = None) -> str | None:
        """Take one key and run one pass over it; returns the key, or None if there was none."""
        key = self._queue.get(block=block, timeout=timeout)
        if key is None:
            return None
        try:
            outcome = self._reconcile(key)
        except Exception as exc:
            log.exception("pass over %s raised", key)
            outcome = Retry(exc)
        if isinstance(outcome, Terminal):
            self.terminal[key] = outcome.error
        settle(self._queue, key, outcome)
        if self._on_outcome is not None:
            self._on_outcome(key, outcome)
        return key

    def _loop(self) -> None:
        while not self._queue.shutting_down:
            self.process_one(timeout=1.0)

    def start(self) -> None:
        for index in range(self._count):
            thread = threading.Thread(target=self._loop, name=f"{self._name}-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the queue down and wait for the passes in flight to finish."""
        self._queue.shutdown()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]
