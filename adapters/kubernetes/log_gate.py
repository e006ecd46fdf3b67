"""While the event log is unreachable, orders wait at one gate instead of retrying one by one.

Every pass appends before it acts, so with the log's database down no pass can do
anything. Retrying each order on its own backoff was measured to go wrong both ways: wake-
ups (watch events, probe answers, timers) bypass an item's delay but still count as
failures, so after a 30 s outage orders were due again only 80-160 s after the log's
return, while a large backlog still hit the down database once per order per delay.

So the first pass that meets `StoreUnavailable` closes the gate; that order and every
order whose pass would start while the gate is closed are parked (remembered, nothing
run). One thread probes the log on a jittered backoff (0.5 s doubling to 10 s), as an
append would, writing nothing (a node that takes reads but no writes is down to a pass);
when it answers, the gate opens and every parked order is enqueued at once, so
the backlog drains within the probe interval of the return, and N orders cost one probe
per interval, not N retries.

A gate that closes again soon after it opened (the probe passes, the next append fails:
a full disk takes the probe's write lock but not an insert) probes on from the backoff
it had reached, not from its start: it flapped twice a second, each time a warning, a
gauge flip and a pass over every parked order.

A probe that fails otherwise than with the log away (`StoreUnusable`: a table gone, a
permission revoked, a corrupt file; or anything unforeseen) will fail so however long it
waits. The gate then stays closed, since every pass would meet the same log, and gives up:
`give_up` is told why, and the controller stops leading and fails its liveness, so
Kubernetes restarts the pod and its start says what is wrong with the log. Before, the
prober died of it and left the gate closed for ever behind a controller that looked alive.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from adapters import metrics
from adapters.kubernetes import queueing
from store import StoreUnavailable

__all__ = ["GateStats", "LogGate"]

log = logging.getLogger(__name__)

PROBE_BACKOFF = queueing.Backoff(initial=0.5, cap=10.0)


@dataclass
class GateStats:
    """Counters for logs and tests."""

    closings: int = 0  # times the log was found unreachable
    failed_passes: int = 0  # passes that met the log down (each parks its order)
    parked: int = 0  # orders that waited at the closed gate (failed or not started)
    probes: int = 0  # reads of the log while it was down


class LogGate:
    """Open while the log answers; closed (orders parked, one prober) while it does not."""

    def __init__(
        self,
        probe: Callable[[], object],
        wake: Callable[[str], None],
        *,
        give_up: Callable[[str], None],
        backoff: queueing.Backoff = PROBE_BACKOFF,
    ) -> None:
        """`probe`: a cheap read of the log that raises StoreUnavailable while it is down;
        `wake`: enqueue an order (the controller's work queue); `give_up`: told why, once,
        when the probe fails otherwise (the controller stops: the log will not answer)."""
        self._probe = probe
        self._wake = wake
        self._give_up = give_up
        self._backoff = backoff
        self._lock = threading.Lock()
        self._parked: set[str] = set()
        self._closed_at: float | None = None
        self._prober: threading.Thread | None = None
        self._stopping = threading.Event()
        # When the gate last opened, and the probes it took to open: a closing soon after
        # goes on from there (module docstring).
        self._opened_at: float | None = None
        self._attempts = 0
        self.stats = GateStats()

    @property
    def closed(self) -> bool:
        return self._closed_at is not None

    def park_if_closed(self, uid: str) -> bool:
        """Before a pass: True (and the order parked) when the log is known to be down."""
        with self._lock:
            if self._closed_at is None:
                return False
            self._park_locked(uid)
            return True

    def failed(self, uid: str, error: BaseException) -> None:
        """A pass met the log down: park the order and, if open, close the gate."""
        with self._lock:
            self.stats.failed_passes += 1
            self._park_locked(uid)
            if self._closed_at is not None:
                return
            self._closed_at = now = time.monotonic()
            self.stats.closings += 1
            metrics.log_unreachable(True)
            if self._stopping.is_set():
                return
            soon = self._opened_at is not None and now - self._opened_at < self._backoff.cap
            start = self._attempts if soon else 0
            self._prober = threading.Thread(
                target=self._probe_until_open, args=(start,), name="log-gate"
            )
            self._prober.daemon = True
            self._prober.start()
        # The type and message only: a driver's repr may carry a connection URL.
        log.warning(
            "event log unreachable (%s: %s): orders wait until it answers",
            type(error).__name__,
            error,
        )

    def stop(self) -> None:
        self._stopping.set()
        prober = self._prober
        if prober is not None and prober is not threading.current_thread():
            prober.join(5.0)

    def _park_locked(self, uid: str) -> None:
        if uid not in self._parked:
            self._parked.add(uid)
            self.stats.parked += 1

    def _probe_until_open(self, attempt: int = 0) -> None:
        while not self._stopping.wait(self._backoff.delay(attempt + 1)):
            attempt += 1
            with self._lock:
                self.stats.probes += 1
            try:
                self._probe()
            except StoreUnavailable:
                continue
            except Exception as exc:
                # Not the log away: asking again cannot open the gate (module docstring).
                self._broken(exc)
                return
            self._open(attempt)
            return

    def _broken(self, error: Exception) -> None:
        with self._lock:
            self._prober = None  # closed for good: parked orders stay parked
        # The type and message only, as above; `give_up` logs it.
        self._give_up(f"probing the event log: {type(error).__name__}: {error}")

    def _open(self, attempts: int) -> None:
        with self._lock:
            parked, self._parked = sorted(self._parked), set()
            self._opened_at = now = time.monotonic()
            self._attempts = attempts
            down = now - (self._closed_at or now)
            self._closed_at = None
            self._prober = None
            metrics.log_unreachable(False)
        log.info("event log answers again after %.0fs: %d orders enqueued", down, len(parked))
        for uid in parked:
            self._wake(uid)
