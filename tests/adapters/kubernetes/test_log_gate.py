"""The log gate: while the event log is down, orders park and one prober asks for it.

The probe is a plain function over a flag standing for the database (the real outage is
tests/outages/test_event_log_down.py); the gate's own behaviour is what is counted here.
"""

from __future__ import annotations

import threading

from adapters import metrics
from adapters.kubernetes import queueing
from adapters.kubernetes.log_gate import LogGate
from store import StoreUnavailable
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


def test_orders_wait_while_the_log_is_down_and_are_woken_together() -> None:
    db = Database()
    woken: list[str] = []
    gate = LogGate(db.epoch, woken.append, backoff=FAST)
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
    gate = LogGate(db.epoch, lambda _uid: None, backoff=queueing.Backoff(initial=0.2, cap=0.2))
    try:
        for index in range(50):
            gate.failed(f"order-{index}", StoreUnavailable("connection refused"))
        eventually(lambda: db.reads >= 2, timeout=5)
        # One probe per interval for the whole backlog, not one retry per order.
        assert gate.stats.closings == 1 and gate.stats.failed_passes == 50
        assert db.reads <= 3
    finally:
        gate.stop()


def test_the_gauge_says_while_orders_wait_for_the_log() -> None:
    db = Database()
    gate = LogGate(db.epoch, lambda _uid: None, backoff=FAST)
    try:
        gate.failed("a", StoreUnavailable("connection refused"))
        assert metrics.REGISTRY.get_sample_value("ai_inference_log_unreachable") == 1
        db.up = True
        eventually(lambda: not gate.closed, timeout=5)
        assert metrics.REGISTRY.get_sample_value("ai_inference_log_unreachable") == 0
    finally:
        gate.stop()
