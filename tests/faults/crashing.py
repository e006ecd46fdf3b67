"""One run of a mix of orders under `ai-inference controller`, clean or crashed once, and
what the oracle compares (Sieve: the end state and the writes per object).

A run starts a controller (with `AI_INFERENCE_FAULT=crash-after:<boundary>:<n>` for a
crash run), creates each mix's orders in its seed's order, edits the replan order's model
once its first plan shows, and waits until every order has settled and the controller
has written nothing for a while. When the controller dies of the hook, the run takes a
snapshot of what the crash left (statuses, children, the token), frees the Lease (its
expiry, without the wait) and starts a controller without the hook; the API server's
audit log from then on holds the writes the restart made.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import store
from adapters import faults
from adapters.kubernetes.converging import RENDERED_ANNOTATION
from fsm.fold import fold
from fsm.reasons import ConditionStatus
from fsm.status import render_status
from tests.faults.bed import KINDS, NAMESPACE, REPLANNED_MODEL, Bed, spec_of
from tests.support.controller_process import ControllerProcess
from tests.support.polling import eventually

__all__ = [
    "BOUNDARIES",
    "Mix",
    "Restarting",
    "Run",
    "State",
    "boundary_counts",
    "differences",
    "normal",
    "per_object",
    "snapshot",
]

# The write boundaries of a pass that the mix reaches (docs/faults.md, "Crashes"); a
# reclaim's (`patch-Deployment`, `append-<Event>`) are test_crash_reclaim.py's.
BOUNDARIES = (
    "append",
    "apply-Deployment",
    "apply-Service",
    "apply-ResourceClaimTemplate",
    # A replan onto other devices: the template's spec is immutable, so it is deleted
    # and made anew (acting.py); a crash between the two must still end as a clean run.
    "delete-ResourceClaimTemplate",
    "apply-Ingress",
    "apply-HorizontalPodAutoscaler",
    "create-Secret",
    "status",
    "event",
)
# The audit log's (resource, subresource, verb) of each boundary's request.
_REQUESTS = {
    "apply-Deployment": {("deployments", "", "patch")},
    "apply-Service": {("services", "", "patch")},
    "apply-ResourceClaimTemplate": {("resourceclaimtemplates", "", "patch")},
    "delete-ResourceClaimTemplate": {("resourceclaimtemplates", "", "delete")},
    "apply-Ingress": {("ingresses", "", "patch")},
    "apply-HorizontalPodAutoscaler": {("horizontalpodautoscalers", "", "patch")},
    "create-Secret": {("secrets", "", "create")},
    "status": {
        ("inferenceservices", "status", "patch"),
        ("inferenceserviceclasses", "status", "patch"),
    },
    "event": {("events", "", "create"), ("events", "", "patch")},
}
_SETTLE_QUIET = 3.0  # seconds without a write of the controller: settled
_VOLATILE = re.compile(r"(Time|Timestamp)$")
_SERVER_SET = frozenset({"resourceVersion", "uid", "clusterIP", "clusterIPs"})
# A digest of the rest of the object, which is compared made generic: the digest itself
# is of the run's own names and UIDs, so it differs between any two runs.
_DERIVED = frozenset({RENDERED_ANNOTATION})


@dataclass(frozen=True)
class Mix:
    """One seed's orders: named `{prefix}-{kind}`, created in `order`, the first `offset`
    seconds into the run, then `pauses` apart."""

    prefix: str
    order: tuple[str, ...] = KINDS
    pauses: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)
    offset: float = 0.0

    @classmethod
    def seeded(cls, prefix: str, rng: random.Random, offset: float = 0.0) -> Mix:
        order = list(KINDS)
        rng.shuffle(order)
        pauses = tuple(round(rng.uniform(0, 0.5), 2) for _ in order)
        return cls(prefix, tuple(order), pauses, offset)

    def name(self, kind: str) -> str:
        return f"{self.prefix}-{kind}"

    def names(self) -> list[str]:
        return [self.name(kind) for kind in KINDS]


def normal(value: Any, mix: Mix, uids: Mapping[str, str]) -> Any:
    """`value` with the run's names and UIDs made generic and times dropped, so two
    runs' objects compare."""
    if isinstance(value, Mapping):
        return {
            k: normal(v, mix, uids)
            for k, v in value.items()
            if not _VOLATILE.search(k) and k not in _SERVER_SET and k not in _DERIVED
        }
    if isinstance(value, list):
        return [normal(v, mix, uids) for v in value]
    if isinstance(value, str):
        for kind, uid in uids.items():
            value = value.replace(uid, f"<{kind}-uid>")
        return value.replace(f"{mix.prefix}-", "<mix>-")
    return value


