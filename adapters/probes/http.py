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
"""

from __future__ import annotations

import functools
import json
import ssl
import time
from dataclasses import dataclass
from typing import Any

import httpx

from adapters import metrics

__all__ = ["DEFAULT_MAX_BODY", "MAX_REDIRECTS", "MODELS_PATH", "ProbeAnswer", "probe"]

MODELS_PATH = "/v1/models"
DEFAULT_MAX_BODY = 64 * 1024
MAX_REDIRECTS = 3
_USER_AGENT = "ai-inference-probe"


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
    controller's idle cost. `trust_env=False`, as the client: no SSL_CERT_FILE.
    """
    return httpx.create_ssl_context(verify=verify, trust_env=False)


class _Failed(Exception):
    def __init__(self, error: str, status_code: int | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.status_code = status_code


def probe(
    base_url: str,
    token: str | None,
    *,
    timeout: float,
    max_body: int = DEFAULT_MAX_BODY,
    verify: bool = True,
    transport: httpx.BaseTransport | None = None,
) -> ProbeAnswer:
    """Probe `base_url` once. Never raises for anything the endpoint or network does.

    The exchange ends within about twice `timeout` (one blocking read may start just
    before the deadline); `transport` swaps the I/O seam in tests.
    """
    answer = _probe(
        base_url, token, timeout=timeout, max_body=max_body, verify=verify, transport=transport
    )
    metrics.probed(ok=answer.ok, status_code=answer.status_code, seconds=answer.latency)
    return answer


def _probe(
    base_url: str,
    token: str | None,
    *,
    timeout: float,
    max_body: int,
    verify: bool,
    transport: httpx.BaseTransport | None,
) -> ProbeAnswer:
    started = time.monotonic()
    deadline = started + timeout
    headers = {"Accept": "application/json", "User-Agent": _USER_AGENT}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with httpx.Client(
            timeout=httpx.Timeout(timeout),  # connect, read, write and pool alike
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment between us and the pod
            verify=_tls(verify),
            transport=transport,
            headers=headers,
        ) as client:
            status, body = _exchange(client, _models_url(base_url), max_body, deadline, timeout)
        _check_models(body, status)
    except _Failed as failed:
        return ProbeAnswer(
            ok=False,
            status_code=failed.status_code,
            error=_scrub(failed.error, token),
            latency=time.monotonic() - started,
        )
    return ProbeAnswer(ok=True, status_code=status, latency=time.monotonic() - started)


def _models_url(base_url: str) -> httpx.URL:
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
    client: httpx.Client, url: httpx.URL, max_body: int, deadline: float, timeout: float
) -> tuple[int, bytes]:
    for _ in range(MAX_REDIRECTS + 1):
        if time.monotonic() > deadline:
            raise _Failed(f"timed out after {timeout:g}s (following redirects)")
        try:
            with client.stream("GET", url) as response:
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
        except httpx.TimeoutException as err:
            raise _Failed(f"timed out after {timeout:g}s ({type(err).__name__})") from err
        except httpx.HTTPError as err:
            raise _Failed(f"{type(err).__name__}: {err}") from err
    raise _Failed(f"more than {MAX_REDIRECTS} redirects")


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
