"""Crash in a reclaim, restart, and compare with a clean run (Sieve).

The crash matrix's mixes never contend for a device, so a reclaim's boundaries
(docs/faults.md, "Crashes") are crashed here, on the bed's reclaim capacity: one device
that only two classes select, one replica each, low and high priority. A low-priority
order becomes Ready on it; a high-priority order is created and takes it
(docs/priority.md): `ReplicasReclaimed` in the taker's stream and `CapacityTaken` in the
victim's are appended, then the victim's Deployment is scaled to 0 by a merge patch that
writes the `ai.deckhouse.io/capacity-taken` annotation. The end: the high order Ready,
the low one Pending with `WorkloadReady=False PreemptedByPriority`.

Each crash run does the same with `AI_INFERENCE_FAULT=crash-after:<boundary>:1`, the first
such write of the run being the reclaim's: after the taker's record
(`append-ReplicasReclaimed`), after the victim's (`append-CapacityTaken`), after the scale
(`patch-Deployment`). The test restarts the controller without the hook (freeing the
Lease, as its expiry would) and holds the end to the clean run's: the same statuses
(phases, conditions, reasons, messages, `replanCount`) and children; the victim's
Deployment scaled exactly once in the whole run (counted from the API server's audit log:
no second take) and, after the restart, written only if the crash left it unscaled (that
one scale); one `ReplicasReclaimed` and one `CapacityTaken` in the log.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

import store
from adapters import faults
from adapters.kubernetes import kinds
from adapters.kubernetes.rest import call
from fsm import events as ev
from tests.faults.bed import NAMESPACE, QWEN_SMALL, Bed, hf
from tests.faults.crashing import (
    Mix,
    Restarting,
    State,
    content,
    differences,
    normal,
    snapshot,
)
from tests.support.controller_process import ControllerProcess
from tests.support.polling import eventually

pytestmark = [
    pytest.mark.cluster,
    # A SIGKILLed controller leaves its probe connections to the simulator's model-server
    # stubs half open; the stubs' event loop may drop one unclosed when its pod goes.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    # Its clean run is the module's: one worker runs them all (`make test` spreads the
    # crash matrix over two, each with a bed of its own).
    pytest.mark.xdist_group("crash-reclaim"),
]

T = TypeVar("T")
ROLES = ("low", "high")  # the victim, the taker
CAPACITY_TAKEN = "ai.deckhouse.io/capacity-taken"
# The taker's Planned message names the claims it needs freed: a pod's generated name.
_CLAIM = re.compile(r"<mix>-low-[a-z0-9]+(?:-[a-z0-9]+)+")


def _how(entry: dict[str, Any]) -> str:
    """A Deployment patch in the audit log: the workload's server-side apply (forced) or
    a merge patch (a reclaim's or give-back's scale)."""
    return "apply" if "force=" in str(entry.get("requestURI")).lower() else "merge"


def _spec(role: str) -> dict[str, Any]:
    return {"inferenceServiceClassName": f"crash-reclaim-{role}", "model": hf(QWEN_SMALL)}


def _conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    status = (obj or {}).get("status") or {}
    return {c["type"]: c for c in status.get("conditions") or []}


def _current(obj: dict[str, Any] | None) -> bool:
    status = (obj or {}).get("status") or {}
    return status.get("observedGeneration") == ((obj or {}).get("metadata") or {}).get("generation")


def _ready(obj: dict[str, Any] | None) -> bool:
    status = (obj or {}).get("status") or {}
    return (
        _current(obj)
        and status.get("phase") == "Ready"
        and all(c["status"] == "True" for c in _conditions(obj).values())
    )


def _preempted(obj: dict[str, Any] | None) -> bool:
    workload = _conditions(obj).get("WorkloadReady") or {}
    return (
        _current(obj)
        and ((obj or {}).get("status") or {}).get("phase") == "Pending"
        and (workload.get("status"), workload.get("reason")) == ("False", "PreemptedByPriority")
    )


@dataclass
class Outcome:
    """What one run ended with, and what the oracle counts of it."""

    summary: dict[str, Any]
    victim: dict[str, Any]  # the low order's Deployment, as the controller wrote it
    victim_patches: int  # merge patches (scales) of the victim's Deployment, whole run
    victim_writes_after_restart: list[str]  # any write to it after the restart: "verb how"
    reclaimed: list[tuple[str, int]]  # in the taker's stream: (victim, replicas)
    taken: list[tuple[str, str | None, int]]  # in the victim's: (taker, class, replicas)
    crashes: int
    victim_at_crash: dict[str, Any] | None


@dataclass
class Contention(Restarting):
    """One controller's run of the low, then the high order, named `{prefix}-{role}`;
    `fault`: the hook's spec (None: a clean run)."""

    bed: Bed
    prefix: str
    fault: str | None = None
    proc: ControllerProcess = field(init=False)
    start_offset: int = 0
    restart_offset: int | None = None
    crashes: int = 0
    victim_at_crash: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.mix = Mix(self.prefix, order=ROLES)
        self.boundary = self.fault.split(":")[1] if self.fault else None
        self.start_offset = self.bed.audit_offset()
        self.proc = self.bed.controller(env={faults.ENV: self.fault} if self.fault else None)

    def name(self, role: str) -> str:
        return self.mix.name(role)

    def drive(self) -> Outcome:
        self.bed.create(self.name("low"), _spec("low"))
        self.until(lambda: _ready(self.bed.get(self.name("low"))), what="the low order Ready")
        self.bed.create(self.name("high"), _spec("high"))
        self.until(lambda: _ready(self.bed.get(self.name("high"))), what="the high order Ready")
        self.until(
            lambda: _preempted(self.bed.get(self.name("low"))), what="the low order preempted"
        )
        self.quiet(timeout=60)
        end = snapshot(self.bed, self.mix, kinds=ROLES)
        return self._outcome(end)

    def hook_line(self) -> str:
        return f"fault hook: SIGKILL after {self.boundary} #1"

    def at_the_crash(self) -> None:
        self.victim_at_crash = self._deployment("low")

    def _deployment(self, role: str) -> dict[str, Any] | None:
        path = kinds.DEPLOYMENTS.object_path(NAMESPACE, self.name(role))
        with contextlib.suppress(Exception):
            return dict(call(self.bed.admin, "GET", path))
        return None

    def _victim_writes(self, start: int) -> list[dict[str, Any]]:
        return [
            entry
            for entry in self.bed.writes(start)
            if (entry.get("objectRef") or {}).get("resource") == "deployments"
            and (entry.get("objectRef") or {}).get("name") == self.name("low")
        ]

    def _outcome(self, end: State) -> Outcome:
        patches = [e for e in self._victim_writes(self.start_offset) if _how(e) == "merge"]
        after = (
            []
            if self.restart_offset is None
            else [f"{e.get('verb')} {_how(e)}" for e in self._victim_writes(self.restart_offset)]
        )
        victim = end.orders["low"].children[("Deployment", self.name("low"))]
        return Outcome(
            summary=self._summary(end),
            victim=victim,
            victim_patches=len(patches),
            victim_writes_after_restart=after,
            reclaimed=[
                (self._generic(e.victim), e.replicas)
                for e in self._recorded("high", ev.ReplicasReclaimed)
            ],
            taken=[
                (self._generic(e.taken_by), e.priority_class_name, e.replicas)
                for e in self._recorded("low", ev.CapacityTaken)
            ],
            crashes=self.crashes,
            victim_at_crash=self.victim_at_crash,
        )

    def _summary(self, end: State) -> dict[str, Any]:
        """The end made comparable with another run's: names, UIDs and the victim's
        claim names (generated per pod) made generic; the victim's Deployment as written,
        its capacity-taken record included."""
        out = end.summary(self.mix)
        for role in ROLES:
            for condition in out[role]["status"].get("conditions") or []:
                condition["message"] = _CLAIM.sub("<mix>-low-<claim>", condition["message"])
        victim = end.orders["low"].children[("Deployment", self.name("low"))]
        out["low"]["deployment"] = normal(content(victim), self.mix, end.uids())
        return out

    def _generic(self, name: str) -> str:
        return name.replace(f"{self.prefix}-", "<mix>-")

    def _recorded(self, role: str, kind: type[T]) -> list[T]:
        log = store.open_log(self.bed.store_url, read_only=True)
        try:
            info = log.find_stream(NAMESPACE, self.name(role))
            assert info is not None, f"no stream for {self.name(role)}"
            return [r.event for r in log.read(info.uid) if isinstance(r.event, kind)]
        finally:
            log.close()

    def finish(self) -> None:
        """Stop the controller (SIGTERM), delete both orders and wait until the device
        is free again: no claim of theirs left (the next run needs the one device)."""
        try:
            code = self.proc.stop()
            assert code == 0, self.proc.stderr[-3000:]
        finally:
            for role in ROLES:
                self.bed.delete(self.name(role))

            def freed() -> bool:
                listing = call(
                    self.bed.admin, "GET", kinds.RESOURCE_CLAIMS.collection_path(NAMESPACE)
                )
                return not [
                    claim
                    for claim in listing.get("items") or []
                    if claim["metadata"]["name"].startswith(f"{self.prefix}-")
                ]

            eventually(freed, timeout=90, interval=0.5, what=f"{self.prefix}'s claims gone")


