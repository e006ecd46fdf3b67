"""Backends for the store's contract suite: every test taking `log_url` or `log` runs on a
fresh SQLite file and on a fresh database of the PostgreSQL server at 127.0.0.1:5432.

The session creates one PostgreSQL database with a random name and drops it afterwards;
each test gets a fresh schema in it. If the server is
not running, the session tries once to start the machine's cluster with `pg_ctlcluster`;
if that fails too, the PostgreSQL tests FAIL with the reason (they never skip: a suite that
silently tests one backend is not the contract suite).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import store

PG_HOST = os.environ.get("AI_INFERENCE_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("AI_INFERENCE_TEST_PG_PORT", "5432"))
PG_USER = "postgres"

_pg_checked: list[str] = []  # "" once the server answered, else the reason it did not


def admin_connection(dbname: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
    """The server's superuser on `dbname`, autocommitting: what tests make and drop
    databases, schemas and roles with."""
    return psycopg.connect(
        host=PG_HOST,
        port=PG_PORT,
        user=PG_USER,
        dbname=dbname,
        autocommit=True,
        connect_timeout=3,
    )


def _reachable() -> str:
    try:
        with admin_connection():
            return ""
    except psycopg.OperationalError as exc:
        return str(exc).strip()


def _start_cluster() -> str:
    try:
        versions = sorted(os.listdir("/etc/postgresql"))
    except OSError as exc:
        return f"no /etc/postgresql to start a cluster from: {exc}"
    if not versions:
        return "no PostgreSQL cluster configured under /etc/postgresql"
    command = ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "start"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(command)} failed: {exc}"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        return f"{' '.join(command)} exited {done.returncode}: {said}"
    return ""


def _ensure_server() -> None:
    if not _pg_checked:
        reason = _reachable()
        if reason:
            started = _start_cluster()
            deadline = time.monotonic() + 20
            while not started and _reachable() and time.monotonic() < deadline:
                time.sleep(0.3)
            reason = started or _reachable()
        _pg_checked.append(reason)
    if _pg_checked[0]:
        pytest.fail(
            f"PostgreSQL at {PG_HOST}:{PG_PORT} is needed by the store's contract suite and "
            f"could not be reached or started: {_pg_checked[0]}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A fresh database with a random name on the PostgreSQL server, dropped at the end."""
    _ensure_server()
    name = f"ai_inference_test_{uuid.uuid4().hex[:12]}"
    with admin_connection() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with admin_connection() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_url(postgres_database: str) -> str:
    """An empty schema of its own for each test, first on the connection's search_path.

    A schema per test isolates as well as a database per test (the log names no schema)
    at a fraction of CREATE DATABASE's cost; the session's database is dropped at the end.
    """
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with admin_connection(postgres_database) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return (
        f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/{postgres_database}"
        f"?options=-csearch_path%3D{schema}"
    )


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'log.sqlite'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def log_url(request: pytest.FixtureRequest) -> str:
    """The URL of an empty database of each backend in turn (not yet migrated)."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
def log(log_url: str) -> Iterator[store.EventLog]:
    """An open, migrated event log on each backend in turn."""
    opened = store.open_log(log_url)
    try:
        yield opened
    finally:
        opened.close()
