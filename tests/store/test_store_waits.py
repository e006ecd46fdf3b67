"""No wait on the log is unbounded, and a log that cannot be one says so (store/connecting.py).

On PostgreSQL a new leader's fence update queued behind a stalled old leader's append, and
a server that stopped answering mid-connection, each held the controller for hours (the
TCP keepalive's default) with no error for the log gate to act on. Here: the session
settings every connection gets, a lock held by a stalled writer failing a take-over
quickly, and a server that accepts and never answers failing the connection.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import store
from store import connecting


def _show(url: str, setting: str) -> str:
    engine = connecting.create_engine(url)
    try:
        with engine.connect() as conn:
            return str(conn.exec_driver_sql(f"SHOW {setting}").scalar())
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_every_session_bounds_its_lock_waits_and_idle_transactions(postgres_url: str) -> None:
    # The fixture's URL sets options (a search_path): the timeouts are added to them.
    assert "search_path" in postgres_url
    assert _show(postgres_url, "lock_timeout") == "10s"
    assert _show(postgres_url, "idle_in_transaction_session_timeout") == "1min"
    assert _show(postgres_url, "search_path").startswith("t_")


@pytest.mark.postgres
def test_a_setting_the_url_names_wins(postgres_url: str) -> None:
    url = postgres_url.replace("?options=", "?options=-clock_timeout%3D250%20")
    assert _show(url, "lock_timeout") == "250ms"
    assert _show(url, "idle_in_transaction_session_timeout") == "1min"


@pytest.mark.postgres
def test_a_setting_whose_name_holds_a_default_s_name_keeps_that_default(postgres_url: str) -> None:
    # `deadlock_timeout` holds `lock_timeout`: a substring test took the one for the other.
    url = postgres_url.replace("?options=", "?options=-c%20deadlock_timeout%3D2s%20")
    assert _show(url, "deadlock_timeout") == "2s"
    assert _show(url, "lock_timeout") == "10s"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ("-c lock_timeout=1s", True),
        ("-clock_timeout=1s", True),
        ("--lock-timeout=1s", True),
        ("-c LOCK_TIMEOUT=1s", True),
        ("-c search_path=a\\ b -c lock_timeout=1s", True),
        ("-c deadlock_timeout=1s", False),
        ("-c search_path=lock_timeout", False),
        ("-c application_name=lock_timeout\\ 1", False),
    ],
)
def test_the_url_s_options_are_read_by_setting_name(options: str, named: bool) -> None:
    url = sa.engine.URL.create(
        "postgresql+psycopg", host="127.0.0.1", database="x", query={"options": options}
    )
    sent = connecting._postgres_connect_args(url)["options"]
    assert sent.startswith(options)
    default = f"-c lock_timeout={connecting.POSTGRES_SESSION['lock_timeout']}"
    assert (default not in sent) is named
    assert "-c idle_in_transaction_session_timeout=" in sent  # not named: always added


@pytest.mark.postgres
def test_the_connection_parameters_bound_a_silent_server(postgres_url: str) -> None:
    engine = connecting.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            params = conn.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
    finally:
        engine.dispose()
    for name, value in connecting.POSTGRES_DEFAULTS.items():
        assert params.get(name) == value, name


@pytest.mark.postgres
def test_a_take_over_behind_a_stalled_append_fails_instead_of_waiting(postgres_url: str) -> None:
    log = store.open_log(postgres_url)
    try:
        log.claim_epoch(1)
        # The old leader froze inside an append: its share lock on the fence stays.
        stalled = sa.create_engine(postgres_url)
        with stalled.connect() as conn, conn.begin():
            conn.exec_driver_sql("SELECT * FROM leader_fence FOR SHARE").all()
            started = time.monotonic()
            with pytest.raises(store.StoreUnavailable, match="lock"):
                log.claim_epoch(2)
            assert time.monotonic() - started < 3 * connecting.BUSY_TIMEOUT_MS / 1000
        stalled.dispose()
        assert log.claim_epoch(2) == 2  # the lock gone, the take-over goes through
    finally:
        log.close()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_server_that_never_answers_is_unreachable_not_a_hang(silent_server: int) -> None:
    url = f"postgresql://postgres@127.0.0.1:{silent_server}/x?connect_timeout=1"
    started = time.monotonic()
    with pytest.raises(store.StoreUnavailable):
        store.open_log(url)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql+psycopg2://postgres@127.0.0.1/x", "psycopg2"),
        ("postgresql+asyncpg://postgres@127.0.0.1/x", "asyncpg"),
        ("sqlite://", "in-memory"),
        ("sqlite:///:memory:", "in-memory"),
        ("mysql://root@127.0.0.1/x", "mysql"),
        ("://x", "not a database URL"),
        ("postgresql://u@h:54x/x", "not a database URL"),
    ],
)
def test_a_url_no_shipped_driver_serves_is_refused_by_name(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        store.open_log(url)


def test_a_file_that_is_no_database_is_not_an_outage(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database, only words\n" * 100)
    with pytest.raises(store.SchemaError):
        store.open_log(f"sqlite:///{path}")


@pytest.mark.postgres
def test_a_table_of_another_application_is_not_an_outage(postgres_url: str) -> None:
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE events (id integer)")
    engine.dispose()
    with pytest.raises(store.SchemaError):
        store.open_log(postgres_url)
