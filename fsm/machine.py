"""The order state machine, declared once as data, and the cheap cursor that walks it.

An order is in one leaf of a hierarchical machine: Pending (with one sub-state per
readiness condition it can be held at), Ready (serving on a fresh plan, or on the plan
in force after a failed recalculation), Degraded (serving but unable to grow), Failed
(was serving, the API failed persistently) and Deleted. The top level is the order's
`status.phase`.

The machine does not read events. After every event the fold judges the six conditions
(`fsm.status.judge`) and fires `settle` until no guard passes: each step moves the
order one stage along the chain of conditions — forward when the condition it is held
at turns True, back when one before it breaks — so the diagram is the chain the user
reads in `status.conditions`. Guards are named pure predicates of the conditions'
(status, reason) pairs; nothing has side effects; `auto_transitions` is off.

Cost: `transitions` models must be plain objects and `add_model` is O(N), so one static
machine drives one private cursor (added once) and the order's state is just the leaf
name stored in `OrderState`. A walk's result depends only on (leaf, condition summary),
so it is memoised: the machine runs once per distinct pair, never once per order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from enum import StrEnum
from functools import lru_cache
from typing import Any, NamedTuple

# The module, not the package: the package imports asyncio and the diagram support too.
from transitions.extensions.nesting import HierarchicalMachine

from fsm.reasons import ConditionStatus, Phase, Reason

__all__ = [
    "DELETE",
    "GUARDS",
    "LEAF_MEANING",
    "SETTLE",
    "STATES",
    "TRANSITIONS",
    "Edge",
    "Leaf",
    "Summary",
    "cache_info",
    "delete",
    "edges",
    "machine",
    "phase_of",
    "settle",
    "step",
    "summarize",
]

SETTLE = "settle"
DELETE = "delete"


class Leaf(StrEnum):
    """Every state an order can be in; the value is the nested name (`_` separated)."""

    PENDING_CLASS = "Pending_Class"
    PENDING_MODEL = "Pending_Model"
    PENDING_PLAN = "Pending_Plan"
    PENDING_WORKLOAD = "Pending_Workload"
    PENDING_PROBE = "Pending_Probe"
    READY_SERVING = "Ready_Serving"
    READY_PLAN_IN_FORCE = "Ready_PlanInForce"
    DEGRADED_SCALE_UP_BLOCKED = "Degraded_ScaleUpBlocked"
    DEGRADED_CAPACITY_TAKEN = "Degraded_CapacityTaken"
    FAILED = "Failed"
    DELETED = "Deleted"


STATES: list[str | dict[str, Any]] = [
    {
        "name": "Pending",
        "initial": "Class",
        "children": ["Class", "Model", "Plan", "Workload", "Probe"],
    },
    {"name": "Ready", "initial": "Serving", "children": ["Serving", "PlanInForce"]},
    {
        "name": "Degraded",
        "initial": "ScaleUpBlocked",
        "children": ["ScaleUpBlocked", "CapacityTaken"],
    },
    "Failed",
    "Deleted",
]

LEAF_MEANING: dict[Leaf, str] = {
    Leaf.PENDING_CLASS: "Held at ClassResolved: the class is being judged or refused the order.",
    Leaf.PENDING_MODEL: "Held at ModelResolved: the model ref is being resolved or was refused.",
    Leaf.PENDING_PLAN: "Held at Planned: no launch plan yet, or none fits.",
    Leaf.PENDING_WORKLOAD: "Held at WorkloadReady: the workload is applied and rolling out.",
    Leaf.PENDING_PROBE: "Held at Ready: waiting for the first successful probe.",
    Leaf.READY_SERVING: "Serving on the plan it computed; growth healthy.",
    Leaf.READY_PLAN_IN_FORCE: "Serving on the plan it holds; a recalculation failed.",
    Leaf.DEGRADED_SCALE_UP_BLOCKED: "Serving, but cannot grow: preemption exhausted capacity.",
    Leaf.DEGRADED_CAPACITY_TAKEN: "Serving at fewer replicas: a higher-priority order took some.",
    Leaf.FAILED: "Was serving; the inference API failed persistently (ServiceUnhealthy).",
    Leaf.DELETED: "The order is gone; its stream is closed.",
}

# (status, reason) of the six conditions in SPEC order: all a guard may look at.
Summary = tuple[tuple[ConditionStatus, Reason], ...]
_CLASS, _MODEL, _PLAN, _WORKLOAD, _READY, _SCALING = range(6)
_T = ConditionStatus.TRUE


def summarize(verdicts: Sequence[Any]) -> Summary:
    """The guards' view of judged conditions (anything with `.status` and `.reason`)."""
    return tuple((v.status, v.reason) for v in verdicts)


