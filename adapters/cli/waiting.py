"""Waiting in a command's main thread without going deaf to signals.

Python runs a signal handler in the main thread, the next time that thread runs Python
code; the kernel hands a process's SIGTERM to any of its threads. A main thread blocked
for good in `Event.wait()` (a lock acquired without a timeout) is not woken when the
signal lands on one of the dozens of watch threads, so the handler never ran: the demo
ignored SIGTERM (seen in the test suite), and so could the controller, until Kubernetes
killed it with its Lease still held. Waiting in short slices runs the handler within one.
"""

from __future__ import annotations

import threading

__all__ = ["until_set"]

_SLICE = 0.5  # seconds: how late a signal's handler may run


def until_set(event: threading.Event | None = None) -> None:
    """Return when `event` is set (never, without one); signal handlers run meanwhile."""
    event = event or threading.Event()
    while not event.wait(_SLICE):
        pass
