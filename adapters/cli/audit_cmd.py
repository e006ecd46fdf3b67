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
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from adapters.cli import options

if TYPE_CHECKING:
    import store
    from store.records import RecordedEvent, StreamInfo

__all__ = ["EXIT_CODES", "parse_instant", "register"]

EXIT_CODES = f"""exit codes:
  {options.EXIT_OK}  done
  {options.EXIT_DIVERGED}  verify: a replayed status differs from the recorded one;
     history/status/why: no such order, or no event yet at that point
  {options.EXIT_USAGE}  usage error (bad arguments)
  {options.EXIT_UNREADABLE}  the event log cannot be opened or read (no such file, unreachable,
     no permission, or a schema this release does not read: see `ai-inference migrate`)
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
    history.add_argument("order", metavar="NS/NAME", help="the order, or uid:UID")

    at = add(
        "status",
        "an order's status exactly as it was at a time or version",
        _status,
        output="yaml",
    )
    at.add_argument("order", metavar="NS/NAME", help="the order, or uid:UID")
    point = at.add_mutually_exclusive_group()
    point.add_argument(
        "--at",
        type=parse_instant,
        metavar="TIME",
        help="RFC 3339 time, e.g. 2026-12-02T10:00:00Z (whole seconds: to the end of that "
        "second), or a time ago: -2h, -15m, -1d, -1h30m",
    )
    point.add_argument("--version", type=int, help="stream version (event count)")

    why = add("why", "where an order is, why, and what would unblock it", _why)
    why.add_argument("order", metavar="NS/NAME", help="the order, or uid:UID")

    verify = add("verify", "replay every stream and compare with the recorded status", _verify)
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
    migrate.set_defaults(run=_migrate)


def parse_instant(text: str, *, now: Callable[[], datetime] | None = None) -> datetime:
    """An RFC 3339 time with a zone, or `-<n>d<n>h<n>m<n>s` (any of them) before now."""
    relative = _RELATIVE.fullmatch(text.strip())
    if relative is not None and any(relative.groups()):
        days, hours, minutes, seconds = (int(g or 0) for g in relative.groups())
        ago = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        return (now or _utc_now)() - ago
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"not an RFC 3339 time nor a time ago such as -2h: {text!r}"
        ) from exc
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone; add Z or an offset")
    return moment


def _utc_now() -> datetime:
    return datetime.now(UTC)


# -- opening the log ------------------------------------------------------------------------


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

    Opening it would create an empty database file, and `verify` would then report
    "0 streams verified" for a mistyped path: a read-only command must refuse instead.
    """
    from pathlib import Path

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None  # open_log reports the malformed URL
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return None if Path(parsed.database).exists() else parsed.database


def _unreadable(url: str, exc: BaseException, *, opening: bool = True) -> int:
    doing = "open" if opening else "read"
    sys.stderr.write(f"cannot {doing} the event log {_shown(url)}: {exc}\n")
    return options.EXIT_UNREADABLE


def _shown(url: str) -> str:
    """The URL without its password (it may be typed on the command line)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _with_log(args: argparse.Namespace, body: Callable[[store.EventLog], int]) -> int:
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    import store

    missing = _missing_sqlite_file(args.store)
    if missing is not None:
        return _unreadable(args.store, FileNotFoundError(f"no file {missing}"))
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
        rows = explain.history_rows(_events(log.read(info.uid)))
        if args.output != "table":
            doc: dict[str, Any] = _order_doc(info)
            doc["events"] = [r.as_dict() for r in rows]
            _emit(doc, args.output)
            return options.EXIT_OK
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
        return options.EXIT_OK

    return _with_log(args, body)


def _deleted(info: StreamInfo) -> str:
    return f", deleted at {_time(info.deleted_at)}" if info.deleted_at else ""


def _status(args: argparse.Namespace) -> int:
    from fsm import fold, status

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
            return options.EXIT_DIVERGED
        rendered = status.render_status(fold.fold(_events(records)))
        if args.output != "table":
            _emit({"version": records[-1].version, "status": rendered}, args.output)
            return options.EXIT_OK
        sys.stdout.write(
            f"{info.namespace}/{info.name} at version {records[-1].version} "
            f"({_time(records[-1].recorded_at)}): {rendered.get('phase')}\n"
        )
        rows = [
            [str(c.get(k, "")) for k in ("type", "status", "reason", "message")]
            for c in rendered.get("conditions") or []
        ]
        sys.stdout.write(_table(["CONDITION", "STATUS", "REASON", "MESSAGE"], rows) + "\n")
        return options.EXIT_OK

    return _with_log(args, body)


def _why(args: argparse.Namespace) -> int:
    from fsm import explain, fold
    from fsm.reasons import CATALOGUE

    def body(log: store.EventLog) -> int:
        info = _find(log, args.order)
        events = _events(log.read(info.uid))
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
                "whoCanUnblock": explain.WHO_CAN_ACT[about.who],
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
        recorded = {info.uid: (info, p) for info, p in orders if p is not None}
        progress = _Progress(len(orders), shown=args.progress or sys.stderr.isatty())
        found: dict[str, dict[str, Any]] = {}
        checked = 0
        try:
            for done, (uid, records) in enumerate(log.read_all(), start=1):
                if uid in recorded:
                    info, projection = recorded[uid]
                    checked += 1
                    upto = [r for r in records if r.version <= projection.version]
                    replayed = status.render_status(fold.fold(_events(upto)))
                    if replayed != projection.status:
                        doc = _order_doc(info)
                        doc["atVersion"] = projection.version
                        doc["differences"] = _differences(projection.status, replayed)
                        found[uid] = doc
                # Streams begun since the statuses were read are replayed, not counted.
                progress.step(min(done, len(orders)))
        finally:
            progress.close()
        divergent = [found[info.uid] for info, _ in orders if info.uid in found]  # oldest first
        if args.output != "table":
            _emit({"checked": checked, "divergent": divergent}, args.output)
        else:
            for doc in divergent:
                sys.stdout.write(
                    f"DIVERGES {doc['namespace']}/{doc['name']} (uid {doc['uid']}) at version "
                    f"{doc['atVersion']}:\n"
                )
                for key, pair in doc["differences"].items():
                    sys.stdout.write(
                        f"  {key}: recorded {pair['recorded']!r}\n"
                        f"  {key}: replayed {pair['replayed']!r}\n"
                    )
            sys.stdout.write(f"{checked} streams verified, {len(divergent)} divergent\n")
        return options.EXIT_DIVERGED if divergent else options.EXIT_OK

    return _with_log(args, body)


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

    try:
        with store.open_log(args.store):
            pass
    except (store.StoreError, ValueError, ArgumentError, SQLAlchemyError) as exc:
        return _unreadable(args.store, exc)
    sys.stdout.write(f"event log {_shown(args.store)} at revision {migrating.head_revision()}\n")
    return options.EXIT_OK
