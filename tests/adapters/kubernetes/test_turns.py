"""Tenants take the background threads in turn (turns.py): counts and order, not times.

Calls block on events the test holds, so what runs while others hang is exact.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pytest

from adapters.kubernetes.turns import TenantTurns
from tests.support.polling import eventually


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # never leave a thread hung behind a failed test


def hung(release: threading.Event, started: list[str], name: str) -> Callable[[], None]:
    def call() -> None:
        started.append(name)
        release.wait(60)

    return call


def test_a_tenant_whose_calls_hang_leaves_threads_for_another(release: threading.Event) -> None:
    turns = TenantTurns(8, "t", reserve=2)
    started: list[str] = []
    try:
        for i in range(48):
            turns.submit("hung-tenant", hung(release, started, f"a{i}"))
        eventually(lambda: turns.running("hung-tenant") == 6, timeout=10, what="six of eight")
        answered = threading.Event()
        turns.submit("other", answered.set)
        assert answered.wait(10), "the other tenant's call waited behind the hung ones"
        assert turns.running("hung-tenant") == 6  # its share, never the reserve
        assert len(started) == 6
    finally:
        release.set()
        turns.stop()


def test_the_next_turn_goes_to_the_tenant_that_waited_not_to_the_queue_order(
    release: threading.Event,
) -> None:
    turns = TenantTurns(1, "t")  # one thread: one call at a time, in turn
    ran: list[str] = []
    gate = threading.Event()
    try:
        turns.submit("a", hung(gate, ran, "a0"))
        for i in range(1, 4):
            turns.submit("a", lambda i=i: ran.append(f"a{i}"))
        eventually(lambda: ran == ["a0"], timeout=10, what="the first call")
        turns.submit("b", lambda: ran.append("b0"))  # behind three of a's in the queue
        gate.set()
        eventually(lambda: len(ran) == 5, timeout=10, what="every call")
        assert ran == ["a0", "b0", "a1", "a2", "a3"]
    finally:
        turns.stop()


def test_calls_beyond_the_threads_wait_and_all_run() -> None:
    turns = TenantTurns(3, "t")
    done: list[int] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        with lock:
            done.append(i)

    try:
        for i in range(200):
            turns.submit(f"tenant-{i % 7}", lambda i=i: call(i))
        eventually(lambda: len(done) == 200, timeout=10, what="200 calls")
        assert sorted(done) == list(range(200))
        assert len(turns._threads) <= 3
    finally:
        turns.stop()


def divide_by_zero() -> None:
    1 / 0  # noqa: B018 - raising is the point


def test_a_call_that_raises_is_logged_and_its_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    turns = TenantTurns(1, "t")
    after = threading.Event()
    try:
        with caplog.at_level(logging.ERROR, logger="adapters.kubernetes.turns"):
            turns.submit("a", divide_by_zero)
            turns.submit("a", after.set)
            assert after.wait(10)
        assert "ZeroDivisionError" in caplog.text and "tenant a" in caplog.text
    finally:
        turns.stop()


def test_stopping_drops_the_calls_not_started(release: threading.Event) -> None:
    turns = TenantTurns(1, "t")
    started: list[str] = []
    turns.submit("a", hung(release, started, "first"))
    eventually(lambda: started == ["first"], timeout=10, what="the first call")
    turns.submit("a", hung(release, started, "second"))
    turns.stop()
    release.set()
    turns.submit("a", hung(release, started, "after stop"))
    eventually(lambda: turns.running("a") == 0, timeout=10, what="the first call's end")
    assert started == ["first"]
