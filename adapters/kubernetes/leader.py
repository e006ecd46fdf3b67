"""Leader election on a coordination.k8s.io/v1 Lease, with an epoch for fencing the log.

The controller runs one `Elector`; only the leader runs workers. `on_started(epoch)` is
called when this process becomes leader and `on_stopped()` when it stops being one (lost
the Lease, could not renew in time, or released it); the caller starts and stops its
workers there. Leader election does not fence by itself (ENGINEERING item 15): stamp
every append to the event log with the epoch, and the store rejects older epochs.

Why not the official client's `leaderelection` module: its Lease support varies by
release and its loop keeps running after renewal fails. This one is small:

- Optimistic concurrency: every write carries the Lease's resourceVersion; a 409 means
  another candidate won this round.
- Expiry is judged on the local monotonic clock from when this candidate last saw the
  record change (holder, renewTime, transitions), as client-go does, never by comparing
  clocks across machines.
- The leader renews every `retry_period`; if no renewal succeeded for `renew_deadline`
  (shorter than the lease duration) it steps down, before anyone else may take over.
- A leader renews optimistically, as client-go does: it writes the Lease it wrote last
  (its resourceVersion) with a new renewTime, one request instead of a read and a write;
  if that fails for any reason (a 409 says someone else wrote it) the round falls back to
  reading the Lease and judging it afresh.
- The Lease travels as plain JSON (the client's methods with `_preload_content=False`):
  its generated model cost more CPU than the rest of a renewal, every two seconds.
- The epoch is `spec.leaseTransitions`, raised on every new term (also when the same
  identity comes back), so it strictly grows across takeovers. If the Lease was deleted,
  its count restarts; pass `epoch_floor` (the newest epoch the log has seen) and a new
  term starts above it. While the floor cannot be read (the log is down) the Lease is not
  taken: a term whose epoch is unknown could not append anyway.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from adapters import metrics
from adapters.kubernetes import errors, queueing

__all__ = ["Elector"]

log = logging.getLogger(__name__)


def _micro_time(moment: datetime) -> str:
    # MicroTime wants exactly six fraction digits; isoformat() drops them at .000000.
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _FloorUnknown(Exception):
    """The newest epoch (`epoch_floor`) could not be read: the Lease is not taken."""


class Elector:
    """One candidate for the Lease `namespace/name` under `identity`."""

    def __init__(
        self,
        leases: Any,
        *,
        namespace: str,
        name: str,
        identity: str,
        on_started: Callable[[int], None],
        on_stopped: Callable[[], None],
        lease_duration: int = 15,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        epoch_floor: Callable[[], int] | None = None,
        clock: queueing.Clock | None = None,
    ) -> None:
        """`leases` is a CoordinationV1Api (or anything with its three Lease methods)."""
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError("need 0 < retry_period < renew_deadline < lease_duration")
        self._leases = leases
        self.namespace, self.name, self.identity = namespace, name, identity
        self._on_started, self._on_stopped = on_started, on_stopped
        self._duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry = retry_period
        self._floor = epoch_floor
        self._clock: queueing.Clock = clock or queueing.MonotonicClock()
        # A request must end well inside the renew deadline, or a hung renewal would
        # keep us "leading" past it.
        self._request_timeout = (min(5.0, renew_deadline / 2), min(5.0, renew_deadline / 2))
        self._observed: tuple[Any, ...] | None = None
        self._written: Any = None  # the Lease as our last write returned it (while leading)
        self._observed_at = 0.0
        self._leading = False
        self._epoch: int | None = None
        self._last_renewal = 0.0
        self._stopping = threading.Event()
        self._stop_lock = threading.Lock()  # stop() may come from a worker and main at once
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        return self._leading

    def holds_lease(self) -> bool:
        """Leading, and the last renewal is recent enough that no one else may lead yet.

        Judged now, on the local clock, not when the renewal loop next wakes up: a write
        about to be sent asks this, and a stalled loop must not let it through.
        """
        return self._leading and self._clock.now() - self._last_renewal < self._renew_deadline

    @property
    def epoch(self) -> int | None:
        """The current term's epoch while leading, else None."""
        return self._epoch if self._leading else None

    # -- one round -----------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One round: create, renew or take over the Lease; True if we hold it now."""
        if self.holds_lease() and self._written is not None and self._renew_written():
            return True
        try:
            lease = self._call("read_namespaced_lease", self.name, self.namespace)
        except errors.APINotFoundError:
            return self._create()
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        transitions = spec.get("leaseTransitions")
        now = self._observe(spec)
        duration = spec.get("leaseDurationSeconds") or self._duration
        if holder and holder != self.identity and now < self._observed_at + duration:
            if self._leading:
                log.warning("lease %s/%s is held by %s now", self.namespace, self.name, holder)
                self._step_down()
            else:  # a standby's round: what `--log-level debug` shows of the election
                log.debug(
                    "lease %s/%s is held by %s; standing by", self.namespace, self.name, holder
                )
            return False
        if self._leading and holder != self.identity:
            # Our term lapsed while this process did not run (a long GC, a frozen VM) and
            # another came and went: the Lease is released, or its holder's expired. The
            # term is over, as client-go's Run ends past renewDeadline. Taking the Lease
            # again here made a new term under the old epoch, with the fence open and no
            # take-over: the log's newer epoch refused only this process's appends.
            log.warning(
                "lease %s/%s was %s's since this process last renewed it",
                self.namespace,
                self.name,
                holder or "released",
            )
            self._step_down()
            return False
        renewing = self._leading and holder == self.identity
        epoch = transitions or 0
        if not renewing:
            epoch = self._next_epoch(transitions)
        lease["spec"] = {
            **spec,
            **self._spec(epoch, renewing=renewing, acquired=spec.get("acquireTime")),
        }
        try:
            written = self._call("replace_namespaced_lease", self.name, self.namespace, lease)
        except errors.APIConflictError:
            return False  # another candidate wrote first; read again next round
        self._won(epoch, written)
        return True

    def _renew_written(self) -> bool:
        """The fast path: renew the Lease we wrote last, unread. False (and forgotten)
        when that write fails: the round then reads the Lease as any candidate would."""
        lease, self._written = self._written, None
        lease["spec"]["renewTime"] = _micro_time(datetime.now(UTC))
        try:
            written = self._call("replace_namespaced_lease", self.name, self.namespace, lease)
        except errors.APIError as exc:
            log.debug(
                "lease %s/%s: renewal unread failed (%s); reading it",
                self.namespace,
                self.name,
                exc,
            )
            return False
        spec = written.get("spec") or {}
        self._observe(spec)
        self._won(spec.get("leaseTransitions") or 0, written)
        return True

    def _observe(self, spec: dict[str, Any]) -> float:
        """Note the Lease's record (holder, renewTime, transitions); its expiry counts
        from when the record last changed, on the local clock. Returns now."""
        record = (
            spec.get("holderIdentity") or "",
            spec.get("renewTime"),
            spec.get("leaseTransitions"),
        )
        now = self._clock.now()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        return now

    def _call(self, method: str, *args: Any) -> dict[str, Any]:
        """A Lease method of the client, its answer as JSON (no generated model)."""
        with errors.translating():
            response = getattr(self._leases, method)(
                *args, _request_timeout=self._request_timeout, _preload_content=False
            )
            answer: dict[str, Any] = json.loads(response.data)
        return answer

    def _create(self) -> bool:
        epoch = self._next_epoch(None)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._spec(epoch, renewing=False, acquired=None),
        }
        try:
            written = self._call("create_namespaced_lease", self.namespace, body)
        except errors.APIConflictError:
            return False  # created by another candidate a moment ago
        self._won(epoch, written)
        return True

    def _spec(self, epoch: int, *, renewing: bool, acquired: str | None) -> dict[str, Any]:
        now = _micro_time(datetime.now(UTC))
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration,
            "acquireTime": acquired if renewing and acquired else now,
            "renewTime": now,
            "leaseTransitions": epoch,
        }

    def _next_epoch(self, transitions: int | None) -> int:
        epoch = 0 if transitions is None else transitions + 1
        if self._floor is not None:
            try:
                floor = self._floor()
            except Exception as exc:
                # Without it a new term could start at an epoch the log already saw.
                raise _FloorUnknown(f"{type(exc).__name__}: {exc}") from exc
            epoch = max(epoch, floor + 1)
        return epoch

    def _won(self, epoch: int, written: Any) -> None:
        self._last_renewal = self._clock.now()
        self._written = written
        if self._leading:
            # Each renewal says so again: the gauge is the process's, and a leader's word
            # every round is what it should show (a test's second elector in this process
            # that stepped down, or anything else that set it, is corrected within a round).
            metrics.leading(True, self._epoch)
            return
        self._leading, self._epoch = True, epoch
        metrics.leading(True, epoch)
        log.info("%s leads %s/%s at epoch %d", self.identity, self.namespace, self.name, epoch)
        self._on_started(epoch)

    def _step_down(self) -> None:
        self._written = None
        if not self._leading:
            return
        self._leading = False
        # A term ends the campaign, as client-go's Run returns: the process that lost the
        # Lease leaves (the controller exits and starts again as a standby). Campaigning
        # on, it would take back a Lease still naming it while it shuts down, as a new
        # term its controller cannot start.
        self._stopping.set()
        metrics.leading(False)
        log.warning("%s stopped leading %s/%s", self.identity, self.namespace, self.name)
        self._on_stopped()

    # -- the loop ------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.try_acquire_or_renew()
            except errors.APIError as exc:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            except _FloorUnknown as exc:
                # Expected while the event log is down: one line a round, no traceback.
                log.warning(
                    "lease %s/%s not taken: the newest epoch cannot be read (%s)",
                    self.namespace,
                    self.name,
                    exc,
                )
            except Exception:
                log.exception("lease %s/%s: round failed", self.namespace, self.name)
            if self._leading and self._clock.now() - self._last_renewal >= self._renew_deadline:
                self._step_down()
            self._stopping.wait(self._retry)

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._loop, name=f"lease-{self.name}-{self.identity}", daemon=True
        )
        self._thread.start()

    def stop(self, *, release: bool = True, timeout: float = 10.0) -> None:
        """Stop campaigning; if leading, release the Lease (so a successor need not wait
        for it to expire) and call `on_stopped`."""
        self._stopping.set()
        with self._stop_lock:
            thread, self._thread = self._thread, None
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout)
            if self._leading and release:
                self.release()
            self._step_down()

    def release(self) -> bool:
        """Give the Lease up now: an empty holder that others may take at once."""
        try:
            lease = self._call("read_namespaced_lease", self.name, self.namespace)
            spec = lease.setdefault("spec", {})
            if (spec.get("holderIdentity") or "") != self.identity:
                return False
            spec.update(
                {
                    "holderIdentity": None,
                    "leaseDurationSeconds": 1,
                    "renewTime": _micro_time(datetime.now(UTC)),
                }
            )
            self._call("replace_namespaced_lease", self.name, self.namespace, lease)
        except errors.APIError as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        self._step_down()
        return True
