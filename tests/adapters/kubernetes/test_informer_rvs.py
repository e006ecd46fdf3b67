"""Read your own writes: which RVs an informer still knows an object passed through.

A writer waits for its own write right after it returns, so the cache remembers an
object's past RVs only for a short while; its current RV it always knows. Fed events
directly (no API server): `wait_for_rv` with no timeout says what the cache knows now.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from adapters.kubernetes import kinds, watching
from adapters.kubernetes.watching import Informer

_HORIZON = watching._RECENT_RV_SECONDS


class _Clock:
    """The informer's monotonic clock, moved by hand (the informer is never started)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def tick(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(watching, "time", SimpleNamespace(monotonic=lambda: fake.now))
    return fake


def _informer() -> Informer:
    return Informer(None, kinds.SERVICES)  # type: ignore[arg-type]  # never started


def _event(informer: Informer, kind: str, name: str, rv: str) -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv}
    }
    informer._apply(kind, obj)


def _knows(informer: Informer, name: str, rv: str) -> bool:
    return informer.wait_for_rv(f"uid-{name}", rv, 0)


def test_recent_rvs_are_known_and_old_ones_forgotten_but_the_current_one_never(
    clock: _Clock,
) -> None:
    informer = _informer()
    _event(informer, "ADDED", "a", "1")
    _event(informer, "MODIFIED", "a", "2")
    _event(informer, "MODIFIED", "a", "3")
    assert [_knows(informer, "a", rv) for rv in ("1", "2", "3", "4")] == [
        True,
        True,
        True,
        False,
    ]
    clock.tick(_HORIZON + 1)
    _event(informer, "ADDED", "b", "7")  # any later change forgets what is old
    assert [_knows(informer, "a", rv) for rv in ("1", "2", "3")] == [False, False, True]
    assert _knows(informer, "b", "7")
    assert list(informer._seen) == ["uid-b"]


def test_an_object_changed_again_is_remembered_from_its_last_change(clock: _Clock) -> None:
    informer = _informer()
    _event(informer, "ADDED", "a", "1")
    _event(informer, "ADDED", "b", "2")
    clock.tick(_HORIZON - 1)
    _event(informer, "MODIFIED", "a", "3")  # a's memory is now the newest
    clock.tick(2)
    _event(informer, "ADDED", "c", "4")
    assert _knows(informer, "a", "1")  # a changed within the horizon: all of it kept
    assert not _knows(informer, "b", "0")
    assert list(informer._seen) == ["uid-a", "uid-c"]


def test_a_quiet_informer_forgets_on_its_watchdog_tick(
    clock: _Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    informer = _informer()
    _event(informer, "ADDED", "a", "1")
    _event(informer, "MODIFIED", "a", "2")
    clock.tick(_HORIZON + 1)
    monkeypatch.setattr(watching, "WATCHDOG_TICK", 0.01)
    watchdog = threading.Thread(target=informer._watchdog, daemon=True)
    watchdog.start()
    try:
        deadline = time.monotonic() + 10
        while informer._seen and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        informer._stopping.set()
        watchdog.join(5)
    assert not informer._seen  # no change came: the watchdog's tick forgot
    assert not _knows(informer, "a", "1")
    assert _knows(informer, "a", "2")


def test_a_deleted_object_is_known_gone_whatever_its_rvs() -> None:
    informer = _informer()
    _event(informer, "ADDED", "a", "1")
    _event(informer, "DELETED", "a", "2")
    assert _knows(informer, "a", "99")
    assert not informer._seen


def test_an_object_back_in_the_selection_is_no_longer_gone() -> None:
    """A child whose label someone removed left the label-selected informer (DELETED)
    and came back when our apply put the label on again (ADDED, the same UID). It stayed
    "gone" for good: every later wait for one of our writes to it answered at once, with
    a copy older than the write."""
    informer = _informer()
    _event(informer, "ADDED", "llm", "10")
    _event(informer, "DELETED", "llm", "11")
    assert _knows(informer, "llm", "20")  # gone: nothing more to wait for
    _event(informer, "ADDED", "llm", "12")
    assert not _knows(informer, "llm", "20")  # back: a write at 20 is not here yet
    _event(informer, "MODIFIED", "llm", "20")
    assert _knows(informer, "llm", "20")
