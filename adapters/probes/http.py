"""The HTTP probe of an order's inference API: `GET {base}/v1/models`, answered or not.

Only a successful probe makes an order Ready, and persistent failures after Ready make it
Failed (SPEC §3 steps 7-8), so the probe must give a clear answer in bounded time and
bounded memory whatever the endpoint does: every socket operation (connect, send, each
read) waits at most the timeout, and every read, of the answer's head too, at most the
time left before the exchange's deadline (`deadlines`): an endpoint that drips its
headers a byte at a time fails at the deadline, as a silent one does; the body is read
in chunks and cut at `max_body`; redirects are followed only within the same scheme,
host and port (a redirect elsewhere would carry the probe, and the token, to another
party); the answer counts only if it is JSON with a `data` list
(an OpenAI-style model list).

The token is sent as `Authorization: Bearer` and never appears in an answer's error
text, whatever the server or the library say. The controller turns a ProbeAnswer into a
`ProbeResult` observation; `latency` is for metrics and logs, never for the fold. Every
probe is counted and timed in `adapters.metrics`.

The exchange is the standard library's `http.client`, not httpx: one GET on a kept
connection is all a probe needs, and httpx's stack (client, httpcore's pool, h11) cost
twice the CPU of the whole exchange on `http.client` (benchmarks/probes.py), with
hundreds of Ready orders probed every 30 s the controller's largest idle cost. httpx
still parses the endpoint's URL (once per endpoint) and builds the TLS context.

The controller probes through a `Prober`, which keeps one idle connection per origin
(scheme, host, port and TLS verification) between probes. What a kept connection must
not change, it does not: each request carries its own headers and timeout (a token is
never a connection's, so never sent to another order's request on it), nothing is
remembered between requests (no cookies), a redirect stays on the origin's connection,
an answer not read to its end closes the connection, and at most `MAX_KEPT` origins are
kept, each no longer than `KEEP_ALIVE_SECONDS` idle. A server may close an idle
connection whenever it likes (vLLM's after 5 s): a request that fails on a kept
connection before any answer (the server closed it before or as the request went out)
is sent once more on a new one, so a stale connection never becomes a failed probe.
`probe()` probes once on a connection of its own.
"""

from __future__ import annotations

import functools
import http.client
import json
import re
import ssl
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import httpx

from adapters import metrics
from adapters.probes import deadlines

__all__ = [
    "DEFAULT_MAX_BODY",
    "ERROR_CHARS",
    "KEEP_ALIVE_SECONDS",
    "MAX_KEPT",
    "MAX_REDIRECTS",
    "MODELS_PATH",
    "ProbeAnswer",
    "Prober",
    "probe",
    "shown_url",
]

MODELS_PATH = "/v1/models"
DEFAULT_MAX_BODY = 64 * 1024
MAX_REDIRECTS = 3
ERROR_CHARS = 300  # of a failed probe's error, as the order's log and status keep it
# Longer than a Ready order's probe period at the default interval (3 x 10 s), so its
# next probe finds the connection; an order probed less often gets a new one each time.
KEEP_ALIVE_SECONDS = 120.0
# Origins with a kept connection (an open socket each), the least recently probed
# dropped first: beyond it probes still work, each on a connection of its own.
MAX_KEPT = 1024
_USER_AGENT = "ai-inference-probe"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# What is read of an answer the probe does not use (a redirect's, an error's) so that
# its connection can carry the next probe; a longer one closes the connection instead.
_DISCARDED_MAX = 4096
_CHUNK = 16 * 1024


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    ok: bool
    status_code: int | None = None  # None when no HTTP answer came (timeout, refused, ...)
    error: str = ""  # empty when ok; one line, without the token
    latency: float = 0.0  # seconds, the whole exchange


@functools.cache
def _tls(verify: bool) -> ssl.SSLContext:
    """One TLS context per process, shared by every probe (contexts are thread-safe).

    Building one loads the whole CA bundle: 37 ms of CPU, which per probe was most of
    the controller's idle cost with 500 Ready orders. httpx's helper gives the trust
    httpx would (certifi's bundle), `trust_env=False`: no SSL_CERT_FILE.
    """
    return httpx.create_ssl_context(verify=verify, trust_env=False)


