"""One order's history is found through indexes, never by scanning the log.

`ai-inference history NS/NAME` runs `find_stream` (namespace/name → uid, with the head
version) and `read` (the events of one uid, also up to a time): among a million events
a scan would take seconds. Every statement those calls send is EXPLAINed on both
backends (PostgreSQL with sequential scans discouraged, so a missing index shows as a
`Seq Scan` even on a small table) and must search the streams and events tables by index.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

import store
from tests.store.store_samples import at, things

KEY = store.StreamKey("uid-indexed", "support", "support-llm")


def _statements(log: store.EventLog, action: Any) -> list[tuple[str, Any]]:
    sent: list[tuple[str, Any]] = []

    def record(_conn, _cursor, statement, parameters, _context, _many) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            sent.append((statement, parameters))

    sa.event.listen(log.engine, "before_cursor_execute", record)
    try:
        action()
    finally:
        sa.event.remove(log.engine, "before_cursor_execute", record)
    return sent


def _plans(log: store.EventLog, statements: list[tuple[str, Any]]) -> list[str]:
    plans = []
    with log.engine.connect() as conn:
        raw = conn.connection.driver_connection
        cursor = raw.cursor()
        postgres = log.engine.dialect.name == "postgresql"
        if postgres:
            cursor.execute("SET enable_seqscan = off")
        for statement, parameters in statements:
            prefix = "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN "
            cursor.execute(prefix + statement, parameters)
            plans.append("\n".join(str(row) for row in cursor.fetchall()))
        cursor.close()
    return plans


def test_history_lookup_uses_indexes(log: store.EventLog) -> None:
    log.append(KEY, things(1, 2, 3), expected_version=0, epoch=1, recorded_at=at(0))
    other = store.StreamKey("uid-other", "support", "other")
    log.append(other, things(4), expected_version=0, epoch=1, recorded_at=at(1))

    def lookup() -> None:
        info = log.find_stream("support", "support-llm")
        assert info is not None and info.version == 3
        assert log.find_stream("support", "support-llm", at=at(0)) == info
        assert len(log.read(info.uid)) == 3
        assert len(log.read(info.uid, upto_time=at(0))) == 3

    statements = _statements(log, lookup)
    assert len(statements) >= 3
    for (statement, _), plan in zip(statements, _plans(log, statements), strict=True):
        for table in ("events", "streams"):
            assert f"Seq Scan on {table}" not in plan, (statement, plan)
            assert f"SCAN {table}" not in plan.replace(f"SCAN {table} USING", ""), (
                statement,
                plan,
            )
