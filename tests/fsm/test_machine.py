"""The order machine: every declared transition, the settle walk, and its cost model."""

from __future__ import annotations

import pytest

from fsm import machine
from fsm.machine import Leaf, Summary
from fsm.reasons import ConditionStatus, Phase, Reason
from tests.support.strategies import expected_leaf

T, F, U = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN
R = Reason

_OK = (
    (T, R.CLASS_ADMITTED),
    (T, R.MODEL_RESOLVED),
    (T, R.PLAN_COMPUTED),
    (T, R.WORKLOAD_AVAILABLE),
    (T, R.ENDPOINT_SERVING),
    (T, R.SCALING_WITHIN_BOUNDS),
)
_AWAITING = (
    R.AWAITING_CLASS,
    R.AWAITING_MODEL,
    R.AWAITING_PLAN,
    R.AWAITING_WORKLOAD,
    R.NOT_SERVING,
)


def held_at(index: int, status: ConditionStatus, reason: Reason) -> Summary:
    """True up to `index`, then the holding condition, then Unknown as judge makes them."""
    tail = tuple((U, r) for r in _AWAITING[index:])
    return (*_OK[:index], (status, reason), *tail)


def serving(
    plan: Reason = R.PLAN_COMPUTED, scaling: tuple[ConditionStatus, Reason] = _OK[5]
) -> Summary:
    return (_OK[0], _OK[1], (T, plan), _OK[3], _OK[4], scaling)


CLASS_BAD = held_at(0, F, R.CLASS_NOT_FOUND)
MODEL_BAD = held_at(1, F, R.MODEL_NOT_FOUND)
PLAN_BAD = held_at(2, F, R.NO_CAPACITY)
ROLLING = held_at(3, F, R.ROLLOUT_IN_PROGRESS)
FIRST_PROBE = held_at(4, F, R.AWAITING_FIRST_PROBE)
UNHEALTHY = held_at(4, F, R.SERVICE_UNHEALTHY)
SERVING = serving()
IN_FORCE = serving(R.LAUNCH_PLAN_IN_FORCE)
BLOCKED = serving(scaling=(F, R.SCALE_UP_BLOCKED))
TAKEN = serving(scaling=(F, R.CAPACITY_TAKEN_BY_PRIORITY))

L = Leaf
# (declared source, the leaf the test starts in, summary, the leaf one step reaches)
SETTLE_STEPS = [
    ("Pending_Class", L.PENDING_CLASS, MODEL_BAD, L.PENDING_MODEL),
    ("Pending_Model", L.PENDING_MODEL, CLASS_BAD, L.PENDING_CLASS),
    ("Pending_Model", L.PENDING_MODEL, PLAN_BAD, L.PENDING_PLAN),
    ("Pending_Plan", L.PENDING_PLAN, MODEL_BAD, L.PENDING_MODEL),
    ("Pending_Plan", L.PENDING_PLAN, ROLLING, L.PENDING_WORKLOAD),
    ("Pending_Workload", L.PENDING_WORKLOAD, PLAN_BAD, L.PENDING_PLAN),
    ("Pending_Workload", L.PENDING_WORKLOAD, FIRST_PROBE, L.PENDING_PROBE),
    ("Pending_Probe", L.PENDING_PROBE, ROLLING, L.PENDING_WORKLOAD),
    ("Pending_Probe", L.PENDING_PROBE, SERVING, L.READY_SERVING),
    ("Pending_Probe", L.PENDING_PROBE, UNHEALTHY, L.FAILED),
    ("Ready_Serving", L.READY_SERVING, IN_FORCE, L.READY_PLAN_IN_FORCE),
    ("Ready_PlanInForce", L.READY_PLAN_IN_FORCE, SERVING, L.READY_SERVING),
    ("Ready", L.READY_SERVING, ROLLING, L.PENDING_WORKLOAD),
    ("Ready", L.READY_SERVING, UNHEALTHY, L.FAILED),
    ("Ready", L.READY_SERVING, BLOCKED, L.DEGRADED_SCALE_UP_BLOCKED),
    ("Ready", L.READY_SERVING, TAKEN, L.DEGRADED_CAPACITY_TAKEN),
    ("Degraded_ScaleUpBlocked", L.DEGRADED_SCALE_UP_BLOCKED, TAKEN, L.DEGRADED_CAPACITY_TAKEN),
    ("Degraded_CapacityTaken", L.DEGRADED_CAPACITY_TAKEN, BLOCKED, L.DEGRADED_SCALE_UP_BLOCKED),
    ("Degraded", L.DEGRADED_CAPACITY_TAKEN, ROLLING, L.PENDING_WORKLOAD),
    ("Degraded", L.DEGRADED_SCALE_UP_BLOCKED, UNHEALTHY, L.FAILED),
    ("Degraded", L.DEGRADED_SCALE_UP_BLOCKED, SERVING, L.READY_SERVING),
    ("Failed", L.FAILED, ROLLING, L.PENDING_WORKLOAD),
    ("Failed", L.FAILED, SERVING, L.READY_SERVING),
]
_DEST_NAME = {L.READY_SERVING: "Ready"}  # a composite destination enters its initial child


