"""One order's history among many events (`bench --large-log EVENTS`).

The run's streams are copied under new UIDs until the log holds the events asked for, in
SQLite and in PostgreSQL (127.0.0.1:5432, a database made and dropped here, when the
driver and the server are there); then one order's history is read among them.
"""

from __future__ import annotations

import math
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import store
from store import schema

__all__ = ["measure"]


def measure(store_url: str, workdir: Path, events: int) -> dict[str, Any]:
    """The run's streams copied under new UIDs until the log holds `events` events, in
    SQLite and in PostgreSQL (127.0.0.1:5432, a database made and dropped here); then
    one order's history read among them."""
    source = sa.create_engine(store_url)
    with source.connect() as conn:
        stream_rows = [dict(r._mapping) for r in conn.execute(sa.select(schema.streams))]
        event_rows = [dict(r._mapping) for r in conn.execute(sa.select(schema.events))]
        type_rows = [dict(r._mapping) for r in conn.execute(sa.select(schema.event_types))]
    source.dispose()
    if not event_rows:
        return {}
    by_stream: dict[str, list[dict[str, Any]]] = {}
    for row in event_rows:
        row.pop("position", None)
        by_stream.setdefault(row["stream_uid"], []).append(row)
    out: dict[str, Any] = {"events": events}
    for backend, url, drop in _backends(workdir):
        try:
            out[backend] = _fill_and_read(url, stream_rows, type_rows, by_stream, events)
        finally:
            drop()
    return out


def _backends(workdir: Path) -> list[tuple[str, str, Callable[[], None]]]:
    path = workdir / "large.sqlite"
    path.unlink(missing_ok=True)
    backends = [("sqlite", f"sqlite:///{path}", lambda: path.unlink(missing_ok=True))]
    try:
        import psycopg  # noqa: PLC0415 - the dev extra; only this figure needs it
    except ImportError:
        return backends
    name = f"ai_inference_bench_{uuid.uuid4().hex[:8]}"

    def admin(statement: str) -> None:
        with psycopg.connect(
            host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(statement)

    try:
        admin(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError:
        return backends  # no server here: SQLite only
    backends.append(
        (
            "postgresql",
            f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}",
            lambda: admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'),
        )
    )
    return backends


def _fill_and_read(
    url: str,
    stream_rows: list[dict[str, Any]],
    type_rows: list[dict[str, Any]],
    by_stream: dict[str, list[dict[str, Any]]],
    events: int,
) -> dict[str, Any]:
    store.open_log(url).close()  # migrated
    engine = sa.create_engine(url)
    per_copy = sum(len(v) for v in by_stream.values())
    copies = max(1, math.ceil(events / per_copy))
    started = time.perf_counter()
    middle = ""
    with engine.begin() as conn:
        if type_rows:  # the copies hold the same types: the log stays one a writer opens
            conn.execute(sa.insert(schema.event_types), type_rows)
        for copy_index in range(copies):
            streams, rows = [], []
            for stream in stream_rows:
                uid = f"{copy_index:07d}-{stream['uid']}"[:64]
                streams.append({**stream, "uid": uid})
                rows += [
                    {**r, "stream_uid": uid, "event_id": uuid.uuid4()}
                    for r in by_stream.get(stream["uid"], ())
                ]
                if copy_index == copies // 2 and not middle and by_stream.get(stream["uid"]):
                    middle = uid
            conn.execute(sa.insert(schema.streams), streams)
            conn.execute(sa.insert(schema.events), rows)
    filled = time.perf_counter() - started
    engine.dispose()
    log = store.open_log(url)
    try:
        log.read(f"{0:07d}-{stream_rows[0]['uid']}"[:64])  # connections and caches warm
        timings = []
        for _ in range(5):
            began = time.perf_counter()
            history = log.read(middle)
            timings.append(time.perf_counter() - began)
    finally:
        log.close()
    return {
        "filled_events": copies * per_copy,
        "fill_s": round(filled, 1),
        "one_history_events": len(history),
        "one_history_ms": round(statistics.median(timings) * 1000, 2),
    }
