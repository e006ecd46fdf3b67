"""Crash at every write boundary of a pass (Sieve), restart, and compare with a clean run.

For each boundary (the log's append, each child's apply, the token Secret's create, the
status, an Event) and each seed, `ai-inference controller` runs a mix of four orders
(Ready and cluster-local, External behind a token, replanned by a model edit, one no
device can hold) with `AI_INFERENCE_FAULT=crash-after:<boundary>:<n>`: it SIGKILLs
itself right after its n-th write of that boundary. The test restarts it without the
hook, waits until everything settled, and holds the end to a clean run of the same mix:

- the same statuses (phase, conditions, reasons and messages, `resolved` with
  `replanCount`) and the same children, none duplicated, none orphaned;
- the token Secret the crash left is the one at the end (not rotated);
- after the restart, no write to an order that had settled before the crash, no write
  to an object the crash left as it ends, and no object written more often than in the
  whole clean run — counted from the API server's audit log.

The seed picks n (within the clean run's count of that boundary), the order in which
the orders are created and the pauses between them. `make test` runs one seed per
boundary; `make faults` sets AI_INFERENCE_FAULT_SEEDS=20 for the whole matrix.
"""

from __future__ import annotations

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

pytestmark = pytest.mark.cluster

SEEDS = int(os.environ.get("AI_INFERENCE_FAULT_SEEDS", "1"))
_PLURAL = {resource.kind: resource.plural for resource in CHILD_KINDS}


@dataclass
class Clean:
    summary: dict[str, Any]
    writes: Counter[tuple[str, str]]
    counts: dict[str, int]


@pytest.fixture(scope="module")
def clean(bed: Bed) -> Clean:
    mix = Mix("clean")
    run = Run(bed, mix)
    try:
        end = run.drive()
    finally:
        run.finish()
    return Clean(end.summary(mix), run.writes_of_run(), boundary_counts(bed, run))


def _objects_of(kind: str, state: State, mix: Mix) -> dict[tuple[str, str], Any]:
    """An order's objects as the audit log names them, with what the controller writes."""
    order = state.orders[kind]
    name = mix.name(kind).replace(f"{mix.prefix}-", "<mix>-")
    out: dict[tuple[str, str], Any] = {("inferenceservices/status patch", name): order.status}
    for (child_kind, child_name), child in order.children.items():
        generic = child_name.replace(f"{mix.prefix}-", "<mix>-")
        out[(_PLURAL[child_kind], generic)] = content(child)
    return out


@pytest.mark.parametrize("seed", range(SEEDS))
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_a_crash_after_any_write_ends_as_a_clean_run(
    bed: Bed, clean: Clean, boundary: str, seed: int
) -> None:
    rng = random.Random(f"{boundary}/{seed}")
    assert clean.counts[boundary] > 0, f"the clean run made no {boundary} write"
    n = rng.randint(1, clean.counts[boundary])
    mix = Mix.seeded(f"b{BOUNDARIES.index(boundary)}s{seed}", rng)
    run = Run(bed, mix, f"crash-after:{boundary}:{n}")
    try:
        end = run.drive()
    finally:
        run.finish()
    assert run.crashes == 1, f"the controller never made {n} {boundary} write(s)"
    crash = run.at_crash
    assert crash is not None

    assert not differences(end.summary(mix), clean.summary), "\n".join(
        differences(end.summary(mix), clean.summary)
    )

    for kind in crash.orders:  # the token the crash left is the one in use: never rotated
        token = crash.orders[kind].token()
        if token is not None:
            assert end.orders[kind].token() == token, f"{kind}: token rotated"

    after = run.writes_after_restart()
    for (request, name), count in after.items():
        if request.startswith(("inferenceservices/status", "events")):
            continue  # bounded by the log below: how many intermediate steps is timing
        assert count <= clean.writes[(request, name)], (
            f"{request} {name}: {count} write(s) after the restart, "
            f"{clean.writes[(request, name)]} in the whole clean run"
        )
    for kind in KINDS:
        generic = mix.name(kind).replace(f"{mix.prefix}-", "<mix>-")
        statuses, told = run.allowed_after_restart(kind)
        written = sum(
            v
            for (r, n), v in after.items()
            if r.startswith("inferenceservices/status") and n == generic
        )
        assert written <= statuses, (
            f"{kind}: {written} status writes after the restart, {statuses} distinct"
        )
        events = sum(
            v for (r, n), v in after.items() if r.startswith("events") and n == f"{generic}.*"
        )
        assert events <= told, (
            f"{kind}: {events} Events after the restart for {told} changes recorded since"
        )
        if kind not in crash.orders:
            continue  # not created yet when the controller crashed
        before, final = _objects_of(kind, crash, mix), _objects_of(kind, end, mix)
        if before == final:  # settled before the crash: the restart writes nothing at all
            written = {k: v for k, v in after.items() if k[1].startswith(generic)}
            assert not written, f"{kind} had settled before the crash, yet: {written}"
        for (resource, name), value in before.items():
            if final.get((resource, name)) != value:
                continue  # changed since the crash: the restart had to write it
            written = {k: v for k, v in after.items() if k[1] == name and k[0].startswith(resource)}
            assert not written, f"{resource} {name} was as it ends at the crash, yet: {written}"
