"""An informer's lookups besides the UID: by indexer value, and by namespace and name.

Both are kept for every cached object, thousands of them, so both hold a single UID as
itself (a str) and make a container only where two objects meet under one key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NameIndex", "ValueIndex"]

Indexer = Callable[[dict[str, Any]], Iterable[str]]


@dataclass
class ValueIndex:
    """The UIDs of the cached objects under each value of one indexer.

    Most values name one object (an order's UID indexes its one Deployment): a single
    UID is kept as itself, only two or more in a set. A set per value was ~200 bytes per
    order and index: 1.7 KB of the 35 KB of cache a Ready order took."""

    key: Indexer
    values: dict[str, str | set[str]] = field(default_factory=dict)

    def add(self, value: str, uid: str) -> None:
        members = self.values.get(value)
        if members is None:
            self.values[value] = uid
        elif isinstance(members, str):
            if members != uid:
                self.values[value] = {members, uid}
        else:
            members.add(uid)

    def discard(self, value: str, uid: str) -> None:
        members = self.values.get(value)
        if members is None:
            return
        if isinstance(members, str):
            if members == uid:
                del self.values[value]
            return
        members.discard(uid)
        if len(members) == 1:
            self.values[value] = next(iter(members))
        elif not members:
            del self.values[value]

    def members(self, value: str) -> Iterable[str]:
        found = self.values.get(value, ())
        return (found,) if isinstance(found, str) else found


class NameIndex:
    """The UID of the cached object of each namespace and name (the newest stored wins:
    an object recreated under its name has a new UID before the old one's DELETED comes).

    Keyed by name alone, with the namespace checked against the cached object: a name
    held in one namespace is the UID itself, one held in several a dict by namespace. A
    (namespace, name) tuple per object was ~580 bytes an order across its children."""

    def __init__(self, namespace_of: Callable[[str], str]) -> None:
        self._namespace_of = namespace_of  # of a UID the cache holds
        self._names: dict[str, str | dict[str, str]] = {}

    def get(self, namespace: str, name: str) -> str | None:
        held = self._names.get(name)
        if isinstance(held, dict):
            return held.get(namespace)
        return held if held is not None and self._namespace_of(held) == namespace else None

    def put(self, namespace: str, name: str, uid: str) -> None:
        held = self._names.get(name)
        if held is None:
            self._names[name] = uid
        elif isinstance(held, dict):
            held[namespace] = uid
        else:
            other = self._namespace_of(held)
            self._names[name] = uid if other == namespace else {other: held, namespace: uid}

    def drop(self, namespace: str, name: str, uid: str) -> None:
        """Forget `uid` under the name, unless a newer object holds it now."""
        held = self._names.get(name)
        if held == uid:
            del self._names[name]
        elif isinstance(held, dict) and held.get(namespace) == uid:
            del held[namespace]
            if len(held) == 1:
                self._names[name] = next(iter(held.values()))

    def __len__(self) -> int:
        return sum(len(h) if isinstance(h, dict) else 1 for h in self._names.values())
