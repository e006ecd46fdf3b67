"""Small events and a fold of them, so the store's suite does not depend on the core's.

The store only needs registered `fsm` events to encode and decode; these stand in for the
order's real events. `ThingCounted` is at schema version 2 with an upcaster from v1, so
the suite can replay a frozen v1 payload through today's code.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import store
from fsm import events as fsm_events
from fsm.events import Event, event, upcaster

__all__ = [
    "T0",
    "ThingCounted",
    "ThingHappened",
    "ThingRemoved",
    "append_as_a_newer_release",
    "at",
    "fold",
    "things",
]

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@event("TestThingHappened")
class ThingHappened(Event):
    name: str
    size: int


@event("TestThingRemoved")
class ThingRemoved(Event):
    name: str


@event("TestThingCounted", version=2)
class ThingCounted(Event):
    count: int
    unit: str


@upcaster("TestThingCounted", 1)
def _counted_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # v1 had a bare `n`; v2 names it `count` and says what was counted.
    payload["count"] = payload.pop("n")
    payload["unit"] = "items"
    return payload


def things(*sizes: int, start: float = 0) -> list[Event]:
    """One ThingHappened per size, named t0, t1, …, observed a second apart."""
    return [
        ThingHappened(observed_at=at(start + i), name=f"t{i}", size=size)
        for i, size in enumerate(sizes)
    ]


def fold(events: list[Event], state: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON-shaped state: live things by name, the last count, how many events folded."""
    folded: dict[str, Any] = {"things": {}, "count": None, "seen": 0}
    if state is not None:
        folded = {"things": dict(state["things"]), "count": state["count"], "seen": state["seen"]}
    for evt in events:
        match evt:
            case ThingHappened(name=name, size=size):
                folded["things"][name] = size
            case ThingRemoved(name=name):
                folded["things"].pop(name, None)
            case ThingCounted(count=count, unit=unit):
                folded["count"] = [count, unit]
            case _:
                raise TypeError(f"not a sample event: {evt!r}")
        folded["seen"] += 1
    return folded


class ThingAdded(Event):
    """An event type of a release newer than this code: registered only while it writes."""

    name: str


def append_as_a_newer_release(
    log: store.EventLog, key: store.StreamKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start `key`'s stream with what a newer release would write: a type this code does
    not know, and a known type at a schema version above this code's."""
    with monkeypatch.context() as newer:
        newer.setattr(ThingAdded, "TYPE", "TestThingAdded")
        newer.setitem(fsm_events._TYPES, "TestThingAdded", ThingAdded)
        newer.setattr(ThingHappened, "VERSION", 2)
        written = [
            ThingAdded(observed_at=at(1), name="new"),
            ThingHappened(observed_at=at(1), name="t9", size=9),
        ]
        log.append(key, written, 0, 1, at(1))
