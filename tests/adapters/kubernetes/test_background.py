"""The background pool's repeated calls: an order's probe on a timer, not a pass per probe.

Counts, not times: how often a call ran, whom it woke. Intervals are tens of
milliseconds so the tests take well under a second each.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from adapters.kubernetes.acting import _first_probe_in
from adapters.kubernetes.background import Background
from fsm.state import OrderState
from tests.support.polling import eventually

KEY = ("probe", "uid-1")
EVERY = 0.02


@pytest.fixture
def woken() -> list[str]:
    return []


@pytest.fixture
def pool(woken: list[str]) -> Iterator[Background]:
    background = Background(woken.append, workers=2)
    yield background
    background.stop()


class Calls:
    def __init__(self, answer: str = "same") -> None:
        self.count = 0
        self.answer = answer
        self.lock = threading.Lock()

    def __call__(self) -> str:
        with self.lock:
            self.count += 1
            return self.answer


def test_a_call_that_brings_no_news_repeats_and_never_wakes(
    pool: Background, woken: list[str]
) -> None:
    calls = Calls()
    pool.repeat(KEY, calls, every=EVERY, first_after=0, news=lambda r: r != "same")
    eventually(lambda: calls.count >= 5, timeout=10, what="five runs")
    assert woken == []
    assert pool.take(KEY) == (False, None)  # nothing kept for a pass
    assert pool.repeating(KEY)
    assert not pool.waiting("uid-1")  # a quiet repeat holds no status back


def test_news_wakes_the_order_once_and_ends_the_repetition(
    pool: Background, woken: list[str]
) -> None:
    calls = Calls("changed")
    pool.repeat(KEY, calls, every=EVERY, first_after=0, news=lambda r: r != "same")
    eventually(lambda: woken, timeout=10, what="the order woken")
    threading.Event().wait(10 * EVERY)
    assert woken == ["uid-1"] and calls.count == 1
    assert not pool.repeating(KEY)  # the pass that takes the answer arms it again
    assert pool.take(KEY) == (True, "changed")


def test_arming_again_keeps_the_time_it_is_due_and_cancel_stops_it(pool: Background) -> None:
    calls = Calls()
    pool.repeat(KEY, calls, every=EVERY, first_after=60, news=lambda _r: False)
    for _ in range(50):  # every pass of a serving order arms its probe again
        pool.repeat(KEY, calls, every=EVERY, first_after=0, news=lambda _r: False)
    threading.Event().wait(10 * EVERY)
    assert calls.count == 0  # still due in a minute, not at once
    pool.cancel(KEY)
    assert not pool.repeating(KEY)


def test_an_announced_call_holds_the_status_back_while_it_runs(pool: Background) -> None:
    # Armed and not yet picked up by the timer: its answer is on its way all the same
    # (publishing meanwhile wrote one more status per order, "awaiting the first probe").
    pool.repeat(KEY, lambda: "x", every=EVERY, first_after=60, news=lambda _r: True, announced=True)
    assert pool.waiting("uid-1")
    pool.cancel(KEY)
    assert not pool.waiting("uid-1")
    release = threading.Event()

    def held() -> str:
        release.wait(10)
        return "first answer"

    pool.repeat(KEY, held, every=EVERY, first_after=0, news=lambda _r: True, announced=True)
    eventually(lambda: pool.busy(KEY), timeout=10, what="the call running")
    assert pool.waiting("uid-1")  # the first probe's answer wakes the order: publish then
    release.set()
    eventually(lambda: not pool.busy(KEY), timeout=10, what="the call done")


class Failing:
    """Raises on its first `fails` calls, then answers `answer`."""

    def __init__(self, fails: int, answer: str = "same") -> None:
        self.fails = fails
        self.answer = answer
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self) -> str:
        with self.lock:
            self.count += 1
            if self.count <= self.fails:
                raise RuntimeError(f"call {self.count} broke its promise")
            return self.answer


def test_a_repeat_whose_call_raises_runs_again(
    pool: Background, woken: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Its timer entry was spent and never put back, and arming it again kept the time it
    was due: it never ran again (an order Ready with a dead runtime, never probed)."""
    calls = Failing(fails=1_000_000)
    with caplog.at_level("ERROR"):
        pool.repeat(KEY, calls, every=EVERY, first_after=0, news=lambda _r: True)
        eventually(lambda: calls.count >= 2, timeout=10, what="a second run")
        for _ in range(3):  # the passes' arming keeps it going, too
            pool.repeat(KEY, calls, every=EVERY, first_after=0, news=lambda _r: True)
        runs = calls.count
        eventually(lambda: calls.count >= runs + 3, timeout=10, what="three more runs")
    assert pool.repeating(KEY) and woken == []  # nobody waited for it: nobody woken
    assert "a background call failed (probe of uid-1): RuntimeError: call 1" in caplog.text


