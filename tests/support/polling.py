"""One way to wait for the world in a test: poll until something truthy, or fail saying
what was awaited and what was last seen. Errors listed in `tolerate` count as "not yet"
(an API error while an object is being made, say)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["eventually"]

T = TypeVar("T")


def eventually(
    probe: Callable[[], T | None],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "",
    tolerate: tuple[type[BaseException], ...] = (),
) -> T:
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except tolerate as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout}s: {what or probe} (last: {last!r})")
        time.sleep(interval)
