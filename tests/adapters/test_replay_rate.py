"""The replay figures (adapters/replay_rate.py) on the log benchmarks/replay.py builds."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import store
from adapters import replay_rate
from benchmarks import replay as bench
from fsm import events as ev
from fsm.fold import fold
from fsm.reasons import Phase


def test_the_benchmark_log_is_varied_and_replays_whole(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    events = bench.build(url, 20)
    with sqlite3.connect(tmp_path / "log.sqlite") as conn:
        rows = list(conn.execute("SELECT type, schema_version, payload FROM events"))
    assert len(rows) == events
    assert len({payload for _, _, payload in rows}) == events  # no two payloads alike
    assert any(v < ev.event_class(t).VERSION for t, v, _ in rows)  # upcasting is measured
    with store.open_log(url) as log:
        phases = {fold(r.event for r in records).phase for _, records in log.read_all()}
    assert phases == {Phase.READY}  # every order served, as in a bench run

    figures = replay_rate.measure(url)

    assert figures["events"] == events
    assert figures["one_history_events"] > 0
    for key in ("raw_decode_per_s", "decode_per_s", "replay_per_s"):
        assert figures[key] > 0
