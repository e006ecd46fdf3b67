"""Values worked out from a tuple of devices, kept while that very tuple lives.

A snapshot's devices are one tuple, shared by every snapshot made from the same parse
(demand and holder priorities are applied with `dataclasses.replace`), and a plan asks
the same questions of it many times: once per device class and once per other order's
demand. Keyed by the tuple's identity, not its value — hashing hundreds of devices is
the cost this avoids — and holding the tuple, so its id cannot be reused by another
while the entry lives. A list may change, so it is never kept. Bounded: full, it is
emptied (old snapshots' entries), and the next asks refill it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["KeptFor"]

V = TypeVar("V")


class KeptFor(Generic[V]):
    def __init__(self, bound: int = 256) -> None:
        self._bound = bound
        self._kept: dict[tuple[int, Hashable], tuple[tuple[Any, ...], V]] = {}

    def get(self, of: Sequence[Any], key: Hashable, make: Callable[[], V]) -> V:
        """`make()`'s value for `of` and `key`, worked out once per tuple `of`."""
        if not isinstance(of, tuple):
            return make()
        hit = self._kept.get((id(of), key))
        if hit is not None and hit[0] is of:
            return hit[1]
        value = make()
        if len(self._kept) >= self._bound:
            self._kept.clear()
        self._kept[(id(of), key)] = (of, value)
        return value
