"""Selector answers shared by the devices that agree on what the selector read.

A cluster's devices each carry an identity of their own (a uuid, a PCI address), so a
memo keyed by the device evaluates every device once per selector: with cel-python's
interpreter, about 0.25 ms each, and at 500 devices and five classes 1.2 s of the
controller's CPU in a rollout (and as much of the simulator's, which judges the same
devices). Yet `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com']
.type == 'gpu'` reads two values, and every device with those two values gets the same
answer.

That holds for any expression: its evaluation is a function of the values it reads,
step by step, so a device that agrees on every value one evaluation read takes the same
steps and gets the same answer. The device is shown to the evaluation wrapped in maps
that note each key read (`Reading`), and a map read as a whole (iterated, sized,
compared) is noted whole. `Answers` keeps, per expression, the answers by what was read;
a device is looked up by projecting it onto each set of reads seen (few: one per path
through the expression). An evaluation that fails is not kept here: its message names
the device it failed on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from celpy import celtypes

__all__ = ["WHOLE", "Answers", "Read", "Reading", "project"]

WHOLE = object()  # the key of a map read as a whole
Read = tuple[tuple[Any, ...], Any]  # (the keys leading to a map, the key read or WHOLE)
_MISSING = object()  # a key the device does not have: itself a value
_A_MAP = ("map",)


class Reading(celtypes.MapType):  # type: ignore[misc]  # celpy's types are untyped to mypy
    """A map of the device as CEL sees it that notes what is read of it in `reads`.

    Reads go to `source`, so a map's own semantics stay (`device.attributes` answers an
    unknown domain with an empty map); maps read from it are wrapped in turn."""

    def __init__(self, source: celtypes.MapType, path: tuple[Any, ...], reads: list[Read]):
        super().__init__(source)
        self._source, self._path, self._reads = source, path, reads

    def _wrapped(self, key: Any, value: Any) -> Any:
        if isinstance(value, celtypes.MapType):
            return Reading(value, (*self._path, key), self._reads)
        return value

    def __getitem__(self, key: Any) -> Any:
        self._reads.append((self._path, key))
        return self._wrapped(key, self._source[key])

    def get(self, key: Any, default: Any = None) -> Any:
        self._reads.append((self._path, key))
        return self._wrapped(key, self._source.get(key, default))

    def __contains__(self, key: object) -> bool:
        self._reads.append((self._path, key))
        return key in self._source

    def _whole(self) -> None:
        self._reads.append((self._path, WHOLE))

    def __iter__(self) -> Iterator[Any]:
        self._whole()
        return iter(self._source)

    def __len__(self) -> int:
        self._whole()
        return len(self._source)

    def keys(self) -> Any:
        self._whole()
        return self._source.keys()

    def values(self) -> Any:
        self._whole()
        return self._source.values()

    def items(self) -> Any:
        self._whole()
        return self._source.items()

    def __eq__(self, other: Any) -> bool:
        self._whole()
        return bool(self._source == other)

    def __ne__(self, other: Any) -> bool:
        self._whole()
        return bool(self._source != other)

    __hash__ = None  # type: ignore[assignment]  # a map, as MapType: not hashable


def project(root: Mapping[Any, Any], reads: tuple[Read, ...]) -> tuple[Any, ...]:
    """What `root` (the device as CEL sees it, unwrapped) holds at each read: typed, so
    that `true` and `1` differ as they do to CEL. A map read by its key is only "a map":
    what is read of it is noted on its own; a map read whole is all of it."""
    return tuple(
        _typed(value) if key is WHOLE or not isinstance(value, Mapping) else _A_MAP
        for path, key in reads
        for value in (_at(root, path, key),)
    )


def _at(root: Mapping[Any, Any], path: tuple[Any, ...], key: Any) -> Any:
    node: Any = root
    for step in path:
        if not isinstance(node, Mapping):
            return _MISSING
        node = node[step] if _has(node, step) else _MISSING
    if not isinstance(node, Mapping):
        return _MISSING
    if key is WHOLE:
        return node
    return node[key] if _has(node, key) else _MISSING


def _has(node: Mapping[Any, Any], key: Any) -> bool:
    # An unknown domain of `attributes` or `capacity` reads as an empty map, not a miss.
    try:
        node[key]
    except (KeyError, TypeError):
        return False
    return True


def _typed(value: Any) -> Any:
    if value is _MISSING:
        return _MISSING
    if isinstance(value, Mapping):
        return (
            "map",
            tuple(sorted(((str(k), _typed(v)) for k, v in value.items()), key=lambda kv: kv[0])),
        )
    return (type(value).__name__, value)


class Answers:
    """Per expression, the answers by what their evaluation read (bounded)."""

    def __init__(self, limit: int = 65536) -> None:
        self._limit = limit
        self._by_reads: dict[str, dict[tuple[Read, ...], dict[tuple[Any, ...], bool]]] = {}
        self._size = 0
        self._lock = threading.Lock()

    def answer(
        self,
        expression: str,
        device: celtypes.MapType,
        evaluate: Callable[[Reading], bool],
    ) -> bool:
        """The answer for `device` (as CEL sees it, under the name `device`): one kept
        for a device that agreed on what its evaluation read, else `evaluate`d on a
        `Reading` of it (its errors pass through, and are not kept)."""
        with self._lock:
            seen = list(self._by_reads.get(expression, {}).items())
        for reads, answers in seen:
            found = answers.get(project(device, reads))
            if found is not None:
                return found
        noted: list[Read] = []
        result = evaluate(Reading(device, (), noted))
        reads = tuple(dict.fromkeys(noted))
        with self._lock:
            if self._size >= self._limit:
                self._by_reads.clear()
                self._size = 0
            kept = self._by_reads.setdefault(expression, {}).setdefault(reads, {})
            kept[project(device, reads)] = result
            self._size += 1
        return result
