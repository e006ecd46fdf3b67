"""The HTTP probe of an order's inference API: `GET {base}/v1/models`, answered or not.

Only a successful probe makes an order Ready, and persistent failures after Ready make it
Failed (SPEC §3 steps 7-8), so the probe must give a clear answer in bounded time and
bounded memory whatever the endpoint does: every httpx timeout is set (connect, read,
write, pool) and the whole exchange has a deadline checked between chunks; the body is
streamed and cut at `max_body`; redirects are followed only within the same scheme, host
and port (a redirect elsewhere would carry the probe, and the token, to another party);
the answer counts only if it is JSON with a `data` list (an OpenAI-style model list).

The token is sent as `Authorization: Bearer` and never appears in an answer's error
text, whatever the server or the library say. The controller turns a ProbeAnswer into a
`ProbeResult` observation; `latency` is for metrics and logs, never for the fold. Every
probe is counted and timed in `adapters.metrics`.

The controller probes through a `Prober`, which keeps one idle connection per origin
(scheme, host, port and TLS verification) between probes: with hundreds of Ready orders
probed every 30 s, a new client and connection per probe was most of the controller's
idle CPU. What a kept connection must not change, it does not: each request carries its
own headers and timeout (a token is never a connection's, so never sent to another
order's request on it), nothing is remembered between requests (no cookies), a redirect
stays on the origin's connections, and at most `MAX_KEPT` origins are kept, each no
longer than `KEEP_ALIVE_SECONDS` idle. A server may close an idle connection whenever it
likes (vLLM's after 5 s): a connection found closed is replaced before the request, and
a request that fails on a kept connection before any answer (the server closed it as the
request went out) is sent once more on a new one, so a stale connection never becomes a
failed probe. `probe()` probes once on a connection of its own, or through `transport`,
the I/O seam for tests.
"""

from __future__ import annotations

import functools
import json
import ssl
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from adapters import metrics

__all__ = [
    "DEFAULT_MAX_BODY",
    "KEEP_ALIVE_SECONDS",
    "MAX_KEPT",
    "MAX_REDIRECTS",
    "MODELS_PATH",
    "ProbeAnswer",
    "Prober",
    "probe",
]

MODELS_PATH = "/v1/models"
DEFAULT_MAX_BODY = 64 * 1024
MAX_REDIRECTS = 3
# Longer than a Ready order's probe period at the default interval (3 x 10 s), so its
# next probe finds the connection; an order probed less often gets a new one each time.
KEEP_ALIVE_SECONDS = 120.0
# Origins with a kept connection (an open socket each), the least recently probed
# dropped first: beyond it probes still work, each on a connection of its own.
MAX_KEPT = 1024
_USER_AGENT = "ai-inference-probe"
_CONNECTING = "connection.connect_tcp.started"  # httpcore's trace: a new connection


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    ok: bool
    status_code: int | None = None  # None when no HTTP answer came (timeout, refused, ...)
    error: str = ""  # empty when ok; one line, without the token
    latency: float = 0.0  # seconds, the whole exchange


@functools.cache
def _tls(verify: bool) -> ssl.SSLContext:
    """One TLS context per process, shared by every probe (contexts are thread-safe).

    httpx builds a fresh one for each client, loading the whole CA bundle: 37 ms of CPU
    per probe here, which with 500 Ready orders probed every 30 s was most of the
    controller's idle cost. `trust_env=False`: no SSL_CERT_FILE.
    """
    return httpx.create_ssl_context(verify=verify, trust_env=False)


def _transport(verify: bool, *, keep: bool) -> httpx.HTTPTransport:
    # No proxy: a transport never reads the environment's (a client would, unless told).
    limits = httpx.Limits(
        max_connections=None,  # one per probe in flight: the caller's pool bounds them
        max_keepalive_connections=1 if keep else 0,
        keepalive_expiry=KEEP_ALIVE_SECONDS,
    )
    return httpx.HTTPTransport(verify=_tls(verify), trust_env=False, limits=limits)


