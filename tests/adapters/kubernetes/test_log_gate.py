"""The log gate: while the event log is down, orders park and one prober asks for it.

The probe is a plain function over a flag standing for the database (the real outage is
tests/outages/test_event_log_down.py); the gate's own behaviour is what is counted here.
A log that answers but cannot be used is a real one, broken on SQLite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

import store
from adapters import metrics
from adapters.kubernetes import queueing
from adapters.kubernetes.log_gate import LogGate
from store import StoreUnavailable, connecting
from tests.support.polling import eventually

FAST = queueing.Backoff(initial=0.01, cap=0.05, jitter=0.0)


class Database:
    def __init__(self) -> None:
        self.up = False
        self.reads = 0
        self.lock = threading.Lock()

    def epoch(self) -> int:
        with self.lock:
            self.reads += 1
        if not self.up:
            raise StoreUnavailable("connection refused")
        return 7


def _never(reason: str) -> None:
    raise AssertionError(f"the gate gave up on a log that was only down: {reason}")


def test_orders_wait_while_the_log_is_down_and_are_woken_together() -> None:
    db = Database()
    woken: list[str] = []
    gate = LogGate(db.epoch, woken.append, give_up=_never, backoff=FAST)
    try:
        assert not gate.park_if_closed("a")  # open: passes run
        gate.failed("a", StoreUnavailable("connection refused"))
        assert gate.closed
        # Passes that would start now are parked, not run; duplicates count once.
        assert gate.park_if_closed("b") and gate.park_if_closed("b") and gate.park_if_closed("c")
        eventually(lambda: gate.stats.probes >= 3, timeout=5)
        assert woken == []  # nothing is woken while the log is down
        db.up = True
        eventually(lambda: not gate.closed, timeout=5)
        assert sorted(woken) == ["a", "b", "c"]  # each parked order once, all at the return
        assert (gate.stats.closings, gate.stats.failed_passes, gate.stats.parked) == (1, 1, 3)
        assert not gate.park_if_closed("d")
    finally:
        gate.stop()


def test_one_prober_however_many_passes_fail() -> None:
    db = Database()
    gate = LogGate(
        db.epoch,
        lambda _uid: None,
        give_up=_never,
        backoff=queueing.Backoff(initial=0.2, cap=0.2),
    )
    try:
        for index in range(50):
            gate.failed(f"order-{index}", StoreUnavailable("connection refused"))
        eventually(lambda: db.reads >= 2, timeout=5)
        # One probe per interval for the whole backlog, not one retry per order.
        assert gate.stats.closings == 1 and gate.stats.failed_passes == 50
        assert db.reads <= 3
    finally:
        gate.stop()


class _CountedBackoff(queueing.Backoff):
    """The gate's backoff, counting which attempt each probe waited for."""

    def __init__(self, cap: float) -> None:
        super().__init__(initial=0.001, cap=cap, jitter=0.0)
        object.__setattr__(self, "asked", [])

    def delay(self, attempt: int, rand: Callable[[], float] | None = None) -> float:
        self.asked.append(attempt)  # type: ignore[attr-defined]
        return min(super().delay(attempt, rand), 0.01)


def test_a_gate_that_closes_again_at_once_probes_on_from_its_backoff() -> None:
    """The probe passes but the next append fails (a full disk: the probe takes the
    write lock, an insert needs a page): each closing started probing from the first
    delay, so the gate flapped twice a second. A closing soon after an opening goes on
    from the backoff reached; one long after starts again."""
    backoff = _CountedBackoff(cap=60.0)
    gate = LogGate(lambda: 7, lambda _uid: None, give_up=_never, backoff=backoff)
    try:
        for _ in range(5):  # the append after each opening fails again at once
            gate.failed("a", StoreUnavailable("No space left on device"))
            eventually(lambda: not gate.closed, timeout=5)
        assert backoff.asked == [1, 2, 3, 4, 5]  # type: ignore[attr-defined]
    finally:
        gate.stop()
    backoff = _CountedBackoff(cap=0.0)  # open for longer than the cap: anew each time
    gate = LogGate(lambda: 7, lambda _uid: None, give_up=_never, backoff=backoff)
    try:
        for _ in range(3):
            gate.failed("a", StoreUnavailable("No space left on device"))
            eventually(lambda: not gate.closed, timeout=5)
        assert backoff.asked == [1, 1, 1]  # type: ignore[attr-defined]
    finally:
        gate.stop()


