"""The event log: append with an expected version and a leader epoch, read, look streams up.

The controller appends the events a decision produced before it acts on them, and folds
what it reads back; the audit CLI reads, time-travels and compares projections. One
`EventLog` is shared by every worker thread: each call takes its own pooled connection
and transaction.

Guarantees, and where they come from:

- Concurrency is the schema's: `(stream_uid, version)` is unique, so of two writers that
  read the same head only one commits; the other gets `StreamConflict`, raised from the
  database's IntegrityError. A writer whose expected version lies beyond the head (which
  would leave a gap) is refused before inserting.
- Fencing: every append carries the writer's leader epoch. In the same transaction the
  append raises the single fence row to its epoch if that is newer, then reads the row
  under a share lock (`FOR SHARE`; SQLite's one write lock plays that part) and refuses
  with `StaleEpoch` if a newer epoch was seen. A takeover's update waits for the share
  locks of appends in flight, and an append that starts after the takeover commits sees
  the new epoch: an old leader's append either commits before the new leader's first
  write or not at all.
- Readability: a writer must be able to read every event already there, or its folds
  would stop at the first one it does not know. The `event_types` table lists every
  (type, schema version) the events hold (an append adds the pairs it is the first to
  write, in its own transaction), and opening for writing checks it against the code's
  registry: a log a newer release wrote is refused with what this release cannot read.
- Time is the caller's: `recorded_at` and deletion times are parameters. The store never
  reads a clock, so a controller with an injected clock, and every test, is deterministic.
"""

from __future__ import annotations

import functools
import importlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from fsm.events import Event, cannot_read
from store import codec, connecting, migrating, schema
from store.errors import (
    StaleEpoch,
    StoreError,
    StoreUnavailable,
    StoreUnusable,
    StreamConflict,
    StreamDeleted,
    StreamNotFound,
    UndecodableEvent,
    UnreadableLog,
)
from store.records import Projection, RecordedEvent, Snapshot, StreamInfo, StreamKey

__all__ = ["AppendObserver", "EventLog", "open_log"]

_MAX_EPOCH = 2**63 - 1
# Rows fetched at a time by `read_all`: large enough that a round trip is rare, small
# enough that a million-event log is never held at once.
_BATCH = 2000

# Told of every append: its events, how long it took (seconds) and the error that refused
# it (None: committed). How metrics see the log without the store knowing them.
AppendObserver = Callable[[Sequence[Event], float, BaseException | None], None]


def open_log(url: str, *, read_only: bool = False) -> EventLog:
    """Open the log at `url` (`sqlite:///path` or `postgresql+psycopg://…`).

    A writer (the controller) migrates the schema to this release's head first, then
    refuses (UnreadableLog) a log holding event types or versions it cannot read. A reader
    (`read_only=True`, the audit CLI) never migrates, locks or writes: its connections
    refuse writes (SQLite `query_only`, a PostgreSQL read-only session), so a role with
    only SELECT will do; it raises SchemaError unless the schema is at this release's head.
    """
    engine = connecting.create_engine(url, read_only=read_only)
    try:
        if read_only:
            migrating.check_current(engine)
            return EventLog(engine)
        migrating.upgrade(engine)
        log = EventLog(engine)
        log.check_readable()
    except BaseException:
        engine.dispose()
        raise
    return log


@contextmanager
def _translated() -> Iterator[None]:
    """The one boundary where the database library's failures become the store's.

    Every one of them: an outage a later attempt may not meet is StoreUnavailable (the
    controller waits it out at its log gate); any other answer, asked again, is the same
    (a table missing, a permission denied, a corrupt file), and is StoreUnusable."""
    try:
        yield
    except sa.exc.IntegrityError as exc:
        raise StoreError(f"integrity violation: {exc}") from exc
    except sa.exc.SQLAlchemyError as exc:
        said = connecting.described(exc)
        if connecting.passing(exc):
            raise StoreUnavailable(f"the event log's database is unavailable: {said}") from exc
        raise StoreUnusable(
            f"the event log's database cannot be used, and retrying will not help: {said}"
        ) from exc


