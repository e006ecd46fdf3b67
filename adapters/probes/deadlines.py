"""Reads that end at a deadline, however slowly the peer sends.

A socket timeout bounds one read: a peer that sends a byte just before each read times
out (a header byte every few seconds) is never timed out, and an answer's head of
100 KiB takes days. Within `until(deadline)`, every read made through these helpers
waits at most the time left before `deadline` (`time.monotonic()`), and fails as a
timeout once it has passed, so a whole exchange, its head included, ends by then.

The probe (`adapters.probes.http`) reads through `DeadlineResponse`, http.client's
response on such reads. The deadline is the calling thread's (a context variable): the
exchanges of other threads on the same pool keep their own. The hub lookup is held to it
too, through its client's network backend (adapters/models/hub_network.py).
"""

from __future__ import annotations

import http.client
import io
import math
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["DeadlineResponse", "left", "until"]

_DEADLINE: ContextVar[float] = ContextVar("deadline", default=math.inf)


@contextmanager
def until(deadline: float) -> Iterator[None]:
    """Every read (through these helpers) in the block ends by `deadline`."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def left(timeout: float | None) -> float | None:
    """`timeout` (None: none), cut to the time left before the deadline; TimeoutError
    once it has passed. Outside `until`, `timeout` itself."""
    deadline = _DEADLINE.get()
    if deadline == math.inf:
        return timeout
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("timed out (deadline)")
    return remaining if timeout is None else min(timeout, remaining)


class _Reader(io.RawIOBase):
    """The socket's reads, each waiting at most the socket's timeout and the time left."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        # makefile, not the socket: the socket stays open while the answer is read
        # after http.client closed the connection (an answer that closes it).
        self._raw = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        per_read = self._sock.gettimeout()
        timeout = left(per_read)
        if timeout == per_read:
            return self._raw.readinto(buffer)
        self._sock.settimeout(timeout)
        try:
            return self._raw.readinto(buffer)
        finally:
            self._sock.settimeout(per_read)  # a kept connection's next request's own

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class DeadlineResponse(http.client.HTTPResponse):
    """http.client's response whose every read, of the head too, ends by the deadline."""

    def __init__(
        self,
        sock: socket.socket,
        debuglevel: int = 0,
        method: str | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(sock, debuglevel, method, url)
        self.fp.close()  # the plain reader http.client made: nothing was read from it
        self.fp = io.BufferedReader(_Reader(sock))
