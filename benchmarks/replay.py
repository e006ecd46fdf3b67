"""Replay rate without a cluster: a realistic log in a temporary SQLite file, replayed.

`ai-inference bench` measures replay on the log of a real run, which needs the local
control plane and minutes. This builds a log of the same shape in seconds and measures it
with the same function (`adapters.replay_rate.measure`), so a change to the store's read
path, the codec or the fold can be judged on its own. It prints one JSON line:
`raw_decode_per_s` (msgpack.unpackb over every payload), `replay_per_s` (decode + upcast +
fold of every stream) and `replay_to_raw`, the goal of issue #11 being >= 1/3.

The streams are the tests' own (tests/support/strategies.py, fed through `decide` as the
controller does): an order served (10 events), served then probed again, served then
edited into a failed replan; and one stream in ten is the frozen schema-v1 fixture
(tests/fsm/fixtures/order_stream_v1.json), so the upcasters run too.

    PYTHONPATH=. .venv/bin/python benchmarks/replay.py              # 3,000 streams
    PYTHONPATH=. .venv/bin/python benchmarks/replay.py -n 500 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgpack
import sqlalchemy as sa

import store
from adapters import replay_rate
from fsm import events as ev
from fsm import observations as ob
from fsm.decide import decide
from fsm.fold import evolve
from fsm.state import OrderState
from store import codec, schema
from tests.support import strategies as s

FIXTURE = Path(__file__).parent.parent / "tests/fsm/fixtures/order_stream_v1.json"
Row = tuple[str, int, bytes]  # type name, schema version, payload


def _decided(*observations: ob.Observation) -> list[ev.Event]:
    """The events the controller would record for these observations."""
    state, out = OrderState(), []
    for o in observations:
        for e in decide(state, o):
            state = evolve(state, e)
            out.append(e)
    return out


def _frozen_v1() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))["events"]
    assert any(e["version"] < ev.event_class(e["type"]).VERSION for e in events)
    return events


def templates() -> list[list[ev.Event] | list[dict[str, Any]]]:
    """The streams to repeat, one in ten of them the frozen v1 fixture."""
    served = _decided(*s.SERVING)
    reprobed = _decided(*s.SERVING, s.probe(40, ok=False), s.probe(70))
    replanned = _decided(*s.REPLANNED_AND_FAILED)
    return [served] * 6 + [reprobed, reprobed, replanned, _frozen_v1()]


def _encoded(shape: list[ev.Event] | list[dict[str, Any]], shift: timedelta) -> list[Row]:
    """One stream of `shape`, its times moved by `shift`: no two streams share a payload,
    as in a real log, so nothing can profit from repeated bytes."""
    rows: list[Row] = []
    for e in shape:
        if isinstance(e, ev.Event):
            moved = e.model_copy(update={"observed_at": e.observed_at + shift})
            rows.append(tuple(codec.encode(moved)))  # type: ignore[arg-type]
        else:
            at = datetime.fromisoformat(e["payload"]["observed_at"]) + shift
            payload = {**e["payload"], "observed_at": at.isoformat()}
            rows.append((e["type"], e["version"], msgpack.packb(payload)))
    return rows


def build(url: str, streams: int) -> int:
    """Fill the log at `url` with `streams` streams; returns the number of events."""
    store.open_log(url).close()  # migrated
    engine = sa.create_engine(url)
    shapes = templates()
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    stream_rows: list[dict[str, Any]] = []
    event_rows: list[dict[str, Any]] = []
    for i in range(streams):
        uid = str(uuid.UUID(int=i + 1))
        created = t0 + timedelta(seconds=i)
        stream_rows.append(
            {"uid": uid, "namespace": "bench", "name": f"order-{i}", "created_at": created}
        )
        rows = _encoded(shapes[i % len(shapes)], timedelta(seconds=i))
        for version, (type_name, schema_version, payload) in enumerate(rows, start=1):
            event_rows.append(
                {
                    "stream_uid": uid,
                    "version": version,
                    "event_id": uuid.uuid4(),
                    "type": type_name,
                    "schema_version": schema_version,
                    "recorded_at": created + timedelta(seconds=version),
                    "leader_epoch": 1,
                    "payload": payload,
                }
            )
    # Interleaved as a live log is: orders progress side by side, not one after another.
    event_rows.sort(key=lambda r: (r["version"], r["stream_uid"]))
    held = {(r["type"], r["schema_version"]) for r in event_rows}
    with engine.begin() as conn:
        conn.execute(sa.insert(schema.streams), stream_rows)
        conn.execute(sa.insert(schema.events), event_rows)
        # What an append would have listed: the log stays one a writer can open.
        conn.execute(
            sa.insert(schema.event_types),
            [{"type": t, "schema_version": v} for t, v in sorted(held)],
        )
    engine.dispose()
    return len(event_rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--streams", type=int, default=3000)
    parser.add_argument("--profile", action="store_true", help="cProfile to stderr")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="replay-bench-") as folder:
        url = f"sqlite:///{folder}/log.sqlite"
        build(url, args.streams)
        profiler = cProfile.Profile() if args.profile else None
        if profiler is not None:
            profiler.enable()
        figures = replay_rate.measure(url)
        if profiler is not None:
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
            sys.stderr.write(out.getvalue())
    figures["streams"] = args.streams
    sys.stdout.write(json.dumps(figures) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
