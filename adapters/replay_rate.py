"""How fast the event log replays: decode + upcast + fold of every stream, beside a raw
msgpack decode of the same payloads in the same run (issue #11: replay should reach a
third of the raw rate).

`ai-inference bench` (its replay phase) and `benchmarks/replay.py` both call `measure`,
so the figure either prints is the one path the audit CLI's `verify` also takes.
"""

from __future__ import annotations

import math
import sqlite3
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgpack

import store
from fsm import fold
from store import codec

__all__ = ["measure"]


def measure(store_url: str) -> dict[str, Any]:
    """Replay every stream of the SQLite log at `store_url`; rates in events a second.

    Beside the raw msgpack decode (the goal's yardstick) it gives the rate of decoding
    alone (msgpack, upcast, pydantic validation: what no replay can skip), so
    `decode_to_raw` is the most `replay_to_raw` could reach with a free query and fold.
    The two decodes are short, so each is the best of three runs; the replay runs once;
    one order's history is the median of five reads.
    """
    path = store_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        rows = list(connection.execute("SELECT type, schema_version, payload FROM events"))

    def unpack() -> None:
        for _type, _version, payload in rows:
            msgpack.unpackb(payload)

    def decode() -> None:
        for type_name, version, payload in rows:
            codec.decode(type_name, version, payload)

    raw, decoded = _best(unpack), _best(decode)
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
        history, timings = 0, []
        for _ in range(5 if one else 0):  # one read is a single cold sample: the median
            started = time.perf_counter()
            history = len(log.read(one))
            timings.append(time.perf_counter() - started)
        one_order = statistics.median(timings) if timings else 0.0
    finally:
        log.close()
    raw_rate = _rate(len(rows), raw)
    decode_rate = _rate(len(rows), decoded)
    replay_rate = _rate(replayed, folded)
    return {
        "events": len(rows),
        "raw_decode_per_s": round(raw_rate),
        "decode_per_s": round(decode_rate),
        "replay_per_s": round(replay_rate),
        "replay_to_raw": round(replay_rate / raw_rate, 3) if raw_rate else None,
        "decode_to_raw": round(decode_rate / raw_rate, 3) if raw_rate else None,
        "one_history_events": history,
        "one_history_ms": round(one_order * 1000, 2),
    }


def _best(run: Callable[[], None], times: int = 3) -> float:
    took = []
    for _ in range(times):
        started = time.perf_counter()
        run()
        took.append(time.perf_counter() - started)
    return min(took)


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds else math.inf
