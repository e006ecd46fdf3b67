"""The prober's kept connections, against real HTTP/1.1 servers on 127.0.0.1.

Each server counts the connections it accepted and saw closed, and records what every
request carried: reuse is counted, not assumed, and the same count shows a one-off
probe opening a connection each time. What a kept connection must not change is
checked on the wire: a token goes only with its own request, nothing is remembered
between requests, a connection the server closed (idle, or as the request arrived) does
not fail the next probe, and the bounds on what is kept hold.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from adapters.probes.http import Prober, probe
from tests.support.polling import eventually

TOKEN_A = "token-of-order-a-0123456789abcdef"
TOKEN_B = "token-of-order-b-fedcba9876543210"
MODELS = json.dumps({"object": "list", "data": [{"id": "qwen"}]}).encode()
TIMEOUT = 2.0


class Server(ThreadingHTTPServer):
    """Keep-alive unless `mode` says otherwise:

    - "keep": answers every request, keeps the connection until the client closes it;
    - "idle-close": closes a connection idle for `idle` seconds (as uvicorn does);
    - "drop-second": closes a connection when its second request arrives, unanswered
      (the server's idle timer fired as the request went out);
    - "drop": closes every connection at its first request, unanswered;
    - "slow-second": holds a connection's second request past the probe's timeout;
    - "hold-first": holds the server's first request until `release` is set;
    - "small-error" / "large-error": answers 500 with a body of 20 bytes / 20 KB.
    """

    daemon_threads = True
    block_on_close = False

    def __init__(self, mode: str = "keep", idle: float = 5.0) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.mode = mode
        self.idle = idle
        self.lock = threading.Lock()
        self.accepted = 0
        self.closed = 0
        self.seen: list[tuple[str | None, str | None]] = []  # (Authorization, Cookie)
        self.release = threading.Event()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.accepted += 1
        super().process_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"  # keep-alive: the connection outlives a request

    def setup(self) -> None:
        self.timeout = self.server.idle  # how long the connection may wait for a request
        super().setup()
        self.requests = 0

    def finish(self) -> None:
        super().finish()
        with self.server.lock:
            self.server.closed += 1

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.requests += 1
        with self.server.lock:
            self.server.seen.append((self.headers.get("Authorization"), self.headers.get("Cookie")))
        mode = self.server.mode
        if mode == "drop" or (mode == "drop-second" and self.requests == 2):
            self.close_connection = True  # no answer at all: the client reads EOF
            return
        if mode == "slow-second" and self.requests == 2:
            self.server.release.wait(3 * TIMEOUT)
        if mode == "hold-first" and len(self.server.seen) == 1:
            self.server.release.wait(10)
        if mode.endswith("-error"):
            body = b"e" * (20 if mode == "small-error" else 20 * 1024)
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(MODELS)))
        self.send_header("Set-Cookie", "session=from-the-endpoint; Path=/")
        self.end_headers()
        self.wfile.write(MODELS)


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(mode: str = "keep", idle: float = 5.0) -> Server:
        server = Server(mode, idle)
        threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def prober() -> Iterator[Prober]:
    kept = Prober()
    yield kept
    kept.close()


def test_a_prober_keeps_one_connection_per_origin(
    serve: Callable[..., Server], prober: Prober
) -> None:
    a, b = serve(), serve()
    for _ in range(5):
        for server in (a, b):
            answer = prober.probe(server.base, TOKEN_A, timeout=TIMEOUT)
            assert answer.ok, answer.error
    assert (a.accepted, b.accepted) == (1, 1)
    assert len(a.seen) == len(b.seen) == 5


def test_a_one_off_probe_opens_and_closes_a_connection_of_its_own(
    serve: Callable[..., Server],
) -> None:
    server = serve()
    for _ in range(3):
        assert probe(server.base, TOKEN_A, timeout=TIMEOUT).ok
    assert server.accepted == 3
    eventually(lambda: server.closed == 3, timeout=5, what="each connection closed")


def test_a_token_goes_only_with_its_own_request_on_a_shared_connection(
    serve: Callable[..., Server], prober: Prober
) -> None:
    """Two orders behind one origin: the connection is shared, the token never is; and
    a cookie the endpoint sets is not sent back (nothing is kept between requests)."""
    server = serve()
    for token in (TOKEN_A, None, TOKEN_B, None):
        assert prober.probe(server.base, token, timeout=TIMEOUT).ok
    assert server.accepted == 1
    assert server.seen == [
        (f"Bearer {TOKEN_A}", None),
        (None, None),
        (f"Bearer {TOKEN_B}", None),
        (None, None),
    ]


def test_a_connection_the_server_closed_while_idle_is_replaced(
    serve: Callable[..., Server], prober: Prober
) -> None:
    server = serve("idle-close", idle=0.1)
    assert prober.probe(server.base, TOKEN_A, timeout=TIMEOUT).ok
    eventually(lambda: server.closed == 1, timeout=5, what="the server to close it")
    answer = prober.probe(server.base, TOKEN_A, timeout=TIMEOUT)
    assert answer.ok, answer.error
    assert server.accepted == 2 and len(server.seen) == 2


def test_a_connection_closed_as_the_request_went_out_does_not_fail_the_probe(
    serve: Callable[..., Server], prober: Prober
) -> None:
    server = serve("drop-second")
    assert prober.probe(server.base, TOKEN_A, timeout=TIMEOUT).ok
    answer = prober.probe(server.base, TOKEN_A, timeout=TIMEOUT)
    assert answer.ok, answer.error  # sent once more, on a new connection
    assert server.accepted == 2 and len(server.seen) == 3


def test_a_server_that_never_answers_fails_the_probe_without_a_retry(
    serve: Callable[..., Server], prober: Prober
) -> None:
    """Only a kept connection is retried: a new one that fails is the answer."""
    server = serve("drop")
    answer = prober.probe(server.base, TOKEN_A, timeout=TIMEOUT)
    assert not answer.ok and answer.status_code is None
    assert "RemoteDisconnected" in answer.error and TOKEN_A not in answer.error
    assert server.accepted == 1 and len(server.seen) == 1


def test_a_timeout_on_a_kept_connection_is_the_answer_not_a_retry(
    serve: Callable[..., Server], prober: Prober
) -> None:
    server = serve("slow-second")
    assert prober.probe(server.base, None, timeout=0.5).ok
    answer = prober.probe(server.base, None, timeout=0.5)
    assert not answer.ok and "timed out" in answer.error
    assert answer.latency < 2 * 0.5 + 0.5
    assert len(server.seen) == 2  # not asked a third time


def test_origins_kept_are_bounded_and_idle_ones_closed(serve: Callable[..., Server]) -> None:
    a, b = serve(), serve()
    one = Prober(max_kept=1)
    try:
        for _ in range(2):
            for server in (a, b):
                assert one.probe(server.base, None, timeout=TIMEOUT).ok
        # Each probe pushed the other origin out: a new connection every time.
        assert (a.accepted, b.accepted) == (2, 2)
    finally:
        one.close()
    eventually(lambda: (a.closed, b.closed) == (2, 2), timeout=5, what="all closed")

    c, d = serve(), serve()
    brief = Prober(keep_alive=0.2)
    try:
        assert brief.probe(c.base, None, timeout=TIMEOUT).ok
        threading.Event().wait(0.4)
        assert c.closed == 0  # still kept: only a later probe sweeps
        assert brief.probe(d.base, None, timeout=TIMEOUT).ok
        eventually(lambda: c.closed == 1, timeout=5, what="the idle origin's connection closed")
        assert d.closed == 0
    finally:
        brief.close()


def test_closing_the_prober_closes_its_connections_and_later_probes_still_answer(
    serve: Callable[..., Server],
) -> None:
    server = serve()
    kept = Prober()
    assert kept.probe(server.base, None, timeout=TIMEOUT).ok
    kept.close()
    eventually(lambda: server.closed == 1, timeout=5, what="the kept connection closed")
    assert kept.probe(server.base, None, timeout=TIMEOUT).ok  # a connection of its own
    assert server.accepted == 2
    eventually(lambda: server.closed == 2, timeout=5, what="that one closed too")


def test_a_probe_running_when_the_prober_closes_closes_its_connection_at_its_end(
    serve: Callable[..., Server],
) -> None:
    server = serve("slow-second")
    kept = Prober()
    assert kept.probe(server.base, None, timeout=TIMEOUT).ok
    answers: list[bool] = []
    running = threading.Thread(
        target=lambda: answers.append(kept.probe(server.base, None, timeout=TIMEOUT).ok)
    )
    running.start()
    eventually(lambda: len(server.seen) == 2, timeout=5, what="the second request held")
    kept.close()
    threading.Event().wait(0.1)
    assert server.closed == 0  # not closed under the running probe
    server.release.set()
    running.join(10)
    assert answers == [True]
    eventually(lambda: server.closed == 1, timeout=5, what="closed by the probe's end")


@pytest.mark.parametrize(
    ("mode", "connections"),
    [("small-error", 1), ("large-error", 3)],
    ids=["short-error-read-and-kept", "long-error-unread-and-closed"],
)
def test_an_answer_not_read_to_its_end_closes_its_connection(
    serve: Callable[..., Server], prober: Prober, mode: str, connections: int
) -> None:
    """Unread bytes of one answer would be taken for the next one's head: an error's
    body is read when short (the connection is kept) and the connection closed when not."""
    server = serve(mode)
    for _ in range(3):
        answer = prober.probe(server.base, None, timeout=TIMEOUT)
        assert (answer.ok, answer.status_code) == (False, 500), answer.error
    assert server.accepted == connections and len(server.seen) == 3


def test_probes_of_one_origin_at_once_do_not_share_a_connection(
    serve: Callable[..., Server], prober: Prober
) -> None:
    """A connection carries one exchange at a time: a probe of an origin whose kept
    connection is busy uses one of its own, closed after it."""
    server = serve("hold-first")
    held: list[bool] = []
    first = threading.Thread(
        target=lambda: held.append(prober.probe(server.base, TOKEN_A, timeout=5.0).ok)
    )
    first.start()
    eventually(lambda: len(server.seen) == 1, timeout=5, what="the first request held")
    assert prober.probe(server.base, TOKEN_B, timeout=TIMEOUT).ok
    assert server.accepted == 2
    eventually(lambda: server.closed == 1, timeout=5, what="the second's own connection closed")
    server.release.set()
    first.join(10)
    assert held == [True]
    assert prober.probe(server.base, None, timeout=TIMEOUT).ok  # on the kept one again
    assert server.accepted == 2 and server.seen[1:] == [(f"Bearer {TOKEN_B}", None), (None, None)]
