"""The HTTP probe against real HTTP servers on 127.0.0.1, each path behaving one way."""

from __future__ import annotations

import json
import ssl
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from adapters.cluster.pki import make_pki
from adapters.probes import http as probe_http
from adapters.probes.http import DEFAULT_MAX_BODY, Prober, probe
from fsm.state import probe_error_text

TOKEN = "s3cr3t-token-value-0123456789abcdef"
MODELS = json.dumps({"object": "list", "data": [{"id": "qwen", "object": "model"}]}).encode()
SLOW_SECONDS = 5.0
TIMEOUT = 0.5
# The probe's documented bound is about twice the timeout; allow scheduling slack.
BOUND = 2 * TIMEOUT + 0.5
DRIP_SECONDS = 0.3  # between the header bytes of `drip-headers`
DRIP_TIMEOUT = 1.5  # each read waits less than it, the whole head forever


class Loopback(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[tuple[str, str | None]] = []  # (path, Authorization)
        self.other_base = ""  # another origin's base URL, for the redirect cases
        self.release = threading.Event()  # ends slow handlers at teardown
        self.answers = 0  # of the cases that answer differently each time

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The probe hangs up on huge and slow answers by design: a broken pipe is expected.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    server: Loopback

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: pytest shows stderr of failures only, and there is nothing to add

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str, code: int = 302) -> None:
        self.send_response(code)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization")
        self.server.seen.append((self.path, auth))
        case = self.path.removesuffix("/v1/models").strip("/")
        if not self.path.endswith("/v1/models"):
            self._send(404, b'{"error": "not found"}')
        elif case == "ok":
            self._send(200, MODELS)
        elif case == "auth":
            if auth == f"Bearer {TOKEN}":
                self._send(200, MODELS)
            else:
                # A careless server may echo what it was sent; the probe must not repeat it.
                self._send(401, json.dumps({"error": f"bad key {auth}"}).encode())
        elif case == "broken":
            self._send(500, b'{"error": "engine dead"}')
        elif case == "slow":
            self.server.release.wait(SLOW_SECONDS)
            self._send(200, MODELS)
        elif case == "trickle":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            for _ in range(int(SLOW_SECONDS / 0.1)):
                if self.server.release.wait(0.1):
                    return
                self.wfile.write(b" ")
                self.wfile.flush()
        elif case == "drip-headers":
            # A byte every 0.3 s: no read waits its timeout, the head never ends.
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                while not self.server.release.wait(DRIP_SECONDS):
                    self.wfile.write(b"a")
                    self.wfile.flush()
            except OSError:
                pass  # the probe hung up: what we want
        elif case == "huge-declared":
            self._send(200, b'{"data": [], "pad": "' + b"x" * (2 * DEFAULT_MAX_BODY) + b'"}')
        elif case == "huge-streamed":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")
            self.end_headers()  # no Content-Length: the body ends when the server closes
            self.wfile.write(b'{"data": [], "pad": "')
            for _ in range(64):
                self.wfile.write(b"x" * DEFAULT_MAX_BODY)
        elif case == "away":
            self._redirect(f"{self.server.other_base}/ok/v1/models?key={TOKEN}")
        elif case == "away-by-name":
            self._redirect(f"http://localhost:{self.server.server_address[1]}/ok/v1/models")
        elif case == "moved":
            self._redirect("/ok/v1/models", 307)
        elif case == "loop":
            self._redirect("/loop/v1/models")
        elif case == "bad-location-control":
            self._redirect("/\x01x")
        elif case == "bad-location-ipv6":
            self._redirect("http://[::1")
        elif case == "odd-length":
            self.send_response(200)
            self.send_header("Content-Length", "\u00b2")  # "²": isdigit(), and no int
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(MODELS)
        elif case == "cut-short":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(MODELS) + 100))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(MODELS)  # and the connection closes 100 bytes early
        elif case == "broken-bad-chunks":
            self.send_response(500)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"zz\r\nnot a chunk size\r\n")
        elif case == "html":
            self._send(200, b"<html>nginx default page</html>", "text/html")
        elif case == "no-data":
            self._send(200, b'{"object": "list"}')
        elif case == "deep-json":  # valid JSON Python's parser cannot descend
            self._send(200, b"[" * 5_000 + b"]" * 5_000)
        elif case == "away-long":  # another origin, a 60 KB path new at every answer
            self.server.answers += 1
            self._redirect(f"{self.server.other_base}/{self.server.answers}/{'a' * 60_000}")
        elif case == "long-bad-status-line":  # http.client quotes the line it cannot read
            self.server.answers += 1
            self.wfile.write(f"XTTP/1.1 {self.server.answers} {'x' * 60_000}\r\n\r\n".encode())
        else:
            self._send(404, b"{}")