def test_the_gauge_says_while_orders_wait_for_the_log() -> None:
    db = Database()
    gate = LogGate(db.epoch, lambda _uid: None, give_up=_never, backoff=FAST)
    try:
        gate.failed("a", StoreUnavailable("connection refused"))
        assert metrics.REGISTRY.get_sample_value("ai_inference_log_unreachable") == 1
        db.up = True
        eventually(lambda: not gate.closed, timeout=5)
        assert metrics.REGISTRY.get_sample_value("ai_inference_log_unreachable") == 0
    finally:
        gate.stop()


# Each makes a probe of a log that answers but cannot be used, in `folder`; what it opens
# goes to `opened`, closed after the test.
Broken = Callable[[Path, list[store.EventLog]], Callable[[], object]]


def _table_gone(folder: Path, opened: list[store.EventLog]) -> Callable[[], object]:
    log = store.open_log(f"sqlite:///{folder / 'log.sqlite'}")
    opened.append(log)
    with log.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE leader_fence")
    return log.epoch


def _corrupt(folder: Path, opened: list[store.EventLog]) -> Callable[[], object]:
    path = folder / "log.sqlite"
    store.open_log(f"sqlite:///{path}").close()
    data = bytearray(path.read_bytes())
    data[100:] = b"\x13" * (len(data) - 100)  # the header kept, every page garbage
    path.write_bytes(bytes(data))
    opened.append(store.EventLog(connecting.create_engine(f"sqlite:///{path}")))
    return opened[-1].epoch


def _raising(error: Exception) -> Broken:
    def probe() -> object:
        raise error

    return lambda _folder, _opened: probe


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (_table_gone, "no such table: leader_fence"),
        (_corrupt, "malformed"),
        # What a store that let the driver's errors through raised: the gate does not
        # count on the store for its liveness.
        (
            _raising(sa.exc.ProgrammingError("SELECT", {}, Exception("permission denied"))),
            "permission",
        ),
        (_raising(sa.exc.InternalError("UPDATE", {}, Exception("read-only"))), "read-only"),
        (_raising(sa.exc.DatabaseError("SELECT", {}, Exception("malformed"))), "malformed"),
        (_raising(RuntimeError("a bug")), "a bug"),
    ],
    ids=["table-gone", "corrupt-file", "programming", "internal", "database", "bug"],
)
def test_a_log_that_cannot_be_used_ends_the_wait_and_says_why(
    tmp_path: Path, broken: Broken, says: str
) -> None:
    gave_up: list[str] = []
    woken: list[str] = []
    opened: list[store.EventLog] = []
    probe = broken(tmp_path, opened)
    gate = LogGate(probe, woken.append, give_up=gave_up.append, backoff=FAST)
    try:
        gate.failed("a", StoreUnavailable("connection refused"))
        eventually(lambda: gave_up, timeout=5, what="the gate gave up")
        (reason,) = gave_up
        assert says in reason
        # Closed for good, and said so once: no prober left, no order woken, none run.
        assert gate.closed and gate.park_if_closed("b") and woken == []
        eventually(
            lambda: not [t for t in threading.enumerate() if t.name == "log-gate"],
            timeout=5,
            what="the prober gone",
        )
        assert gate.stats.probes == 1
    finally:
        gate.stop()
        for log in opened:
            log.close()
