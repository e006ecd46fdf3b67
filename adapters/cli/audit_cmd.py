"""`ai-inference history|status|why|verify` — the administrator's window into the log.

Everything here is a fold of the event log, read-only, and works on a SQLite file or a
PostgreSQL URL, for live and deleted orders alike. Modelled on Temporal's CLI: show the
history, describe a point in time, explain a stuck order, verify the projections.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

import store
from fsm import explain, fold, status
from store.records import RecordedEvent, StreamInfo

__all__ = ["DEFAULT_STORE", "register"]

DEFAULT_STORE = os.environ.get("AI_INFERENCE_STORE", "sqlite:///ai-inference.sqlite")


def register(subparsers: Any) -> None:
    def add(name: str, help_text: str, run: Any) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = subparsers.add_parser(name, help=help_text)
        sub.add_argument(
            "--store", default=DEFAULT_STORE, help=f"event log URL (default {DEFAULT_STORE})"
        )
        sub.set_defaults(run=run)
        return sub

    history = add("history", "an order's events and what each changed", _history)
    history.add_argument("order", metavar="NS/NAME", help="the order, or uid:UID")
    history.add_argument("--output", "-o", choices=("table", "json"), default="table")

    at = add("status", "an order's status exactly as it was at a time or version", _status)
    at.add_argument("order", metavar="NS/NAME", help="the order, or uid:UID")
    point = at.add_mutually_exclusive_group()
    point.add_argument(
        "--at",
        type=_instant,
        help="RFC 3339 time, e.g. 2026-12-02T10:00:00Z (whole seconds: to the end of that second)",
    )
    point.add_argument("--version", type=int, help="stream version (event count)")

    why = add("why", "where an order is, why, and what would unblock it", _why)
    why.add_argument("order", metavar="NS/NAME", help="the order, or uid:UID")

    add("verify", "replay every stream and compare with the recorded status", _verify)


def _instant(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time: {text!r}") from exc
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone; add Z or an offset")
    return moment


class _NoSuchOrder(LookupError):
    pass


def _find(log: store.EventLog, ref: str) -> StreamInfo:
    if ref.startswith("uid:"):
        info = log.stream(ref[4:])
    else:
        namespace, sep, name = ref.partition("/")
        if not sep or not namespace or not name:
            raise _NoSuchOrder(f"{ref!r}: name the order as NAMESPACE/NAME or uid:UID")
        info = log.find_stream(namespace, name)
    if info is None:
        raise _NoSuchOrder(f"no stream for {ref} in the event log")
    return info


def _missing_sqlite_file(url: str) -> str | None:
    """The path of a SQLite log named by `url` that does not exist, else None.

    Opening it would create an empty log, and `verify` would then report "0 streams
    verified, 0 divergent" for a mistyped path: a read-only command must refuse instead.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None  # open_log reports the malformed URL
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return None if Path(parsed.database).exists() else parsed.database


def _with_log(args: argparse.Namespace, body: Any) -> int:
    missing = _missing_sqlite_file(args.store)
    if missing is not None:
        sys.stderr.write(f"cannot open the event log {args.store}: no file {missing}\n")
        return 2
    try:
        log = store.open_log(args.store)
    except (store.StoreError, ValueError, ArgumentError) as exc:  # unreachable, or a bad URL
        sys.stderr.write(f"cannot open the event log {args.store}: {exc}\n")
        return 2
    try:
        code: int = body(log)
        return code
    except _NoSuchOrder as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    finally:
        log.close()


def _events(records: list[RecordedEvent]) -> list[Any]:
    return [r.event for r in records]


def _history(args: argparse.Namespace) -> int:
    def body(log: store.EventLog) -> int:
        info = _find(log, args.order)
        rows = explain.history_rows(_events(log.read(info.uid)))
        if args.output == "json":
            doc = {"uid": info.uid, "namespace": info.namespace, "name": info.name}
            doc["events"] = [r.as_dict() for r in rows]  # type: ignore[assignment]
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
            return 0
        out = [f"{info.namespace}/{info.name} (uid {info.uid}){_deleted(info)}"]
        out.append(
            f"{'VER':>4}  {'TIME':<20}  {'EVENT':<22}  {'PHASE':<19}  {'REASON':<28}  CHANGES"
        )
        for r in rows:
            phase = (
                str(r.phase_after)
                if r.phase_before == r.phase_after
                else f"{r.phase_before}->{r.phase_after}"
            )
            out.append(
                f"{r.version:>4}  {status.rfc3339(r.at):<20}  {r.type:<22}  {phase:<19}  "
                f"{r.reason:<28}  {'; '.join(r.changes)}".rstrip()
            )
        sys.stdout.write("\n".join(out) + "\n")
        return 0

    return _with_log(args, body)


def _deleted(info: StreamInfo) -> str:
    return f", deleted at {status.rfc3339(info.deleted_at)}" if info.deleted_at else ""


def _status(args: argparse.Namespace) -> int:
    def body(log: store.EventLog) -> int:
        info = _find(log, args.order)
        upto = args.at
        if upto is not None and upto.microsecond == 0:
            # Kubernetes (lastTransitionTime) and `history` print whole seconds; such a time
            # means the end of that second, or the event printed at it would be left out.
            upto += timedelta(seconds=1, microseconds=-1)
        records = log.read(info.uid, upto_version=args.version, upto_time=upto)
        if not records:
            sys.stderr.write(f"{args.order} had no events yet at that point\n")
            return 1
        doc = {
            "version": records[-1].version,
            "status": status.render_status(fold.fold(_events(records))),
        }
        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))
        return 0

    return _with_log(args, body)


def _why(args: argparse.Namespace) -> int:
    def body(log: store.EventLog) -> int:
        info = _find(log, args.order)
        events = _events(log.read(info.uid))
        sys.stdout.write(explain.explain(fold.fold(events), events))
        return 0

    return _with_log(args, body)


def _verify(args: argparse.Namespace) -> int:
    def body(log: store.EventLog) -> int:
        divergent = checked = 0
        for info in log.streams():
            projection = log.projection(info.uid)
            if projection is None:
                continue
            checked += 1
            replayed = status.render_status(
                fold.fold(_events(log.read(info.uid, upto_version=projection.version)))
            )
            if replayed != projection.status:
                divergent += 1
                sys.stdout.write(
                    f"DIVERGES {info.namespace}/{info.name} (uid {info.uid}) at version "
                    f"{projection.version}:\n{_diff(projection.status, replayed)}"
                )
        sys.stdout.write(f"{checked} streams verified, {divergent} divergent\n")
        return 1 if divergent else 0

    return _with_log(args, body)


def _diff(recorded: dict[str, Any], replayed: dict[str, Any]) -> str:
    lines = []
    for key in sorted(set(recorded) | set(replayed)):
        if recorded.get(key) != replayed.get(key):
            lines.append(
                f"  {key}: recorded {recorded.get(key)!r}\n  {key}: replayed {replayed.get(key)!r}"
            )
    return "\n".join(lines) + "\n"
