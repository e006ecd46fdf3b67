"""How fast the event log replays: decode + upcast + fold of every stream, beside a raw
msgpack decode of the same payloads in the same run (issue #11: replay should reach a
third of the raw rate).

`ai-inference bench` (its replay phase) and `benchmarks/replay.py` both call `measure`,
so the figure either prints is the one path the audit CLI's `verify` also takes.
"""

from __future__ import annotations

import math
import sqlite3
import time
from typing import Any

import msgpack

import store
from fsm import fold

__all__ = ["measure"]


def measure(store_url: str) -> dict[str, Any]:
    """Replay every stream of the SQLite log at `store_url`; rates in events a second."""
    path = store_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        payloads = [row[0] for row in connection.execute("SELECT payload FROM events")]
    started = time.perf_counter()
    for payload in payloads:
        msgpack.unpackb(payload)
    raw = time.perf_counter() - started
    log = store.open_log(store_url)
    try:
        streams = log.streams()
        if streams:  # first use builds the models and the statement cache: untimed
            fold.fold([r.event for r in log.read(streams[0].uid)])
        started = time.perf_counter()
        replayed = 0
        for _uid, records in log.read_all():
            fold.fold([r.event for r in records])
            replayed += len(records)
        folded = time.perf_counter() - started
        one = streams[len(streams) // 2].uid if streams else ""
        started = time.perf_counter()
        history = len(log.read(one)) if one else 0
        one_order = time.perf_counter() - started
    finally:
        log.close()
    raw_rate = len(payloads) / raw if raw else math.inf
    replay_rate = replayed / folded if folded else math.inf
    return {
        "events": len(payloads),
        "raw_decode_per_s": round(raw_rate),
        "replay_per_s": round(replay_rate),
        "replay_to_raw": round(replay_rate / raw_rate, 3) if raw_rate else None,
        "one_history_events": history,
        "one_history_ms": round(one_order * 1000, 2),
    }
