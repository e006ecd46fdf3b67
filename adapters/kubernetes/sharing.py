"""Equal parts of the orders' folded states, held once: memory per order, not per value.

The reconciler keeps every order's folded state (reconciling.py). Each order's fold builds
its own values — the class's effective policy, the model's facts and judgement, the plan's
basis, the workload — and with many orders of one class and model most of them are equal:
they were ~15 KB of every order's memory (benchmarks/memory.py). `shared_parts(state)`
returns the state with each such part replaced by an equal one another order already
holds. The values are frozen, so sharing changes no answer; a value no state holds any
more is freed (the table refers to them weakly).

Who calls it: `Reconciler._keep`, before a state is kept between passes.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["Table", "shared_parts"]

T = TypeVar("T")
_SWEEP_EVERY = 4096  # insertions between sweeps of the dead references


class Table:
    """Values by equality, weakly: `shared(v)` is an equal value already held, else `v`."""

    def __init__(self) -> None:
        self._by_hash: dict[int, list[weakref.ref[Any]]] = {}
        self._lock = threading.Lock()
        self._inserted = 0
        # Which fields were given, by value: a set per combination and model kind, not per
        # model (each is a few hundred bytes to over a kilobyte; a state has a dozen
        # fields given). Never freed: the combinations are few and fixed by the code.
        self._fields_sets: dict[frozenset[str], set[str]] = {}

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for refs in self._by_hash.values() for ref in refs if ref() is not None)

    def shared(self, value: T) -> T:
        try:
            key = hash(value)
        except TypeError:  # not frozen: never shared
            return value
        with self._lock:
            refs = self._by_hash.setdefault(key, [])
            for ref in refs:
                held = ref()
                if held is not None and _same(held, value):
                    return held  # type: ignore[no-any-return]
            refs[:] = [ref for ref in refs if ref() is not None]
            refs.append(weakref.ref(value))
            self._inserted += 1
            if self._inserted % _SWEEP_EVERY == 0:
                self._sweep()
        return value

    def share_fields_set(self, model: BaseModel) -> None:
        """Gives a frozen `model` an equal set of given fields another model holds.

        Sound only for frozen models: pydantic changes a model's set in place only when an
        attribute is set, which a frozen model refuses; `model_copy` copies it first."""
        fields = model.__pydantic_fields_set__
        with self._lock:
            held = self._fields_sets.setdefault(frozenset(fields), fields)
        if held is not fields:
            object.__setattr__(model, "__pydantic_fields_set__", held)

    def _sweep(self) -> None:
        for key in list(self._by_hash):
            alive = [ref for ref in self._by_hash[key] if ref() is not None]
            if alive:
                self._by_hash[key] = alive
            else:
                del self._by_hash[key]


def _same(held: Any, value: Any) -> bool:
    # Which fields were given explicitly is part of a model (fsm/policy.py reads it).
    return bool(
        type(held) is type(value)
        and held == value
        and (not isinstance(value, BaseModel) or held.model_fields_set == value.model_fields_set)
    )


_TABLE = Table()


def _part(value: Any, table: Table) -> Any:
    """`value` with its parts shared, and itself shared when it is a frozen model."""
    if isinstance(value, tuple):
        items = tuple(_part(item, table) for item in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if not isinstance(value, BaseModel) or not value.model_config.get("frozen"):
        return value
    updates = {}
    for name, field_value in value.__dict__.items():
        new = _part(field_value, table)
        if new is not field_value:
            updates[name] = new
    if updates:
        value = value.model_copy(update=updates)
    table.share_fields_set(value)
    return table.shared(value)


def shared_parts(state: T, table: Table | None = None, *, kept: T | None = None) -> T:
    """`state` (a frozen model) with every part that is a frozen model shared; the state
    itself, unique to its order, is not put in the table.

    `kept` is a state this returned before, that `state` was folded from: a part still
    the very object `kept` holds is shared already and is not walked again. A fold
    changes a field or two of a state, and hashing every other part anew (models hash
    all their fields) was 5 % of the controller's CPU in a rollout."""
    if not isinstance(state, BaseModel):
        return state
    table = _TABLE if table is None else table
    before = kept.__dict__ if isinstance(kept, BaseModel) else {}
    updates = {}
    for name, value in state.__dict__.items():
        if name in before and before[name] is value:
            continue
        new = _part(value, table)
        if new is not value:
            updates[name] = new
    state = state.model_copy(update=updates) if updates else state
    if state.model_config.get("frozen"):
        table.share_fields_set(state)
    return state