@pytest.fixture
def servers() -> Iterator[tuple[Loopback, Loopback]]:
    main, other = Loopback(), Loopback()
    main.other_base = other.base
    threads = [
        threading.Thread(target=s.serve_forever, args=(0.02,), daemon=True) for s in (main, other)
    ]
    for t in threads:
        t.start()
    yield main, other
    for s in (main, other):
        s.release.set()
        s.shutdown()
        s.server_close()


@pytest.fixture
def server(servers: tuple[Loopback, Loopback]) -> Loopback:
    return servers[0]


@pytest.mark.parametrize(
    ("case", "token", "ok", "status", "error"),
    [
        ("ok", None, True, 200, ""),
        ("ok", TOKEN, True, 200, ""),
        ("auth", TOKEN, True, 200, ""),
        ("auth", None, False, 401, "wants a valid token"),
        ("auth", "wrong-token", False, 401, "wants a valid token"),
        ("broken", TOKEN, False, 500, "failed the request"),
        ("broken-bad-chunks", TOKEN, False, 500, "failed the request"),
        ("html", None, False, 200, "not JSON"),
        ("no-data", None, False, 200, "without a `data` list"),
        ("deep-json", None, False, 200, "not JSON"),
        ("huge-declared", None, False, 200, "exceeds"),
        ("huge-streamed", None, False, 200, "exceeds"),
        ("cut-short", None, False, 200, "cut short"),
        ("moved", TOKEN, True, 200, ""),
        ("away-by-name", TOKEN, False, 302, "another origin"),
        ("loop", None, False, None, "redirects"),
        ("bad-location-control", TOKEN, False, 302, "redirect to an invalid URL not followed"),
        ("bad-location-ipv6", TOKEN, False, 302, "redirect to an invalid URL not followed"),
        ("odd-length", None, True, 200, ""),
        ("missing", None, False, 404, "no such path"),
    ],
    ids=[
        "ok",
        "ok-with-token",
        "token-accepted",
        "token-missing",
        "token-wrong",
        "server-error",
        "server-error-with-an-unreadable-body",
        "not-json",
        "json-without-data",
        "json-nested-too-deep",  # RecursionError raised out of the probe
        "huge-declared-body",
        "huge-streamed-body",
        "body-shorter-than-declared",
        "same-origin-redirect-followed",
        "other-host-redirect-refused",
        "redirect-loop",
        "redirect-to-a-control-character",  # httpx's join raised out of the probe
        "redirect-to-an-unclosed-ipv6-host",
        "content-length-of-a-non-ascii-digit",  # int("²") raised out of the probe
        "no-models-api",
    ],
)
def test_answers(
    server: Loopback, case: str, token: str | None, ok: bool, status: int | None, error: str
) -> None:
    answer = probe(f"{server.base}/{case}", token, timeout=2.0)
    assert (answer.ok, answer.status_code) == (ok, status), answer.error
    assert error in answer.error if error else answer.error == ""
    assert "\n" not in answer.error
    assert 0 < answer.latency < 2.0


