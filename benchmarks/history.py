"""Benchmark: one order's history among a million events costs what it costs among none.

`ai-inference history NS/NAME` finds the stream by (namespace, name) and reads it by
(stream uid, version): both by index (tests/store/test_store_indexes.py checks the
plans). This measures it end to end, as an administrator runs it: the same command,
same order, against a log holding only that order and against one where it is buried
among `--events` others (SQLite). It prints both medians, their difference and ratio,
and exits 1 when the difference exceeds the floor (default 20 ms): a scan would cost
seconds.

    .venv/bin/python benchmarks/history.py                 # 1,000,000 events
    .venv/bin/python benchmarks/history.py --events 200000 --floor-ms 20

Filling a million rows takes a minute or two on 2 cores; the log is written to a
temporary folder and removed afterwards (`--keep` keeps it).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import store  # noqa: E402 - after the path set-up, so a checkout runs without installing
from store import schema  # noqa: E402
from tests.adapters.cli.test_audit_cli import _write_life  # noqa: E402 - a real order's life

ORDER = "support/support-llm"
STREAM_EVENTS = 100  # events per filler stream


def _fill(url: str, total: int) -> None:
    """Bury the order among `total` events of other streams (copies of its own events)."""
    with store.open_log(url) as log:
        _write_life(log)
        with log.engine.connect() as conn:
            template = [dict(r._mapping) for r in conn.execute(sa.select(schema.events))]
        written = 0
        started = time.monotonic()
        while written < total:
            streams, rows = [], []
            for _ in range(min(100, (total - written) // STREAM_EVENTS + 1)):
                uid = str(uuid.uuid4())
                created = template[0]["recorded_at"]
                streams.append(
                    {"uid": uid, "namespace": "bench", "name": uid[:8], "created_at": created}
                )
                for version in range(1, STREAM_EVENTS + 1):
                    row = dict(template[(version - 1) % len(template)])
                    row.pop("position")
                    row.update(stream_uid=uid, version=version, event_id=uuid.uuid4())
                    rows.append(row)
            with log.engine.begin() as conn:
                conn.execute(sa.insert(schema.streams), streams)
                conn.execute(sa.insert(schema.events), rows)
            written += len(rows)
            sys.stderr.write(f"\rfilling: {written:,}/{total:,} events")
        sys.stderr.write(f" in {time.monotonic() - started:.0f}s\n")


def _median_run(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--floor-ms", type=float, default=20.0)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="bench-history-"))
    try:
        alone, crowded = folder / "alone.sqlite", folder / "crowded.sqlite"
        with store.open_log(f"sqlite:///{alone}") as log:
            _write_life(log)
        _fill(f"sqlite:///{crowded}", args.events)
        cli = [sys.executable, "-m", "adapters.cli.main", "history", ORDER, "--store"]
        small = _median_run([*cli, str(alone)], args.runs)
        large = _median_run([*cli, str(crowded)], args.runs)
        extra_ms = (large - small) * 1000
        sys.stdout.write(
            f"history among 0 others: {small * 1000:.0f} ms; among {args.events:,} events: "
            f"{large * 1000:.0f} ms; difference {extra_ms:+.1f} ms (floor {args.floor_ms:.0f} "
            f"ms), ratio {large / small:.3f}\n"
        )
        return 0 if extra_ms <= args.floor_ms else 1
    finally:
        if args.keep:
            sys.stdout.write(f"logs kept in {folder}\n")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