class EventLog:
    """Streams of events, one per order UID, over an already migrated database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._observers: list[AppendObserver] = []
        # The newest epoch this log saw the fence at. The fence only rises, so an append
        # at that epoch need not try to raise it: one statement of its transaction fewer.
        self._fence_seen = 0
        # The (type, schema version) pairs known to be in `event_types`: an append writes
        # there only the pairs it may be the first to record.
        self._types_recorded: set[tuple[str, int]] = set()

    def observe_appends(self, observer: AppendObserver) -> Callable[[], None]:
        """Call `observer` after every append; returns the function that stops it."""
        self._observers.append(observer)

        def remove() -> None:
            if observer in self._observers:
                self._observers.remove(observer)

        return remove

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- writing ----------------------------------------------------------------------

    def append(
        self,
        stream: StreamKey,
        events: Sequence[Event],
        expected_version: int,
        epoch: int,
        recorded_at: datetime,
    ) -> int:
        """Append `events` after version `expected_version` (0: create the stream).

        Returns the stream's new version. Raises StreamConflict if the head is not
        `expected_version`, StaleEpoch if a newer leader epoch was seen, StreamDeleted if
        the order's stream was marked deleted.
        """
        started = time.perf_counter()  # a duration for observers, never a recorded time
        try:
            version = self._append(stream, events, expected_version, epoch, recorded_at)
        except BaseException as exc:
            self._told(events, started, exc)
            raise
        self._told(events, started, None)
        return version

    def _told(self, events: Sequence[Event], started: float, error: BaseException | None) -> None:
        for observer in list(self._observers):
            observer(events, time.perf_counter() - started, error)

    def _append(
        self,
        stream: StreamKey,
        events: Sequence[Event],
        expected_version: int,
        epoch: int,
        recorded_at: datetime,
    ) -> int:
        if not events:
            raise ValueError("nothing to append")
        _check_key(stream)
        if expected_version < 0:
            raise ValueError(f"expected_version must be >= 0, got {expected_version}")
        _check_epoch(epoch)
        _check_instant(recorded_at)
        encoded = [codec.encode(e) for e in events]
        rows = [
            {
                "stream_uid": stream.uid,
                "version": expected_version + offset,
                "event_id": uuid4(),
                "type": enc.type_name,
                "schema_version": enc.schema_version,
                "recorded_at": recorded_at,
                "leader_epoch": epoch,
                "payload": enc.payload,
            }
            for offset, enc in enumerate(encoded, start=1)
        ]
        new_types = {(e.type_name, e.schema_version) for e in encoded} - self._types_recorded
        with _translated():
            try:
                with self._writing() as conn:
                    self._fence_seen = _fence(conn, epoch, raised=epoch <= self._fence_seen)
                    if new_types:
                        conn.execute(
                            _insert_absent_types(conn.dialect.name),
                            [{"type": t, "schema_version": v} for t, v in sorted(new_types)],
                        )
                    if expected_version == 0:
                        conn.execute(
                            sa.insert(schema.streams).values(
                                uid=stream.uid,
                                namespace=stream.namespace,
                                name=stream.name,
                                created_at=recorded_at,
                            )
                        )
                    else:
                        _check_writable_head(conn, stream.uid, expected_version)
                    conn.execute(sa.insert(schema.events), rows)
            except sa.exc.IntegrityError as exc:
                # The stream row or the version was taken by a writer that committed first.
                head = self._head_or_none(stream.uid)
                raise StreamConflict(stream.uid, expected_version, head) from exc
        self._types_recorded |= new_types
        return expected_version + len(rows)

    def claim_epoch(self, epoch: int) -> int:
        """Raise the fence to `epoch` without appending (a new leader's first act).

        From then on appends stamped with an older epoch are refused even on streams the
        new leader has not written yet. Returns the fence's epoch; raises StaleEpoch if a
        newer one was already seen.
        """
        _check_epoch(epoch)
        with _translated(), self._writing() as conn:
            self._fence_seen = _fence(conn, epoch)
            return self._fence_seen

    def event_types(self) -> set[tuple[str, int]]:
        """Every (type, schema version) the log's events hold."""
        query = sa.select(schema.event_types.c.type, schema.event_types.c.schema_version)
        with _translated(), self._engine.connect() as conn:
            return {(str(name), int(version)) for name, version in conn.execute(query)}

    def check_readable(self) -> None:
        """Raise UnreadableLog if the log holds events this code cannot decode."""
        held = self.event_types()
        unreadable = {pair: why for pair in held if (why := cannot_read(*pair)) is not None}
        if unreadable:
            raise UnreadableLog(unreadable)
        self._types_recorded |= held

    def epoch(self) -> int:
        """The newest leader epoch the store has seen."""
        with _translated(), self._engine.connect() as conn:
            return int(conn.execute(_FENCE_EPOCH).scalar_one())

    def writable_epoch(self) -> int:
        """`epoch`, read as an append reads it, with a pass's writes rehearsed: in a write
        transaction, the fence held for share, a stream, an event and its type inserted,
        a projection and a snapshot kept (the upserts a pass's status and fold make),
        the stream marked deleted, then all rolled back. Writes nothing; raises as an
        append would where the database takes reads but no writes (a PostgreSQL standby,
        an old primary after a fail-over), which a plain read does not notice, and where
        one of a pass's writes cannot be made at all (a table gone, a privilege revoked:
        StoreUnusable), which a read of the fence alone did not meet."""
        with _translated(), self._engine.connect() as conn:
            conn.execution_options(**{connecting.WRITE: True})
            transaction = conn.begin()
            try:
                epoch = int(conn.execute(_SEEN_FENCE).scalar_one())
                uid, now = f"rehearsal-{uuid4()}", datetime.now(UTC)
                conn.execute(
                    sa.insert(schema.streams).values(uid=uid, namespace="", name="", created_at=now)
                )
                conn.execute(
                    sa.insert(schema.events).values(
                        stream_uid=uid,
                        version=1,
                        event_id=uuid4(),
                        type="rehearsal",
                        schema_version=1,
                        recorded_at=now,
                        leader_epoch=epoch,
                        payload=b"",
                    )
                )
                conn.execute(
                    _insert_absent_types(conn.dialect.name),
                    [{"type": "rehearsal", "schema_version": 1}],
                )
                for table, column in ((schema.projections, "status"), (schema.snapshots, "state")):
                    conn.execute(
                        _upsert_latest(conn.dialect.name, table, column),
                        {"stream_uid": uid, "version": 1, column: {}},
                    )
                conn.execute(
                    sa.update(schema.streams)
                    .where(schema.streams.c.uid == uid)
                    .values(deleted_at=now)
                )
                return epoch
            finally:
                transaction.rollback()

    def mark_deleted(self, uid: str, at: datetime) -> None:
        """Mark the order gone; its history stays readable. The first deletion time is kept."""
        _check_instant(at)
        with _translated(), self._writing() as conn:
            marked = conn.execute(
                sa.update(schema.streams)
                .where(schema.streams.c.uid == uid, schema.streams.c.deleted_at.is_(None))
                .values(deleted_at=at)
            )
            if marked.rowcount == 0 and not _exists(conn, uid):
                raise StreamNotFound(uid)

    def save_snapshot(self, uid: str, version: int, state: Mapping[str, Any]) -> bool:
        """Keep `state` as the fold of events 1..`version`; an older snapshot never wins.

        Returns False when a snapshot of a later version is already stored.
        """
        return self._keep_latest(schema.snapshots, "state", uid, version, state)

    def record_projection(self, uid: str, version: int, status: Mapping[str, Any]) -> bool:
        """Record the status just written to the API, computed at stream `version`.

        Returns False when a projection of a later version is already recorded (a slower
        writer must not roll the record back).
        """
        return self._keep_latest(schema.projections, "status", uid, version, status)

    # -- reading ----------------------------------------------------------------------

    def read(
        self,
        stream_uid: str,
        after_version: int = 0,
        upto_version: int | None = None,
        upto_time: datetime | None = None,
    ) -> list[RecordedEvent]:
        """Events of one stream with `after_version < version <= upto_version`, in order.

        `upto_time` cuts the stream before its first event recorded after that instant,
        so the answer is always a prefix of the stream: what the log held at that time.
        Raises StreamNotFound for an unknown uid.
        """
        query = (
            sa.select(*_ENVELOPE)
            .where(
                schema.events.c.stream_uid == stream_uid, schema.events.c.version > after_version
            )
            .order_by(schema.events.c.version)
        )
        if upto_version is not None:
            query = query.where(schema.events.c.version <= upto_version)
        if upto_time is not None:
            _check_instant(upto_time)
            first_later = (
                sa.select(sa.func.min(schema.events.c.version))
                .where(
                    schema.events.c.stream_uid == stream_uid,
                    schema.events.c.recorded_at > upto_time,
                )
                .scalar_subquery()
            )
            query = query.where(
                sa.or_(first_later.is_(None), schema.events.c.version < first_later)
            )
        with _translated(), self._engine.connect() as conn:
            rows = conn.execute(query).all()
            if not rows and not _exists(conn, stream_uid):
                raise StreamNotFound(stream_uid)
        return [_recorded(row) for row in rows]

    def read_all(
        self, *, undecodable: Callable[[UndecodableEvent], object] | None = None
    ) -> Iterator[tuple[str, list[RecordedEvent]]]:
        """Every stream's events from one ordered query: `(uid, records)` per stream.

        Streams come in uid order (the `(stream_uid, version)` index's), each complete and
        in version order, each event as `read` gives it. Rows are fetched in batches, so a
        log larger than memory replays in the space of its largest stream; the connection
        is held until the iterator is exhausted or closed. What replays the whole log (the
        audit's `verify`, the benchmark) takes this instead of one `read` per stream.

        An event this code cannot decode raises UndecodableEvent and ends the replay;
        given `undecodable`, it is handed there instead, its stream is left out (a part of
        it would fold to a state it never had) and the replay goes on with the next one.
        """
        query = sa.select(*_ENVELOPE).order_by(schema.events.c.stream_uid, schema.events.c.version)
        # The result is closed however the caller stops: PostgreSQL's server cursor with it.
        with (
            _translated(),
            self._engine.connect() as conn,
            conn.execution_options(yield_per=_BATCH).execute(query) as rows,
        ):
            uid, records, broken = "", list[RecordedEvent](), False
            for batch in rows.partitions():
                for row in batch:
                    if row.stream_uid != uid:
                        if records and not broken:
                            yield uid, records
                        uid, records, broken = row.stream_uid, [], False
                    if broken:
                        continue
                    try:
                        records.append(_recorded(row))
                    except UndecodableEvent as exc:
                        if undecodable is None:
                            raise
                        undecodable(exc)
                        broken = True
            if records and not broken:
                yield uid, records

    def stream(self, uid: str) -> StreamInfo | None:
        """The stream of one order UID, or None."""
        found = self._infos(schema.streams.c.uid == uid)
        return found[0] if found else None

    def find_stream(
        self, namespace: str, name: str, *, at: datetime | None = None
    ) -> StreamInfo | None:
        """The stream namespace/name stands for, or None: its live order's, else the newest.

        `at`: the one it stood for at that instant, of the streams begun by then: one not
        deleted before it, else the newest (deleted by then). A name deleted and created
        again has a stream per order; the newest need not be the one meant.
        """
        streams = schema.streams.c
        where = sa.and_(streams.namespace == namespace, streams.name == name)
        alive: sa.ColumnElement[bool] = streams.deleted_at.is_(None)
        if at is not None:
            _check_instant(at)
            where = sa.and_(where, streams.created_at <= at)
            alive = sa.or_(alive, streams.deleted_at >= at)
        found = self._infos(
            where,
            order=[
                sa.case((alive, 1), else_=0).desc(),
                streams.created_at.desc(),
                # Two alive then, begun at one instant (a skewed clock): the live one is meant.
                sa.case((streams.deleted_at.is_(None), 1), else_=0).desc(),
                streams.uid.desc(),
            ],
        )
        return found[0] if found else None

    def streams(self) -> list[StreamInfo]:
        """Every stream, deleted ones included, oldest first."""
        return self._infos(sa.true())

    def orders(
        self, *, namespace: str | None = None, deleted: bool | None = None
    ) -> list[tuple[StreamInfo, Projection | None]]:
        """Every stream (of `namespace`; only deleted or only live ones if `deleted` says
        so), oldest first, each with the status last recorded for it (None: never)."""
        where: list[sa.ColumnElement[bool]] = []
        if namespace is not None:
            where.append(schema.streams.c.namespace == namespace)
        if deleted is not None:
            column = schema.streams.c.deleted_at
            where.append(column.is_not(None) if deleted else column.is_(None))
        condition = sa.and_(sa.true(), *where)
        infos = self._infos(condition)
        query = (
            sa.select(schema.projections)
            .join(schema.streams, schema.streams.c.uid == schema.projections.c.stream_uid)
            .where(condition)
        )
        with _translated(), self._engine.connect() as conn:
            recorded = {
                row.stream_uid: Projection(int(row.version), dict(row.status))
                for row in conn.execute(query)
            }
        return [(info, recorded.get(info.uid)) for info in infos]

    def load_snapshot(self, uid: str) -> Snapshot | None:
        row = self._latest(schema.snapshots, "state", uid)
        return None if row is None else Snapshot(row[0], row[1])

    def projection(self, uid: str) -> Projection | None:
        row = self._latest(schema.projections, "status", uid)
        return None if row is None else Projection(row[0], row[1])

    # -- helpers ----------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        with self._engine.connect() as conn:
            conn.execution_options(**{connecting.WRITE: True})
            with conn.begin():
                yield conn

    def _head_or_none(self, uid: str) -> int | None:
        try:
            with self._engine.connect() as conn:
                return _head(conn, uid)
        except sa.exc.SQLAlchemyError:
            return None

    def _infos(
        self, where: sa.ColumnElement[bool], *, order: Sequence[sa.ColumnElement[Any]] = ()
    ) -> list[StreamInfo]:
        head = (
            sa.select(sa.func.coalesce(sa.func.max(schema.events.c.version), 0))
            .where(schema.events.c.stream_uid == schema.streams.c.uid)
            .scalar_subquery()
        )
        order = order or [schema.streams.c.created_at, schema.streams.c.uid]
        query = sa.select(schema.streams, head.label("head")).where(where).order_by(*order)
        with _translated(), self._engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            StreamInfo(r.uid, r.namespace, r.name, r.created_at, r.deleted_at, int(r.head))
            for r in rows
        ]

    def _keep_latest(
        self, table: sa.Table, column: str, uid: str, version: int, value: Mapping[str, Any]
    ) -> bool:
        if version < 1:
            raise ValueError(f"version must be >= 1, got {version}")
        document = dict(value)
        # Fail here, in the caller's terms, rather than deep inside the driver's bind step.
        json.dumps(document, allow_nan=False)
        stmt = _upsert_latest(self._engine.dialect.name, table, column)
        with _translated(), self._writing() as conn:
            head = _head(conn, uid)
            if head == 0 and not _exists(conn, uid):
                raise StreamNotFound(uid)
            if version > head:
                raise ValueError(f"stream {uid} is at version {head}, not {version}")
            values = {"stream_uid": uid, "version": version, column: document}
            return conn.execute(stmt, values).first() is not None

    def _latest(self, table: sa.Table, column: str, uid: str) -> tuple[int, dict[str, Any]] | None:
        query = sa.select(table.c.version, table.c[column]).where(table.c.stream_uid == uid)
        with _translated(), self._engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else (int(row[0]), dict(row[1]))


