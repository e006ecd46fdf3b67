"""An OpenAI-compatible stand-in for runtime pods: one port of 127.0.0.1 per pod, one server.

The controller probes an order's inference API (`/v1/models` with the token) and users
call it; with no real vLLM on this machine, every Ready simulated pod gets a `Stub`. It
answers like vLLM's OpenAI server: `GET /v1/models`, `POST /v1/chat/completions`
(also streamed), `/v1/completions`, `/v1/embeddings`, `/v1/rerank`, plus the
unauthenticated `/health` and `/version`. With an API key (vLLM's `VLLM_API_KEY` /
`--api-key`) every `/v1` path needs `Authorization: Bearer <key>`, else 401.

Every stub listens on its own port (so its address is `http://127.0.0.1:PORT`, what the
endpoint annotation carries), but all of them are served by ONE asyncio event loop in
one thread (`StubServer`): a thousand Ready pods cost a thousand listening sockets, not a
thousand threads polling for requests, and a stub holding a request (`"timeout"`) holds
no thread at all. The server routes by the port a connection arrived on.

`failure` is the knob tests flip (through a pod or Deployment annotation, see
`kubelet`): an HTTP status such as `"500"` answers every `/v1` call with it; `"timeout"`
holds the request for `hang_seconds`, past any probe timeout. With either, `/health` stays
healthy: the process lives while its API fails, which is what the controller must tell
apart. `"crash"` is the runtime down: every path answers 503, `/health` too, so the
kubelet's readiness probe takes the pod out of Ready, as it would a crash-looping one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import math
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from http import HTTPStatus
from types import TracebackType
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = ["CRASH", "EMBEDDING_DIMENSIONS", "Stub", "StubRequest", "StubServer"]

log = logging.getLogger(__name__)

EMBEDDING_DIMENSIONS = 16
_MAX_BODY = 1 << 20
_VERSION = "0.10.1+simulated"
_MAX_HEADER_LINES = 100
CRASH: Final = "crash"  # the failure knob's value for a runtime that is down
_HANG: Final = object()  # the answer of a `"timeout"` stub: hold the request


class StubRequest:
    """What the stub was asked and answered (for tests)."""

    __slots__ = ("authorized", "method", "path", "status")

    def __init__(self, method: str, path: str, status: int, authorized: bool) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.authorized = authorized

    def __repr__(self) -> str:
        return f"StubRequest({self.method} {self.path} -> {self.status})"


def _tokens(text: str) -> list[str]:
    return [t for t in "".join(c.lower() if c.isalnum() else " " for c in text).split() if t]


def _embedding(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    raw = [(b - 127.5) / 127.5 for b in digest[:EMBEDDING_DIMENSIONS]]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    return [round(v / norm, 6) for v in raw]


def _reply(messages: Sequence[Any]) -> str:
    last = next(
        (m.get("content") for m in reversed(messages) if isinstance(m, dict)),
        "",
    )
    text = last if isinstance(last, str) else json.dumps(last)
    if text.strip().lower() == "ping":
        return "pong"
    return f"This is a simulated answer to: {text[:200]}"


class StubServer:
    """One event loop thread serving every stub's port; started on first use."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="stub-server", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def call(self, make: Callable[[], Any]) -> Any:
        """Run a coroutine made by `make` on the loop and wait for its result."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("StubServer.call from the loop itself would deadlock")
        future: Future[Any] = asyncio.run_coroutine_threadsafe(make(), self._loop)
        return future.result(timeout=30)


_SHARED: StubServer | None = None
_SHARED_LOCK = threading.Lock()


def shared_server() -> StubServer:
    """The process's stub server (every simulator in it shares the one loop)."""
    global _SHARED  # noqa: PLW0603 - one loop per process, made on first use
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = StubServer()
        return _SHARED


