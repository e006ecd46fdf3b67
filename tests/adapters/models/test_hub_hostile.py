"""A hub that answers garbage, too much, too slowly or not at all (issue #10), or drips
its answer's head.

Each misbehaviour is a real HTTP server on 127.0.0.1 that this module starts; the resolver
must turn each into a named ModelResolved reason whose message says what was wrong —
never the raw body — within its time bounds, reading no more of a huge answer than its
cap. Tokens that cannot be sent in a header are refused before any request.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import threading
import time
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from adapters.models.huggingface import HubResolver, HubSettings, token_problem
from adapters.models.lookup import ModelUnavailable
from adapters.simulator.hub import StandInHub
from fsm.reasons import Reason
from tests.adapters.models.conftest import FakeClock

MODEL = "Qwen/Qwen2.5-7B-Instruct"
MARKER = "RAW-BODY-MARKER"  # in every garbage body: must never reach a message
HUGE = 50 * 1024 * 1024
CHUNK = 64 * 1024


class HostileHub(ThreadingHTTPServer):
    """Answers every request the way `mode` says."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = "garbage"
        self.sent = 0  # body bytes written before the client went away
        self.requests = 0
        self.cookies: list[str | None] = []  # the Cookie header of each request
        self.release = threading.Event()  # ends every hung answer
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: HostileHub
    BODIES: ClassVar[dict[str, bytes]] = {
        "garbage": f"<html><body>502 {MARKER} Bad Gateway</body></html>".encode(),
        "json-list": json.dumps([MARKER, 1, 2]).encode(),
        "wrong-types": json.dumps(
            {"id": MODEL, "sha": ["not", "a", "sha"], "siblings": MARKER, "tags": 7}
        ).encode(),
        "binary": bytes(range(256)) * 16 + MARKER.encode(),
        # Valid JSON that Python's parser cannot descend: RecursionError, not ValueError.
        "deep-json": b"[" * 100_000 + b"]" * 100_000,
    }

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.server.requests += 1
        self.server.cookies.append(self.headers.get("Cookie"))
        mode = self.server.mode
        if mode == "sets-a-cookie":
            self._answer(self.BODIES["garbage"], cookie=f"session={MARKER}; Path=/")
        elif mode in self.BODIES:
            self._answer(self.BODIES[mode])
        elif mode == "huge":
            self._huge()
        elif mode == "huge-503":
            self._huge(status=503)
        elif mode == "gzip-bomb-503":
            self._gzip_bomb(status=503)
        elif mode == "huge-redirect":
            if self.path.startswith("/moved"):
                self._answer(b"{}", status=503)
            else:
                self._huge(status=302, location="/moved" + self.path)
        elif mode.startswith("status-"):
            self._answer(b'{"error": "upstream timed out"}', status=int(mode.split("-")[1]))
        elif mode.startswith("quiet-"):  # quiet-<status>-<Retry-After>
            _, status, wait = mode.split("-", 2)
            self._answer(b'{"error": "slow down"}', status=int(status), retry_after=wait)
        elif mode.startswith("ratelimit-"):  # ratelimit-<status>-<remaining>-<reset>
            _, status, left, reset = mode.split("-", 3)
            limit = f'"api";r={left};t={reset}'
            self._answer(b'{"error": "rate limited"}', status=int(status), ratelimit=limit)
        elif mode.startswith("late-quiet-"):  # the same, a second late
            _, _, status, wait = mode.split("-", 3)
            time.sleep(1.0)
            self._answer(b'{"error": "slow down"}', status=int(status), retry_after=wait)
        elif mode == "redirect-loop":
            self._answer(b"", status=302, location=self.path)
        elif mode == "slow":
            time.sleep(2.0)
            self._answer(b"{}")
        elif mode == "hung":
            self.server.release.wait(30)
        elif mode == "trickle":
            self._trickle()
        elif mode == "drip-headers":
            self._drip_headers()

    def _answer(
        self,
        body: bytes,
        *,
        cookie: str | None = None,
        status: int = 200,
        location: str | None = None,
        retry_after: str | None = None,
        ratelimit: str | None = None,
    ) -> None:
        self.send_response(status)
        if ratelimit is not None:
            self.send_header("RateLimit", ratelimit)
            self.send_header("RateLimit-Policy", '"fixed window";"api";q=500;w=300')
        if cookie is not None:
            self.send_header("Set-Cookie", cookie)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        if location is not None:
            self.send_header("Location", location)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _huge(self, status: int = 200, location: str | None = None) -> None:
        self.send_response(status)
        if location is not None:
            self.send_header("Location", location)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(HUGE))
        self.end_headers()
        chunk = (b'{"id": "' + MARKER.encode() + b'", "pad": "').ljust(CHUNK, b"x")
        try:
            while self.server.sent < HUGE and not self.server.release.is_set():
                self.wfile.write(chunk)
                self.server.sent += len(chunk)
        except OSError:
            pass  # the client hung up: what we want

    def _gzip_bomb(self, status: int) -> None:
        """A few hundred KB on the wire that inflate to HUGE bytes."""
        body = gzip_bomb()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
            self.server.sent += len(body)
        except OSError:
            pass

    def _trickle(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            while not self.server.release.wait(0.1):
                self.wfile.write(b" ")
                self.wfile.flush()
        except OSError:
            pass

    def _drip_headers(self) -> None:
        """The answer's head a byte every 0.1 s, for ever: each read gets its byte
        within any read timeout."""
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"x" * 100_000
        try:
            for byte in head:
                if self.server.release.wait(0.1):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        except OSError:
            pass


@functools.cache
def gzip_bomb() -> bytes:
    return gzip.compress(b"x" * HUGE, compresslevel=9)


@pytest.fixture
def hostile() -> Iterator[HostileHub]:
    server = HostileHub()
    yield server
    server.close()


def resolver_for(url: str, *, request: float = 0.5, total: float = 2.0) -> HubResolver:
    return HubResolver(HubSettings(endpoint=url, request_timeout=request, total_timeout=total))


def unavailable(result: object) -> ModelUnavailable:
    assert isinstance(result, ModelUnavailable), result
    return result


def resolved_traced(resolver: HubResolver) -> tuple[ModelUnavailable, int]:
    """The resolver's failure for MODEL, and the peak of Python memory while it ran."""
    tracemalloc.start()
    try:
        failure = unavailable(resolver.resolve(MODEL))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return failure, peak


@pytest.mark.parametrize("mode", ["garbage", "json-list", "wrong-types", "binary", "deep-json"])
def test_garbage_is_metadata_invalid_and_the_body_is_not_quoted(
    hostile: HostileHub, mode: str
) -> None:
    hostile.mode = mode
    failure = unavailable(resolver_for(hostile.url).resolve(MODEL))
    assert failure.reason is Reason.MODEL_METADATA_INVALID
    assert "not valid model metadata" in failure.message
    assert MARKER not in failure.message
    assert not failure.transient  # it will not fix itself: cached briefly, not hammered


def test_a_huge_answer_is_cut_at_the_cap_and_never_held_whole(hostile: HostileHub) -> None:
    hostile.mode = "huge"
    resolver = resolver_for(hostile.url, request=5.0, total=10.0)
    failure, peak = resolved_traced(resolver)
    assert failure.reason is Reason.MODEL_METADATA_INVALID
    cap = resolver.settings.max_file_bytes
    assert f"more than {cap} bytes" in failure.message
    assert MARKER not in failure.message
    # The cap (8 MiB) and a copy of it, not the 50 MB answer.
    assert peak < 3 * cap, f"peak {peak} bytes while reading a {HUGE}-byte answer"
    hostile.release.set()
    assert hostile.sent < HUGE


@pytest.mark.parametrize("mode", ["huge-503", "gzip-bomb-503", "huge-redirect"])
def test_an_error_or_a_redirect_with_a_huge_body_is_never_held_whole(
    hostile: HostileHub, mode: str
) -> None:
    """The client reads an error's body and a redirect's whole, past the cap on answers:
    a 503 with gigabytes (or a gzip of them) took the controller's memory. The outage is
    said as one, from a capped read."""
    hostile.mode = mode
    gzip_bomb()  # made before the count: the server's making of it is not the client's
    resolver = resolver_for(hostile.url, request=5.0, total=10.0)
    failure, peak = resolved_traced(resolver)
    assert failure.reason is Reason.MODEL_SOURCE_UNREACHABLE
    assert "HTTP 503" in failure.message and failure.transient
    assert MARKER not in failure.message
    assert peak < HUGE // 10, f"peak {peak} bytes for a {HUGE}-byte body"


@pytest.mark.parametrize(
    ("status", "transient"),
    [(408, True), (425, True), (429, True), (503, True), (504, True), (400, False), (410, False)],
)
def test_a_proxys_try_again_is_an_outage_not_the_models_fault(
    hostile: HostileHub, status: int, transient: bool
) -> None:
    """408 and 425 were taken as the model's fault (cached, no backoff, and a Ready
    order's facts replaced by the failure: demoted to Pending for a proxy's hiccup)."""
    hostile.mode = f"status-{status}"
    failure = unavailable(resolver_for(hostile.url).resolve(MODEL))
    assert failure.transient is transient
    assert failure.reason is (
        Reason.MODEL_SOURCE_UNREACHABLE if transient else Reason.MODEL_METADATA_INVALID
    )
    assert f"HTTP {status}" in failure.message


@pytest.mark.parametrize(
    ("mode", "quiet"),
    [
        ("quiet-429-120", 120),
        ("quiet-503-86400", 900),  # kept for at most the quarter hour
        ("quiet-429-Wed, 21 Oct 2099 07:28:00 GMT", 900),  # an HTTP date
        # huggingface.co's own 429: no Retry-After, its rate limit spent for 300 s.
        ("ratelimit-429-0-300", 300),
    ],
    ids=["seconds", "capped", "http-date", "rate-limit-spent"],
)
def test_a_hub_that_asks_for_quiet_is_left_alone_until_then(
    hostile: HostileHub, clock: FakeClock, mode: str, quiet: int
) -> None:
    """Each order naming a model the hub refused with Retry-After asked again on its own
    backoff (about once a minute each), while the hub asked for an hour: now no model
    is asked of that hub until the quiet ends, and every order says so, in words that
    stay the same meanwhile."""
    hostile.mode = mode
    resolver = HubResolver(
        HubSettings(endpoint=hostile.url, request_timeout=0.5, total_timeout=2.0), clock=clock
    )
    first = unavailable(resolver.resolve(MODEL))
    assert first.transient and first.reason is Reason.MODEL_SOURCE_UNREACHABLE
    assert first.message == unavailable(resolver.resolve(MODEL)).message  # one event, not two
    asked = hostile.requests
    other = unavailable(resolver.resolve("org/another-model"))
    again = unavailable(resolver.resolve("org/another-model"))
    assert hostile.requests == asked  # nothing sent during the quiet
    assert other.transient and other.reason is Reason.MODEL_SOURCE_UNREACHABLE
    assert f"asked for {quiet} s without requests; 'org/another-model'" in other.message
    assert again.message == other.message
    clock.now += quiet + 1
    unavailable(resolver.resolve(MODEL))
    assert hostile.requests > asked  # asked again once the quiet is over


def test_a_rate_limit_not_spent_asks_for_no_quiet(hostile: HostileHub, clock: FakeClock) -> None:
    """A 503 that says requests are left is no request to wait: asked again as any."""
    hostile.mode = "ratelimit-503-7-300"
    resolver = HubResolver(
        HubSettings(endpoint=hostile.url, request_timeout=0.5, total_timeout=2.0), clock=clock
    )
    said = unavailable(resolver.resolve(MODEL)).message
    assert "answered HTTP 503" in said and "without requests" not in said
    asked = hostile.requests
    unavailable(resolver.resolve("org/another-model"))
    assert hostile.requests > asked


def test_one_tokens_quiet_leaves_the_other_tenants_asking(
    hostile: HostileHub, hub: StandInHub, clock: FakeClock
) -> None:
    """A hub limits each account: one tenant's spent token must not silence it for every
    other token and for anonymous lookups."""
    hostile.mode = "quiet-429-3600"
    resolver = HubResolver(
        HubSettings(endpoint=hostile.url, request_timeout=0.5, total_timeout=2.0), clock=clock
    )
    unavailable(resolver.resolve(MODEL, token="hf_spent"))
    asked = hostile.requests
    assert "asked for 900 s" in unavailable(resolver.resolve(MODEL, token="hf_spent")).message
    assert hostile.requests == asked
    unavailable(resolver.resolve(MODEL, token="hf_other"))
    unavailable(resolver.resolve(MODEL))
    assert hostile.requests > asked + 1  # each of the other two was asked


def test_a_quiet_met_after_the_endpoint_changed_does_not_silence_the_new_hub(
    hostile: HostileHub, hub: StandInHub, clock: FakeClock
) -> None:
    """An admin moves away from a hub that throttles while a lookup is still waiting on
    it: its Retry-After, come late, is the old hub's, not the new one's."""
    hostile.mode = "late-quiet-429-3600"
    resolver = HubResolver(
        HubSettings(endpoint=hostile.url, request_timeout=3.0, total_timeout=5.0), clock=clock
    )
    late = threading.Thread(target=resolver.resolve, args=(MODEL,))
    late.start()
    time.sleep(0.3)  # the lookup is under way
    assert resolver.use_endpoint(hub.url)
    late.join(10)
    assert not late.is_alive()
    assert not isinstance(resolver.resolve(MODEL), ModelUnavailable)  # the new hub answered


def test_a_redirect_loop_ends_and_is_said(hostile: HostileHub) -> None:
    hostile.mode = "redirect-loop"
    failure = unavailable(resolver_for(hostile.url).resolve(MODEL))
    assert failure.reason is Reason.MODEL_SOURCE_UNREACHABLE
    assert "redirected" in failure.message and failure.transient
    assert hostile.requests <= 10


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("slow", "did not answer within 0.5s"),
        ("hung", "did not answer within 0.5s"),
        ("trickle", "did not finish answering"),
        ("drip-headers", "did not finish answering within the 2s allowed"),
    ],
)
def test_slow_hung_or_trickling_hubs_are_unreachable_within_the_bounds(
    hostile: HostileHub, mode: str, says: str
) -> None:
    hostile.mode = mode
    started = time.monotonic()
    failure = unavailable(resolver_for(hostile.url, request=0.5, total=2.0).resolve(MODEL))
    elapsed = time.monotonic() - started
    assert failure.reason is Reason.MODEL_SOURCE_UNREACHABLE
    assert says in failure.message
    assert failure.transient  # retried with backoff by the controller, never cached
    assert elapsed < 3.0, f"{mode}: {elapsed:.1f}s past the 2s bound"