class _Failed(Exception):
    def __init__(self, error: str, status_code: int | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.status_code = status_code


_Origin = tuple[bool, str, str, int | None]  # (verify, scheme, host, port)


def _connection(origin: _Origin, timeout: float) -> http.client.HTTPConnection:
    """Not connected yet: http.client connects at the first request, and again at the
    next one after any close. No proxy: a probe goes to the endpoint itself."""
    verify, scheme, host, port = origin
    if scheme == "https":
        return _HTTPSConnection(host, port, timeout=timeout, context=_tls(verify))
    return _HTTPConnection(host, port, timeout=timeout)


class _HTTPConnection(http.client.HTTPConnection):
    response_class = deadlines.DeadlineResponse  # reads end by the probe's deadline

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The Service's name looked up within the probe's timeout: getaddrinfo takes
        # none. http.client sets the attribute in its __init__, so it is replaced here.
        self._create_connection = deadlines.create_connection


class _HTTPSConnection(http.client.HTTPSConnection):
    response_class = deadlines.DeadlineResponse

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = deadlines.create_connection


@dataclass(slots=True)
class _Kept:
    connection: http.client.HTTPConnection
    used: float  # time.monotonic() of the last probe's end
    busy: bool = False  # a probe uses it now: it is never closed under it, nor shared


class Prober:
    """Probes that keep one idle connection per origin between them; thread-safe.

    A connection carries one probe at a time: a probe of an origin whose connection is
    busy uses one of its own. `close()` (at shutdown) closes the kept connections; a
    probe still running closes its own when it ends, and probes after it each use a
    connection of their own.
    """

    def __init__(self, *, max_kept: int = MAX_KEPT, keep_alive: float = KEEP_ALIVE_SECONDS) -> None:
        self._max_kept = max_kept
        self._keep_alive = keep_alive
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
        origin = (verify, url.scheme, url.host, url.port)
        kept = self._take(origin, timeout)
        if kept is None:
            return probe(base_url, token, timeout=timeout, max_body=max_body, verify=verify)
        try:
            answer = _probe(
                kept.connection, url, token, timeout=timeout, max_body=max_body, started=started
            )
        finally:
            self._give_back(origin, kept)
        return _answered(answer)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [o for o, k in self._kept.items() if not k.busy]
            closing = [self._kept.pop(o).connection for o in idle]
        for connection in closing:
            connection.close()

    def _take(self, origin: _Origin, timeout: float) -> _Kept | None:
        now = time.monotonic()
        with self._lock:
            if self._closed:
                return None
            kept = self._kept.get(origin)
            if kept is None:
                kept = self._kept[origin] = _Kept(_connection(origin, timeout), now)
            elif kept.busy:
                return None
            else:
                self._kept.move_to_end(origin)
            kept.busy = True
            closing = self._sweep(now)
        for connection in closing:
            connection.close()
        _set_timeout(kept.connection, timeout)
        return kept

    def _sweep(self, now: float) -> list[http.client.HTTPConnection]:
        """Drop the least recently used origins past the bound or idle too long (those
        in use are passed over); under the lock. Usually looks at the oldest alone."""
        doomed: list[_Origin] = []
        for origin, kept in self._kept.items():
            too_many = len(self._kept) - len(doomed) > self._max_kept
            if not too_many and now - kept.used <= self._keep_alive:
                break  # the rest were used more recently
            if not kept.busy:
                doomed.append(origin)
        return [self._kept.pop(origin).connection for origin in doomed]

    def _give_back(self, origin: _Origin, kept: _Kept) -> None:
        with self._lock:
            kept.busy = False
            kept.used = time.monotonic()
            if not self._closed:
                return
            del self._kept[origin]  # closed while this probe ran: it closes its own
        kept.connection.close()


def _close_all(kept: OrderedDict[_Origin, _Kept], lock: threading.Lock) -> None:
    with lock:
        connections = [k.connection for k in kept.values()]
        kept.clear()
    for connection in connections:
        connection.close()


def _set_timeout(connection: http.client.HTTPConnection, timeout: float) -> None:
    """Every socket operation of the next exchange waits at most `timeout`; a kept
    connection may have been opened by a probe with another."""
    if connection.timeout != timeout:
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)