class Stub:
    """One runtime's API, listening on `url` from construction until `close()`."""

    def __init__(
        self,
        *,
        served_names: Sequence[str],
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_model_len: int = 32768,
        hang_seconds: float = 30.0,
        label: str = "",
        server: StubServer | None = None,
    ) -> None:
        self.served_names = tuple(served_names) or ("default",)
        self.api_key = api_key
        self.max_model_len = max_model_len
        self.hang_seconds = hang_seconds
        self.label = label
        self.failure: str | None = None
        self.created = int(time.time())
        self._requests: list[StubRequest] = []
        self._lock = threading.Lock()
        self._server = server or shared_server()
        # Bound here, in the caller's thread, so the address is known before it returns.
        listener = socket.create_server((host, port), backlog=64)
        bound_host, bound_port = listener.getsockname()[:2]
        self.port = int(bound_port)
        self.url = f"http://{bound_host!s}:{bound_port}"
        self._connections: set[asyncio.StreamWriter] = set()
        self._closed: asyncio.Event | None = None
        self._listener: asyncio.Server = self._server.call(lambda: self._listen(listener))

    async def _listen(self, listener: socket.socket) -> asyncio.Server:
        self._closed = asyncio.Event()
        return await asyncio.start_server(self._connection, sock=listener)

    @property
    def requests(self) -> tuple[StubRequest, ...]:
        with self._lock:
            return tuple(self._requests)

    def close(self) -> None:
        """Stop listening, end every open connection (and a hang in progress)."""
        self._server.call(self._close)

    async def _close(self) -> None:
        self._listener.close()
        if self._closed is not None:
            self._closed.set()
        for writer in list(self._connections):
            writer.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listener.wait_closed(), 5)

    def __enter__(self) -> Stub:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # --- HTTP/1.1 over asyncio streams --------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away mid-request (a probe timeout): nothing to tell it
        except ValueError as err:  # a request line or header we cannot read
            log.debug("stub %s: bad request: %s", self.url, err)
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Serve one request; False when the connection is to be closed."""
        line = await reader.readline()
        if not line.strip():
            return False
        method, target, version = line.decode("latin-1").split()
        headers: dict[str, str] = {}
        for _ in range(_MAX_HEADER_LINES):
            raw = await reader.readline()
            if raw in (b"\r\n", b"\n", b""):
                break
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        length = int(headers.get("content-length") or 0)
        if length > _MAX_BODY:
            await _send(writer, 413, _error(413, "request body too large", "BadRequestError"))
            return False
        body = await reader.readexactly(length) if length else b""
        authorization = headers.get("authorization")
        status, payload = self._route(method, target, authorization, body)
        if payload is _HANG:
            assert self._closed is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), self.hang_seconds)
            status, payload = 504, _error(504, "simulated hang ended", "GatewayTimeout")
        self._record(method, target, status, self.authorized(authorization))
        await _send(writer, status, payload, keep_alive=keep_alive)
        return keep_alive

    # --- answering ----------------------------------------------------------------------

    def _record(self, method: str, target: str, status: int, authorized: bool) -> None:
        with self._lock:
            self._requests.append(StubRequest(method, target, status, authorized))
            del self._requests[:-500]

    def authorized(self, header: str | None) -> bool:
        if self.api_key is None:
            return True
        expected = f"Bearer {self.api_key}".encode()
        return header is not None and hmac.compare_digest(header.encode(), expected)

    def answer(
        self, method: str, target: str, authorization: str | None, body: bytes
    ) -> tuple[int, Any]:
        """(status, JSON value or SSE lines) for one request, in the caller's thread (a
        `"timeout"` stub answers 504 at once: only a connection can be held)."""
        status, payload = self._route(method, target, authorization, body)
        if payload is _HANG:
            return 504, _error(504, "simulated hang ended", "GatewayTimeout")
        return status, payload

    def probe(self, target: str, headers: Mapping[str, str]) -> bool:
        """A kubelet's httpGet probe, judged in-process: 2xx/3xx passes; a held request
        fails, as it would past the probe's timeout. Pure in the stub's state."""
        authorization = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
        status, payload = self._route("GET", target, authorization, b"")
        return payload is not _HANG and 200 <= status < 400

    def _route(
        self, method: str, target: str, authorization: str | None, body: bytes
    ) -> tuple[int, Any]:
        route = urlsplit(target).path.rstrip("/") or "/"
        if self.failure == CRASH:
            return 503, _error(503, "simulated crash", "ServiceUnavailable")
        if route in ("/health", "/ping") and method in ("GET", "POST"):
            return 200, None
        if route == "/version":
            return 200, {"version": _VERSION}
        if route.startswith("/v1") or route in ("/rerank", "/v2/rerank"):
            if not self.authorized(authorization):
                return 401, {"error": "Unauthorized"}
            failure = self.failure
            if failure == "timeout":
                return 504, _HANG
            if failure and failure.isdigit():
                return int(failure), _error(int(failure), "simulated failure", "SimulatedError")
        if route == "/v1/models" and method == "GET":
            return 200, self._models()
        handlers = {
            "/v1/chat/completions": self._chat,
            "/v1/completions": self._completion,
            "/v1/embeddings": self._embeddings,
            "/v1/rerank": self._rerank,
            "/v2/rerank": self._rerank,
            "/rerank": self._rerank,
        }
        if route in handlers:
            if method != "POST":
                return 405, {"detail": "Method Not Allowed"}
            try:
                request = json.loads(body or b"{}")
            except ValueError as err:
                return 400, _error(400, f"body is not JSON: {err}", "BadRequestError")
            if not isinstance(request, dict):
                return 400, _error(400, "body must be a JSON object", "BadRequestError")
            model = request.get("model", self.served_names[0])
            if model not in self.served_names:
                return 404, _error(404, f"The model `{model}` does not exist.", "NotFoundError")
            return handlers[route](request, str(model))
        return 404, {"detail": "Not Found"}

    def _models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "vllm",
                    "root": self.served_names[0],
                    "parent": None,
                    "max_model_len": self.max_model_len,
                    "permission": [],
                }
                for name in self.served_names
            ],
        }

    def _chat(self, request: dict[str, Any], model: str) -> tuple[int, Any]:
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, _error(400, "messages must be a non-empty list", "BadRequestError")
        content = _reply(messages)
        prompt = sum(len(_tokens(json.dumps(m))) for m in messages)
        completion = len(_tokens(content))
        ident = f"chatcmpl-{uuid.uuid4().hex}"
        if request.get("stream"):
            chunks = [
                {"role": "assistant", "content": ""},
                {"content": content},
            ]
            lines: list[dict[str, Any]] = [
                {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "delta": delta,
                            "finish_reason": "stop" if last else None,
                        }
                    ],
                }
                for last, delta in ((False, chunks[0]), (True, chunks[1]))
            ]
            return 200, _Stream(lines)
        return 200, {
            "id": ident,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "tool_calls": []},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": _usage(prompt, completion),
        }

    def _completion(self, request: dict[str, Any], model: str) -> tuple[int, Any]:
        prompt = request.get("prompt", "")
        text = _reply([{"content": prompt if isinstance(prompt, str) else json.dumps(prompt)}])
        return 200, {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}],
            "usage": _usage(len(_tokens(str(prompt))), len(_tokens(text))),
        }

    def _embeddings(self, request: dict[str, Any], model: str) -> tuple[int, Any]:
        raw = request.get("input")
        inputs = [raw] if isinstance(raw, str) else raw
        if not isinstance(inputs, list) or not inputs:
            return 400, _error(400, "input must be a string or a list", "BadRequestError")
        texts = [item if isinstance(item, str) else json.dumps(item) for item in inputs]
        tokens = sum(len(_tokens(t)) for t in texts)
        return 200, {
            "id": f"embd-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": model,
            "data": [
                {"object": "embedding", "index": i, "embedding": _embedding(t)}
                for i, t in enumerate(texts)
            ],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
        }

    def _rerank(self, request: dict[str, Any], model: str) -> tuple[int, Any]:
        query = request.get("query")
        documents = request.get("documents")
        if not isinstance(query, str) or not isinstance(documents, list):
            return 400, _error(
                400, "query (string) and documents (list) are required", "BadRequestError"
            )
        asked = set(_tokens(query))
        ranked: list[tuple[float, int, str]] = []
        for index, document in enumerate(documents):
            text = document if isinstance(document, str) else str((document or {}).get("text", ""))
            words = set(_tokens(text))
            ranked.append((round(len(asked & words) / (len(asked | words) or 1), 6), index, text))
        ranked.sort(key=lambda r: (-r[0], r[1]))
        top = request.get("top_n")
        if isinstance(top, int) and top > 0:
            ranked = ranked[:top]
        scored = [
            {"index": index, "document": {"text": text}, "relevance_score": score}
            for score, index, text in ranked
        ]
        tokens = len(asked) + sum(len(_tokens(text)) for _, _, text in ranked)
        return 200, {
            "id": f"rerank-{uuid.uuid4().hex}",
            "model": model,
            "usage": {"total_tokens": tokens},
            "results": scored,
        }


class _Stream:
    """Server-sent events: one `data:` line per chunk, then `data: [DONE]`."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks = chunks

    def encode(self) -> bytes:
        lines = [f"data: {json.dumps(c)}\n\n" for c in self.chunks] + ["data: [DONE]\n\n"]
        return "".join(lines).encode()


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _error(code: int, message: str, kind: str) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


async def _send(
    writer: asyncio.StreamWriter, status: int, payload: Any, *, keep_alive: bool = False
) -> None:
    if isinstance(payload, _Stream):
        data, kind = payload.encode(), "text/event-stream"
    elif payload is None:
        data, kind = b"", "application/json"
    else:
        data, kind = json.dumps(payload).encode(), "application/json"
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    head = (
        f"HTTP/1.1 {status} {phrase}\r\nserver: uvicorn\r\ncontent-type: {kind}\r\n"
        f"content-length: {len(data)}\r\n"
        f"connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + data)
    await writer.drain()
