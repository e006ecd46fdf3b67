"""What each order's workload was last found converged with, so a pass that would find
the same again renders and compares nothing.

Every pass of a planned order renders its workload and compares it with the live objects
(converging.py): a level-based controller repairs on every pass. During a rollout most
passes come from changes the comparison cannot see — a Deployment's status, a pod, a
probe's answer — and rendering and comparing again found nothing each time, at 12 % of
the controller's CPU in `bench -n 500`. So after a pass that found nothing to repair,
the Actor notes what that verdict rested on: the render's inputs, which children were
live, and the parts of each live child that the comparison read (each top-level field a
rendered object sets, its metadata field by field, and every child's owner references,
by which strays are told). While all of those are the very objects (or equal ones), the
verdict holds: the render is a pure function of its inputs and `covers` of the parts
it reads.

The cache makes the identity check cheap and sound: it holds equal parts of its objects
once (compacting.py), so a Deployment whose status moved still holds the very same
`spec`. A part someone changed is a new object and fails the check, and the next pass
renders, compares and repairs as before. The note holds references to the parts it
compares, so none of them can be freed and its id reused.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from adapters.kubernetes.converging import Key, Obj, key_of

__all__ = ["Converged"]

_Path = tuple[str, ...]
# What is read of each live child, by kind, in the children's order: equal across the
# orders of one class, so held once (a note is per order, and memory per order counts).
_Shape = tuple[tuple[str, tuple[_Path, ...]], ...]
_MISSING = object()
# Read by `strays` (owned_by) on every live child, rendered or not; `annotations` also by
# the Actor (the replicas a higher priority took).
_ALWAYS: tuple[_Path, ...] = (("metadata", "ownerReferences"), ("metadata", "annotations"))


class _Note:
    __slots__ = ("inputs", "names", "parts", "shape")

    def __init__(
        self, inputs: object, shape: _Shape, names: tuple[str, ...], parts: tuple[Any, ...]
    ) -> None:
        self.inputs = inputs
        self.shape = shape
        self.names = names
        self.parts = parts


class Converged:
    """Per order, the last converged verdict and what it rested on."""

    def __init__(self) -> None:
        self._notes: dict[str, _Note] = {}
        self._shapes: dict[_Shape, _Shape] = {}
        self._lock = threading.Lock()
        self.hits = 0  # passes that rendered nothing (for tests: counts, not times)

    def holds(self, uid: str, inputs: object, live: Mapping[Key, Obj]) -> bool:
        """Whether the order's last converged verdict still holds for these inputs and
        these live children."""
        with self._lock:
            note = self._notes.get(uid)
        if note is None or note.inputs != inputs or len(live) != len(note.names):
            return False
        parts = _parts(note.shape, note.names, live)
        if parts is None or not all(
            a is b or a == b for a, b in zip(parts, note.parts, strict=True)
        ):
            return False
        self.hits += 1
        return True

    def found(
        self, uid: str, inputs: object, rendered: Iterable[Obj], live: Mapping[Key, Obj]
    ) -> None:
        """Note that the order's workload, rendered from `inputs`, was found converged
        with `live` (nothing drifted, nothing stray)."""
        read: dict[Key, tuple[_Path, ...]] = {key: _ALWAYS for key in live}
        for doc in rendered:
            key = key_of(doc)
            if key not in live:
                return  # not converged: nothing to note
            read[key] = _read_by(doc)
        keys = sorted(read)
        shape = tuple((kind, read[(kind, name)]) for kind, name in keys)
        names = tuple(name for _, name in keys)
        parts = _parts(shape, names, live)
        if parts is None:
            return
        with self._lock:
            shape = self._shapes.setdefault(shape, shape)
            self._notes[uid] = _Note(inputs, shape, names, parts)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._notes.pop(uid, None)


def _read_by(doc: Obj) -> tuple[_Path, ...]:
    """The parts of a live object that `covers(live, doc)` reads: each top-level field the
    rendered object sets, and its metadata field by field (a live object's metadata is
    new in every version: its resourceVersion moves)."""
    paths: list[_Path] = list(_ALWAYS)
    for field, value in doc.items():
        if field in ("apiVersion", "kind"):
            continue
        if field == "metadata" and isinstance(value, Mapping):
            paths.extend(("metadata", name) for name in value if ("metadata", name) not in paths)
        else:
            paths.append((field,))
    return tuple(paths)


def _parts(
    shape: _Shape, names: tuple[str, ...], live: Mapping[Key, Obj]
) -> tuple[Any, ...] | None:
    out: list[Any] = []
    for (kind, read), name in zip(shape, names, strict=True):
        obj = live.get((kind, name))
        if obj is None:
            return None
        for path in read:
            value: Any = obj
            for step in path:
                value = value.get(step, _MISSING) if isinstance(value, Mapping) else _MISSING
            out.append(value)
    return tuple(out)