class _Failed(Exception):
    def __init__(self, error: str, status_code: int | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.status_code = status_code


_Origin = tuple[bool, str, str, int | None]  # (verify, scheme, host, port)


@dataclass
class _Kept:
    transport: httpx.HTTPTransport
    used: float  # time.monotonic() of the last probe's end
    busy: int = 0  # probes using it now: it is never closed under them


class Prober:
    """Probes that keep one idle connection per origin between them; thread-safe.

    `close()` (at shutdown) closes the kept connections; a probe still running closes
    its own when it ends, and probes after it each use a connection of their own.
    `transport` replaces every origin's connections (tests).
    """

    def __init__(
        self,
        *,
        max_kept: int = MAX_KEPT,
        keep_alive: float = KEEP_ALIVE_SECONDS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._max_kept = max_kept
        self._keep_alive = keep_alive
        self._seam = transport
        self._lock = threading.Lock()
        self._kept: OrderedDict[_Origin, _Kept] = OrderedDict()  # least recently used first
        self._closed = False
        # Sockets are closed even if nobody calls close() (a test's controller).
        self._finalizer = weakref.finalize(self, _close_all, self._kept, self._lock)

    def probe(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout: float,
        max_body: int = DEFAULT_MAX_BODY,
        verify: bool = True,
    ) -> ProbeAnswer:
        """Probe `base_url` once; as `probe()`, on a kept connection to its origin."""
        started = time.monotonic()
        try:
            url = _models_url(base_url)
        except _Failed as failed:
            return _answered(_failure(failed, token, started))
        if self._seam is not None:
            return _answered(
                _probe(self._seam, url, token, timeout=timeout, max_body=max_body, started=started)
            )
        origin = (verify, url.scheme, url.host, url.port)
        kept = self._take(origin, verify)
        if kept is None:
            return probe(base_url, token, timeout=timeout, max_body=max_body, verify=verify)
        try:
            answer = _probe(
                kept.transport, url, token, timeout=timeout, max_body=max_body, started=started
            )
        finally:
            self._give_back(origin, kept)
        return _answered(answer)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [o for o, k in self._kept.items() if not k.busy]
            closing = [self._kept.pop(o).transport for o in idle]
        for transport in closing:
            transport.close()

    def _take(self, origin: _Origin, verify: bool) -> _Kept | None:
        now = time.monotonic()
        with self._lock:
            if self._closed:
                return None
            kept = self._kept.get(origin)
            if kept is None:
                kept = self._kept[origin] = _Kept(_transport(verify, keep=True), now)
            else:
                self._kept.move_to_end(origin)
            kept.busy += 1
            closing = self._sweep(now)
        for transport in closing:
            transport.close()
        return kept

    def _sweep(self, now: float) -> list[httpx.HTTPTransport]:
        """Drop the least recently used origins past the bound or idle too long (those
        in use are passed over); under the lock. Usually looks at the oldest alone."""
        doomed: list[_Origin] = []
        for origin, kept in self._kept.items():
            too_many = len(self._kept) - len(doomed) > self._max_kept
            if not too_many and now - kept.used <= self._keep_alive:
                break  # the rest were used more recently
            if not kept.busy:
                doomed.append(origin)
        return [self._kept.pop(origin).transport for origin in doomed]

    def _give_back(self, origin: _Origin, kept: _Kept) -> None:
        with self._lock:
            kept.busy -= 1
            kept.used = time.monotonic()
            if not self._closed or kept.busy:
                return
            del self._kept[origin]  # closed while this probe ran: the last one out closes
        kept.transport.close()


def _close_all(kept: OrderedDict[_Origin, _Kept], lock: threading.Lock) -> None:
    with lock:
        transports = [k.transport for k in kept.values()]
        kept.clear()
    for transport in transports:
        transport.close()


def probe(
    base_url: str,
    token: str | None,
    *,
    timeout: float,
    max_body: int = DEFAULT_MAX_BODY,
    verify: bool = True,
    transport: httpx.BaseTransport | None = None,
) -> ProbeAnswer:
    """Probe `base_url` once, on a connection of its own. Never raises for anything the
    endpoint or network does.

    The exchange ends within about twice `timeout` (one blocking read may start just
    before the deadline); `transport` swaps the I/O seam in tests.
    """
    started = time.monotonic()
    try:
        url = _models_url(base_url)
    except _Failed as failed:
        return _answered(_failure(failed, token, started))
    own = transport is None
    seam = _transport(verify, keep=False) if transport is None else transport
    try:
        return _answered(
            _probe(seam, url, token, timeout=timeout, max_body=max_body, started=started)
        )
    finally:
        if own:
            seam.close()


def _answered(answer: ProbeAnswer) -> ProbeAnswer:
    metrics.probed(ok=answer.ok, status_code=answer.status_code, seconds=answer.latency)
    return answer


def _failure(failed: _Failed, token: str | None, started: float) -> ProbeAnswer:
    return ProbeAnswer(
        ok=False,
        status_code=failed.status_code,
        error=_scrub(failed.error, token),
        latency=time.monotonic() - started,
    )


def _probe(
    transport: httpx.BaseTransport,
    url: httpx.URL,
    token: str | None,
    *,
    timeout: float,
    max_body: int,
    started: float,
) -> ProbeAnswer:
    headers = {"Accept": "application/json", "User-Agent": _USER_AGENT}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        status, body = _exchange(
            transport, url, headers, max_body=max_body, deadline=started + timeout, timeout=timeout
        )
        _check_models(body, status)
    except _Failed as failed:
        return _failure(failed, token, started)
    return ProbeAnswer(ok=True, status_code=status, latency=time.monotonic() - started)


@functools.lru_cache(maxsize=MAX_KEPT)
def _models_url(base_url: str) -> httpx.URL:
    """Parsed once per endpoint (httpx.URL is immutable); an invalid one raises each time."""
    try:
        url = httpx.URL(base_url.rstrip("/") + MODELS_PATH)
    except httpx.InvalidURL as err:
        raise _Failed(f"invalid endpoint URL: {err}") from err
    if url.scheme not in ("http", "https") or not url.host:
        raise _Failed(f"invalid endpoint URL {_shown(url)}: need http(s)://host")
    return url


def _shown(url: httpx.URL) -> str:
    # Userinfo in a URL is a credential too: never show it.
    return str(url.copy_with(username=None, password=None)) if url.userinfo else str(url)


def _same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


def _exchange(
    transport: httpx.BaseTransport,
    url: httpx.URL,
    headers: dict[str, str],
    *,
    max_body: int,
    deadline: float,
    timeout: float,
) -> tuple[int, bytes]:
    timeouts = httpx.Timeout(timeout).as_dict()  # connect, read, write and pool alike
    for _ in range(MAX_REDIRECTS + 1):
        if time.monotonic() > deadline:
            raise _Failed(f"timed out after {timeout:g}s (following redirects)")
        try:
            response = _send(transport, url, headers, timeouts, deadline)
            try:
                if response.is_redirect:
                    target = url.join(response.headers["location"])
                    if not _same_origin(url, target):
                        raise _Failed(
                            f"redirect to another origin not followed: {_shown(target)}",
                            response.status_code,
                        )
                    url = target
                    continue
                if not response.is_success:
                    raise _Failed(_status_error(response.status_code), response.status_code)
                return response.status_code, _read_capped(response, max_body, deadline, timeout)
            finally:
                response.close()
        except httpx.TimeoutException as err:
            raise _Failed(f"timed out after {timeout:g}s ({type(err).__name__})") from err
        except httpx.HTTPError as err:
            raise _Failed(f"{type(err).__name__}: {err}") from err
    raise _Failed(f"more than {MAX_REDIRECTS} redirects")


def _send(
    transport: httpx.BaseTransport,
    url: httpx.URL,
    headers: dict[str, str],
    timeouts: dict[str, float | None],
    deadline: float,
) -> httpx.Response:
    """The response's head; once more on a new connection if a kept one failed before
    any answer (closed by the server as the request went out). A timeout is no such
    failure: it is the answer."""
    for attempt in (1, 2):
        seen: list[str] = []  # httpcore's trace events; none from a test's transport
        request = httpx.Request(
            "GET",
            url,
            headers=headers,
            extensions={"timeout": timeouts, "trace": _recorder(seen)},
        )
        try:
            return transport.handle_request(request)
        except httpx.TimeoutException:
            raise
        except httpx.TransportError:
            reused = bool(seen) and _CONNECTING not in seen
            if not reused or attempt == 2 or time.monotonic() > deadline:
                raise
    raise AssertionError("unreachable: the second attempt returns or raises")


def _recorder(seen: list[str]) -> Callable[[str, dict[str, Any]], None]:
    return lambda name, _info: seen.append(name)


def _status_error(code: int) -> str:
    if code == 401:
        return "HTTP 401: the endpoint wants a valid token"
    if code == 403:
        return "HTTP 403: the token is not allowed"
    return f"HTTP {code}"


def _read_capped(response: httpx.Response, max_body: int, deadline: float, timeout: float) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body:
        raise _Failed(f"response of {declared} bytes exceeds {max_body}", response.status_code)
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > max_body:
            raise _Failed(f"response exceeds {max_body} bytes", response.status_code)
        if time.monotonic() > deadline:
            # A server that trickles bytes resets the read timeout with every one.
            raise _Failed(f"timed out after {timeout:g}s (body still arriving)")
    return bytes(body)


def _check_models(body: bytes, status: int) -> None:
    try:
        answer: Any = json.loads(body)
    except ValueError as err:  # UnicodeDecodeError is a ValueError too
        raise _Failed(f"HTTP {status} but not JSON: {type(err).__name__}", status) from err
    if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
        raise _Failed(f"HTTP {status} JSON without a `data` list: not a model list", status)


def _scrub(text: str, token: str | None) -> str:
    line = " ".join(text.split())
    return line.replace(token, "***") if token else line
