"""Crash at every write boundary of a pass (Sieve), restart, and compare with a clean run.

For each boundary (the log's append, each child's apply, the token Secret's create, the
status, an Event) and each seed, `ai-inference controller` runs a mix of four orders
(Ready and cluster-local, External behind a token with an HPA, replanned by a model edit,
one no device can hold) with `AI_INFERENCE_FAULT=crash-after:<boundary>:<n>`: it
SIGKILLs itself right after its n-th write of that boundary. The test restarts it
without the hook, waits until everything settled, and holds the end to a clean run:

- the same statuses (phase, conditions, reasons and messages, `resolved` with
  `replanCount`) and the same children, none duplicated, none orphaned;
- the token Secret the crash left is the one at the end (not rotated);
- after the restart, counted from the API server's audit log: no write to an order that
  had settled before the crash, none to an object the crash left as it ends, no child
  written more often than in the whole clean run, status writes and Events within what
  the log recorded after the crash.

A seed picks the order in which its mix's orders are created and the pauses between
them; a round of seeds (AI_INFERENCE_FAULT_MIXES of them, started about a second apart)
shares one crashed controller and its n. Plain `pytest` runs one seed per boundary;
`make test` and `make faults` run 20 per boundary, four to a round, on two workers.

The mixes never contend for a device, so the reclaim's boundaries (`patch-Deployment`, the
appends of `ReplicasReclaimed` and `CapacityTaken`) are crashed in test_crash_reclaim.py.
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from tests.faults.bed import CHILD_KINDS, KINDS, Bed
from tests.faults.crashing import (
    BOUNDARIES,
    Mix,
    Run,
    State,
    boundary_counts,
    content,
    differences,
)

pytestmark = [
    pytest.mark.cluster,
    # A SIGKILLed controller leaves its probe connections to the simulator's model-server
    # stubs half open; the stubs' event loop may drop one unclosed when its pod goes.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SEEDS = int(os.environ.get("AI_INFERENCE_FAULT_SEEDS", "1"))
MIXES = int(os.environ.get("AI_INFERENCE_FAULT_MIXES", "1"))  # seeds per crashed controller
ROUNDS = math.ceil(SEEDS / MIXES)
_PLURAL = {resource.kind: resource.plural for resource in CHILD_KINDS}


@dataclass
class Clean:
    summary: dict[str, Any]
    writes: Counter[tuple[str, str]]
    counts: dict[str, int]


@pytest.fixture(scope="module")
def clean(bed: Bed) -> Clean:
    mix = Mix("clean")
    run = Run(bed, [mix])
    try:
        end = run.drive()
    finally:
        run.finish()
    return Clean(end["clean"].summary(mix), run.writes_of_run(mix), boundary_counts(bed, run))


def _reached(boundary: str, clean: Clean) -> int:
    """How many writes of `boundary` a mix surely makes: half the clean run's count (how
    many intermediate steps a run shows — statuses, their Events, a replan's re-applies —
    comes and goes with timing)."""
    return max(1, clean.counts[boundary] // 2)


def _generic(name: str, mix: Mix) -> str:
    return name.replace(f"{mix.prefix}-", "<mix>-")


def _objects_of(kind: str, state: State, mix: Mix) -> dict[tuple[str, str], Any]:
    """An order's objects as the audit log names them, with what the controller writes."""
    order = state.orders[kind]
    out: dict[tuple[str, str], Any] = {
        ("inferenceservices/status patch", _generic(mix.name(kind), mix)): order.status
    }
    for (child_kind, child_name), child in order.children.items():
        out[(_PLURAL[child_kind], _generic(child_name, mix))] = content(child)
    return out


@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_a_crash_after_any_write_ends_as_a_clean_run(
    bed: Bed, clean: Clean, boundary: str, round_: int
) -> None:
    assert clean.counts[boundary] > 0, f"the clean run made no {boundary} write"
    seeds = range(round_ * MIXES, min(SEEDS, (round_ + 1) * MIXES))
    mixes, offset = [], 0.0
    for seed in seeds:
        rng = random.Random(f"{boundary}/{seed}")
        mixes.append(Mix.seeded(f"b{BOUNDARIES.index(boundary)}s{seed}", rng, offset))
        offset += rng.uniform(0.5, 1.5)
    n = random.Random(f"{boundary}/{round_}/n").randint(1, _reached(boundary, clean) * len(mixes))
    run = Run(bed, mixes, f"crash-after:{boundary}:{n}")
    try:
        ends = run.drive()
    finally:
        run.finish()
    assert run.crashes == 1, f"the controller never made {n} {boundary} write(s)"
    for mix in mixes:
        _holds(run, clean, mix, run.at_crash[mix.prefix], ends[mix.prefix])


def _holds(run: Run, clean: Clean, mix: Mix, crash: State, end: State) -> None:
    found = differences(end.summary(mix), clean.summary)
    assert not found, f"{mix}:\n" + "\n".join(found)

    for kind in crash.orders:  # the token the crash left is the one in use: never rotated
        token = crash.orders[kind].token()
        if token is not None:
            assert end.orders[kind].token() == token, f"{mix.name(kind)}: token rotated"

    after = run.writes_after_restart(mix)
    for (request, name), count in after.items():
        if request.startswith(("inferenceservices/status", "events")):
            continue  # bounded by the log below: how many intermediate steps is timing
        assert count <= clean.writes[(request, name)], (
            f"{mix.prefix} {request} {name}: {count} write(s) after the restart, "
            f"{clean.writes[(request, name)]} in the whole clean run\n"
            + run.writes_told(mix, request, name)
        )
    for kind in KINDS:
        name = mix.name(kind)
        generic = _generic(name, mix)
        statuses, told = run.allowed_after_restart(name)
        written = sum(
            v for (r, n), v in after.items() if r.startswith("inferenceservices/") and n == generic
        )
        assert written <= statuses, f"{name}: {written} status writes, {statuses} distinct"
        events = sum(
            v for (r, n), v in after.items() if r.startswith("events") and n == f"{generic}.*"
        )
        assert events <= told, f"{name}: {events} Events after the restart, {told} changes"
        if kind not in crash.orders:
            continue  # not created yet when the controller crashed
        before, final = _objects_of(kind, crash, mix), _objects_of(kind, end, mix)
        if before == final:  # settled before the crash: the restart writes nothing at all
            written_to = {k: v for k, v in after.items() if k[1].startswith(generic)}
            assert not written_to, f"{name} had settled before the crash, yet: {written_to}"
        for (resource, object_name), value in before.items():
            if final.get((resource, object_name)) != value:
                continue  # changed since the crash: the restart had to write it
            written_to = {
                k: v for k, v in after.items() if k[1] == object_name and k[0].startswith(resource)
            }
            assert not written_to, f"{resource} {object_name} was as it ends, yet: {written_to}"