def _check_epoch(epoch: int) -> None:
    if not 0 <= epoch <= _MAX_EPOCH:
        raise ValueError(f"leader epoch must be a non-negative 64-bit int, got {epoch}")


def _check_key(stream: StreamKey) -> None:
    # The columns' widths are Kubernetes' own limits; refuse here, not as a driver error.
    uid, namespace, name = stream
    if not 0 < len(uid) <= 64 or not 0 < len(namespace) <= 63 or not 0 < len(name) <= 253:
        raise ValueError(f"not a Kubernetes object key: {stream!r}")


def _check_instant(at: datetime) -> None:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"naive datetime {at!r}: give the log timezone-aware instants")


# The statements of every append, built once: building them per call (clauses, binds,
# coercions) cost about as much CPU as running them on SQLite. Values travel as binds.
_FENCE_ROW = schema.leader_fence.c.id == schema.FENCE_ROW
_RAISE_FENCE = (
    sa.update(schema.leader_fence)
    .where(_FENCE_ROW, schema.leader_fence.c.epoch < sa.bindparam("new_epoch"))
    .values(epoch=sa.bindparam("new_epoch"))
)
_FENCE_EPOCH = sa.select(schema.leader_fence.c.epoch).where(_FENCE_ROW)
# FOR SHARE: a takeover's UPDATE now waits until this transaction ends.
_SEEN_FENCE = _FENCE_EPOCH.with_for_update(read=True)
_WRITABLE_HEAD = (
    sa.select(schema.streams.c.deleted_at)
    .join(
        schema.events,
        sa.and_(
            schema.events.c.stream_uid == schema.streams.c.uid,
            schema.events.c.version == sa.bindparam("expected"),
        ),
    )
    .where(schema.streams.c.uid == sa.bindparam("uid"))
    # FOR SHARE OF streams: a concurrent mark_deleted waits until this append ends.
    .with_for_update(read=True, of=schema.streams)
)
_HEAD = sa.select(sa.func.coalesce(sa.func.max(schema.events.c.version), 0)).where(
    schema.events.c.stream_uid == sa.bindparam("uid")
)
_EXISTS = sa.select(schema.streams.c.uid).where(schema.streams.c.uid == sa.bindparam("uid"))


