"""Every failure of the database reaches the log's callers as a store error, of the kind
that says what to do: StoreUnavailable (wait it out) or StoreUnusable (retrying will not
help). Before, a permission denied, a corrupt file or a read-only node escaped as the
driver's own exception, and the controller's log gate, which waits for StoreError only,
died of it; a table gone on SQLite was "unavailable" and waited for ever.
"""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg.errors
import pytest
import sqlalchemy as sa

import store
from store import connecting
from tests.store.conftest import admin_connection
from tests.store.store_samples import at, things

KEY = store.StreamKey("7f0c1d2e-0000-4000-8000-0000000000f1", "support", "support-llm")


def test_a_table_gone_is_unusable_not_an_outage(log: store.EventLog) -> None:
    log.append(KEY, things(1), 0, 1, at(0))
    with log.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE leader_fence")
    with pytest.raises(store.StoreUnusable, match="leader_fence") as gone:
        log.epoch()
    assert not isinstance(gone.value, store.StoreUnavailable)
    assert isinstance(gone.value.__cause__, sa.exc.SQLAlchemyError)  # kept for the logs
    assert "[SQL:" not in str(gone.value)  # the database's words, not the statement


def test_a_corrupt_sqlite_file_is_unusable(sqlite_url: str, tmp_path: Path) -> None:
    with store.open_log(sqlite_url) as log:
        log.append(KEY, things(1, 2, 3), 0, 1, at(0))
    path = tmp_path / "log.sqlite"
    data = bytearray(path.read_bytes())
    # The header's magic kept (it is still a database), every page after it garbage.
    data[100:] = b"\x13" * (len(data) - 100)
    path.write_bytes(bytes(data))
    with (
        store.EventLog(connecting.create_engine(sqlite_url)) as log,
        pytest.raises(store.StoreUnusable, match="malformed"),
    ):
        log.read(KEY.uid)


def _search_path(url: str) -> str:
    found = re.search(r"search_path%3D([a-z0-9_]+)", url)
    assert found, url
    return found.group(1)


@pytest.fixture
def reader_role(postgres_url: str) -> Iterator[str]:
    """A role that may read the log's schema revision and nothing else of it."""
    store.open_log(postgres_url).close()  # migrated by the owner
    role = f"reader_{uuid.uuid4().hex[:8]}"
    schema = _search_path(postgres_url)
    admin = sa.create_engine(postgres_url)
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"CREATE ROLE {role} LOGIN")
            conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            conn.exec_driver_sql(f"GRANT SELECT ON alembic_version TO {role}")
        yield role
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP OWNED BY {role}")
            conn.exec_driver_sql(f"DROP ROLE {role}")
        admin.dispose()


@pytest.mark.postgres
def test_a_permission_denied_is_unusable(postgres_url: str, reader_role: str) -> None:
    url = postgres_url.replace("://postgres@", f"://{reader_role}@")
    with (
        store.EventLog(connecting.create_engine(url)) as log,
        pytest.raises(store.StoreUnusable, match=r"permission denied .*\(SQLSTATE 42501\)"),
    ):
        log.epoch()


