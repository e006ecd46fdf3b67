"""Engines for the two supported databases, configured the way the recorder relies on.

SQLite (the default, one file): WAL so readers never block the writer, foreign keys on,
a busy timeout so concurrent writers wait instead of failing, and real transactions —
pysqlite's own transaction handling is switched off (it neither begins a transaction
before a SELECT or DDL nor lets us choose `BEGIN IMMEDIATE`), and every SQLAlchemy
transaction emits its own BEGIN. A connection tagged `write=True` begins with
`BEGIN IMMEDIATE`, taking the single write lock up front: an append or a migration then
never has to upgrade a read lock, which SQLite can only answer with SQLITE_BUSY.

PostgreSQL (production) through psycopg 3; `postgresql://` URLs are given that driver.
No wait on the server is unbounded (`POSTGRES_DEFAULTS`, each overridable in the URL): a
connection attempt, a silent peer (TCP keepalives and a user timeout, so a partitioned
server is an error in seconds, not the kernel's quarter of an hour), a lock (a new
leader's fence update queued behind a frozen old leader's append waited for hours), and a
transaction left open by a client that stopped (the server ends it, and its locks).

Both databases' failures are told apart here (`passing`): an outage that a later attempt
may not meet, or an answer that will be the same next time (a table missing, a permission
denied, a corrupt file). The log raises the first as StoreUnavailable, the second as
StoreUnusable.
"""

from __future__ import annotations

import re
import sqlite3
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError

__all__ = ["BUSY_TIMEOUT_MS", "WRITE", "create_engine", "described", "normalise_url", "passing"]

BUSY_TIMEOUT_MS = 10_000
# libpq connection parameters, for those the URL does not set.
POSTGRES_DEFAULTS = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}
# Server settings of each session, added to the URL's `options` unless it sets them: a
# lock waited for as long as SQLite's busy timeout, and a transaction idle for a minute
# ended (a read of the whole log fetches its batches far more often than that).
POSTGRES_SESSION = {
    "lock_timeout": str(BUSY_TIMEOUT_MS),
    "idle_in_transaction_session_timeout": "60000",
}
PAGE_CACHE_KIB = 512  # per SQLite connection

# Execution option that marks a connection whose transactions will write.
WRITE = "ai_inference_write"

# PostgreSQL's failures that a later attempt may not meet, by SQLSTATE class (its first
# two characters): the connection (08), a transaction rolled back for a concurrent one
# (40), the server short of resources (53), a lock not granted in time (55), the server
# shutting down, starting or cancelling a statement (57), its I/O (58). And two codes of
# class 25: a write refused by a read-only node (a standby, or a primary being failed
# over; the connection is dropped, so the next attempt connects again) and a session the
# server ended for idling in a transaction. Every other code answers what was asked and
# will answer it so again: a table missing or a permission denied (42), corrupt data (XX).
_PG_PASSING_CLASSES = frozenset({"08", "40", "53", "55", "57", "58"})
_PG_READ_ONLY = "25006"
_PG_PASSING_CODES = frozenset({_PG_READ_ONLY, "25P03"})
# SQLite's primary result codes of the same kind (extended codes share their prefix):
# not SQLITE_ERROR (no such table), READONLY (a file or mount we may not write), CORRUPT
# or NOTADB.
_SQLITE_PASSING = frozenset(
    {"BUSY", "LOCKED", "NOMEM", "INTERRUPT", "IOERR", "FULL", "CANTOPEN", "PROTOCOL"}
)


def normalise_url(url: str | URL) -> URL:
    """Parse a database URL; plain `postgresql://` means psycopg 3 (the one driver we ship).

    Raises ValueError for anything that is not a URL of a log we can open; make_url raises
    ArgumentError for what it cannot parse, and int()'s ValueError for a port."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ValueError(f"not a database URL ({exc})") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValueError(
            f"unsupported database {parsed.get_backend_name()!r}: use sqlite or postgresql"
        )
    if parsed.drivername not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
        raise ValueError(
            f"unsupported driver {parsed.drivername!r}: use sqlite:/// or postgresql:// "
            f"(psycopg 3, the one shipped)"
        )
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        # Each pooled connection would be a database of its own, empty to the others.
        raise ValueError("an in-memory SQLite log is not shared between connections: name a file")
    return parsed


def create_engine(url: str | URL, *, read_only: bool = False) -> Engine:
    """An engine for `url` with the pragmas/options the event log needs.

    `read_only`: every connection refuses writes, and on SQLite the journal mode is left
    as the writer set it (switching it is a write).
    """
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(parsed)
        _configure_sqlite(engine, read_only=read_only)
        return engine
    # pre_ping: a controller outlives database restarts; a dead pooled connection is
    # replaced instead of failing the next append. READ COMMITTED whatever the server's
    # default: the fence's locks are built for it, and under a SERIALIZABLE default most
    # concurrent appends failed with a serialization failure, taken for an outage.
    engine = sa.create_engine(
        parsed,
        pool_pre_ping=True,
        isolation_level="READ COMMITTED",
        connect_args=_postgres_connect_args(parsed),
    )
    if read_only:

        @sa.event.listens_for(engine, "connect")
        def _read_only(dbapi_connection: Any, _record: Any) -> None:
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            dbapi_connection.commit()

    else:

        @sa.event.listens_for(engine, "handle_error")
        def _read_only_node(context: sa.engine.ExceptionContext) -> None:
            # A node that refused a write (a standby; the old primary of a fail-over) keeps
            # refusing it on this connection, and the pool's ping does not tell: drop the
            # pool's connections, so the next attempt reaches the node the URL names now.
            if getattr(context.original_exception, "sqlstate", None) == _PG_READ_ONLY:
                context.is_disconnect = True

    return engine


def passing(exc: sa.exc.SQLAlchemyError) -> bool:
    """Whether `exc` is an outage a later attempt may not meet (the database away, busy,
    locked, failing over), rather than an answer retrying cannot change."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    orig = getattr(exc, "orig", None)
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate[:2] in _PG_PASSING_CLASSES or sqlstate in _PG_PASSING_CODES
    name = getattr(orig, "sqlite_errorname", None)
    if isinstance(name, str):
        return name.removeprefix("SQLITE_").split("_")[0] in _SQLITE_PASSING
    # No code from a server: the driver or the pool did not reach one (refused, timed out).
    return isinstance(
        exc,
        sa.exc.OperationalError
        | sa.exc.InterfaceError
        | sa.exc.TimeoutError
        | sa.exc.DisconnectionError,
    )