def test_the_token_is_sent_as_a_bearer_header(server: Loopback) -> None:
    probe(f"{server.base}/ok", TOKEN, timeout=2.0)
    probe(f"{server.base}/ok/", None, timeout=2.0)  # a trailing slash makes no double slash
    assert server.seen == [("/ok/v1/models", f"Bearer {TOKEN}"), ("/ok/v1/models", None)]


def test_a_redirect_to_another_origin_is_not_followed_and_hides_the_token(
    servers: tuple[Loopback, Loopback],
) -> None:
    main, other = servers
    answer = probe(f"{main.base}/away", TOKEN, timeout=2.0)
    assert not answer.ok and answer.status_code == 302
    assert "another origin" in answer.error and answer.error.endswith(other.base)
    assert TOKEN not in answer.error  # the origin only: the query that carried it is not said
    assert other.seen == [], "the other origin was contacted"


@pytest.mark.parametrize("case", ["away-long", "long-bad-status-line"])
def test_an_error_the_endpoint_words_is_short(
    servers: tuple[Loopback, Loopback], case: str
) -> None:
    """Whoever answers the Service words the error of a redirect elsewhere or of a line
    that is not HTTP, and every new error is an event in the order's log: 60 KB, new at
    every probe, was 60 KB a probe in the log for as long as the endpoint liked."""
    main, _ = servers
    answers = [probe(f"{main.base}/{case}", TOKEN, timeout=2.0) for _ in range(2)]
    assert all(not a.ok and len(a.error) <= probe_http.ERROR_CHARS for a in answers)
    if case == "away-long":  # what changes from one answer to the next is not said
        assert answers[0].error == answers[1].error


@pytest.mark.parametrize("case", ["slow", "trickle"], ids=["slow-headers", "trickling-body"])
def test_a_slow_endpoint_times_out_within_the_bound(server: Loopback, case: str) -> None:
    answer = probe(f"{server.base}/{case}", TOKEN, timeout=TIMEOUT)
    assert not answer.ok and answer.status_code is None
    assert "timed out" in answer.error
    assert answer.latency < BOUND


@pytest.mark.parametrize("kept", [False, True], ids=["own-connection", "kept-connection"])
def test_dripping_headers_time_out_at_the_deadline(server: Loopback, kept: bool) -> None:
    # Before, each header byte reset the read timeout: a head of 100 KiB took days.
    prober = Prober()
    probing = prober.probe if kept else probe
    answer = probing(f"{server.base}/drip-headers", TOKEN, timeout=DRIP_TIMEOUT)
    assert not answer.ok and answer.status_code is None
    assert f"timed out after {DRIP_TIMEOUT:g}s" in answer.error
    assert DRIP_TIMEOUT - 0.1 < answer.latency < DRIP_TIMEOUT + 0.5
    # The deadline was the exchange's, not the connection's: the next probe answers.
    assert probing(f"{server.base}/ok", TOKEN, timeout=DRIP_TIMEOUT).ok
    prober.close()


def test_a_closed_port_is_an_answer_not_an_exception() -> None:
    probe_server = Loopback()
    base = probe_server.base
    probe_server.server_close()  # nothing listens there any more
    answer = probe(base, TOKEN, timeout=TIMEOUT)
    assert not answer.ok and answer.status_code is None
    assert "Connection refused" in answer.error and TOKEN not in answer.error


@pytest.mark.parametrize(
    "base", ["not a url", "ftp://127.0.0.1/", "http://"], ids=["garbage", "ftp", "no-host"]
)
def test_an_invalid_base_url_is_an_answer(base: str) -> None:
    answer = probe(base, None, timeout=TIMEOUT)
    assert not answer.ok and "invalid endpoint URL" in answer.error


@pytest.mark.parametrize("case", ["bad-location-control", "bad-location-ipv6", "ok"])
def test_kept_connections_answer_a_bad_redirect_and_probe_on(server: Loopback, case: str) -> None:
    """The controller's Prober: a Location httpx cannot parse is a failed probe, and the
    origin's next probe still gets its answer."""
    prober = Prober()
    try:
        answer = prober.probe(f"{server.base}/{case}", TOKEN, timeout=2.0)
        assert answer.ok is (case == "ok"), answer.error
        assert prober.probe(f"{server.base}/ok", TOKEN, timeout=2.0).ok
    finally:
        prober.close()


