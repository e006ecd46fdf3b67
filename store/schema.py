"""The tables of the event log, as SQLAlchemy Core metadata.

The schema itself is created only by the Alembic migrations in `migrations/`; this module
describes the same tables so the recorder can build queries, and a test compares the two
with Alembic's `compare_metadata` so they cannot drift apart. Constraint names come from
one naming convention, identical on SQLite and PostgreSQL.

    streams        one row per order UID (namespace/name kept for look-up; deleted_at
                   marks a deleted order whose history stays readable)
    events         the envelope: global position, (stream_uid, version) unique, event
                   UUID, type, schema version, recorded time, leader epoch, msgpack payload
    leader_fence   one row: the newest leader epoch any append or claim has carried
    snapshots      per stream, the folded state JSON and the version it covers
    projections    per stream, the status last written to the API and its version
    event_types    every (type, schema version) the events hold: what a release must
                   read before it may write (`EventLog.check_readable`)
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

__all__ = [
    "FENCE_ROW",
    "HEAD",
    "UtcDateTime",
    "event_types",
    "events",
    "leader_fence",
    "metadata",
    "projections",
    "snapshots",
    "streams",
]

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# The newest migration of migrations/versions: the revision this code reads and writes.
# A reader compares the database's recorded revision with it without loading Alembic; a
# test keeps it equal to Alembic's head.
HEAD = "0002"

# The id of the single row of leader_fence; the first migration inserts it with epoch 0.
FENCE_ROW = 1

metadata = sa.MetaData(naming_convention=NAMING)


class UtcDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware instant stored in UTC.

    PostgreSQL keeps `timestamptz`; SQLite keeps text without an offset, so every value is
    converted to UTC before it is written and comparisons in SQL stay correct. Naive
    datetimes are refused: a time without a zone is ambiguous history.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: the log stores aware instants only")
        utc = value.astimezone(UTC)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


streams = sa.Table(
    "streams",
    metadata,
    sa.Column("uid", sa.String(64), primary_key=True),
    sa.Column("namespace", sa.String(63), nullable=False),
    sa.Column("name", sa.String(253), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("deleted_at", UtcDateTime(), nullable=True),
    sa.Index(None, "namespace", "name"),
)

events = sa.Table(
    "events",
    metadata,
    # BIGINT on PostgreSQL (a sequence); INTEGER on SQLite, where only that exact type
    # makes the column the rowid and so auto-incrementing.
    sa.Column(
        "position",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    sa.Column("stream_uid", sa.String(64), sa.ForeignKey("streams.uid"), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("event_id", sa.Uuid(), nullable=False),
    sa.Column("type", sa.String(200), nullable=False),
    sa.Column("schema_version", sa.Integer(), nullable=False),
    sa.Column("recorded_at", UtcDateTime(), nullable=False),
    sa.Column("leader_epoch", sa.BigInteger(), nullable=False),
    sa.Column("payload", sa.LargeBinary(), nullable=False),
    # The concurrency control of the whole log: two writers of the same next version
    # cannot both commit.
    sa.UniqueConstraint("stream_uid", "version"),
    sa.UniqueConstraint("event_id"),
)

leader_fence = sa.Table(
    "leader_fence",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("epoch", sa.BigInteger(), nullable=False),
)

snapshots = sa.Table(
    "snapshots",
    metadata,
    sa.Column("stream_uid", sa.String(64), sa.ForeignKey("streams.uid"), primary_key=True),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("state", sa.JSON(), nullable=False),
)

projections = sa.Table(
    "projections",
    metadata,
    sa.Column("stream_uid", sa.String(64), sa.ForeignKey("streams.uid"), primary_key=True),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("status", sa.JSON(), nullable=False),
)

event_types = sa.Table(
    "event_types",
    metadata,
    sa.Column("type", sa.String(200), primary_key=True),
    sa.Column("schema_version", sa.Integer(), primary_key=True),
)