def test_a_cookie_set_for_one_tenant_never_goes_with_anothers_request(
    hostile: HostileHub,
) -> None:
    """huggingface_hub sends every request through one process-wide client: a session
    cookie a mirror set in its answer to tenant A's token went with tenant B's anonymous
    requests, and with every later one."""
    hostile.mode = "sets-a-cookie"
    resolver = resolver_for(hostile.url)
    unavailable(resolver.resolve(MODEL, token="hf_tenantAtokenabcdefghijklmn"))
    unavailable(resolver.resolve(MODEL))  # another question: asked, not cached
    assert len(hostile.cookies) == 2
    assert hostile.cookies == [None, None]


# --- tokens that cannot be sent ----------------------------------------------------------

UNSENDABLE = {
    "newline": "hf_abcdefgh\nijklmnopqrstu",
    "carriage-return": "hf_abcdefgh\rijklmnopqrstu",
    "crlf-header-injection": "hf_abcdefghijk\r\nX-Injected: yes",
    "non-latin-1": "hf_abcdefgh€ijklmnopqrstu",
    "latin-1-only": "hf_abcdefghéijklmnopqrstu",
    "nul": "hf_abcdefgh\x00ijklmnopqrstu",
    "pem": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
        "-----END OPENSSH PRIVATE KEY-----"
    ),
}