@pytest.mark.parametrize("token", ["tok\nen-0123456789", "tok\ren-0123456789"])
def test_a_token_http_client_will_not_send_is_an_answer_that_does_not_quote_it(
    server: Loopback, token: str
) -> None:
    """http.client refuses such a header with a ValueError quoting its repr (which the
    scrub could not find): it escaped the probe, the token in its text."""
    answer = probe(f"{server.base}/ok", token, timeout=2.0)
    assert not answer.ok and "could not be sent" in answer.error
    assert "0123456789" not in answer.error and server.seen == []


def test_credentials_in_the_url_are_not_shown() -> None:
    answer = probe("ftp://user:pa55word@127.0.0.1/", None, timeout=TIMEOUT)
    assert "pa55word" not in answer.error


def test_a_smaller_cap_cuts_a_normal_answer(server: Loopback) -> None:
    answer = probe(f"{server.base}/ok", None, timeout=2.0, max_body=16)
    assert not answer.ok and "exceeds 16" in answer.error


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[Loopback]:
    """The OK endpoint over TLS, with a certificate for 127.0.0.1 from a local CA that
    no trust store holds."""
    pki = make_pki(tmp_path / "pki")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.serving_cert, pki.serving_key)
    server = Loopback()
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_tls_endpoint_is_verified_unless_verification_is_off(tls_server: Loopback) -> None:
    base = tls_server.base.replace("http://", "https://") + "/ok"
    refused = probe(base, TOKEN, timeout=2.0)
    assert not refused.ok and refused.status_code is None
    assert "CERTIFICATE_VERIFY_FAILED" in refused.error and TOKEN not in refused.error
    assert probe(base, TOKEN, timeout=2.0, verify=False).ok
    kept = Prober()
    try:
        for _ in range(2):
            assert kept.probe(base, TOKEN, timeout=2.0, verify=False).ok
    finally:
        kept.close()
    assert tls_server.seen == [("/ok/v1/models", f"Bearer {TOKEN}")] * 3


def test_probes_share_one_tls_context(
    tls_server: Loopback, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CA bundle is loaded once per process, not per probe (37 ms of CPU each here:
    most of the controller's idle cost with hundreds of Ready orders)."""
    loads: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        original(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    probe_http._tls.cache_clear()  # an earlier test's context would hide the count
    base = tls_server.base.replace("http://", "https://") + "/ok"
    for _ in range(5):  # each one verifies the local CA's certificate, and refuses it
        refused = probe(base, None, timeout=2.0)
        assert "CERTIFICATE_VERIFY_FAILED" in refused.error
    assert len(loads) == 1


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pa55word@mirror.corp/hf", "https://mirror.corp/hf"),
        ("https://token@mirror.corp", "https://mirror.corp"),
        ("http://user:pa55word@[::1", "http://[::1"),  # httpx cannot parse it
        ("https://huggingface.co", "https://huggingface.co"),  # untouched
    ],
    ids=["user-and-password", "user-only", "unparsable", "no-credentials"],
)
def test_shown_url_drops_the_userinfo(url: str, shown: str) -> None:
    assert probe_http.shown_url(url) == shown


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("broken", "HTTP 500: the runtime failed the request"),
        ("auth", "HTTP 401: the endpoint wants a valid token"),
    ],
)
def test_a_status_is_said_once_in_the_orders_message(
    server: Loopback, case: str, said: str
) -> None:
    """The status and the log put the code before the probe's error: an error that began
    with it too read "HTTP 500: HTTP 500" in every failing order's message."""
    answer = probe(f"{server.base}/{case}", None, timeout=2.0)
    assert probe_error_text(answer.status_code, answer.error) == said
