"""Threads that tenants take in turn, for the calls that wait on a tenant's network.

A thread pool runs its calls first come, first served: one tenant whose calls hang (a hub
that never answers for its models, runtimes that accept and never reply) held every thread
for their timeouts while another tenant's call waited behind all of them — a hub lookup
answered in milliseconds waited 30 s behind 48 of another namespace's. Here each tenant
(an order's namespace) has a queue of its own. A free thread takes the next call of the
tenant whose turn it is (of those with calls waiting, the one served longest ago), and no
tenant holds more than `workers - reserve` threads at once: with one tenant's calls hung,
another tenant's call starts at once on a reserved thread. A tenant alone still has most
of the pool (the bench's 500 orders of one namespace probe on six threads of eight).

With more tenants hung than the reserve covers, a newcomer waits for one hung call to end
(each is bounded by its own timeout: a probe's, or the hub lookup's total), not for every
call queued before it: its tenant is next in turn.

Threads are started as calls arrive, up to `workers`, and are daemons: a hung call does not
hold the process at its exit. A call that raises is logged; callers handle their own
failures, so this is the last resort.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable

__all__ = ["TenantTurns"]

log = logging.getLogger(__name__)


class TenantTurns:
    def __init__(self, workers: int, name: str, *, reserve: int = 2) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self._workers = workers
        self._name = name
        # A pool of one or two threads has nothing to reserve: its one tenant keeps one.
        self._per_tenant = max(1, workers - reserve)
        self._lock = threading.Condition()
        self._waiting: dict[str, deque[Callable[[], None]]] = {}
        self._running: Counter[str] = Counter()
        # When each tenant with calls waiting or running was last served: the next turn
        # is the one served longest ago, a newcomer's (0) before all.
        self._served: dict[str, int] = {}
        self._tickets = itertools.count(1)
        self._threads: list[threading.Thread] = []
        self._queued = 0  # calls waiting, all tenants
        self._idle = 0  # threads waiting for a call
        self._stopped = False

    def submit(self, tenant: str, call: Callable[[], None]) -> None:
        with self._lock:
            if self._stopped:
                return
            self._waiting.setdefault(tenant, deque()).append(call)
            self._queued += 1
            # More calls waiting than threads to take them: a thread more, up to `workers`.
            if self._queued > self._idle and len(self._threads) < self._workers:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            self._lock.notify()

    def running(self, tenant: str) -> int:
        """How many of `tenant`'s calls run now."""
        with self._lock:
            return self._running[tenant]

    def stop(self) -> None:
        """Drop the calls not started; a running call ends on its own (threads are daemons)."""
        with self._lock:
            self._stopped = True
            self._waiting.clear()
            self._queued = 0
            self._lock.notify_all()

    def _next(self) -> tuple[str, Callable[[], None]] | None:
        """The next call of the tenant below its share that was served longest ago.
        Under the lock."""
        below = [t for t in self._waiting if self._running[t] < self._per_tenant]
        if not below:
            return None
        tenant = min(below, key=lambda t: self._served.get(t, 0))
        calls = self._waiting[tenant]
        call = calls.popleft()
        if not calls:
            del self._waiting[tenant]
        self._served[tenant] = next(self._tickets)
        self._running[tenant] += 1
        self._queued -= 1
        return tenant, call

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
                picked = self._next()
                while picked is None and not self._stopped:
                    self._lock.wait()
                    picked = self._next()
                self._idle -= 1
                if picked is None:
                    return  # stopped
            tenant, call = picked
            try:
                call()
            except Exception:  # the callers' own failures are handled where they run
                log.exception("a background call failed (tenant %s)", tenant)
            finally:
                with self._lock:
                    self._running[tenant] -= 1
                    if not self._running[tenant]:
                        del self._running[tenant]
                        if tenant not in self._waiting:
                            del self._served[tenant]  # nothing of it left: forgotten
                    # A tenant back below its share may have calls waiting for this thread
                    # or another idle one.
                    self._lock.notify()