def _true_up_to(s: Summary, last: int) -> bool:
    return all(status is _T for status, _ in s[: last + 1])


# --- guards: pure predicates of the summary ------------------------------------------


def class_true(s: Summary) -> bool:
    """ClassResolved is True."""
    return s[_CLASS][0] is _T


def class_broken(s: Summary) -> bool:
    """ClassResolved is not True."""
    return not class_true(s)


def model_true(s: Summary) -> bool:
    """ModelResolved is True."""
    return s[_MODEL][0] is _T


def broken_before_plan(s: Summary) -> bool:
    """A condition before Planned is not True."""
    return not _true_up_to(s, _MODEL)


def plan_true(s: Summary) -> bool:
    """Planned is True (a fresh plan, or the plan in force)."""
    return s[_PLAN][0] is _T


def broken_before_workload(s: Summary) -> bool:
    """A condition before WorkloadReady is not True."""
    return not _true_up_to(s, _PLAN)


def workload_true(s: Summary) -> bool:
    """WorkloadReady is True."""
    return s[_WORKLOAD][0] is _T


def broken_before_probe(s: Summary) -> bool:
    """A condition before Ready is not True."""
    return not _true_up_to(s, _WORKLOAD)


def endpoint_serving(s: Summary) -> bool:
    """Ready is True: the inference API answered."""
    return s[_READY][0] is _T


def service_unhealthy(s: Summary) -> bool:
    """Ready is False with ServiceUnhealthy: probes failed persistently after Ready."""
    return s[_READY][1] is Reason.SERVICE_UNHEALTHY


def plan_in_force(s: Summary) -> bool:
    """Planned holds LaunchPlanInForce: a recalculation failed, the held plan serves."""
    return s[_PLAN][1] is Reason.LAUNCH_PLAN_IN_FORCE


def plan_current(s: Summary) -> bool:
    """Planned holds PlanComputed."""
    return s[_PLAN][1] is Reason.PLAN_COMPUTED


def scale_up_blocked(s: Summary) -> bool:
    """ScalingHealthy is False with ScaleUpBlocked."""
    return s[_SCALING][1] is Reason.SCALE_UP_BLOCKED


def capacity_taken(s: Summary) -> bool:
    """ScalingHealthy is False with CapacityTakenByPriority."""
    return s[_SCALING][1] is Reason.CAPACITY_TAKEN_BY_PRIORITY


def growth_healthy(s: Summary) -> bool:
    """ScalingHealthy is True."""
    return s[_SCALING][0] is _T


Guard = Callable[[Summary], bool]
GUARDS: dict[str, Guard] = {
    g.__name__: g
    for g in (
        class_true,
        class_broken,
        model_true,
        broken_before_plan,
        plan_true,
        broken_before_workload,
        workload_true,
        broken_before_probe,
        endpoint_serving,
        service_unhealthy,
        plan_in_force,
        plan_current,
        scale_up_blocked,
        capacity_taken,
        growth_healthy,
    )
}


def _settle(source: str, dest: str, guard: Guard) -> dict[str, Any]:
    # Plain strings: transitions would name an Enum member by its .name, not its value.
    return {"trigger": SETTLE, "source": str(source), "dest": str(dest), "conditions": [guard]}


