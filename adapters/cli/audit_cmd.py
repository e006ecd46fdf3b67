"""`ai-inference list|history|status|why|verify|migrate` — the administrator's window into the log.

Everything but `migrate` is a fold of the event log and strictly read-only: it never
migrates, locks or writes the log, so it runs with a database role that may only SELECT,
and on a SQLite file beside a running controller. Each works on a SQLite path or a
database URL (`--store`, the same forms as the controller's), for live and deleted orders
alike, and prints a table for people or JSON/YAML for scripts (`-o`). Modelled on
Temporal's CLI: list the workflows, show a history, describe a point in time, explain a
stuck order, verify the projections.

Start-up matters (an administrator types these in a hurry, scripts call them in loops):
this module imports only the standard library when the parser is built; the store, the
core and SQLAlchemy are imported by the command that runs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from adapters.cli import options

if TYPE_CHECKING:
    import store
    from store.records import RecordedEvent, StreamInfo

__all__ = ["EXIT_CODES", "order_ref", "parse_instant", "register"]

EXIT_CODES = f"""exit codes:
  {options.EXIT_OK}  done
  {options.EXIT_DIVERGED}  verify: a replayed status differs from the recorded one, or events are
     missing; history/status/why: no such order, or no event or version there
  {options.EXIT_USAGE}  usage error (bad arguments, an order not named NS/NAME or uid:UID)
  {options.EXIT_UNREADABLE}  the event log cannot be opened or read (no such file, a malformed URL,
     unreachable, no permission, or a schema this release does not read: see
     `ai-inference migrate`); verify: an event this release cannot decode (the
     other streams are still verified and reported); history/status/why: the
     order's stream misses events, so its state cannot be replayed
