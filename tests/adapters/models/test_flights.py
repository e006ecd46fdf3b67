"""`Flights`: one call per key at a time, its answer (or its exception) told to all."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from adapters.models.caching import Flights
from tests.support.polling import eventually


def test_callers_during_a_call_get_its_exception_and_the_next_caller_calls_again() -> None:
    flights: Flights[str, int] = Flights()
    entered, release = threading.Event(), threading.Event()
    calls = []

    def failing() -> int:
        calls.append("failing")
        entered.set()
        release.wait(timeout=10)
        raise RuntimeError("hub said no")

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(flights.share, "m", failing)
        assert entered.wait(timeout=10)
        second = pool.submit(flights.share, "m", lambda: len(calls))  # never called
        eventually(lambda: flights.waiting("m") == 1, timeout=10, what="the second waiting")
        release.set()
        for future in (first, second):
            with pytest.raises(RuntimeError, match="hub said no"):
                future.result(timeout=10)
    assert calls == ["failing"]
    assert len(flights) == 0 and flights.waiting("m") == 0  # nothing is left running
    assert flights.share("m", lambda: 3) == 3


def test_calls_for_other_keys_run_side_by_side() -> None:
    flights: Flights[str, str] = Flights()
    both = threading.Barrier(2)

    def meet(key: str) -> str:
        both.wait(timeout=10)  # each call must be running for the other to pass
        return key

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda k: flights.share(k, lambda: meet(k)), ["a", "b"]))
    assert answers == ["a", "b"]