def probe(
    base_url: str,
    token: str | None,
    *,
    timeout: float,
    max_body: int = DEFAULT_MAX_BODY,
    verify: bool = True,
) -> ProbeAnswer:
    """Probe `base_url` once, on a connection of its own. Never raises for anything the
    endpoint or network does.

    Every read ends by `timeout` after the start, however the endpoint drips its answer;
    a connect or send may start just before it, so the exchange ends within about twice
    `timeout` at worst.
    """
    started = time.monotonic()
    try:
        url = _models_url(base_url)
    except _Failed as failed:
        return _answered(_failure(failed, token, started))
    connection = _connection((verify, url.scheme, url.host, url.port), timeout)
    try:
        return _answered(
            _probe(connection, url, token, timeout=timeout, max_body=max_body, started=started)
        )
    finally:
        connection.close()


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
    connection: http.client.HTTPConnection,
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
    deadline = started + timeout
    try:
        with deadlines.until(deadline):
            status, body = _exchange(
                connection, url, headers, max_body=max_body, deadline=deadline, timeout=timeout
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


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


def shown_url(url: str) -> str:
    """`url` as a message or a log may show it: without its userinfo (`user:password@`),
    a credential too. The hub's endpoint is shown through it as the probe's URLs are; a
    URL httpx cannot parse loses whatever stands before an `@` in its authority."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError):
        return _USERINFO.sub(r"\1", url)
    return _shown(parsed) if parsed.userinfo else url


def _same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


def _exchange(
    connection: http.client.HTTPConnection,
    url: httpx.URL,
    headers: dict[str, str],
    *,
    max_body: int,
    deadline: float,
    timeout: float,
) -> tuple[int, bytes]:
    for _ in range(MAX_REDIRECTS + 1):
        if time.monotonic() > deadline:
            raise _Failed(f"timed out after {timeout:g}s (following redirects)")
        try:
            response = _send(connection, url.raw_path.decode("ascii"), headers, deadline, timeout)
            read_to_end = False
            try:
                location = response.getheader("location")
                if response.status in _REDIRECTS and location is not None:
                    target = _redirect_target(url, location, response.status)
                    if not _same_origin(url, target):
                        # Its origin only: the rest is the endpoint's to vary at will, and
                        # every new error is an event in the order's log.
                        origin = f"{target.scheme}://{target.netloc.decode('ascii')}"
                        raise _Failed(
                            f"redirect to another origin not followed: {origin}",
                            response.status,
                        )
                    read_to_end = _discard(response, deadline, timeout)
                    url = target
                    continue
                if not 200 <= response.status < 300:
                    read_to_end = _discard(response, deadline, timeout)
                    raise _Failed(_status_error(response.status), response.status)
                body = _read_capped(response, max_body, deadline, timeout)
                read_to_end = True
                return response.status, body
            finally:
                if not read_to_end:
                    connection.close()  # what is left of the answer would be the next's
                response.close()
        except (OSError, http.client.HTTPException) as err:  # the connection is closed
            raise _Failed(f"{type(err).__name__}: {err}") from err
    raise _Failed(f"more than {MAX_REDIRECTS} redirects")


def _redirect_target(url: httpx.URL, location: str, status: int) -> httpx.URL:
    """Where a redirect points, or _Failed: a `Location` httpx cannot parse (`/\\x01`,
    `http://[::1`) made `join` raise out of the probe, which ended the order's probing."""
    try:
        return url.join(location)
    except (httpx.InvalidURL, ValueError) as err:
        raise _Failed(
            f"HTTP {status} redirect to an invalid URL not followed ({type(err).__name__})",
            status,
        ) from err


def _send(
    connection: http.client.HTTPConnection,
    target: str,
    headers: dict[str, str],
    deadline: float,
    timeout: float,
) -> http.client.HTTPResponse:
    """The response's head; once more on a new connection if a kept one failed before
    any answer (closed by the server as the request went out). A timeout is no such
    failure: it is the answer."""
    for attempt in (1, 2):
        reused = connection.sock is not None  # else this request opens the connection
        try:
            connection.request("GET", target, headers=headers)
            return connection.getresponse()
        except TimeoutError as err:
            phase = "connecting" if connection.sock is None else "no answer"
            connection.close()  # a late answer must not be taken for the next request's
            raise _Failed(f"timed out after {timeout:g}s ({phase})") from err
        except (OSError, http.client.HTTPException):  # TLS's errors too (ValueErrors also)
            connection.close()
            if not reused or attempt == 2 or time.monotonic() > deadline:
                raise
        except ValueError as err:
            # http.client refusing to send a header (a token with a line break): its
            # message quotes the value's repr, which _scrub cannot find. Not said.
            connection.close()
            raise _Failed(f"the request could not be sent ({type(err).__name__})") from err
    raise AssertionError("unreachable: the second attempt returns or raises")


def _status_error(code: int) -> str:
    """What an error status means, without the code: the status and the log put
    "HTTP <code>: " before it (fsm.state.probe_error_text), and with it the message read
    "HTTP 500: HTTP 500"."""
    if code == 401:
        return "the endpoint wants a valid token"
    if code == 403:
        return "the token is not allowed"
    if code == 404:
        return "no such path: the runtime serves no OpenAI models API there"
    if code >= 500:
        return "the runtime failed the request"
    return "an unexpected status"


def _discard(response: http.client.HTTPResponse, deadline: float, timeout: float) -> bool:
    """Whether the rest of an unused answer was read, so the connection can be kept.

    Whatever goes wrong reading it only closes the connection: the answer is its status.
    """
    try:
        _read_capped(response, _DISCARDED_MAX, deadline, timeout)
    except (_Failed, OSError, http.client.HTTPException):
        return False
    return True


def _read_capped(
    response: http.client.HTTPResponse, max_body: int, deadline: float, timeout: float
) -> bytes:
    """The whole body, or _Failed past `max_body` bytes or the deadline."""
    declared = response.getheader("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > max_body:
        raise _Failed(f"response of {declared} bytes exceeds {max_body}", response.status)
    body = bytearray()
    while True:
        try:
            chunk = response.read1(_CHUNK)
        except TimeoutError as err:
            raise _Failed(f"timed out after {timeout:g}s (body)") from err
        if not chunk:
            break
        body += chunk
        if len(body) > max_body:
            raise _Failed(f"response exceeds {max_body} bytes", response.status)
        if time.monotonic() > deadline:
            # A server that trickles bytes resets the read timeout with every one.
            raise _Failed(f"timed out after {timeout:g}s (body still arriving)")
    if response.length:  # the server closed before the length it declared
        raise _Failed(f"response cut short, {response.length} bytes missing", response.status)
    return bytes(body)


def _check_models(body: bytes, status: int) -> None:
    try:
        answer: Any = json.loads(body)
    # UnicodeDecodeError is a ValueError too; RecursionError is `[[[[...` a few KB deep.
    except (ValueError, RecursionError) as err:
        raise _Failed(f"HTTP {status} but not JSON: {type(err).__name__}", status) from err
    if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
        raise _Failed(f"HTTP {status} JSON without a `data` list: not a model list", status)


def _scrub(text: str, token: str | None) -> str:
    """One line, without the token, and clipped after that: whoever answers the Service
    chooses what a server's line or a URL in the error says, and each new error is an
    event in the order's log (64 KB a probe, for as long as it likes, before)."""
    line = " ".join(text.split())
    line = line.replace(token, "***") if token else line
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"
