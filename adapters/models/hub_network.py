"""The hub client's reads and writes, held to the resolution's deadline.

httpx's timeouts bound one read: a hub that sends a header byte just before each read
times out is never timed out, so one lookup held a background thread — a pool the probes
share — for as long as the hub liked, and the answer's head was never bounded by the
resolution's `total_timeout`. Every transport of the hub client reads and writes through
`DeadlineBackend`: each operation waits at most the time left before the calling
thread's deadline (`adapters.probes.deadlines.until`, as the probes do) and fails as a
timeout once it has passed. Outside `until`, it is the library's own backend.

httpcore2 takes a network backend only where a connection pool is made, and httpx2's
transports make theirs themselves: `hold_to_deadlines` sets it on the pools of a client
already made (the library's own factory, which hf_hub wraps rather than copies), and
fails loudly if a release of either library moved it.
"""

from __future__ import annotations

import ssl
import typing
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

from adapters.probes import deadlines

__all__ = ["DeadlineBackend", "hold_to_deadlines"]


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    try:
        return deadlines.left(timeout)
    except TimeoutError as exc:
        raise error(str(exc)) from exc


class _Stream(httpcore2.NetworkStream):
    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        tls = self._inner.start_tls(
            ssl_context, server_hostname, _left(timeout, httpcore2.ConnectTimeout)
        )
        return _Stream(tls)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore2.NetworkBackend):
    """`inner`'s connections, every operation of them cut to the time left."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        # The name looked up within the time left (getaddrinfo takes no timeout), then
        # each address tried as socket.create_connection would.
        try:
            found = deadlines.addresses(host, port, _left(timeout, httpcore2.ConnectTimeout))
        except TimeoutError as slow:
            raise httpcore2.ConnectTimeout(str(slow)) from slow
        except OSError as unknown:
            raise httpcore2.ConnectError(str(unknown)) from unknown
        error: Exception | None = None
        for address in found:
            try:
                stream = self._inner.connect_tcp(
                    str(address[0]),
                    port,
                    _left(timeout, httpcore2.ConnectTimeout),
                    local_address,
                    typing.cast(Any, socket_options),
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as failed:
                # The next address while time is left, as socket.create_connection goes on
                # (a node of a round-robin name that drops SYNs, an IPv6 route to nowhere).
                error = failed
                continue
            return _Stream(stream)
        raise error or httpcore2.ConnectError(f"no address for {host}")

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        stream = self._inner.connect_unix_socket(
            path, _left(timeout, httpcore2.ConnectTimeout), typing.cast(Any, socket_options)
        )
        return _Stream(stream)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def hold_to_deadlines(client: httpx2.Client) -> None:
    """Every connection `client` makes (directly or through a proxy from the
    environment) reads and writes through a `DeadlineBackend`."""
    transports = [client._transport, *client._mounts.values()]  # no public accessor
    for transport in transports:
        if transport is None:
            continue  # a mount that says "no proxy here": the default transport serves it
        pool = getattr(transport, "_pool", None)
        inner = getattr(pool, "_network_backend", None)
        if not isinstance(inner, httpcore2.NetworkBackend):
            raise RuntimeError(
                f"cannot hold the hub client's {type(transport).__name__} to deadlines: "
                "httpx2 or httpcore2 changed where a pool keeps its network backend"
            )
        if not isinstance(inner, DeadlineBackend):
            pool._network_backend = DeadlineBackend(inner)  # type: ignore[union-attr]