@pytest.mark.parametrize("token", UNSENDABLE.values(), ids=UNSENDABLE.keys())
def test_a_token_that_cannot_be_a_header_is_refused_before_any_request(
    token: str, caplog: pytest.LogCaptureFixture
) -> None:
    """httpx's error for such a header quotes the header, token and all (seen:
    "LocalProtocolError: Illegal header value b'Bearer hf_…\\n…'" in the order's status)."""
    with StandInHub() as hub, caplog.at_level(logging.DEBUG):
        resolver = resolver_for(hub.url, request=2.0, total=4.0)
        failure = unavailable(resolver.resolve(MODEL, token=token))
        assert resolver.peek(MODEL, token=token) == failure
        assert hub.requests == ()
    assert failure.reason is Reason.AUTH_SECRET_INVALID
    assert "nothing was sent" in failure.message
    windows = _windows(token.encode())
    for text in (failure.message, repr(failure), caplog.text):
        assert not windows & _windows(text.encode()), "a piece of the token was echoed"


def test_a_trailing_newline_is_still_no_problem() -> None:
    assert token_problem("hf_abcdefghijklmnop") is None
    assert token_problem("hf_abc\n") == "a line break"
    assert token_problem("hf abc") == "a space"


def _windows(data: bytes, size: int = 8) -> set[bytes]:
    return {data[i : i + size] for i in range(len(data) - size + 1)}
