"""Cached objects held compactly: strings interned, equal parts held once.

Each watch event is parsed on its own, so each cached object had its own copy of every
key ("metadata", "name", ...) and of every repeated value (the order's UID in each child's
labels and owner reference, "True", timestamps, the image): interning them halved what
the cache held per order. Whole parts repeat too: the Deployments of one model have the
same args, ports, resources, probe, volumes and strategy; an order's children carry the
same labels and owner reference; a settled rollout's status is the same everywhere. With
~9 cached objects per order, those parts were most of what was left of the controller's
memory per order (benchmarks/memory.py). `compact` returns the object with each part
(a dict or a list) replaced by an equal one already held, if any.

A shared part belongs to many cached objects, so it must never be changed; that is the
cache's rule already (`Informer.get(copy_=False)` hands out objects to read only, and the
default hands out a deep copy). Parts no cached object holds any more are swept from the
table in amortized constant time per insertion; the table holds only the parts, never
the objects themselves (the top level is unique to its object: it has the object's UID).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

__all__ = ["Compactor", "compact", "copied", "dropped"]

_SHARED_TEXT = 128  # strings up to this length are interned; longer ones are rarely equal
_MIN_SWEEP = 1024  # insertions before the first sweep of parts nobody holds


def _intern(value: Any) -> Any:
    return sys.intern(value) if type(value) is str and len(value) <= _SHARED_TEXT else value


class Compactor:
    """A table of parts by value; `compact(obj)` is `obj` built from the table's parts.

    Bottom-up: a part's own parts are already the table's, so two equal parts have the
    very same items, and telling them equal is one identity check per item. The table is
    keyed by a hash of those identities (of an interned string, its own), so an entry
    costs a number, not a copy of the part's shape."""

    def __init__(self, sweep_after: int = _MIN_SWEEP) -> None:
        self._held: dict[int, Any] = {}
        self._sweep_after = sweep_after  # changes at least, before a sweep
        self._lock = threading.Lock()
        self._changes = 0  # parts entered and objects dropped since the last sweep
        self._novel = False  # whether a part under the one being built was new

    def __len__(self) -> int:
        return len(self._held)

    def compact(self, value: Any) -> Any:
        """`value` (parsed JSON) with keys and short strings interned and parts shared;
        the top-level dict or list itself is a new one, never shared."""
        with self._lock:
            self._novel = False
            if type(value) is dict:
                out: Any = {_intern(k): self._part(v) for k, v in value.items()}
            elif type(value) is list:
                out = [self._part(item) for item in value]
            else:
                out = _intern(value)
            self._sweep_if_due()
            return out

    def dropped(self) -> None:
        """An object left a cache: its parts may be held by the table alone now."""
        with self._lock:
            self._changes += 1
            self._sweep_if_due()

    def _sweep_if_due(self) -> None:
        # Amortized: a sweep visits every entry, and comes after as many changes.
        if self._changes > max(self._sweep_after, len(self._held)):
            self._sweep()

    def _part(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            text = _intern(value)
            if text is value and 1 < len(value) <= _SHARED_TEXT:
                # No equal string lived in the process: a UID, a name, an RV met for the
                # first time. What holds it is new too. (This tells strings fresh from a
                # parse, as every watched object's are. Empty and one-letter strings are
                # left out: most are the interpreter's own singletons, always `is`.)
                self._novel = True
            return text
        if kind is not dict and kind is not list:
            return value
        outer, self._novel = self._novel, False
        if kind is dict:
            fresh: Any = {_intern(k): self._part(v) for k, v in value.items()}
        else:
            fresh = [self._part(item) for item in value]
        if self._novel:
            # A part of it was new (to the table, or a string to the process), so it is
            # too, and likely unique to its object (its metadata, with its UID and RV): not
            # entered, lest the table hold an entry for every part of every object (a
            # number and a slot each, ~90 bytes). Entered the next time it is seen, its
            # parts by then held: an object's shared parts are shared from the second
            # object on that has them (deeper ones from the third), not from the first.
            return fresh
        if kind is dict:
            key = hash((dict, *fresh, *map(_key_of, fresh.values())))
        else:
            key = hash((list, *map(_key_of, fresh)))
        held = self._held.get(key)
        if held is not None and _same(held, fresh):
            self._novel = outer
            return held
        if held is None:
            self._held[key] = fresh
            self._changes += 1
        self._novel = True  # (a collision, not entered: as new to its parent, too)
        return fresh

    def _sweep(self) -> None:
        """Drops the parts only the table holds. Newest first: a part is inserted after
        its own parts, so dropping it first frees them to be dropped in the same sweep."""
        for key in reversed(list(self._held)):
            # Three references to a part nobody else holds: the table's, `part`'s and
            # getrefcount's own argument.
            part = self._held[key]
            if sys.getrefcount(part) <= 3:
                del self._held[key]
            del part
        self._changes = 0


def _key_of(value: Any) -> Any:
    """What stands for an item in a part's key: a part by its identity, a string as
    itself, another scalar with its type (`True`, `1` and `1.0` are equal in Python)."""
    kind = type(value)
    if kind is dict or kind is list:
        return id(value)
    if kind is str:
        return value
    return (kind, value)


def _same(held: Any, fresh: Any) -> bool:
    """Whether two parts built of the table's parts are one value, keys in one order."""
    if type(held) is not type(fresh) or len(held) != len(fresh):
        return False
    pairs = (
        zip(held.items(), fresh.items(), strict=True)
        if type(held) is dict
        else (((None, a), (None, b)) for a, b in zip(held, fresh, strict=True))
    )
    return all(
        ka == kb and (a is b or (type(a) is type(b) and type(a) not in (dict, list) and a == b))
        for (ka, a), (kb, b) in pairs
    )


_SHARED = Compactor()


def compact(value: Any) -> Any:
    """`value` compacted by the process's one table: parts are shared across kinds too
    (an order's labels and owner reference are on all of its children)."""
    return _SHARED.compact(value)


def dropped() -> None:
    """An object left a cache (see `Compactor.dropped`)."""
    _SHARED.dropped()


def copied(value: Any) -> Any:
    """A deep copy of a compacted object that shares no part with it nor within itself.

    `copy.deepcopy` keeps a part met twice one object in the copy too: with equal parts
    shared (a Deployment's labels and its pod template's), a change to one in a copy would
    show in the other. Parsed JSON holds only dicts, lists and immutable scalars."""
    kind = type(value)
    if kind is dict:
        return {k: copied(v) for k, v in value.items()}
    if kind is list:
        return [copied(item) for item in value]
    return value