def test_an_announced_repeat_that_raises_holds_no_status_back(
    pool: Background, woken: list[str]
) -> None:
    """A first probe is announced: the pass holds the order's status back until it
    answers. One that raised left `waiting` true for ever: no status was ever published."""
    calls, every = Failing(fails=2, answer="first answer"), 0.3  # time for the pass
    pool.repeat(KEY, calls, every=every, first_after=0, news=lambda _r: True, announced=True)
    eventually(lambda: woken, timeout=10, interval=0.005, what="the waiting order woken")
    assert woken == ["uid-1"] and pool.take(KEY) == (False, None)
    # The woken pass arms the probe again, announced as before: until a call returns,
    # nobody waits for one.
    pool.repeat(KEY, calls, every=every, first_after=0, news=lambda _r: True, announced=True)
    assert not pool.waiting("uid-1") and calls.count == 1
    eventually(lambda: pool.take(KEY) == (True, "first answer"), timeout=10, what="an answer")
    assert woken == ["uid-1", "uid-1"] and calls.count == 3
    pool.repeat(KEY, calls, every=EVERY, first_after=60, news=lambda _r: True, announced=True)
    assert pool.waiting("uid-1")  # a call returned: announcing counts again


def test_a_one_shot_call_that_raises_keeps_nothing_and_says_whose_it_was(
    pool: Background, woken: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("ERROR"):
        pool.start(("hub", "uid-2"), Failing(fails=1))
        eventually(lambda: not pool.busy(("hub", "uid-2")), timeout=10, what="the call done")
        eventually(lambda: "hub of uid-2" in caplog.text, timeout=10, what="the failure logged")
    assert pool.take(("hub", "uid-2")) == (False, None) and not pool.waiting("uid-2")
    assert woken == []  # its pass asks again on its requeue, not in a loop
    pool.start(("hub", "uid-2"), Calls("answer"))
    eventually(lambda: pool.take(("hub", "uid-2")) == (True, "answer"), timeout=10, what="it")


def test_first_probes_after_a_restart_are_spread_over_the_interval() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ready = OrderState(probe_ok=True, last_probe_at=now - timedelta(hours=1))
    uids = [f"order-{i}" for i in range(200)]
    firsts = [_first_probe_in(uid, ready, 30.0, now) for uid in uids]
    assert all(0 <= first < 30.0 for first in firsts)
    # Spread: each tenth of the interval gets some (200 at once was the restart's burst).
    assert {int(first // 3) for first in firsts} == set(range(10))
    assert firsts[0] == 30.0 * zlib.crc32(b"order-0") / 2**32  # the same after each restart
    # Never probed: at once; probed 10 s ago: when the interval ends.
    assert _first_probe_in("x", OrderState(), 30.0, now) == 0.0
    recent = OrderState(probe_ok=True, last_probe_at=now - timedelta(seconds=10))
    assert _first_probe_in("x", recent, 30.0, now) == 20.0


GRAIN, APART = 0.5, 0.08


def _three_due_around_a_tick(grain: float) -> tuple[float, list[float]]:
    """Three repeats due APART seconds apart around a tick of GRAIN: the tick, and when
    each ran."""
    background = Background(lambda _uid: None, workers=4, grain=grain)
    ran: list[float] = []
    lock = threading.Lock()

    def call() -> str:
        with lock:
            ran.append(time.monotonic())
        return "same"

    now = time.monotonic()
    tick = round((now + 1.0) / GRAIN) * GRAIN  # at least 0.75 s ahead
    try:
        for i in range(3):
            background.repeat(
                ("probe", f"uid-{i}"),
                call,
                every=60,
                first_after=tick - now + (i - 1) * APART,
                news=lambda _r: False,
            )
        eventually(lambda: len(ran) == 3, timeout=10, what="three runs")
    finally:
        background.stop()
    return tick, ran


def test_repeats_due_around_the_same_tick_of_the_grain_start_together() -> None:
    """Probes of many orders run in bursts (warm code: half the CPU each) rather than
    one every few milliseconds; without a grain the same arming runs them apart."""
    tick, ran = _three_due_around_a_tick(GRAIN)
    assert max(ran) - min(ran) < APART, ran  # one burst, at the tick
    assert min(ran) >= tick - 0.01
    _, apart = _three_due_around_a_tick(0.0)
    assert max(apart) - min(apart) >= 1.5 * APART, apart


def test_the_grain_rounds_a_due_time_to_its_nearest_tick() -> None:
    """Nearest, not up: rounding up would add a grain to every period (31 s, not 30)."""
    background = Background(lambda _uid: None, inline=True, grain=1.0)
    assert background._on_grain(100.4, 30.0) == 130.0  # a little early
    assert background._on_grain(100.6, 30.0) == 131.0  # a little late
    assert background._on_grain(100.4, 0.0) == 100.4  # at once is at once
    assert Background(lambda _uid: None, inline=True)._on_grain(100.4, 30.0) == 130.4


def test_stopping_with_calls_still_queued_reports_no_failure(caplog) -> None:
    """The pool is shut down with its queued calls cancelled: that is no failed call (the
    done-callback asked a cancelled future for its exception and raised, a traceback for
    each on the controller's way out)."""
    background = Background(lambda _uid: None, workers=1)
    release = threading.Event()
    background.start(("slow", "uid-0"), release.wait)
    for i in range(1, 4):
        background.start(("queued", f"uid-{i}"), lambda: "never")  # behind the slow one
    with caplog.at_level("ERROR"):
        background.stop()
        release.set()
        time.sleep(0.1)
    assert not [r for r in caplog.records if "exception calling callback" in r.getMessage()]
    assert not [r for r in caplog.records if "background call failed" in r.getMessage()]


def test_one_shot_calls_holding_every_thread_do_not_hold_a_due_repeat(
    pool: Background,
) -> None:
    """Hub lookups (one-shot) against a hub that never answers held the shared pool's
    threads, and every tenant's probe (a repeat) waited behind them for their timeouts.
    Each kind has a pool of its own: the probe runs while the lookups still hang."""
    release = threading.Event()
    for i in range(6):  # three times the workers
        pool.start(("hub", f"order-{i}"), lambda: release.wait(10))
    probed = threading.Event()
    pool.repeat(KEY, probed.set, every=30, first_after=0.0, news=lambda _r: True, announced=True)
    try:
        assert probed.wait(5), "the due probe waited behind the lookups"
        assert all(pool.busy(("hub", f"order-{i}")) for i in range(2))  # still hanging
    finally:
        release.set()


def test_one_tenants_hung_probes_do_not_hold_back_another_tenants_probe() -> None:
    """Probes of runtimes that accept and never answer held every thread of the probe
    pool for twice their timeout, and another namespace's due probe waited behind them
    all. Tenants take the threads in turn and none holds them all (turns.py)."""
    background = Background(lambda _uid: None, workers=4)
    release = threading.Event()
    hung: list[str] = []
    other = threading.Event()

    def hang(uid: str) -> Callable[[], str]:
        def call() -> str:
            hung.append(uid)
            release.wait(60)
            return "same"

        return call

    try:
        for i in range(20):
            background.repeat(
                ("probe", f"uid-{i}"),
                hang(f"uid-{i}"),
                every=60,
                first_after=0,
                news=lambda _r: False,
                tenant="hung-tenant",
            )
        eventually(lambda: len(hung) == 2, timeout=10, what="two hung probes")
        background.repeat(
            ("probe", "uid-other"),
            lambda: other.set() or "same",
            every=60,
            first_after=0,
            news=lambda _r: False,
            tenant="other-tenant",
        )
        assert other.wait(10), "the other tenant's probe waited behind the hung ones"
        assert len(hung) == 2  # four threads, two kept from any one tenant
    finally:
        release.set()
        background.stop()