_L = Leaf
# Order matters within a source: the first passing guard wins, and a child's transitions
# are tried before its parent's. Backward moves come first, so a broken chain wins.
TRANSITIONS: list[dict[str, Any]] = [
    _settle(_L.PENDING_CLASS, _L.PENDING_MODEL, class_true),
    _settle(_L.PENDING_MODEL, _L.PENDING_CLASS, class_broken),
    _settle(_L.PENDING_MODEL, _L.PENDING_PLAN, model_true),
    _settle(_L.PENDING_PLAN, _L.PENDING_MODEL, broken_before_plan),
    _settle(_L.PENDING_PLAN, _L.PENDING_WORKLOAD, plan_true),
    _settle(_L.PENDING_WORKLOAD, _L.PENDING_PLAN, broken_before_workload),
    _settle(_L.PENDING_WORKLOAD, _L.PENDING_PROBE, workload_true),
    _settle(_L.PENDING_PROBE, _L.PENDING_WORKLOAD, broken_before_probe),
    _settle(_L.PENDING_PROBE, "Ready", endpoint_serving),
    # After the first Ready a failing probe never means HealthCheckFailed again, so an
    # order coming back from Pending_Workload may be straight Failed.
    _settle(_L.PENDING_PROBE, _L.FAILED, service_unhealthy),
    _settle(_L.READY_SERVING, _L.READY_PLAN_IN_FORCE, plan_in_force),
    _settle(_L.READY_PLAN_IN_FORCE, _L.READY_SERVING, plan_current),
    _settle("Ready", _L.PENDING_WORKLOAD, broken_before_probe),
    _settle("Ready", _L.FAILED, service_unhealthy),
    _settle("Ready", _L.DEGRADED_SCALE_UP_BLOCKED, scale_up_blocked),
    _settle("Ready", _L.DEGRADED_CAPACITY_TAKEN, capacity_taken),
    _settle(_L.DEGRADED_SCALE_UP_BLOCKED, _L.DEGRADED_CAPACITY_TAKEN, capacity_taken),
    _settle(_L.DEGRADED_CAPACITY_TAKEN, _L.DEGRADED_SCALE_UP_BLOCKED, scale_up_blocked),
    _settle("Degraded", _L.PENDING_WORKLOAD, broken_before_probe),
    _settle("Degraded", _L.FAILED, service_unhealthy),
    _settle("Degraded", "Ready", growth_healthy),
    _settle(_L.FAILED, _L.PENDING_WORKLOAD, broken_before_probe),
    _settle(_L.FAILED, "Ready", endpoint_serving),
    {"trigger": DELETE, "source": ["Pending", "Ready", "Degraded", "Failed"], "dest": "Deleted"},
]


class Edge(NamedTuple):
    trigger: str
    source: str
    dest: str
    guard: str | None


def edges() -> list[Edge]:
    """TRANSITIONS flattened one source per row, for the docs and the tests."""
    out: list[Edge] = []
    for t in TRANSITIONS:
        sources = t["source"] if isinstance(t["source"], list) else [t["source"]]
        conditions = t.get("conditions") or [None]
        guard = None if conditions[0] is None else conditions[0].__name__
        out.extend(Edge(t["trigger"], str(src), str(t["dest"]), guard) for src in sources)
    return out


_PHASES: dict[str, Phase] = {p.value: p for p in Phase}


def phase_of(leaf: str) -> Phase | None:
    """The phase a leaf stands for; None for Deleted (the order keeps its last phase)."""
    return _PHASES.get(leaf.split("_", 1)[0])


# --- the one machine and its cursor --------------------------------------------------


class _Cursor:
    """The single model the machine drives; it carries a leaf name and nothing else."""

    state: str = Leaf.PENDING_CLASS.value


_MACHINE = HierarchicalMachine(
    model=None,
    states=STATES,
    transitions=TRANSITIONS,
    initial="Pending",
    auto_transitions=False,
    ignore_invalid_triggers=False,  # a trigger with no edge from a state is a bug
    send_event=False,
)
_CURSOR: Any = _Cursor()
_MACHINE.add_model(_CURSOR, initial=Leaf.PENDING_CLASS.value)
# transitions scopes nested states on the machine object while it triggers, so walks
# are serialised; cached answers need no lock.
_LOCK = threading.Lock()
# A walk visits each leaf at most once in each direction.
_MAX_STEPS = 2 * len(Leaf)


def machine() -> HierarchicalMachine:
    return _MACHINE


@lru_cache(maxsize=8192)
def _walk(source: str, trigger: str, summary: Summary) -> str:
    with _LOCK:
        _CURSOR.state = str(source)
        if trigger == DELETE:
            _CURSOR.trigger(DELETE)
            return str(_CURSOR.state)
        for _ in range(_MAX_STEPS):
            if not _CURSOR.trigger(SETTLE, summary):
                return str(_CURSOR.state)
        raise RuntimeError(f"the order machine did not settle from {source} on {summary}")


def step(source: str, summary: Summary) -> str:
    """One `settle` step, uncached: the state (maybe a composite's entry) it moves to."""
    with _LOCK:
        _CURSOR.state = str(source)
        _CURSOR.trigger(SETTLE, summary)
        return str(_CURSOR.state)


def settle(source: str, verdicts: Sequence[Any]) -> Leaf:
    """The leaf an order in `source` reaches once the judged conditions take effect."""
    return Leaf(_walk(source, SETTLE, summarize(verdicts)))


def delete(source: str) -> Leaf:
    return Leaf(_walk(source, DELETE, ()))


def cache_info() -> Any:
    """How often the machine itself ran (misses) versus answered from memory (hits)."""
    return _walk.cache_info()