def _run(bed: Bed, prefix: str, fault: str | None = None) -> Outcome:
    run = Contention(bed, prefix, fault)
    try:
        return run.drive()
    finally:
        run.finish()


@pytest.fixture(scope="module")
def clean(bed: Bed) -> Iterator[Outcome]:
    yield _run(bed, "rc-clean")


def _as_documented(outcome: Outcome) -> None:
    """docs/priority.md: the taker Ready, the victim Pending at zero with the record."""
    low = outcome.summary["low"]["status"]
    workload = next(c for c in low["conditions"] if c["type"] == "WorkloadReady")
    assert (low["phase"], workload["status"], workload["reason"]) == (
        "Pending",
        "False",
        "PreemptedByPriority",
    )
    assert workload["message"].startswith("1 replica(s) taken by support/<mix>-high"), workload
    assert outcome.summary["high"]["status"]["phase"] == "Ready"
    assert outcome.victim["spec"]["replicas"] == 0
    assert CAPACITY_TAKEN in (outcome.victim["metadata"].get("annotations") or {})
    assert outcome.victim_patches == 1, f"the victim was scaled {outcome.victim_patches} times"
    assert outcome.reclaimed == [("support/<mix>-low", 1)], outcome.reclaimed
    assert outcome.taken == [("support/<mix>-high", "inference-high", 1)], outcome.taken


