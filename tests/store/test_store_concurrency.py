"""Writers racing in threads: versions stay contiguous and a deposed leader cannot slip in.

Run on both backends; on PostgreSQL the races are real (row locks, unique indexes), on
SQLite they are serialised by the one write lock and must give the same answers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

import store
from tests.store.store_samples import ThingHappened, at

WRITERS = 4
EACH = 8


def _run(workers: list[Callable[[], None]]) -> list[BaseException]:
    """Start the workers together; return what they raised."""
    barrier = threading.Barrier(len(workers))
    failures: list[BaseException] = []

    def wrapped(work: Callable[[], None]) -> None:
        barrier.wait()
        try:
            work()
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=wrapped, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a writer hung"
    return failures


def _append_with_retries(
    log: store.EventLog, key: store.StreamKey, writer: int, epoch: int = 1
) -> int:
    """Append EACH events one by one, re-reading the head on every conflict (as the
    controller does); returns how many conflicts it met."""
    conflicts = 0
    for n in range(EACH):
        thing = ThingHappened(observed_at=at(n), name=f"w{writer}", size=n)
        while True:
            info = log.stream(key.uid)
            head = 0 if info is None else info.version
            try:
                log.append(key, [thing], head, epoch, at(n))
                break
            except store.StreamConflict:
                conflicts += 1
    return conflicts


def test_racing_writers_on_one_stream_all_land_once_in_order(log: store.EventLog) -> None:
    key = store.StreamKey("uid-shared", "support", "support-llm")
    failures = _run([lambda w=w: _append_with_retries(log, key, w) for w in range(WRITERS)])  # type: ignore[misc]
    assert failures == []

    recorded = log.read(key.uid)
    assert [r.version for r in recorded] == list(range(1, WRITERS * EACH + 1))
    for writer in range(WRITERS):
        sizes = [r.event.size for r in recorded if r.event.name == f"w{writer}"]  # type: ignore[attr-defined]
        assert sizes == list(range(EACH)), f"writer {writer} lost or reordered events"


def test_writers_on_different_streams_do_not_interfere(log: store.EventLog) -> None:
    keys = [store.StreamKey(f"uid-{w}", "support", f"order-{w}") for w in range(WRITERS)]
    failures = _run(
        [lambda k=k, w=w: _append_with_retries(log, k, w) for w, k in enumerate(keys)]  # type: ignore[misc]
    )
    assert failures == []
    assert [(s.key, s.version) for s in log.streams()] == [(k, EACH) for k in keys]


def test_an_old_leader_racing_a_takeover_never_appends_after_it(log: store.EventLog) -> None:
    """Both leaders write the same stream; once epoch 2 is in the stream, no epoch 1 follows."""
    key = store.StreamKey("uid-contested", "support", "support-llm")
    log.append(key, [ThingHappened(observed_at=at(0), name="seed", size=0)], 0, 1, at(0))
    refused: list[store.StaleEpoch] = []

    def old_leader() -> None:
        try:
            for _ in range(200):
                _append_with_retries(log, key, writer=1, epoch=1)
        except store.StaleEpoch as exc:
            refused.append(exc)

    def new_leader() -> None:
        log.claim_epoch(2)
        _append_with_retries(log, key, writer=2, epoch=2)

    assert _run([old_leader, new_leader]) == []
    epochs = [r.epoch for r in log.read(key.uid)]
    assert epochs == sorted(epochs), "an epoch-1 append landed after an epoch-2 one"
    assert epochs.count(2) == EACH
    assert len(refused) == 1 and refused[0].current == 2


def test_a_takeover_waits_for_an_append_in_flight(log: store.EventLog) -> None:
    """An append that passed the fence holds it: the new epoch commits only after it."""
    key = store.StreamKey("uid-inflight", "support", "support-llm")
    # The old leader's epoch is already the fence's, so its append only reads the fence.
    log.claim_epoch(1)
    inserting = threading.Event()
    release = threading.Event()
    old_thread = "old-leader"

    def pause_old_leader_insert(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if threading.current_thread().name == old_thread and statement.lstrip().upper().startswith(
            "INSERT INTO EVENTS"
        ):
            inserting.set()
            release.wait(timeout=30)

    sa.event.listen(log.engine, "before_cursor_execute", pause_old_leader_insert)
    outcome: dict[str, object] = {}

    def old_leader() -> None:
        thing = ThingHappened(observed_at=at(0), name="old", size=1)
        outcome["old"] = log.append(key, [thing], 0, 1, at(0))

    def new_leader() -> None:
        outcome["claimed"] = log.claim_epoch(2)

    old = threading.Thread(target=old_leader, name=old_thread)
    new = threading.Thread(target=new_leader)
    try:
        old.start()
        assert inserting.wait(timeout=30), "the old leader's append never reached its insert"
        new.start()
        new.join(timeout=0.5)
        assert new.is_alive(), "the takeover committed while an older append was in flight"
        assert "claimed" not in outcome
    finally:
        release.set()
        old.join(timeout=30)
        new.join(timeout=30)
        sa.event.remove(log.engine, "before_cursor_execute", pause_old_leader_insert)

    assert outcome == {"old": 1, "claimed": 2}
    with pytest.raises(store.StaleEpoch):
        log.append(key, [ThingHappened(observed_at=at(1), name="old", size=2)], 1, 1, at(1))
    assert [r.epoch for r in log.read(key.uid)] == [1]


@pytest.mark.postgres
def test_writers_keep_their_isolation_under_a_serializable_server_default(
    postgres_url: str,
) -> None:
    """A database whose default isolation is SERIALIZABLE (a DBA's choice) failed most
    concurrent appends to different streams with a serialization failure, which the
    store reports as an outage: the log gate closed for every order. The log's own
    transactions are READ COMMITTED, which the fence's locking is built for."""
    url = f"{postgres_url}%20-cdefault_transaction_isolation%3Dserializable"
    with store.open_log(url) as log:
        log.claim_epoch(1)
        keys = [
            store.StreamKey(f"uid-{w}-{s}", "support", "o") for w in range(4) for s in range(10)
        ]
        failures = _run(
            [
                lambda w=w: [_append_with_retries(log, k, w) for k in keys[w * 10 : (w + 1) * 10]]
                for w in range(4)
            ]  # type: ignore[misc]
        )
        assert failures == []
        assert sorted(s.version for s in log.streams()) == [EACH] * len(keys)