"""

PHASES = ("Pending", "Ready", "Degraded", "Failed")

_RELATIVE = re.compile(r"-(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def register(subparsers: Any) -> None:
    def add(name: str, help_text: str, run: Any, *, output: str = "table") -> Any:
        sub = subparsers.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        options.add_store(sub)
        options.add_output(sub, default=output)
        sub.set_defaults(run=run)
        return sub

    listing = add("list", "the orders in the event log, with their last recorded phase", _list)
    listing.add_argument("-n", "--namespace", help="only this namespace")
    listing.add_argument("--phase", choices=PHASES, help="only orders last recorded in PHASE")
    listing.add_argument(
        "--reason", help="only orders with a condition of this reason (e.g. NoCapacity)"
    )
    gone = listing.add_mutually_exclusive_group()
    gone.add_argument("--deleted", action="store_true", help="only deleted orders")
    gone.add_argument("--live", action="store_true", help="only orders not deleted")

    history = add("history", "an order's events and what each changed", _history)
    history.add_argument("order", type=order_ref, metavar="NS/NAME", help="the order, or uid:UID")

    at = add(
        "status",
        "an order's status as the log held it at a time or version",
        _status,
        output="yaml",
    )
    at.add_argument("order", type=order_ref, metavar="NS/NAME", help="the order, or uid:UID")
    point = at.add_mutually_exclusive_group()
    point.add_argument(
        "--at",
        type=parse_instant,
        metavar="TIME",
        help="RFC 3339 time, e.g. 2026-12-02T10:00:00Z (whole seconds: to the end of that "
        "second), or a time ago: -2h, -15m, -1d, -1h30m; NS/NAME is the order of that name "
        "then",
    )
    point.add_argument(
        "--version",
        type=options.positive_int,
        metavar="N",
        help="stream version (1 is the first event)",
    )

    why = add("why", "where an order is, why, and what would unblock it", _why)
    why.add_argument("order", type=order_ref, metavar="NS/NAME", help="the order, or uid:UID")

    verify = add(
        "verify",
        "replay every stream, compare with the recorded status, and check no event is missing",
        _verify,
    )
    verify.add_argument(
        "--progress",
        action="store_true",
        help="report progress on stderr even when it is not a terminal",
    )

    migrate = subparsers.add_parser(
        "migrate",
        help="upgrade the event log's schema to this release (the controller does it too)",
        description="Upgrade the event log's schema to this release. The read commands "
        "never do; the controller does when it starts.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.add_store(migrate)
    migrate.add_argument(
        "--create",
        action="store_true",
        help="start a new log if the SQLite file does not exist (else a mistyped path is refused)",
    )
    migrate.set_defaults(run=_migrate)


def parse_instant(text: str, *, now: Callable[[], datetime] | None = None) -> datetime:
    """An RFC 3339 time with a zone, or `-<n>d<n>h<n>m<n>s` (any of them) before now;
    in UTC, as the log stores it, so a time the log cannot hold is refused here."""
    relative = _RELATIVE.fullmatch(text.strip())
    try:
        if relative is not None and any(relative.groups()):
            days, hours, minutes, seconds = (int(g or 0) for g in relative.groups())
            ago = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
            return ((now or _utc_now)() - ago).astimezone(UTC)
        try:
            # RFC 3339 allows `t` and `z` in lower case (section 5.6); fromisoformat not `z`.
            moment = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"not an RFC 3339 time nor a time ago such as -2h: {text!r}"
            ) from exc
        if moment.tzinfo is None:
            raise argparse.ArgumentTypeError(f"{text!r} has no time zone; add Z or an offset")
        return moment.astimezone(UTC)
    except OverflowError:
        # timedelta's days, a date before year 1 or after 9999 (in UTC too): argparse
        # catches only ValueError and TypeError, and would show a traceback.
        raise argparse.ArgumentTypeError(
            f"{text!r} is out of range: a time between the years 1 and 9999"
        ) from None


def _utc_now() -> datetime:
    return datetime.now(UTC)


def order_ref(text: str) -> str:
    """`NAMESPACE/NAME` or `uid:UID`, checked when parsing: a malformed one is a usage error."""
    if text.startswith("uid:"):
        if len(text) > 4:
            return text
    else:
        namespace, _, name = text.partition("/")
        if namespace and name and "/" not in name:
            return text
    raise argparse.ArgumentTypeError(f"{text!r}: name the order as NAMESPACE/NAME or uid:UID")


# -- opening the log ------------------------------------------------------------------------


class _NoSuchOrder(LookupError):
    pass


def _find(log: store.EventLog, ref: str, *, at: datetime | None = None) -> StreamInfo:
    """The stream `ref` (checked by `order_ref`) names; `at`: the one it named then."""
    if ref.startswith("uid:"):
        info = log.stream(ref[4:])
    else:
        namespace, _, name = ref.partition("/")
        # None begun by `at`: the order of that name now, which had no events yet then.
        info = log.find_stream(namespace, name, at=at) or log.find_stream(namespace, name)
    if info is None:
        raise _NoSuchOrder(f"no stream for {ref} in the event log")
    return info


def _malformed(url: str) -> str | None:
    """Why `url` is no database URL we can open, else None."""
    import store

    try:
        store.normalise_url(url)
    except ValueError as exc:
        return str(exc)
    return None


def _missing_file(url: str) -> str | None:
    """`no file PATH` if `url` names a SQLite file that does not exist, else None.

    Opening it would create an empty log: `verify` would report "0 streams verified" for a
    mistyped path, and `migrate` would make a new log beside the one meant.
    """
    from pathlib import Path

    from sqlalchemy.engine import make_url

    parsed = make_url(url)  # `_malformed` passed it
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return None if Path(parsed.database).exists() else f"no file {parsed.database}"


def _unreadable(url: str, exc: BaseException | str, *, opening: bool = True) -> int:
    doing = "open" if opening else "read"
    sys.stderr.write(f"cannot {doing} the event log {options.redacted(url)}: {exc}\n")
    return options.EXIT_UNREADABLE


def _with_log(args: argparse.Namespace, body: Callable[[store.EventLog], int]) -> int:
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    import store

    refused = _malformed(args.store) or _missing_file(args.store)
    if refused is not None:
        return _unreadable(args.store, refused)
    try:
        log = store.open_log(args.store, read_only=True)
    except (store.StoreError, ValueError, ArgumentError, SQLAlchemyError) as exc:
        return _unreadable(args.store, exc)
    try:
        return body(log)
    except _NoSuchOrder as exc:
        sys.stderr.write(f"{exc}\n")
        return options.EXIT_DIVERGED
    except (store.StoreError, SQLAlchemyError) as exc:
        return _unreadable(args.store, exc, opening=False)
    finally:
        log.close()


# -- output ---------------------------------------------------------------------------------


def _emit(doc: Any, output: str) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    lines = [header, *rows]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _time(moment: datetime | None) -> str | None:
    from fsm.status import rfc3339

    return None if moment is None else rfc3339(moment)


def _order_doc(info: StreamInfo) -> dict[str, Any]:
    return {
        "uid": info.uid,
        "namespace": info.namespace,
        "name": info.name,
        "created": _time(info.created_at),
        "deleted": _time(info.deleted_at),
        "version": info.version,
    }


def _events(records: list[RecordedEvent]) -> list[Any]:
    return [r.event for r in records]


# -- the commands -----------------------------------------------------------------------------


def _waiting_reason(status: dict[str, Any]) -> str:
    """The reason of the first condition that is not True (what holds the order)."""
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("status") != "True":
            return str(cond.get("reason", ""))
    return ""


def _list(args: argparse.Namespace) -> int:
    def body(log: store.EventLog) -> int:
        deleted = True if args.deleted else False if args.live else None
        docs = []
        for info, projection in log.orders(namespace=args.namespace, deleted=deleted):
            status = projection.status if projection is not None else {}
            phase = str(status.get("phase") or "")
            reasons = {
                str(c.get("reason")) for c in status.get("conditions") or [] if isinstance(c, dict)
            }
            if args.phase and phase != args.phase:
                continue
            if args.reason and args.reason not in reasons:
                continue
            doc = _order_doc(info)
            doc.update(phase=phase or None, reason=_waiting_reason(status) or None)
            docs.append(doc)
        if args.output != "table":
            _emit(docs, args.output)
            return options.EXIT_OK
        header = ["NAMESPACE", "NAME", "PHASE", "REASON", "EVENTS", "CREATED", "DELETED", "UID"]
        rows = [
            [
                d["namespace"],
                d["name"],
                d["phase"] or "-",
                d["reason"] or "-",
                str(d["version"]),
                d["created"] or "",
                d["deleted"] or "-",
                d["uid"],
            ]
            for d in docs
        ]
        sys.stdout.write(_table(header, rows) + "\n")
        return options.EXIT_OK

    return _with_log(args, body)


def _history(args: argparse.Namespace) -> int:
    from fsm import explain, status

    def body(log: store.EventLog) -> int:
        info = _find(log, args.order)
        records = log.read(info.uid)
        # Each row numbered by its stored version, not by the fold's count of events: a log
        # missing events shows the gap, and the exit code and stderr say so.
        rows = [
            replace(row, version=record.version)
            for row, record in zip(explain.history_rows(_events(records)), records, strict=True)
        ]
        if args.output != "table":
            doc: dict[str, Any] = _order_doc(info)
            doc["events"] = [r.as_dict() for r in rows]
            _emit(doc, args.output)
            return options.EXIT_UNREADABLE if _refuse_gap(args.order, records) else options.EXIT_OK
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
        return options.EXIT_UNREADABLE if _refuse_gap(args.order, records) else options.EXIT_OK

    return _with_log(args, body)


def _deleted(info: StreamInfo) -> str:
    return f", deleted at {_time(info.deleted_at)}" if info.deleted_at else ""


def _status(args: argparse.Namespace) -> int:
    from fsm import fold, status

    def body(log: store.EventLog) -> int:
        upto = args.at
        if upto is not None and upto.microsecond == 0:
            # Kubernetes (lastTransitionTime) and `history` print whole seconds; such a time
            # means the end of that second, or the event printed at it would be left out.
            upto += timedelta(seconds=1, microseconds=-1)
        info = _find(log, args.order, at=upto)
        records = log.read(info.uid, upto_version=args.version, upto_time=upto)
        if args.version is not None and (not records or records[-1].version != args.version):
            sys.stderr.write(f"{args.order} has no version {args.version} (head {info.version})\n")
            return options.EXIT_DIVERGED
        if not records:
            sys.stderr.write(f"{args.order} had no events yet at that point\n")
            return options.EXIT_DIVERGED
        if _refuse_gap(args.order, records):
            return options.EXIT_UNREADABLE
        rendered = status.render_status(fold.fold(_events(records)))
        deleted = _deleted_by(info, upto, records[-1].version)
        if args.output != "table":
            doc = {"version": records[-1].version, "deleted": _time(deleted), "status": rendered}
            _emit(doc, args.output)
            return options.EXIT_OK
        sys.stdout.write(
            f"{info.namespace}/{info.name} at version {records[-1].version} "
            f"({_time(records[-1].recorded_at)}): {rendered.get('phase')}\n"
        )
        if deleted is not None:
            sys.stdout.write(f"deleted at {_time(deleted)}: the last status it had\n")
        rows = [
            [str(c.get(k, "")) for k in ("type", "status", "reason", "message")]
            for c in rendered.get("conditions") or []
        ]
        sys.stdout.write(_table(["CONDITION", "STATUS", "REASON", "MESSAGE"], rows) + "\n")
        return options.EXIT_OK

    return _with_log(args, body)


def _deleted_by(info: StreamInfo, upto: datetime | None, version: int) -> datetime | None:
    """When the order was deleted, if it was by the point shown: the time `upto`, else
    the `version` shown (a deleted order's stream ends with its deletion)."""
    if info.deleted_at is None:
        return None
    if upto is not None:
        return info.deleted_at if info.deleted_at <= upto else None
    return info.deleted_at if version == info.version else None


def _why(args: argparse.Namespace) -> int:
    from fsm import explain, fold
    from fsm.reasons import CATALOGUE

    def body(log: store.EventLog) -> int:
        info = _find(log, args.order)
        records = log.read(info.uid)
        if _refuse_gap(args.order, records):
            return options.EXIT_UNREADABLE
        events = _events(records)
        state = fold.fold(events)
        text = explain.explain(state, events)
        if args.output == "table":
            sys.stdout.write(text)
            return options.EXIT_OK
        block = explain.blocking_condition(state)
        blocking = None
        if block is not None:
            about = CATALOGUE[block.reason]
            blocking = {
                "condition": str(block.type),
                "status": str(block.status),
                "reason": str(block.reason),
                "message": block.message,
                "meaning": about.meaning,
                "whoCanUnblock": explain.WHO_CAN_ACT[explain.who_can_act(state, block)],
            }
        doc = _order_doc(info)
        doc.update(
            phase=str(state.phase),
            state=state.machine_state,
            since=_time(state.state_since),
            blocking=blocking,
            explanation=text,
        )
        _emit(doc, args.output)
        return options.EXIT_OK

    return _with_log(args, body)


class _Progress:
    """`verify: 120/4000 streams` on stderr, rewritten in place, at most ~10 times a second."""

    def __init__(self, total: int, *, shown: bool) -> None:
        self._total, self._shown, self._last = total, shown, 0.0

    def step(self, done: int) -> None:
        import time

        now = time.monotonic()
        if self._shown and (now - self._last >= 0.1 or done == self._total):
            self._last = now
            sys.stderr.write(f"\rverify: {done}/{self._total} streams")
            sys.stderr.flush()

    def close(self) -> None:
        if self._shown:
            sys.stderr.write("\n")


def _verify(args: argparse.Namespace) -> int:
    from fsm import fold, status

    def body(log: store.EventLog) -> int:
        # The recorded statuses first, then every stream in one ordered query: a log of
        # thousands of orders is two queries, not two per order.
        orders = log.orders()
        recorded = {info.uid: projection for info, projection in orders}
        progress = _Progress(len(orders), shown=args.progress or sys.stderr.isatty())
        problems: dict[str, list[str]] = {}  # what is wrong, of every stream met ([]: nothing)
        differences: dict[str, dict[str, Any]] = {}
        unreadable: set[str] = set()

        def undecodable(exc: store.UndecodableEvent) -> None:
            # Reported with the others; the rest of the log is still verified.
            unreadable.add(exc.uid)
            problems[exc.uid] = [f"unreadable: {exc}"]

        try:
            for uid, records in log.read_all(undecodable=undecodable):
                projection = recorded.get(uid)
                problems[uid] = _stream_problems(records, projection)
                # A stream missing events cannot be replayed to what was recorded.
                if projection is not None and not problems[uid]:
                    upto = [r for r in records if r.version <= projection.version]
                    replayed = status.render_status(fold.fold(_events(upto)))
                    if replayed != projection.status:
                        differences[uid] = _differences(projection.status, replayed)
                # Streams begun since the statuses were read are replayed, not counted.
                progress.step(min(len(problems), len(orders)))
        finally:
            progress.close()
        divergent = []
        for info, projection in orders:  # oldest first
            # A stream is made with its first event, in one transaction: none is a loss.
            lost = "no events" + (
                f", status recorded at version {projection.version}" if projection else ""
            )
            found = problems.get(info.uid, [lost])
            if found or info.uid in differences:
                doc = _order_doc(info)
                doc["atVersion"] = None if projection is None else projection.version
                doc["problems"] = found
                doc["differences"] = differences.get(info.uid, {})
                divergent.append(doc)
        checked = sum(projection is not None for projection in recorded.values())
        if args.output != "table":
            _emit({"checked": checked, "divergent": divergent}, args.output)
        else:
            for doc in divergent:
                order = f"{doc['namespace']}/{doc['name']} (uid {doc['uid']})"
                for problem in doc["problems"]:
                    sys.stdout.write(f"DIVERGES {order}: {problem}\n")
                if doc["differences"]:
                    sys.stdout.write(f"DIVERGES {order} at version {doc['atVersion']}:\n")
                for key, pair in doc["differences"].items():
                    sys.stdout.write(
                        f"  {key}: recorded {pair['recorded']!r}\n"
                        f"  {key}: replayed {pair['replayed']!r}\n"
                    )
            # An unreadable stream is one of the divergent: said so, not passed for read.
            cannot = f" ({len(unreadable)} of them unreadable)" if unreadable else ""
            sys.stdout.write(f"{checked} streams verified, {len(divergent)} divergent{cannot}\n")
        if unreadable:  # the others were verified, but the log is not all readable
            return options.EXIT_UNREADABLE
        return options.EXIT_DIVERGED if divergent else options.EXIT_OK

    return _with_log(args, body)


def _gap(records: list[RecordedEvent]) -> str | None:
    """How a stream's events read so far fail to run 1..their last version, if they do:
    events lost, so what they fold to is not what the order went through."""
    if not records:
        return None
    head = records[-1].version
    if records[0].version == 1 and head == len(records):  # ordered and unique: so 1..head
        return None
    have = {r.version for r in records}
    missing = _spans([v for v in range(1, head + 1) if v not in have])
    return f"versions do not run 1..{head}" + (f": {missing} missing" if missing else "")


def _refuse_gap(ref: str, records: list[RecordedEvent]) -> bool:
    """Say so on stderr if `records` miss events (see `verify`); True if they do."""
    gap = _gap(records)
    if gap is not None:
        sys.stderr.write(
            f"the event log is damaged: {ref}'s {gap}, so its state cannot be replayed "
            f"(`ai-inference verify` lists every such stream)\n"
        )
    return gap is not None


def _stream_problems(
    records: list[RecordedEvent], projection: store.Projection | None
) -> list[str]:
    """What is wrong with one stream's events, whatever they fold to: versions that do not
    run 1..head (events lost: their fold may still equal the recorded status), or a status
    recorded at a version the stream does not reach."""
    problems = []
    head = records[-1].version
    gap = _gap(records)
    if gap is not None:
        problems.append(gap)
    if projection is not None and projection.version > head:
        problems.append(f"status recorded at version {projection.version}, beyond the head {head}")
    return problems


def _spans(versions: list[int]) -> str:
    """`[2, 3, 4, 9]` as `2-4, 9`: a lost stretch of a long stream stays one line."""
    spans: list[list[int]] = []
    for v in versions:
        if spans and spans[-1][1] == v - 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _differences(recorded: dict[str, Any], replayed: dict[str, Any]) -> dict[str, Any]:
    return {
        key: {"recorded": recorded.get(key), "replayed": replayed.get(key)}
        for key in sorted(set(recorded) | set(replayed))
        if recorded.get(key) != replayed.get(key)
    }


def _migrate(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    import store
    from store import migrating

    refused = _malformed(args.store)
    if refused is not None:
        return _unreadable(args.store, refused)
    missing = None if args.create else _missing_file(args.store)
    if missing is not None:
        return _unreadable(args.store, f"{missing} (--create starts a new log there)")
    try:
        with store.open_log(args.store):
            pass
    except (store.StoreError, ValueError, ArgumentError, SQLAlchemyError) as exc:
        return _unreadable(args.store, exc)
    shown = options.redacted(args.store)
    sys.stdout.write(f"event log {shown} at revision {migrating.head_revision()}\n")
    return options.EXIT_OK
