"""Pure text and rows for the audit CLI: `ai-inference why` and `ai-inference history`.

`explain` answers an administrator's question about one order: where it is and since
when, which condition holds it and why, the decisions that led there (for a plan, every
candidate the planner weighed and why it lost) and who can unblock it — the answer comes
from the reason catalogue, so it is the same text the reasons page documents.

`history_rows` folds a stream event by event and reports, per event, what it changed:
the CLI prints the rows as a table or as JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fsm import events as ev
from fsm.fold import evolve
from fsm.reasons import (
    CATALOGUE,
    READINESS_CONDITIONS,
    ConditionStatus,
    ConditionType,
    Phase,
    Reason,
    Who,
)
from fsm.state import Condition, OrderState
from fsm.status import rfc3339
from fsm.values import Candidate

__all__ = [
    "WHO_CAN_ACT",
    "HistoryRow",
    "blocking_condition",
    "explain",
    "history_rows",
    "who_can_act",
]

WHO_CAN_ACT: dict[Who, str] = {
    Who.NOBODY: "nobody needs to act",
    Who.WAIT: "nobody: it resolves by itself, waiting is the right answer",
    Who.USER: "the order's author: the model ref, the auth Secret or the class name in the spec",
    Who.ADMIN: "the cluster administrator: the class, the launch recipes or the capacity",
}


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """What one event did to the order."""

    version: int
    at: datetime
    type: str
    phase_before: Phase
    phase_after: Phase
    state_before: str
    state_after: str
    changes: tuple[str, ...]  # "Planned: Unknown -> False (NoCapacity)"
    reason: str  # the event's own reason, else the first changed condition's, else ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "time": rfc3339(self.at),
            "type": self.type,
            "phaseBefore": str(self.phase_before),
            "phaseAfter": str(self.phase_after),
            "stateBefore": self.state_before,
            "stateAfter": self.state_after,
            "changes": list(self.changes),
            "reason": self.reason,
        }


def _changes(before: OrderState, after: OrderState) -> list[tuple[Condition | None, Condition]]:
    old = {c.type: c for c in before.conditions}
    out: list[tuple[Condition | None, Condition]] = []
    for cond in after.conditions:
        prev = old.get(cond.type)
        if prev is None or (prev.status, prev.reason) != (cond.status, cond.reason):
            out.append((prev, cond))
    return out


def _describe(prev: Condition | None, cond: Condition) -> str:
    was = "-" if prev is None else f"{prev.status} ({prev.reason})"
    return f"{cond.type}: {was} -> {cond.status} ({cond.reason})"


def history_rows(events: Iterable[ev.Event], start: OrderState | None = None) -> list[HistoryRow]:
    """One row per event: its time and type, and the phase and conditions it changed."""
    state = OrderState() if start is None else start
    rows: list[HistoryRow] = []
    for event in events:
        after = evolve(state, event)
        changed = _changes(state, after)
        own = getattr(event, "reason", None)
        reason = (
            str(own) if isinstance(own, Reason) else (str(changed[0][1].reason) if changed else "")
        )
        rows.append(
            HistoryRow(
                version=after.version,
                at=event.observed_at,
                type=event.TYPE,
                phase_before=state.phase,
                phase_after=after.phase,
                state_before=state.machine_state,
                state_after=after.machine_state,
                changes=tuple(_describe(p, c) for p, c in changed),
                reason=reason,
            )
        )
        state = after
    return rows


def blocking_condition(state: OrderState) -> Condition | None:
    """The condition that keeps the order from being Ready and healthy, if any.

    The first readiness condition that is not True; else a False ScalingHealthy; else a
    Planned condition held on the plan in force (serving, but a recalculation failed).
    """
    for type_ in READINESS_CONDITIONS:
        cond = state.condition(type_)
        if cond is not None and cond.status is not ConditionStatus.TRUE:
            return cond
    scaling = state.condition(ConditionType.SCALING_HEALTHY)
    if scaling is not None and scaling.status is ConditionStatus.FALSE:
        return scaling
    planned = state.condition(ConditionType.PLANNED)
    if planned is not None and planned.reason is Reason.LAUNCH_PLAN_IN_FORCE:
        return planned
    return None


def who_can_act(state: OrderState, cond: Condition) -> Who:
    """Who can move `cond` on: its reason's, but for a plan held in force, whose
    recalculation failed for a reason of its own (PlacementUndecidable needs the admin;
    "waiting is the right answer" was wrong there, and its Event was Normal)."""
    attempt = state.attempt
    if cond.reason is Reason.LAUNCH_PLAN_IN_FORCE and attempt is not None and not attempt.ok:
        return CATALOGUE[attempt.reason].who
    return CATALOGUE[cond.reason].who


def _candidate_line(c: Candidate) -> str:
    shape = [str(x) for x in (c.product_name, c.placement_mode, c.sharing_mode) if x is not None]
    if c.accelerator_count is not None:
        shape.append(f"x{c.accelerator_count}")
    head = f"{c.device_class} ({', '.join(shape)})" if shape else c.device_class
    verdict = "chosen" if c.lost_because is None else f"lost, {c.lost_because}"
    return f"    - {head}: {verdict}" + (f" - {c.detail}" if c.detail else "")


def explain(state: OrderState, events: Sequence[ev.Event] = ()) -> str:
    """Why the order is where it is, in a few lines of plain text."""
    who = f"{state.namespace}/{state.name}" if state.name else "The order"
    since = f" since {rfc3339(state.state_since)}" if state.state_since is not None else ""
    lines = [f"{who}: {state.phase} ({state.machine_state}){since}, generation {state.generation}."]
    if state.deleted:
        lines.append("The order was deleted; its stream is closed.")
        return "\n".join(lines) + "\n"

    block = blocking_condition(state)
    if block is None:
        lines.append("Nothing blocks it: every condition is True.")
    else:
        info = CATALOGUE[block.reason]
        lines += [
            f"Held at {block.type}={block.status}, reason {block.reason}: {block.message}",
            f"  What it means: {info.meaning}",
            f"  Who can unblock it: {WHO_CAN_ACT[who_can_act(state, block)]}.",
        ]
        decisions = [
            row
            for row in history_rows(events)
            if any(ch.startswith(f"{block.type}:") for ch in row.changes)
        ]
        if decisions:
            lines.append("Decisions that led here:")
            lines += [f"  {rfc3339(r.at)} {r.type} ({r.reason})" for r in decisions[-5:]]
        a = state.attempt
        if block.type is ConditionType.PLANNED and a is not None and not a.ok:
            lines.append(f"Last plan attempt ({rfc3339(a.at)}): {a.reason}. Candidates:")
            lines += [_candidate_line(c) for c in a.candidates] or ["    (none: nothing to try)"]
            if a.excluded_device_classes:
                lines.append(f"  Excluded as tried: {', '.join(a.excluded_device_classes)}")

    lines.append("Conditions:")
    lines += [
        f"  {c.type:<15} {c.status:<8} {c.reason:<30} {c.message}".rstrip()
        for c in state.conditions
    ]
    return "\n".join(lines) + "\n"
