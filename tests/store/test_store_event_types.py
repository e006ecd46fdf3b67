"""The log knows which event types and versions it holds, and a writer that cannot read
them all refuses it: what keeps an older release, rolled back to, from folding past events
a newer one wrote. On both backends."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

import store
from fsm import events as fsm_events
from fsm.events import cannot_read
from store import connecting, migrating
from tests.store.store_samples import (
    ThingCounted,
    ThingRemoved,
    append_as_a_newer_release,
    at,
    things,
)

KEY = store.StreamKey("7f0c1d2e-0000-4000-8000-0000000000e1", "support", "support-llm")
OTHER = store.StreamKey("7f0c1d2e-0000-4000-8000-0000000000e2", "support", "chat-llm")
SAMPLES = {("TestThingHappened", 1), ("TestThingCounted", 2), ("TestThingRemoved", 1)}


def test_each_append_records_the_types_it_is_the_first_to_write(
    log: store.EventLog, log_url: str
) -> None:
    log.append(KEY, things(1, 2), 0, 1, at(0))
    assert log.event_types() == {("TestThingHappened", 1)}
    counted = ThingCounted(observed_at=at(1), count=3, unit="gpus")
    log.append(KEY, [counted, ThingRemoved(observed_at=at(1), name="t0")], 2, 1, at(1))
    assert log.event_types() == SAMPLES

    # A process that has not read the table yet writes pairs already there: kept once.
    other = store.EventLog(connecting.create_engine(log_url))
    try:
        other.append(OTHER, [*things(4), counted], 0, 1, at(2))
    finally:
        other.close()
    assert log.event_types() == SAMPLES


def test_a_refused_append_records_no_type(log: store.EventLog) -> None:
    log.append(KEY, things(1), 0, 1, at(0))
    removed = ThingRemoved(observed_at=at(1), name="t0")
    with pytest.raises(store.StreamConflict):
        log.append(KEY, [removed], 0, 1, at(1))
    assert log.event_types() == {("TestThingHappened", 1)}
    # Not taken for recorded by the refused append: the next one records it.
    log.append(KEY, [removed], 1, 1, at(1))
    assert log.event_types() == {("TestThingHappened", 1), ("TestThingRemoved", 1)}


def test_a_log_a_newer_release_wrote_is_refused_for_writing_and_still_read(
    log: store.EventLog, log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log.append(KEY, things(1), 0, 1, at(0))
    append_as_a_newer_release(log, OTHER, monkeypatch)

    with pytest.raises(store.UnreadableLog) as refused:
        store.open_log(log_url)
    assert refused.value.unreadable == {
        ("TestThingAdded", 1): "a type this release does not know",
        ("TestThingHappened", 2): "this release reads it up to v1",
    }
    assert str(refused.value).startswith(
        "the event log holds events this release cannot read: TestThingAdded v1 (a type "
        "this release does not know), TestThingHappened v2 (this release reads it up to "
        "v1). A newer release wrote them"
    )
    assert isinstance(refused.value, store.SchemaError)  # a log it cannot open, as a schema

    # The audit still reads it: what it can decode, and a clear error for the rest.
    with store.open_log(log_url, read_only=True) as reader:
        assert [r.version for r in reader.read(KEY.uid)] == [1]
        with pytest.raises(store.UndecodableEvent, match="TestThingAdded"):
            reader.read(OTHER.uid)


def test_the_upgrade_lists_the_types_the_events_already_hold(log: store.EventLog) -> None:
    """A log recorded before the table existed gets it filled from its events."""
    log.append(KEY, things(1), 0, 1, at(0))
    log.append(OTHER, [ThingCounted(observed_at=at(1), count=3, unit="gpus")], 0, 1, at(1))
    held = log.event_types()
    with log.engine.connect() as conn:
        conn.execution_options(**{connecting.WRITE: True})
        with conn.begin():
            command.downgrade(migrating.alembic_config(conn), "0001")
        assert "event_types" not in sa.inspect(conn).get_table_names()
    migrating.upgrade(log.engine)
    assert log.event_types() == held == {("TestThingHappened", 1), ("TestThingCounted", 2)}


@pytest.mark.parametrize(
    ("type_name", "version", "why"),
    [
        ("TestThingCounted", 2, None),
        ("TestThingCounted", 1, None),  # lifted by its upcaster
        ("TestThingCounted", 3, "this release reads it up to v2"),
        ("TestNoSuchThing", 1, "a type this release does not know"),
    ],
)
def test_what_this_release_can_read(type_name: str, version: int, why: str | None) -> None:
    assert cannot_read(type_name, version) == why


def test_an_old_version_with_no_upcaster_cannot_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(fsm_events._UPCASTERS, ("TestThingCounted", 1))
    assert cannot_read("TestThingCounted", 1) == "no upcaster from v1"


def test_every_version_an_event_was_ever_written_at_is_readable() -> None:
    """A version bumped without its upcaster would make every log holding the older one
    refused by the very release that wrote it."""
    registered = fsm_events.registered_types()
    assert len(registered) > 10
    unreadable = {
        (name, version): why
        for name, cls in registered.items()
        for version in range(1, cls.VERSION + 1)
        if (why := cannot_read(name, version)) is not None
    }
    assert unreadable == {}
