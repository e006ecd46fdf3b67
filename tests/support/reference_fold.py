"""The fold as first written, without its shortcuts: the reference the fast one must equal.

`fsm.fold.evolve` judges only the conditions whose facts moved (`fsm.status.rejudge`) and
copies the state once per event. This is the plain version: every condition judged from
scratch (`fsm.status.judge`), a fresh copy for the facts and another for what judging
them settles. The property tests fold the same streams both ways and compare.
"""

from __future__ import annotations

from collections.abc import Iterable

from fsm import events as ev
from fsm import fold as fast
from fsm import machine
from fsm.reasons import Phase
from fsm.state import OrderState
from fsm.status import judge

__all__ = ["evolve", "fold"]

_SERVING = (Phase.READY, Phase.DEGRADED)


def evolve(state: OrderState, event: ev.Event) -> OrderState:
    if state.deleted:
        return state.model_copy(update={"version": state.version + 1})
    updates = fast._HANDLERS[type(event)](state, event)
    updates["version"] = state.version + 1
    updates["last_event_at"] = event.observed_at
    facts = state.model_copy(update=updates)

    verdicts = judge(facts)
    if isinstance(event, ev.OrderDeleted):
        leaf, phase = machine.delete(state.machine_state), state.phase
    else:
        leaf = machine.settle(state.machine_state, verdicts)
        phase = machine.phase_of(leaf) or state.phase
    moved = leaf.value != state.machine_state or state.state_since is None
    return facts.model_copy(
        update={
            "conditions": fast._stamp(state.conditions, verdicts, event.observed_at),
            "machine_state": leaf.value,
            "phase": phase,
            "state_since": event.observed_at if moved else state.state_since,
            "ever_ready": facts.ever_ready or phase in _SERVING,
        }
    )


def fold(events: Iterable[ev.Event], start: OrderState | None = None) -> OrderState:
    state = OrderState() if start is None else start
    for event in events:
        state = evolve(state, event)
    return state