def described(exc: sa.exc.SQLAlchemyError) -> str:
    """What the database said, with its code: without SQLAlchemy's statement and its
    parameters (an event's payload), which say nothing of what went wrong."""
    orig = getattr(exc, "orig", None)
    if orig is None:
        return str(exc.args[0]) if exc.args else type(exc).__name__
    primary = getattr(getattr(orig, "diag", None), "message_primary", None)
    said = str(primary or orig).strip() or type(orig).__name__
    sqlstate = getattr(orig, "sqlstate", None)
    code = f"SQLSTATE {sqlstate}" if sqlstate else getattr(orig, "sqlite_errorname", None)
    return f"{said} ({code})" if code else said


def _postgres_connect_args(url: URL) -> dict[str, str]:
    """POSTGRES_DEFAULTS the URL does not set, and its `options` with POSTGRES_SESSION's
    settings it does not name (a search_path in the URL keeps the timeouts)."""
    args = {k: v for k, v in POSTGRES_DEFAULTS.items() if k not in url.query}
    given = url.query.get("options", "")
    options = " ".join(given) if isinstance(given, tuple) else given
    named = _setting_names(options)
    added = [f"-c {k}={v}" for k, v in POSTGRES_SESSION.items() if k not in named]
    if added:
        args["options"] = " ".join(filter(None, [options, *added]))
    return args


# A word of libpq's `options`: spaces separate words unless escaped with a backslash.
_OPTION_WORD = re.compile(r"(?:\\.|[^\s\\])+")


def _setting_names(options: str) -> set[str]:
    """The server settings `options` names (`-c name=value`, `-cname=value`,
    `--name=value`), spelt as the server reads them: lower case, `-` as `_`. Not a
    substring test: `deadlock_timeout` holds `lock_timeout`, and hid its default."""
    names: set[str] = set()
    words = iter(_OPTION_WORD.findall(options))
    for word in words:
        if word == "-c":
            setting = next(words, "")
        elif word.startswith(("--", "-c")):
            setting = word[2:]
        else:
            continue  # another switch, or its argument
        names.add(setting.partition("=")[0].strip().lower().replace("-", "_"))
    return names


def _configure_sqlite(engine: Engine, *, read_only: bool = False) -> None:
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # None = the driver issues no BEGIN/COMMIT of its own; SQLAlchemy's begin does.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            if read_only:
                cursor.execute("PRAGMA query_only=ON")
            else:
                _use_wal(cursor)
                # FULL: a committed append survives a power loss or an OS crash too, not
                # only a crash of the process. NORMAL may lose the last commits then, and
                # the log would say less than the controller had done after appending.
                # One fsync per commit: 0.18 ms against 0.04 ms on this project's machines.
                cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute("PRAGMA foreign_keys=ON")
            # Each pooled connection keeps its own page cache (2 MB by default), and a
            # controller's few connections filled theirs as the log grew: ~10 MB of its
            # memory at 500 orders. The controller reads the log rarely (it keeps the
            # folded states) and the operating system caches the file for everyone.
            cursor.execute(f"PRAGMA cache_size=-{PAGE_CACHE_KIB}")
        finally:
            cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(WRITE):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


def _use_wal(cursor: Any) -> None:
    """Switch the file to WAL, once in its life (the mode is kept in the file).

    The switch needs the file to itself, and SQLite refuses it at once, busy timeout or
    not, while another connection holds the file: controllers starting together on a new
    log did ("database is locked"). So only a file not in WAL yet is switched, and a
    refused switch is tried again until the busy timeout has passed.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            if cursor.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal":
                return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError("database is locked: cannot switch it to WAL")
        time.sleep(0.01)
