"""The work queue and its outcomes, driven by a fake clock: no threads unless named."""

from __future__ import annotations

import threading
import time

import pytest

from adapters.kubernetes import queueing
from adapters.kubernetes.queueing import Done, RequeueAfter, Retry, Terminal


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


NO_JITTER = queueing.Backoff(initial=1.0, factor=2.0, cap=8.0, jitter=0.0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock) -> queueing.WorkQueue:
    return queueing.WorkQueue(clock=clock, backoff=NO_JITTER)


def drain(queue: queueing.WorkQueue) -> list[str]:
    keys = []
    while (key := queue.get(block=False)) is not None:
        keys.append(key)
    return keys


DELAYS = [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 8.0), (10_000, 8.0)]


@pytest.mark.parametrize(("attempt", "delay"), DELAYS, ids=[f"attempt-{a}" for a, _ in DELAYS])
def test_backoff_doubles_to_its_cap(attempt, delay) -> None:
    assert NO_JITTER.delay(attempt) == delay


def test_backoff_jitter_lengthens_but_never_passes_the_cap() -> None:
    backoff = queueing.Backoff(initial=0.8, cap=30.0, jitter=0.5)
    assert backoff.delay(1, rand=lambda: 1.0) == pytest.approx(1.2)
    assert backoff.delay(1, rand=lambda: 0.0) == pytest.approx(0.8)
    assert backoff.delay(7, rand=lambda: 1.0) == 30.0


def test_duplicate_adds_collapse(queue) -> None:
    for key in ("a", "b", "a", "a", "c", "b"):
        queue.add(key)
    assert drain(queue) == ["a", "b", "c"]


def test_an_item_is_never_handed_out_twice_at_once(queue) -> None:
    queue.add("a")
    assert queue.get(block=False) == "a"
    queue.add("a")  # an event while the pass runs
    assert queue.get(block=False) is None
    queue.done("a")
    assert queue.get(block=False) == "a"  # processed again after
    queue.done("a")
    assert queue.get(block=False) is None


def test_a_key_is_busy_from_its_add_to_the_end_of_its_last_pass(queue) -> None:
    assert not queue.busy("a")
    queue.add("a")
    assert queue.busy("a")  # waiting
    assert queue.get(block=False) == "a"
    assert queue.busy("a")  # in its pass
    queue.add("a")  # an event meanwhile: a further pass is owed
    queue.done("a")
    assert queue.busy("a")
    assert queue.get(block=False) == "a"
    queue.done("a")
    assert not queue.busy("a")
    queue.add_after("a", 5)
    assert not queue.busy("a")  # a timer is not work owed yet


def test_add_after_fires_when_the_clock_says(queue, clock) -> None:
    queue.add_after("t", 5)
    assert queue.get(block=False) is None
    clock.advance(4.9)
    assert queue.get(block=False) is None
    clock.advance(0.1)
    assert queue.get(block=False) == "t"


def test_the_earliest_timer_wins(queue, clock) -> None:
    queue.add_after("t", 10)
    queue.add_after("t", 3)
    queue.add_after("t", 7)
    assert queue.pending_timers() == {"t": 3}
    clock.advance(3)
    assert drain(queue) == ["t"]
    queue.done("t")
    clock.advance(10)
    assert drain(queue) == []  # the superseded deadlines do not fire again


def test_an_immediate_add_supersedes_a_timer(queue, clock) -> None:
    queue.add_after("t", 10)
    queue.add("t")
    assert drain(queue) == ["t"]
    queue.done("t")
    clock.advance(10)
    assert drain(queue) == []


class Script:
    """A reconcile that returns queued outcomes and records the keys it saw."""

    def __init__(self, *outcomes: queueing.Outcome | Exception) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[str] = []

    def __call__(self, key: str) -> queueing.Outcome:
        self.calls.append(key)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def test_retry_backs_off_exponentially_and_success_forgets(queue, clock) -> None:
    script = Script(Retry(), Retry(), Retry(), Done())
    workers = queueing.Workers(queue, script)
    queue.add("k")
    waits = []
    while workers.process_one(block=False) is not None:
        waits.append(queue.pending_timers().get("k"))
        if waits[-1] is not None:
            clock.advance(waits[-1])
    assert waits == [1.0, 2.0, 4.0, None]
    assert script.calls == ["k"] * 4
    assert queue.failures("k") == 0


def test_an_exception_is_a_retry(queue, clock) -> None:
    script = Script(RuntimeError("bug"), Done())
    workers = queueing.Workers(queue, script)
    queue.add("k")
    workers.process_one(block=False)
    assert queue.failures("k") == 1
    assert workers.process_one(block=False) is None  # not before its backoff
    clock.advance(1.0)
    assert workers.process_one(block=False) == "k"
    assert queue.failures("k") == 0


def test_requeue_after_is_a_timer_not_a_failure(queue, clock) -> None:
    script = Script(Retry(), RequeueAfter(30), Done())
    workers = queueing.Workers(queue, script)
    queue.add("k")
    workers.process_one(block=False)
    clock.advance(1.0)
    workers.process_one(block=False)
    assert queue.failures("k") == 0
    assert queue.pending_timers() == {"k": 30}
    clock.advance(30)
    assert workers.process_one(block=False) == "k"


def test_terminal_is_recorded_and_never_retried(queue, clock) -> None:
    error = ValueError("no such model")
    seen: list[tuple[str, queueing.Outcome]] = []
    workers = queueing.Workers(
        queue, Script(Terminal(error)), on_outcome=lambda k, o: seen.append((k, o))
    )
    queue.add("k")
    workers.process_one(block=False)
    clock.advance(3600)
    assert workers.process_one(block=False) is None
    assert workers.terminal == {"k": error}
    assert seen == [("k", Terminal(error))]


def test_shutdown_releases_waiters_and_refuses_adds(queue) -> None:
    got: list[str | None] = []
    waiter = threading.Thread(target=lambda: got.append(queue.get(timeout=5)))
    waiter.start()
    queue.shutdown()
    waiter.join(2)
    assert got == [None]
    queue.add("late")
    assert queue.get(block=False) is None


def test_worker_threads_never_run_one_key_concurrently() -> None:
    queue = queueing.WorkQueue()
    running: dict[str, int] = {}
    overlaps: list[str] = []
    passes: list[str] = []
    lock = threading.Lock()

    def reconcile(key: str) -> queueing.Outcome:
        with lock:
            running[key] = running.get(key, 0) + 1
            if running[key] > 1:
                overlaps.append(key)
        time.sleep(0.01)
        with lock:
            running[key] -= 1
            passes.append(key)
        return Done()

    workers = queueing.Workers(queue, reconcile, workers=4)
    workers.start()
    for _ in range(20):
        for key in ("a", "b", "c"):
            queue.add(key)
        time.sleep(0.002)
    deadline = time.monotonic() + 5
    while (len(queue) or any(running.values())) and time.monotonic() < deadline:
        time.sleep(0.01)
    workers.stop()
    assert overlaps == []
    assert set(passes) == {"a", "b", "c"}
    assert len(passes) < 60  # duplicate adds collapsed


@pytest.mark.parametrize("count", [0, -1])
def test_no_workers_at_all_is_refused_not_a_queue_nobody_takes_from(queue, count) -> None:
    with pytest.raises(ValueError, match="workers must be at least 1"):
        queueing.Workers(queue, lambda _key: queueing.Done(), workers=count)