def _pooled_connection_read_only(log: store.EventLog) -> None:
    """The log at epoch 1, its pool's one connection refusing writes, as one to a primary
    that a fail-over turned into a standby does; a new connection reaches a writable node."""
    log.claim_epoch(1)
    log.engine.dispose()
    with log.engine.connect() as conn:
        conn.exec_driver_sql("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        conn.commit()


@pytest.mark.postgres
def test_a_read_only_node_is_unavailable_and_the_next_attempt_connects_again(
    postgres_url: str,
) -> None:
    with store.open_log(postgres_url) as log:
        _pooled_connection_read_only(log)
        with pytest.raises(store.StoreUnavailable, match=r"read-only .*\(SQLSTATE 25006\)"):
            log.claim_epoch(2)
        assert log.claim_epoch(2) == 2


@pytest.mark.postgres
def test_the_writable_probe_finds_a_read_only_node_a_plain_read_does_not(
    postgres_url: str,
) -> None:
    """The log gate's probe: a node that answers reads but takes no writes (a standby)
    opened the gate to every parked order twice a second while every append failed."""
    with store.open_log(postgres_url) as log:
        _pooled_connection_read_only(log)
        assert log.epoch() == 1  # a plain read answers...
        with pytest.raises(store.StoreUnavailable, match=r"SQLSTATE 25006"):
            log.writable_epoch()  # ...the probe as an append would does not
        assert log.writable_epoch() == 1  # a new connection reaches a writable node


@pytest.mark.parametrize("table", ["events", "streams", "event_types", "projections", "snapshots"])
def test_the_writable_probe_rehearses_an_append_and_writes_nothing(
    log: store.EventLog, table: str
) -> None:
    """The probe (the gate's, the elector's, the one after a pass met StoreUnusable)
    inserts a stream and an event and rolls them back: a table an append needs gone, or
    its insert privilege revoked, is StoreUnusable there, where a read of the fence alone
    answered and the gate opened to passes that all failed."""
    log.append(KEY, things(1), 0, 1, at(0))
    before = (log.streams(), log.read(KEY.uid), log.event_types())
    assert log.writable_epoch() == 1
    assert (log.streams(), log.read(KEY.uid), log.event_types()) == before  # nothing kept
    assert log.append(KEY, things(2), 1, 1, at(1)) == 2  # the stream goes on
    with log.engine.begin() as conn:  # gone, as far as the log can tell
        conn.exec_driver_sql(f"ALTER TABLE {table} RENAME TO {table}_gone")
    assert log.epoch() == 1  # the fence still answers
    with pytest.raises(store.StoreUnusable, match=table):
        log.writable_epoch()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("revoked", "on"),
    [
        ("INSERT", "events"),
        ("UPDATE", "projections"),
        ("UPDATE", "snapshots"),
        ("UPDATE", "streams"),
    ],
)
def test_the_writable_probe_meets_a_privilege_a_pass_needs_revoked(
    postgres_database: str, revoked: str, on: str
) -> None:
    """A pass's status and fold are upserts (INSERT … ON CONFLICT DO UPDATE, which needs
    UPDATE), its order's deletion an UPDATE: a privilege revoked on any of them failed
    every pass while the probe, rehearsing only the append, passed."""
    role, schema_name = f"r_{uuid.uuid4().hex[:10]}", f"s_{uuid.uuid4().hex[:10]}"
    with admin_connection(postgres_database) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'CREATE SCHEMA "{schema_name}" AUTHORIZATION "{role}"')
    url = (
        f"postgresql+psycopg://{role}@127.0.0.1:5432/{postgres_database}"
        f"?options=-csearch_path%3D{schema_name}"
    )
    try:
        with store.open_log(url) as log:
            assert log.writable_epoch() == 0
            with admin_connection(postgres_database) as admin:
                # The table a DBA took over, granting back all but one privilege.
                admin.execute(f'ALTER TABLE "{schema_name}".{on} OWNER TO CURRENT_USER')
                admin.execute(f'GRANT ALL ON "{schema_name}".{on} TO "{role}"')
                admin.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA "{schema_name}" TO "{role}"')
                admin.execute(f'REVOKE {revoked} ON "{schema_name}".{on} FROM "{role}"')
            with pytest.raises(store.StoreUnusable, match="permission denied"):
                log.writable_epoch()
    finally:
        with admin_connection(postgres_database) as admin:
            admin.execute(f'DROP SCHEMA "{schema_name}" CASCADE')
            admin.execute(f'DROP ROLE "{role}"')


class _Sqlite(sqlite3.OperationalError):
    def __init__(self, name: str) -> None:
        super().__init__(name.lower())
        self.sqlite_errorname = name


@pytest.mark.parametrize(
    ("failure", "passing"),
    [
        # PostgreSQL, by SQLSTATE: what a later attempt may not meet...
        (sa.exc.OperationalError("", {}, psycopg.errors.lookup("08006")()), True),
        (sa.exc.OperationalError("", {}, psycopg.errors.lookup("40001")()), True),
        (sa.exc.OperationalError("", {}, psycopg.errors.lookup("53300")()), True),
        (sa.exc.OperationalError("", {}, psycopg.errors.lookup("55P03")()), True),
        (sa.exc.OperationalError("", {}, psycopg.errors.lookup("57P01")()), True),
        (sa.exc.InternalError("", {}, psycopg.errors.lookup("25006")()), True),
        (sa.exc.InternalError("", {}, psycopg.errors.lookup("25P03")()), True),
        # ...and what it will meet again.
        (sa.exc.ProgrammingError("", {}, psycopg.errors.lookup("42501")()), False),
        (sa.exc.ProgrammingError("", {}, psycopg.errors.lookup("42P01")()), False),
        (sa.exc.InternalError("", {}, psycopg.errors.lookup("XX001")()), False),
        (sa.exc.OperationalError("", {}, psycopg.errors.lookup("28P01")()), False),
        (sa.exc.DataError("", {}, psycopg.errors.lookup("22P02")()), False),
        # SQLite, by result code.
        (sa.exc.OperationalError("", {}, _Sqlite("SQLITE_BUSY")), True),
        (sa.exc.OperationalError("", {}, _Sqlite("SQLITE_IOERR_SHORT_READ")), True),
        (sa.exc.OperationalError("", {}, _Sqlite("SQLITE_ERROR")), False),
        (sa.exc.OperationalError("", {}, _Sqlite("SQLITE_READONLY")), False),
        (sa.exc.DatabaseError("", {}, _Sqlite("SQLITE_NOTADB")), False),
        # No code: the server not reached (refused, timed out), or no answer from it.
        (sa.exc.OperationalError("", {}, psycopg.OperationalError("refused")), True),
        (sa.exc.TimeoutError("the pool is exhausted"), True),
        (sa.exc.ProgrammingError("", {}, sqlite3.ProgrammingError("closed")), False),
        (sa.exc.NoResultFound("no fence row"), False),
    ],
    ids=lambda value: (
        (
            getattr(getattr(value, "orig", None), "sqlstate", None)
            or getattr(getattr(value, "orig", None), "sqlite_errorname", None)
            or type(getattr(value, "orig", None) or value).__name__
        )
        if not isinstance(value, bool)
        else str(value)
    ),
)
def test_what_a_later_attempt_may_not_meet(failure: sa.exc.SQLAlchemyError, passing: bool) -> None:
    assert connecting.passing(failure) is passing