def _fence(conn: Connection, epoch: int, *, raised: bool = False) -> int:
    """Advance the fence to `epoch` if newer; refuse if it has seen a newer one.

    `raised`: the fence was seen at `epoch` or above before, so it is not raised first;
    should it be lower after all (a store reset under a running process), it is raised
    now, in the same transaction."""
    if not raised:
        conn.execute(_RAISE_FENCE, {"new_epoch": epoch})
    seen = int(conn.execute(_SEEN_FENCE).scalar_one())
    if seen > epoch:
        raise StaleEpoch(epoch, seen)
    if seen < epoch:
        conn.execute(_RAISE_FENCE, {"new_epoch": epoch})
    return epoch


def _check_writable_head(conn: Connection, uid: str, expected: int) -> None:
    """The version `expected` exists (no gap) and the stream takes events."""
    found = conn.execute(_WRITABLE_HEAD, {"uid": uid, "expected": expected}).first()
    if found is None:
        raise StreamConflict(uid, expected, _head(conn, uid))
    if found.deleted_at is not None:
        raise StreamDeleted(uid)


def _head(conn: Connection, uid: str) -> int:
    return int(conn.execute(_HEAD, {"uid": uid}).scalar_one())


def _exists(conn: Connection, uid: str) -> bool:
    return conn.execute(_EXISTS, {"uid": uid}).first() is not None