def differences(got: Any, want: Any, path: str = "") -> list[str]:
    """Where two JSON-shaped values differ, one line per leaf."""
    if isinstance(got, Mapping) and isinstance(want, Mapping):
        out: list[str] = []
        for key in sorted(set(got) | set(want), key=str):
            out += differences(got.get(key), want.get(key), f"{path}.{key}")
        return out
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        pairs = enumerate(zip(got, want, strict=True))
        return [d for i, (a, b) in pairs for d in differences(a, b, f"{path}[{i}]")]
    return [] if got == want else [f"{path}: {got!r} != {want!r}"]


@dataclass
class Order:
    """What one order is, at a moment: its status, its children, its token."""

    obj: dict[str, Any]
    children: dict[tuple[str, str], dict[str, Any]]

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.obj.get("status") or {})

    def token(self) -> tuple[str, dict[str, Any]] | None:
        for (kind, _), child in self.children.items():
            if kind == "Secret":
                return str(child["metadata"]["uid"]), dict(child.get("data") or {})
        return None


def content(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the controller writes of a child: never its status or server bookkeeping."""
    meta = obj.get("metadata") or {}
    return {
        "labels": meta.get("labels"),
        "annotations": meta.get("annotations"),
        "ownerReferences": meta.get("ownerReferences"),
        **{k: obj.get(k) for k in ("spec", "data", "type", "immutable")},
    }


@dataclass
class State:
    """Every order of a mix at a moment."""

    orders: dict[str, Order]  # by kind

    def uids(self) -> dict[str, str]:
        """The UIDs a run's objects carry: its orders' and their token Secrets'."""
        out = {kind: str(o.obj["metadata"]["uid"]) for kind, o in self.orders.items()}
        for kind, order in self.orders.items():
            token = order.token()
            if token is not None:
                out[f"{kind}-token"] = token[0]
        return out

    def summary(self, mix: Mix) -> dict[str, Any]:
        """What must equal a clean run's: statuses, the set of children, the runtime."""
        uids = self.uids()
        out: dict[str, Any] = {}
        for kind, order in self.orders.items():
            out[kind] = {
                "status": normal(order.status, mix, uids),
                "children": sorted(normal(f"{k}/{n}", mix, uids) for k, n in order.children),
                "specs": {
                    normal(f"{k}/{n}", mix, uids): normal(child.get("spec"), mix, uids)
                    for (k, n), child in order.children.items()
                    if k != "Secret"
                },
            }
        return out


def snapshot(bed: Bed, mix: Mix, *, complete: bool = True, kinds: Sequence[str] = KINDS) -> State:
    """The mix's orders (of `kinds`) now; `complete=False`: those created so far (at a
    crash)."""
    orders: dict[str, Order] = {}
    for kind in kinds:
        obj = bed.get(mix.name(kind))
        if obj is None and not complete:
            continue
        assert obj is not None, f"{mix.name(kind)} is gone"
        children: dict[tuple[str, str], dict[str, Any]] = {}
        for child in bed.children(str(obj["metadata"]["uid"])):
            key = (str(child["kind"]), str(child["metadata"]["name"]))
            assert key not in children, f"duplicate child {key}"
            children[key] = child
        orders[kind] = Order(obj, children)
    return State(orders)


def _ours(stacks: str) -> str:
    """A thread dump cut to the project's own frames, and to the threads with one outside
    the informers (three dozen of them, each waiting on its watch or its watchdog)."""
    threads: list[list[str]] = []
    for line in stacks.splitlines():
        if line.startswith(("Thread ", "Current thread")):
            threads.append([line])
        elif threads and any(part in line for part in ("/adapters/", "/store/", "/fsm/")):
            threads[-1].append(line)
    return "\n".join(
        "\n".join(thread)
        for thread in threads
        if any("/kubernetes/watching.py" not in frame for frame in thread[1:])
    )


def _wall() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _settled(kind: str, obj: dict[str, Any] | None) -> bool:
    status = (obj or {}).get("status") or {}
    meta = (obj or {}).get("metadata") or {}
    if status.get("observedGeneration") != meta.get("generation"):
        return False
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    if kind == "nocap":
        planned = conditions.get("Planned") or {}
        return status.get("phase") == "Pending" and planned.get("reason") == "NoCapacity"
    if kind == "replan" and meta.get("generation") != 2:
        return False
    return status.get("phase") == "Ready" and all(
        c["status"] == "True" for c in conditions.values()
    )


class Restarting:
    """What every crash run shares: wait on a check while a controller the hook killed is
    restarted without the hook (the Lease freed, as its expiry would), and wait until the
    controller has written nothing for `quiet_seconds`. A run says what it keeps of the
    moment of the crash (`at_the_crash`) and which hook line shows the crash was the hook's."""

    bed: Bed
    proc: ControllerProcess
    crashes: int
    restart_offset: int | None
    quiet_seconds = _SETTLE_QUIET
    crashed_at: str | None = None  # the wall clock when the hook's kill was seen

    def until(self, check: Callable[[], Any], *, what: str, timeout: float = 180) -> Any:
        return eventually(
            lambda: self._watch() or check(), timeout=timeout, interval=0.2, what=what
        )

    def quiet(self, timeout: float = 120) -> None:
        """Until the controller has written nothing for `quiet_seconds`."""
        last = (self.bed.audit_offset(), time.monotonic())

        def quiet() -> bool:
            nonlocal last
            self._watch()
            offset = self.bed.audit_offset()
            if offset != last[0]:
                last = (offset, time.monotonic())
            return time.monotonic() - last[1] >= self.quiet_seconds

        eventually(quiet, timeout=timeout, interval=0.25, what="the controller quiet")

    def hook_line(self) -> str:
        return "fault hook: SIGKILL after"

    def at_the_crash(self) -> None:
        raise NotImplementedError

    def _watch(self) -> None:
        """Restart the controller, without the hook, if the hook killed it."""
        code = self.proc.proc.poll()
        if code is None:
            return
        self.proc.kill()  # its pipes read to the end: the hook's last line included
        hooked = self.hook_line() in self.proc.stderr
        assert code == -9 and hooked and self.crashes == 0, (
            f"the controller exited {code} ({self.crashes} crash(es) so far):\n"
            f"{self.proc.stderr[-3000:]}"
        )
        self.crashes += 1
        self.crashed_at = _wall()
        time.sleep(0.5)  # a request another worker had in flight is answered and logged
        self.at_the_crash()
        self.restart_offset = self.bed.audit_offset()
        self.bed.free_lease()
        self.proc = self.bed.controller()


@dataclass
class Run(Restarting):
    """One controller's run of `mixes` side by side; `fault`: the hook's spec (None: a
    clean run). Several mixes started apart meet one crash each at a different point of
    their own progress."""

    bed: Bed
    mixes: list[Mix]
    fault: str | None = None
    proc: ControllerProcess = field(init=False)
    crashes: int = 0
    at_crash: dict[str, State] = field(default_factory=dict)  # by mix prefix
    restart_offset: int | None = None  # the audit log's size when the restart began
    heads_at_crash: dict[str, int] = field(default_factory=dict)  # by order name
    start_offset: int = 0
    moments: list[tuple[str, str]] = field(default_factory=list)  # (wall clock, what the test did)

    def __post_init__(self) -> None:
        self.start_offset = self.bed.audit_offset()
        env = {faults.ENV: self.fault} if self.fault else None
        self.proc = self.bed.controller(env=env)

    # -- the run -------------------------------------------------------------------------

    def drive(self) -> dict[str, State]:
        """Create the mixes, edit each replan order once planned, wait until all settled."""
        schedule = sorted(
            (mix.offset + sum(mix.pauses[:i]), mix.name(kind), kind)
            for mix in self.mixes
            for i, kind in enumerate(mix.order)
        )
        began = time.monotonic()
        for at, name, kind in schedule:
            self.until(lambda a=at: time.monotonic() - began >= a, what="the schedule")
            self.bed.create(name, spec_of(kind))
            self._told(name, "created")
        unplanned = {mix.name("replan") for mix in self.mixes}

        def replanned() -> bool:
            for name in sorted(unplanned):
                if ((self.bed.get(name) or {}).get("status") or {}).get("resolved"):
                    self.bed.patch_spec(name, {"model": REPLANNED_MODEL})
                    self._told(name, "edited")
                    unplanned.discard(name)
            return not unplanned

        self.until(replanned, what="the replan orders' first plans")
        for mix in self.mixes:
            for kind in KINDS:
                name = mix.name(kind)
                try:
                    self.until(
                        lambda k=kind, n=name: _settled(k, self.bed.get(n)),
                        what=f"{name} settled",
                    )
                except AssertionError as exc:
                    raise AssertionError(f"{exc}\n{self._where(name)}") from None
        self.quiet()
        return {mix.prefix: snapshot(self.bed, mix) for mix in self.mixes}

    def _told(self, name: str, what: str) -> None:
        self.moments.append((_wall(), f"{name} {what}"))

    def _where(self, name: str) -> str:
        """Where an order that did not settle stands, for the failure message."""
        obj = self.bed.get(name) or {}
        meta, status = obj.get("metadata") or {}, obj.get("status") or {}
        conditions = [
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in status.get("conditions") or []
        ]
        children = sorted(
            f"{c['kind']}/{c['metadata']['name']}" for c in self.bed.children(str(meta.get("uid")))
        )
        return (
            f"{name}: generation {meta.get('generation')}, observed "
            f"{status.get('observedGeneration')}, phase {status.get('phase')}, stream head "
            f"{self.head(name)}\nconditions {conditions}\nchildren {children}\n"
            f"the test: {self._moments_of(name)}; the crash seen at {self.crashed_at}\n"
            f"its stream: {self.events_of(str(meta.get('uid')))}\n"
            f"crashes {self.crashes}; the controller's lines about {name}:\n"
            + "\n".join(self._lines_about(name))
            + f"\nthe controller's log:\n{self.proc.stderr[-4000:]}"
            + f"\nits threads (the project's frames):\n{_ours(self.proc.stacks())}"
        )

    def at_the_crash(self) -> None:
        for mix in self.mixes:
            self.at_crash[mix.prefix] = snapshot(self.bed, mix, complete=False)
            for kind in KINDS:
                self.heads_at_crash[mix.name(kind)] = self.head(mix.name(kind))

    def finish(self) -> None:
        """Stop the controller (SIGTERM) and delete the mixes' orders."""
        try:
            code = self.proc.stop()
            assert code == 0, self.proc.stderr[-3000:]
        finally:
            for mix in self.mixes:
                for name in mix.names():
                    self.bed.delete(name)

    # -- what was written ------------------------------------------------------------------

    def events_of(self, uid: str) -> str:
        """The order's stream as the log holds it: version, type, time, epoch."""
        rows = _log_rows(
            self.bed,
            "SELECT version, type, recorded_at, leader_epoch FROM events"
            " WHERE stream_uid = ? ORDER BY version",
            uid,
        )
        return "; ".join(f"{v} {t.rsplit('.', 1)[-1]} {at} e{epoch}" for v, t, at, epoch in rows)

    def head(self, name: str) -> int:
        """The version of the order's stream in the log (0: none yet)."""
        ((head,),) = _log_rows(
            self.bed,
            "SELECT COALESCE(MAX(e.version), 0) FROM events e"
            " JOIN streams s ON s.uid = e.stream_uid WHERE s.name = ?",
            name,
        )
        return int(head)

    def allowed_after_restart(self, name: str) -> tuple[int, int]:
        """At most how many status writes and Events the restart may make for an order:
        one status per change of the status rendered from its stream, and one Event per
        condition change, among the events recorded after the crash (plus one status:
        the crash may have come between an append and its status)."""
        log = store.open_log(self.bed.store_url, read_only=True)
        try:
            info = log.find_stream(NAMESPACE, name)
            assert info is not None
            events = [r.event for r in log.read(info.uid)]
        finally:
            log.close()
        start = self.heads_at_crash.get(name, 0)
        states = [fold(events[:k]) for k in range(start, len(events) + 1)]
        rendered = [render_status(state) for state in states]
        statuses = 1 + sum(a != b for a, b in itertools.pairwise(rendered))
        told = 0
        for before, after in itertools.pairwise(states):
            old = {c.type: (c.status, c.reason, c.message) for c in before.conditions}
            told += sum(
                1
                for c in after.conditions
                if c.status is not ConditionStatus.UNKNOWN
                and old.get(c.type) != (c.status, c.reason, c.message)
            )
        return statuses, told

    def writes_after_restart(self, mix: Mix) -> Counter[tuple[str, str]]:
        assert self.restart_offset is not None
        return per_object(self.bed.writes(self.restart_offset), mix)

    def writes_told(self, mix: Mix, request: str, generic: str) -> str:
        """An object's writes since the restart, for a failure message: each with its time
        and answer (the audit log holds no bodies), beside its order's stream and what the
        controller said of that order — a repair is in the log only as such a line."""
        assert self.restart_offset is not None
        name = generic.replace("<mix>-", f"{mix.prefix}-")
        sent = [
            f"{entry.get('stageTimestamp')} {entry.get('verb')} "
            f"{(entry.get('responseStatus') or {}).get('code')}"
            for entry in self.bed.writes(self.restart_offset)
            if per_object([entry], mix).get((request, generic))
        ]
        order = next((mix.name(kind) for kind in KINDS if name.startswith(mix.name(kind))), name)
        return (
            f"{request} {name} since the restart (at {self.crashed_at}): {'; '.join(sent)}\n"
            f"the test: {self._moments_of(order)}\n"
            f"{order}'s stream: {self.events_of(self._uid_in_log(order))}\n"
            f"the controller's lines about {order}:\n" + "\n".join(self._lines_about(order))
        )

    def _moments_of(self, name: str) -> str:
        return "; ".join(f"{at} {what}" for at, what in self.moments if name in what)

    def _lines_about(self, name: str) -> list[str]:
        # The tail shows the controller's last lines, often only the watches' restarts:
        # what it said of this order at any time is told apart.
        return [line for line in self.proc.stderr.splitlines() if name in line][-20:]

    def _uid_in_log(self, name: str) -> str:
        """The order's UID as its stream records it (the order may be deleted by now)."""
        found = _log_rows(self.bed, "SELECT uid FROM streams WHERE name = ?", name)
        return str(found[0][0]) if found else ""

    def writes_of_run(self, mix: Mix) -> Counter[tuple[str, str]]:
        return per_object(self.bed.writes(self.start_offset), mix)


def per_object(entries: list[dict[str, Any]], mix: Mix) -> Counter[tuple[str, str]]:
    """Writes to the mix's objects as ("resource[/sub] verb", generic name)."""
    out: Counter[tuple[str, str]] = Counter()
    for entry in entries:
        ref = entry.get("objectRef") or {}
        name = str(ref.get("name") or "")
        if ref.get("namespace") != NAMESPACE or not name.startswith(f"{mix.prefix}-"):
            continue
        if ref.get("resource") == "events":
            name = name.split(".", 1)[0] + ".*"  # an Event's name carries a time
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        request = f"{ref.get('resource')}{sub} {entry.get('verb')}"
        out[(request, name.replace(f"{mix.prefix}-", "<mix>-"))] += 1
    return out


def boundary_counts(bed: Bed, run: Run) -> dict[str, int]:
    """How many writes of each boundary the clean `run` made (appends: a lower bound)."""
    counts = Counter(
        (
            str((e.get("objectRef") or {}).get("resource")),
            str((e.get("objectRef") or {}).get("subresource") or ""),
            str(e.get("verb")),
        )
        for e in bed.writes(run.start_offset)
    )
    out = {b: sum(counts[r] for r in requests) for b, requests in _REQUESTS.items()}
    # Appends of one pass share their time: distinct (stream, time) undercounts them.
    ((out["append"],),) = _log_rows(
        bed,
        "SELECT COUNT(*) FROM (SELECT DISTINCT e.stream_uid, e.recorded_at, e.leader_epoch"
        " FROM events e JOIN streams s ON s.uid = e.stream_uid WHERE s.name LIKE ?)",
        f"{run.mixes[0].prefix}-%",
    )
    return out


def _log_rows(bed: Bed, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of one query on the run's SQLite event log, read directly (the orders may
    be deleted by now), its connection closed after."""
    path = bed.store_url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute(sql, args).fetchall()
