"""SQLite connections as the event log opens them: WAL, commits synced to the disk, foreign
keys, and a bounded page cache on every pooled connection (a controller's few connections
kept 2 MB each by default, filled as the log grew: ~10 MB of its memory at 500 orders)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from store import connecting


def test_every_pooled_connection_has_the_log_pragmas(tmp_path: Path) -> None:
    engine = connecting.create_engine(f"sqlite:///{tmp_path / 'log.sqlite'}")
    try:
        with ExitStack() as stack:
            # Open at once, so the pool makes several: each gets the pragmas on connect.
            conns = [stack.enter_context(engine.connect()) for _ in range(3)]
            for conn in conns:
                pragma = conn.exec_driver_sql
                assert pragma("PRAGMA cache_size").scalar() == -connecting.PAGE_CACHE_KIB
                assert pragma("PRAGMA journal_mode").scalar() == "wal"
                assert pragma("PRAGMA foreign_keys").scalar() == 1
                assert pragma("PRAGMA synchronous").scalar() == 2  # FULL: power-loss safe
    finally:
        engine.dispose()