def _dialect_insert(dialect: str, table: sa.Table) -> Any:
    """The dialect's own INSERT of `table` (for ON CONFLICT), for an engine's dialect name.

    Imported on the write paths only: the PostgreSQL dialect package costs an audit command
    on SQLite a visible part of its start-up (the engine imports the dialect it uses anyway).
    """
    module = "postgresql" if dialect == "postgresql" else "sqlite"
    return importlib.import_module(f"sqlalchemy.dialects.{module}").insert(table)


@functools.cache
def _upsert_latest(dialect: str, table: sa.Table, column: str) -> Any:
    """INSERT of a (stream_uid, version, column) row that replaces an older version's,
    built once per table (the values travel as parameters)."""
    stmt = _dialect_insert(dialect, table)
    upsert = stmt.on_conflict_do_update(
        index_elements=[table.c.stream_uid],
        set_={"version": stmt.excluded.version, column: stmt.excluded[column]},
        where=table.c.version <= stmt.excluded.version,
    )
    # RETURNING rather than rowcount: drivers disagree on the count of an upsert.
    return upsert.returning(table.c.version)


@functools.cache
def _insert_absent_types(dialect: str) -> Any:
    """INSERT of (type, schema_version) rows that skips the pairs already there."""
    stmt = _dialect_insert(dialect, schema.event_types)
    return stmt.on_conflict_do_nothing(
        index_elements=[schema.event_types.c.type, schema.event_types.c.schema_version]
    )


# The columns of an event row in the order `_recorded` unpacks them.
_ENVELOPE = (
    schema.events.c.position,
    schema.events.c.stream_uid,
    schema.events.c.version,
    schema.events.c.event_id,
    schema.events.c.type,
    schema.events.c.schema_version,
    schema.events.c.recorded_at,
    schema.events.c.leader_epoch,
    schema.events.c.payload,
)


def _recorded(row: Sequence[Any]) -> RecordedEvent:
    # Unpacked, not read by name: a replay does this for every event of the log.
    position, uid, version, event_id, type_name, schema_version, recorded_at, epoch, payload = row
    return RecordedEvent(
        position=int(position),
        stream_uid=uid,
        version=int(version),
        event_id=event_id,
        type_name=type_name,
        schema_version=int(schema_version),
        recorded_at=recorded_at,
        epoch=int(epoch),
        event=codec.decode(type_name, schema_version, payload, uid=uid, version=version),
    )
