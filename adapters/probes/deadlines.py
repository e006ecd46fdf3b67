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
import ipaddress
import math
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["DeadlineResponse", "addresses", "create_connection", "left", "until"]

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


def addresses(host: str, port: int, timeout: float | None) -> list[tuple[Any, ...]]:
    """`host`'s socket addresses (getaddrinfo's last field), waited for at most `timeout`
    cut to the deadline: TimeoutError after that.

    getaddrinfo takes no timeout, and a resolver that does not answer holds its caller for
    its own attempts times the search list (a minute and more with the cluster's ndots:5):
    a hub lookup ran 12 s past a `total_timeout` of 3 s, holding a background thread. So a
    name is looked up on a daemon thread of its own, which ends when the resolver gives up;
    the caller waits no longer than it may. An address is returned at once."""
    try:
        ipaddress.ip_address(host)
        return [(host, port)]
    except ValueError:
        pass
    wait = left(timeout)
    found: list[Any] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as error:
            found.append(error)
        finally:
            done.set()

    threading.Thread(target=look_up, name="lookup", daemon=True).start()
    if not done.wait(wait):
        raise TimeoutError(f"looking up {host} took longer than {wait:g}s")
    if isinstance(found[0], OSError):
        raise found[0]
    return [info[4] for info in found[0]]


def create_connection(
    address: tuple[str, int],
    timeout: float | None = None,
    source_address: tuple[str, int] | None = None,
    **kwargs: Any,
) -> socket.socket:
    """`socket.create_connection`, its name looked up within the timeout (`addresses`)."""
    host, port = address
    error: OSError | None = None
    for resolved in addresses(host, port, timeout):
        try:
            return socket.create_connection(resolved[:2], left(timeout), source_address, **kwargs)
        except OSError as failed:
            error = failed
    raise error or OSError(f"no address for {host}")


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