def _declared_dest(source: str, dest: Leaf) -> str:
    declared = {(e.source, e.dest) for e in machine.edges()}
    return _DEST_NAME[dest] if (source, _DEST_NAME.get(dest, "")) in declared else dest.value


@pytest.mark.parametrize(
    ("source", "start", "summary", "dest"),
    SETTLE_STEPS,
    ids=[f"{s}->{d.value}" for s, _, _, d in SETTLE_STEPS],
)
def test_every_settle_transition_takes_one_step(
    source: str, start: Leaf, summary: Summary, dest: Leaf
) -> None:
    assert machine.step(start, summary) == dest.value


def test_the_step_table_covers_every_declared_transition() -> None:
    covered = {("settle", s, _declared_dest(s, d)) for s, _, _, d in SETTLE_STEPS}
    covered |= {("delete", p, "Deleted") for p in ("Pending", "Ready", "Degraded", "Failed")}
    assert covered == {(e.trigger, e.source, e.dest) for e in machine.edges()}


@pytest.mark.parametrize("start", [leaf for leaf in Leaf if leaf is not Leaf.DELETED], ids=str)
def test_every_live_state_can_be_deleted(start: Leaf) -> None:
    assert machine.delete(start) is Leaf.DELETED


def test_deleted_is_final() -> None:
    assert [e for e in machine.edges() if e.source == "Deleted"] == []


SUMMARIES = {
    "class-bad": CLASS_BAD,
    "model-bad": MODEL_BAD,
    "plan-bad": PLAN_BAD,
    "rolling": ROLLING,
    "first-probe": FIRST_PROBE,
    "unhealthy": UNHEALTHY,
    "serving": SERVING,
    "in-force": IN_FORCE,
    "blocked": BLOCKED,
    "taken": TAKEN,
}
_SERVED = {
    L.READY_SERVING,
    L.READY_PLAN_IN_FORCE,
    L.DEGRADED_SCALE_UP_BLOCKED,
    L.DEGRADED_CAPACITY_TAKEN,
    L.FAILED,
}


# Every live state with every summary, except one pair no stream can reach: once an order
# has served, Ready is never AwaitingFirstProbe again.
WALKS = [
    (start, name)
    for start in Leaf
    if start is not Leaf.DELETED
    for name in SUMMARIES
    if not (start in _SERVED and name == "first-probe")
]


@pytest.mark.parametrize(("start", "name"), WALKS, ids=[f"{s.value}-{n}" for s, n in WALKS])
def test_settle_walks_to_where_the_conditions_say(start: Leaf, name: str) -> None:
    summary = SUMMARIES[name]
    assert machine.settle(start, [_Pair(*p) for p in summary]) is expected_leaf(summary)


class _Pair:
    def __init__(self, status: ConditionStatus, reason: Reason) -> None:
        self.status, self.reason = status, reason


@pytest.mark.parametrize(
    ("leaf", "phase"),
    [
        (L.PENDING_PLAN, Phase.PENDING),
        (L.READY_PLAN_IN_FORCE, Phase.READY),
        (L.DEGRADED_CAPACITY_TAKEN, Phase.DEGRADED),
        (L.FAILED, Phase.FAILED),
        (L.DELETED, None),
    ],
    ids=str,
)
def test_the_top_level_state_is_the_phase(leaf: Leaf, phase: Phase | None) -> None:
    assert machine.phase_of(leaf.value) == phase


def test_no_auto_transitions_and_no_callbacks() -> None:
    m = machine.machine()
    assert not m.auto_transitions
    assert set(m.get_triggers(*[leaf.value for leaf in Leaf])) == {"settle", "delete"}
    for transitions in (t for e in m.events.values() for ts in e.transitions.values() for t in ts):
        assert transitions.before == [] and transitions.after == [] and transitions.prepare == []
        assert all(c.func in machine.GUARDS.values() for c in transitions.conditions)


def test_one_cursor_serves_every_order_and_walks_are_memoised() -> None:
    before = machine.cache_info()
    for _ in range(1000):
        machine.settle(L.PENDING_CLASS, [_Pair(*p) for p in SERVING])
    after = machine.cache_info()
    assert len(machine.machine().models) == 1
    assert after.misses - before.misses <= 1
    assert after.hits - before.hits >= 999


def test_guards_are_named_after_their_functions() -> None:
    assert all(name == guard.__name__ and guard.__doc__ for name, guard in machine.GUARDS.items())
    used = {e.guard for e in machine.edges() if e.guard is not None}
    assert used == set(machine.GUARDS)
