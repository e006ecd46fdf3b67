"""Properties: whatever is appended, in whatever batches, reads back as the same history.

Two families: the suite's own sample events (any batch split, any recorded times, so
time travel is exercised with clocks that step back), and real order streams drawn by
`tests/support/strategies.py` (decide + evolve on random observations), where the oracle is
the core's own fold: folding what the store returns, with or without a snapshot taken
midway, equals folding the events in memory.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import store
from fsm.events import Event
from fsm.fold import fold as fold_order
from fsm.state import OrderState
from tests.store.store_samples import ThingCounted, ThingHappened, ThingRemoved, at, fold
from tests.support import strategies as order_strategies

PROPERTY = settings(
    max_examples=15,
    deadline=None,
    # One log per test and backend; each example writes its own fresh stream.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
)
_instants = st.builds(lambda s, z: at(s).astimezone(z), st.integers(0, 10_000), _zones)
_names = st.text(min_size=1, max_size=8)
_sample_events = st.one_of(
    st.builds(ThingHappened, observed_at=_instants, name=_names, size=st.integers(-(2**40), 2**40)),
    st.builds(ThingRemoved, observed_at=_instants, name=_names),
    st.builds(ThingCounted, observed_at=_instants, count=st.integers(0, 10**6), unit=_names),
)


@st.composite
def batches(draw: Any, events: st.SearchStrategy[list[Event]]) -> list[list[Event]]:
    """The events split into non-empty consecutive batches, as successive appends."""
    drawn = draw(events)
    cuts = sorted(draw(st.sets(st.integers(1, max(len(drawn) - 1, 1)), max_size=4)))
    bounds = [0, *[c for c in cuts if c < len(drawn)], len(drawn)]
    return [drawn[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _fresh_key() -> store.StreamKey:
    return store.StreamKey(str(uuid.uuid4()), "support", "support-llm")


def _append_all(
    log: store.EventLog, key: store.StreamKey, parts: list[list[Event]], times: list[int]
) -> None:
    version = 0
    for part, seconds in zip(parts, times, strict=False):
        version = log.append(key, part, version, 1, at(seconds))


@PROPERTY
@given(
    parts=batches(st.lists(_sample_events, min_size=1, max_size=12)),
    times=st.lists(st.integers(0, 100), min_size=12, max_size=12),
    cut=st.integers(-1, 101),
)
def test_any_batches_read_back_and_fold_as_in_memory(
    log: store.EventLog, parts: list[list[Event]], times: list[int], cut: int
) -> None:
    key = _fresh_key()
    _append_all(log, key, parts, times)
    everything = [e for part in parts for e in part]

    read = log.read(key.uid)
    assert [r.event for r in read] == everything
    assert [r.version for r in read] == list(range(1, len(everything) + 1))
    assert fold([r.event for r in read]) == fold(everything)

    # Time travel: a prefix, recorded no later than the cut, stopped by the first later one.
    past = log.read(key.uid, upto_time=at(cut))
    assert past == read[: len(past)]
    assert all(r.recorded_at <= at(cut) for r in past)
    if len(past) < len(read):
        assert read[len(past)].recorded_at > at(cut)


@PROPERTY
@given(stream=order_strategies.order_streams(max_steps=25), data=st.data())
def test_order_streams_replay_through_the_store_to_the_live_state(
    log: store.EventLog, stream: list[Event], data: st.DataObject
) -> None:
    assume(stream)  # a run always starts with the spec; guard the oracle anyway
    key = _fresh_key()
    midway = data.draw(st.integers(1, len(stream)), label="snapshot after")
    log.append(key, stream[:midway], 0, 1, at(0))
    live_at_midway = fold_order(stream[:midway])
    log.save_snapshot(key.uid, midway, live_at_midway.model_dump(mode="json"))
    if midway < len(stream):
        log.append(key, stream[midway:], midway, 1, at(1))

    live = fold_order(stream)
    replayed = fold_order(r.event for r in log.read(key.uid))
    assert replayed == live

    snapshot = log.load_snapshot(key.uid)
    assert snapshot is not None and snapshot.version == midway
    start = OrderState.model_validate(snapshot.state)
    assert start == live_at_midway
    tail = [r.event for r in log.read(key.uid, after_version=snapshot.version)]
    assert fold_order(tail, start) == live