def test_a_clean_reclaim_ends_as_documented(clean: Outcome) -> None:
    assert clean.crashes == 0
    _as_documented(clean)


# Where the reclaim's pass dies, by the hook's boundary (n = 1: the first such write of
# the run is the reclaim's), and what the victim's Deployment still needs then.
CRASHES = {
    # The taker's record appended; the victim's record and the scale not made.
    "append-ReplicasReclaimed": "unscaled",
    # Both records appended; the scale not made.
    "append-CapacityTaken": "unscaled",
    # The scale made; the pass's status and Events not.
    "patch-Deployment": "scaled",
}


@pytest.mark.parametrize("boundary", list(CRASHES))
def test_a_crash_in_a_reclaim_ends_as_a_clean_run(bed: Bed, clean: Outcome, boundary: str) -> None:
    prefix = f"rc-b{list(CRASHES).index(boundary)}"
    crashed = _run(bed, prefix, f"crash-after:{boundary}:1")
    assert crashed.crashes == 1, f"the controller never made a {boundary} write"
    at_crash = crashed.victim_at_crash or {}
    scaled = CRASHES[boundary] == "scaled"
    annotations = (at_crash.get("metadata") or {}).get("annotations") or {}
    assert (at_crash["spec"]["replicas"], CAPACITY_TAKEN in annotations) == (
        (0, True) if scaled else (1, False)
    ), at_crash

    found = differences(crashed.summary, clean.summary)
    assert not found, "\n".join(found)
    _as_documented(crashed)  # one scale in the whole run, one record of it: no second take
    # After the restart: only the scale the crash left undone, nothing else.
    assert crashed.victim_writes_after_restart == ([] if scaled else ["patch merge"])
