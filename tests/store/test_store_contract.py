"""The event log's contract, the same on SQLite and on PostgreSQL (see conftest.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID

import msgpack
import pytest
import sqlalchemy as sa

import store
from fsm.events import Event
from store import schema
from tests.store.store_samples import (
    T0,
    ThingCounted,
    ThingHappened,
    ThingRemoved,
    at,
    fold,
    things,
)

KEY = store.StreamKey("7f0c1d2e-0000-4000-8000-000000000001", "support", "support-llm")
OTHER = store.StreamKey("7f0c1d2e-0000-4000-8000-000000000002", "analytics", "embedder")


def versions(recorded: list[store.RecordedEvent]) -> list[int]:
    return [r.version for r in recorded]


# -- append and read -------------------------------------------------------------------


def test_append_then_read_round_trips_events_and_envelope(log: store.EventLog) -> None:
    east = timezone(timedelta(hours=3))
    written: list[Event] = [
        ThingHappened(observed_at=T0.astimezone(east), name="a", size=3),
        ThingCounted(observed_at=at(1), count=7, unit="gpus"),
        ThingRemoved(observed_at=at(2), name="a"),
    ]
    recorded_at = datetime(2026, 3, 1, 15, 0, 5, 123456, tzinfo=east)

    assert log.append(KEY, written, expected_version=0, epoch=4, recorded_at=recorded_at) == 3

    read = log.read(KEY.uid)
    assert [r.event for r in read] == written
    assert versions(read) == [1, 2, 3]
    assert [r.type_name for r in read] == [
        "TestThingHappened",
        "TestThingCounted",
        "TestThingRemoved",
    ]
    assert [r.schema_version for r in read] == [1, 2, 1]
    assert {r.stream_uid for r in read} == {KEY.uid}
    assert {r.epoch for r in read} == {4}
    assert all(r.recorded_at == recorded_at and r.recorded_at.tzinfo is UTC for r in read)
    assert len({r.event_id for r in read}) == 3
    assert all(isinstance(r.event_id, UUID) for r in read)
    positions = [r.position for r in read]
    assert positions == sorted(positions) and len(set(positions)) == 3


def test_appends_continue_the_stream_and_positions_grow_across_streams(
    log: store.EventLog,
) -> None:
    assert log.append(KEY, things(1, 2), 0, 1, at(0)) == 2
    assert log.append(OTHER, things(9), 0, 1, at(1)) == 1
    assert log.append(KEY, things(3, start=2), 2, 1, at(2)) == 3

    assert [r.event.size for r in log.read(KEY.uid)] == [1, 2, 3]  # type: ignore[attr-defined]
    first, second = log.read(KEY.uid)[2], log.read(OTHER.uid)[0]
    assert first.position > second.position


@pytest.mark.parametrize("head", [0, 2], ids=["racing-to-create", "racing-mid-stream"])
def test_two_writers_at_the_same_head_one_wins(log: store.EventLog, head: int) -> None:
    if head:
        log.append(KEY, things(1, 2), 0, 1, at(0))
    winner = things(10, start=5)
    loser = things(20, start=5)

    assert log.append(KEY, winner, head, 1, at(5)) == head + 1
    with pytest.raises(store.StreamConflict) as conflict:
        log.append(KEY, loser, head, 1, at(5))

    assert isinstance(conflict.value.__cause__, sa.exc.IntegrityError)
    assert (conflict.value.expected, conflict.value.actual) == (head, head + 1)
    assert [r.event for r in log.read(KEY.uid)][head:] == winner


def test_expected_version_beyond_the_head_is_a_conflict_and_leaves_no_gap(
    log: store.EventLog,
) -> None:
    log.append(KEY, things(1), 0, 1, at(0))
    with pytest.raises(store.StreamConflict) as conflict:
        log.append(KEY, things(2), 3, 1, at(1))
    assert conflict.value.actual == 1
    assert versions(log.read(KEY.uid)) == [1]


def test_a_failed_append_writes_none_of_its_events(log: store.EventLog) -> None:
    log.append(KEY, things(1, 2), 0, 1, at(0))
    with pytest.raises(store.StreamConflict):
        log.append(KEY, things(3, 4, 5), 1, 1, at(1))
    assert versions(log.read(KEY.uid)) == [1, 2]


# -- leader epochs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("earlier", "epoch", "refused"),
    [
        ([], 0, False),
        ([3], 3, False),
        ([3], 4, False),
        ([3], 2, True),
        ([1, 5, 5], 4, True),
        ([1, 5], 0, True),
    ],
    ids=[
        "first-epoch-zero",
        "same-epoch",
        "newer-epoch",
        "older-epoch",
        "older-after-several",
        "zero-after-five",
    ],
)
def test_an_append_from_an_older_epoch_is_refused(
    log: store.EventLog, earlier: list[int], epoch: int, refused: bool
) -> None:
    for offset, seen in enumerate(earlier):
        log.append(OTHER, things(offset), offset, seen, at(offset))

    if refused:
        with pytest.raises(store.StaleEpoch) as stale:
            log.append(KEY, things(1), 0, epoch, at(10))
        assert (stale.value.epoch, stale.value.current) == (epoch, max(earlier))
        assert log.stream(KEY.uid) is None
    else:
        log.append(KEY, things(1), 0, epoch, at(10))
        assert [r.epoch for r in log.read(KEY.uid)] == [epoch]
    assert log.epoch() == max([*earlier, epoch if not refused else 0])


def test_claiming_an_epoch_fences_streams_the_new_leader_has_not_written(
    log: store.EventLog,
) -> None:
    log.append(KEY, things(1), 0, 1, at(0))
    assert log.claim_epoch(2) == 2

    with pytest.raises(store.StaleEpoch):
        log.append(KEY, things(2), 1, 1, at(1))
    with pytest.raises(store.StaleEpoch):
        log.claim_epoch(1)
    assert log.epoch() == 2
    assert log.append(KEY, things(2), 1, 2, at(1)) == 2


def test_an_append_at_the_epoch_the_fence_was_seen_at_does_not_raise_it_again(
    log: store.EventLog, log_url: str
) -> None:
    """The fence only rises, so once this log saw it at an epoch an append at that epoch
    does not try to raise it (one statement of each append's transaction). Another
    process's newer epoch is still refused, and a fence lowered behind the log's back (a
    store restored under a running controller) is raised again by the next append."""
    raises: list[str] = []

    def counted(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.lstrip().upper().startswith("UPDATE LEADER_FENCE"):
            raises.append(statement)

    sa.event.listen(log.engine, "before_cursor_execute", counted)
    assert log.claim_epoch(2) == 2
    assert len(raises) == 1
    for version in range(3):
        log.append(KEY, things(1, start=version), version, 2, at(version))
    assert len(raises) == 1  # seen at 2: never tried again

    with log.engine.begin() as conn:
        conn.execute(sa.update(schema.leader_fence).values(epoch=0))
    log.append(KEY, things(1, start=3), 3, 2, at(3))
    assert log.epoch() == 2

    other = store.open_log(log_url)
    try:
        other.claim_epoch(3)
    finally:
        other.close()
    with pytest.raises(store.StaleEpoch):
        log.append(KEY, things(1, start=4), 4, 2, at(4))
    assert versions(log.read(KEY.uid)) == [1, 2, 3, 4]


# -- reading ranges and time travel ----------------------------------------------------


@pytest.mark.parametrize(
    ("after", "upto", "expected"),
    [
        (0, None, [1, 2, 3, 4, 5]),
        (2, None, [3, 4, 5]),
        (0, 3, [1, 2, 3]),
        (1, 4, [2, 3, 4]),
        (3, 3, []),
        (5, None, []),
        (0, 0, []),
        (4, 99, [5]),
    ],
    ids=["all", "tail", "head", "middle", "empty-range", "after-head", "upto-zero", "upto-beyond"],
)
def test_read_by_version_range(
    log: store.EventLog, after: int, upto: int | None, expected: list[int]
) -> None:
    log.append(KEY, things(1, 2, 3), 0, 1, at(0))
    log.append(KEY, things(4, 5, start=3), 3, 1, at(3))
    assert versions(log.read(KEY.uid, after_version=after, upto_version=upto)) == expected


@pytest.mark.parametrize(
    ("recorded", "cut", "expected"),
    [
        ([0, 10, 20, 30], 20, [1, 2, 3]),
        ([0, 10, 20, 30], 19.999999, [1, 2]),
        ([0, 10, 20, 30], -1, []),
        ([0, 10, 20, 30], 99, [1, 2, 3, 4]),
        ([0, 0, 10, 10], 5, [1, 2]),
        # A clock that stepped back: the answer stays a prefix of the stream.
        ([0, 30, 20, 40], 25, [1]),
    ],
    ids=[
        "at-an-event",
        "just-before",
        "before-all",
        "after-all",
        "same-instant-batch",
        "clock-stepped-back",
    ],
)
def test_read_up_to_a_time_is_a_prefix(
    log: store.EventLog, recorded: list[float], cut: float, expected: list[int]
) -> None:
    for version, seconds in enumerate(recorded):
        log.append(KEY, things(version), version, 1, at(seconds))
    assert versions(log.read(KEY.uid, upto_time=at(cut))) == expected


def test_time_travel_combines_with_version_bounds_and_any_zone(log: store.EventLog) -> None:
    for version in range(4):
        log.append(KEY, things(version), version, 1, at(10 * version))
    west = timezone(timedelta(hours=-7))
    cut = at(25).astimezone(west)
    assert versions(log.read(KEY.uid, after_version=1, upto_time=cut)) == [2, 3]
    assert versions(log.read(KEY.uid, upto_version=2, upto_time=cut)) == [1, 2]


def test_reading_an_unknown_stream_says_so(log: store.EventLog) -> None:
    with pytest.raises(store.StreamNotFound):
        log.read("no-such-uid")
    log.append(KEY, things(1), 0, 1, at(0))
    assert log.read(KEY.uid, after_version=1) == []


@pytest.mark.parametrize("batch", [2000, 2], ids=["one-fetch", "streams-across-fetches"])
def test_read_all_gives_every_stream_as_read_does(
    log: store.EventLog, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    monkeypatch.setattr(store.log, "_BATCH", batch)
    third = store.StreamKey("7f0c1d2e-0000-4000-8000-000000000000", "support", "first-uid")
    # Interleaved appends: positions alternate between streams, versions do not.
    log.append(OTHER, things(9), 0, 1, at(0))
    log.append(KEY, things(1, 2), 0, 1, at(1))
    log.append(third, [ThingCounted(observed_at=at(2), count=1, unit="gpus")], 0, 1, at(2))
    log.append(OTHER, [ThingRemoved(observed_at=at(3), name="t0")], 1, 1, at(3))
    log.append(KEY, things(3, 4, 5, start=2), 2, 1, at(4))
    log.mark_deleted(OTHER.uid, at(5))

    replayed = list(log.read_all())

    assert [uid for uid, _ in replayed] == sorted([KEY.uid, OTHER.uid, third.uid])
    assert dict(replayed) == {uid: log.read(uid) for uid in (KEY.uid, OTHER.uid, third.uid)}
    assert versions(dict(replayed)[KEY.uid]) == [1, 2, 3, 4, 5]


def test_read_all_of_an_empty_log_gives_nothing(log: store.EventLog) -> None:
    assert list(log.read_all()) == []


def test_a_replay_stopped_early_gives_its_connection_back(log: store.EventLog) -> None:
    log.append(KEY, things(1), 0, 1, at(0))
    log.append(OTHER, things(2), 0, 1, at(1))
    replay = log.read_all()
    next(replay)
    assert log.engine.pool.checkedout() == 1  # type: ignore[attr-defined]
    replay.close()
    assert log.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


def test_read_all_upcasts_and_refuses_as_read_does(log: store.EventLog) -> None:
    log.append(KEY, things(1), 0, 1, at(0))
    _insert_raw(
        log,
        2,
        "TestThingCounted",
        1,
        msgpack.packb({"observed_at": "2026-03-01T12:00:00Z", "n": 5}),
    )
    [(uid, records)] = log.read_all()
    assert (uid, records) == (KEY.uid, log.read(KEY.uid))
    assert records[1].event == ThingCounted(observed_at=T0, count=5, unit="items")

    _insert_raw(log, 3, "TestThingHappened", 1, b"\xc1")
    with pytest.raises(store.UndecodableEvent, match="bad msgpack") as undecodable:
        list(log.read_all())
    assert (undecodable.value.uid, undecodable.value.version) == (KEY.uid, 3)


def test_read_all_hands_over_an_undecodable_stream_and_goes_on(log: store.EventLog) -> None:
    # KEY's uid sorts first: the broken stream is met before the one after it.
    log.append(KEY, things(1, 2), 0, 1, at(0))
    log.append(OTHER, things(3), 0, 1, at(1))
    _insert_raw(log, 3, "TestThingHappened", 1, b"\xc1")
    log.append(KEY, things(4, start=3), 3, 1, at(2))  # the stream goes on past the bad event

    told: list[store.UndecodableEvent] = []
    replayed = list(log.read_all(undecodable=told.append))

    assert replayed == [(OTHER.uid, log.read(OTHER.uid))]
    assert [(e.uid, e.version) for e in told] == [(KEY.uid, 3)]


# -- snapshots and projections ---------------------------------------------------------


def test_snapshot_plus_tail_folds_to_the_full_fold(log: store.EventLog) -> None:
    history: list[Event] = [
        *things(1, 2, 3),
        ThingRemoved(observed_at=at(4), name="t1"),
        ThingCounted(observed_at=at(5), count=2, unit="gpus"),
        *things(8, start=6),
    ]
    log.append(KEY, history[:4], 0, 1, at(0))
    log.save_snapshot(KEY.uid, 4, fold(history[:4]))
    log.append(KEY, history[4:], 4, 1, at(1))

    snapshot = log.load_snapshot(KEY.uid)
    assert snapshot is not None
    version, state = snapshot
    tail = [r.event for r in log.read(KEY.uid, after_version=version)]
    assert fold(tail, state) == fold(history) == fold([r.event for r in log.read(KEY.uid)])


def test_snapshots_keep_the_latest_version(log: store.EventLog) -> None:
    log.append(KEY, things(1, 2, 3), 0, 1, at(0))
    assert log.load_snapshot(KEY.uid) is None
    assert log.save_snapshot(KEY.uid, 3, {"v": 3})
    assert not log.save_snapshot(KEY.uid, 2, {"v": 2})
    assert log.load_snapshot(KEY.uid) == store.Snapshot(3, {"v": 3})
    assert log.save_snapshot(KEY.uid, 3, {"v": "3 again"})
    assert log.load_snapshot(KEY.uid) == store.Snapshot(3, {"v": "3 again"})


def test_projection_records_the_latest_status(log: store.EventLog) -> None:
    log.append(KEY, things(1, 2), 0, 1, at(0))
    status = {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}
    assert log.projection(KEY.uid) is None

    assert log.record_projection(KEY.uid, 2, status)
    assert not log.record_projection(KEY.uid, 1, {"phase": "Pending"})
    assert log.projection(KEY.uid) == store.Projection(2, status)


@pytest.mark.parametrize("method", ["save_snapshot", "record_projection"])
@pytest.mark.parametrize(
    ("uid", "version", "error"),
    [
        ("no-such-uid", 1, store.StreamNotFound),
        (KEY.uid, 3, ValueError),
        (KEY.uid, 0, ValueError),
    ],
    ids=["unknown-stream", "beyond-head", "version-zero"],
)
def test_snapshots_and_projections_refuse_versions_the_stream_lacks(
    log: store.EventLog, method: str, uid: str, version: int, error: type[Exception]
) -> None:
    log.append(KEY, things(1, 2), 0, 1, at(0))
    with pytest.raises(error):
        getattr(log, method)(uid, version, {"x": 1})


# -- streams ---------------------------------------------------------------------------


def test_find_stream_returns_the_newest_order_of_that_name(log: store.EventLog) -> None:
    first = store.StreamKey("uid-first", "support", "support-llm")
    second = store.StreamKey("uid-second", "support", "support-llm")
    log.append(first, things(1, 2), 0, 1, at(0))
    log.mark_deleted(first.uid, at(50))
    log.append(second, things(3), 0, 1, at(60))

    found = log.find_stream("support", "support-llm")
    assert found is not None and found.key == second and not found.deleted
    assert found.created_at == at(60) and found.version == 1
    assert log.find_stream("support", "other") is None
    assert log.find_stream("analytics", "support-llm") is None


def test_find_stream_prefers_the_live_order_to_a_newer_deleted_one(log: store.EventLog) -> None:
    # The re-created order's clock ran behind: it began "before" its deleted namesake.
    old = store.StreamKey("uid-old", "support", "support-llm")
    new = store.StreamKey("uid-new", "support", "support-llm")
    log.append(old, things(1), 0, 1, at(10))
    log.mark_deleted(old.uid, at(20))
    log.append(new, things(2), 0, 1, at(5))

    found = log.find_stream("support", "support-llm")
    assert found is not None and found.key == new


@pytest.mark.parametrize(
    ("seconds", "meant"),
    [
        (-1, None),  # before either began
        (0, "uid-first"),
        (30, "uid-first"),
        (50, "uid-first"),  # the instant of its deletion: it still stood for the name
        (55, "uid-first"),  # deleted, and no other yet: the one the name last stood for
        (60, "uid-second"),
        (999, "uid-second"),
    ],
    ids=["before", "created", "live", "deleted-then", "between", "re-created", "later"],
)
def test_find_stream_at_an_instant_is_the_order_of_that_name_then(
    log: store.EventLog, seconds: int, meant: str | None
) -> None:
    first = store.StreamKey("uid-first", "support", "support-llm")
    second = store.StreamKey("uid-second", "support", "support-llm")
    log.append(first, things(1, 2), 0, 1, at(0))
    log.mark_deleted(first.uid, at(50))
    log.append(second, things(3), 0, 1, at(60))

    found = log.find_stream("support", "support-llm", at=at(seconds))
    assert (found and found.uid) == meant


def test_deleted_streams_stay_listed_and_readable(log: store.EventLog) -> None:
    log.append(KEY, things(1, 2), 0, 1, at(0))
    log.append(OTHER, things(3), 0, 1, at(1))
    log.mark_deleted(KEY.uid, at(5))
    log.mark_deleted(KEY.uid, at(9))  # again: the first deletion time is kept

    listed = log.streams()
    assert [(s.key, s.version, s.deleted_at) for s in listed] == [
        (KEY, 2, at(5)),
        (OTHER, 1, None),
    ]
    assert log.stream(KEY.uid) == listed[0]
    assert versions(log.read(KEY.uid)) == [1, 2]


def test_a_deleted_stream_takes_no_more_events(log: store.EventLog) -> None:
    log.append(KEY, things(1), 0, 1, at(0))
    log.mark_deleted(KEY.uid, at(1))
    with pytest.raises(store.StreamDeleted):
        log.append(KEY, things(2), 1, 1, at(2))
    with pytest.raises(store.StreamNotFound):
        log.mark_deleted("no-such-uid", at(2))


def test_the_log_survives_reopening(log_url: str) -> None:
    with store.open_log(log_url) as first:
        first.append(KEY, things(1, 2), 0, 3, at(0))
        first.record_projection(KEY.uid, 2, {"phase": "Ready"})
    with store.open_log(log_url) as second:
        assert [r.event for r in second.read(KEY.uid)] == things(1, 2)
        assert second.epoch() == 3
        assert second.projection(KEY.uid) == store.Projection(2, {"phase": "Ready"})


# -- refusing bad input and bad rows ---------------------------------------------------


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"events": []}, ValueError),
        ({"expected_version": -1}, ValueError),
        ({"epoch": -1}, ValueError),
        ({"epoch": 2**63}, ValueError),
        ({"recorded_at": datetime(2026, 3, 1, 12, 0)}, ValueError),
        ({"stream": store.StreamKey("", "ns", "n")}, ValueError),
        ({"stream": store.StreamKey("u" * 65, "ns", "n")}, ValueError),
    ],
    ids=[
        "no-events",
        "negative-version",
        "negative-epoch",
        "epoch-overflow",
        "naive-time",
        "empty-uid",
        "long-uid",
    ],
)
def test_bad_appends_are_refused_before_touching_the_log(
    log: store.EventLog, change: dict[str, object], error: type[Exception]
) -> None:
    arguments: dict[str, object] = {
        "stream": KEY,
        "events": things(1),
        "expected_version": 0,
        "epoch": 1,
        "recorded_at": at(0),
    }
    with pytest.raises(error):
        log.append(**{**arguments, **change})  # type: ignore[arg-type]
    assert log.streams() == [] and log.epoch() == 0


def test_an_unregistered_event_class_is_refused(log: store.EventLog) -> None:
    class Stray(Event):
        pass

    with pytest.raises(TypeError, match="not registered"):
        log.append(KEY, [Stray(observed_at=T0)], 0, 1, at(0))


def _insert_raw(
    log: store.EventLog, version: int, type_name: str, schema_version: int, payload: bytes
) -> None:
    with log.engine.begin() as conn:
        conn.execute(
            sa.insert(schema.events).values(
                stream_uid=KEY.uid,
                version=version,
                event_id=UUID(int=version),
                type=type_name,
                schema_version=schema_version,
                recorded_at=at(1),
                leader_epoch=1,
                payload=payload,
            )
        )


def test_a_frozen_v1_payload_is_upcast_on_read(log: store.EventLog) -> None:
    log.append(KEY, things(1), 0, 1, at(0))
    frozen_v1 = msgpack.packb({"observed_at": "2026-03-01T12:00:00Z", "n": 5})
    _insert_raw(log, 2, "TestThingCounted", 1, frozen_v1)

    recorded = log.read(KEY.uid)[1]
    assert recorded.schema_version == 1
    assert recorded.event == ThingCounted(observed_at=T0, count=5, unit="items")


@pytest.mark.parametrize(
    ("type_name", "schema_version", "payload", "why"),
    [
        (
            "TestNoSuchThing",
            1,
            msgpack.packb({"observed_at": "2026-03-01T12:00:00Z"}),
            "unknown event type",
        ),
        (
            "TestThingHappened",
            2,
            msgpack.packb({"observed_at": "2026-03-01T12:00:00Z"}),
            "newer than this code",
        ),
        (
            "TestThingHappened",
            1,
            msgpack.packb({"observed_at": "2026-03-01T12:00:00Z"}),
            "invalid payload",
        ),
        ("TestThingHappened", 1, b"\xc1", "bad msgpack"),
        ("TestThingHappened", 1, msgpack.packb([1, 2]), "not a map"),
    ],
    ids=["unknown-type", "future-version", "missing-field", "garbage-bytes", "not-a-map"],
)
def test_an_undecodable_row_raises_clearly(
    log: store.EventLog, type_name: str, schema_version: int, payload: bytes, why: str
) -> None:
    log.append(KEY, things(1), 0, 1, at(0))
    _insert_raw(log, 2, type_name, schema_version, payload)
    with pytest.raises(store.UndecodableEvent, match=why) as undecodable:
        log.read(KEY.uid)
    assert (undecodable.value.uid, undecodable.value.version) == (KEY.uid, 2)
    assert undecodable.value.type_name == type_name


def test_an_unreachable_server_is_unavailable_not_a_driver_error() -> None:
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    with pytest.raises(store.StoreUnavailable):
        store.open_log("postgresql://postgres@127.0.0.1:9/nothing")
