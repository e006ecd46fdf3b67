"""An OpenAI-compatible stand-in for one runtime pod, on its own port of 127.0.0.1.

The controller probes an order's inference API (`/v1/models` with the token) and users
call it; with no real vLLM on this machine, every Ready simulated pod gets one of these.
It answers like vLLM's OpenAI server: `GET /v1/models`, `POST /v1/chat/completions`
(also streamed), `/v1/completions`, `/v1/embeddings`, `/v1/rerank`, plus the
unauthenticated `/health` and `/version`. With an API key (vLLM's `VLLM_API_KEY` /
`--api-key`) every `/v1` path needs `Authorization: Bearer <key>`, else 401.

`failure` is the knob tests flip (through a pod or Deployment annotation, see
`kubelet`): an HTTP status such as `"500"` answers every `/v1` call with it; `"timeout"`
holds the request for `hang_seconds`, past any probe timeout. `/health` stays healthy: the
process lives while its API fails, which is what the controller must tell apart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

__all__ = ["EMBEDDING_DIMENSIONS", "Stub", "StubRequest"]

log = logging.getLogger(__name__)

EMBEDDING_DIMENSIONS = 16
_MAX_BODY = 1 << 20
_VERSION = "0.10.1+simulated"


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
    ) -> None:
        self.served_names = tuple(served_names) or ("default",)
        self.api_key = api_key
        self.max_model_len = max_model_len
        self.hang_seconds = hang_seconds
        self.failure: str | None = None
        self.created = int(time.time())
        self._requests: list[StubRequest] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        bound_host, bound_port = self._server.server_address[:2]
        self.port = int(bound_port)
        self.url = f"http://{bound_host!s}:{bound_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"stub {label or self.url}",
            daemon=True,
        )
        self._thread.start()

    @property
    def requests(self) -> tuple[StubRequest, ...]:
        with self._lock:
            return tuple(self._requests)

    def close(self) -> None:
        self._closing.set()  # ends a hang in progress
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Stub:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

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
        """(status, JSON value or SSE lines) for one request; the handler only transports."""
        route = urlsplit(target).path.rstrip("/") or "/"
        if route in ("/health", "/ping") and method in ("GET", "POST"):
            return 200, None
        if route == "/version":
            return 200, {"version": _VERSION}
        if route.startswith("/v1") or route in ("/rerank", "/v2/rerank"):
            if not self.authorized(authorization):
                return 401, {"error": "Unauthorized"}
            failure = self.failure
            if failure == "timeout":
                self._closing.wait(self.hang_seconds)
                return 504, _error(504, "simulated hang ended", "GatewayTimeout")
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


def _handler_for(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self._send(413, _error(413, "request body too large", "BadRequestError"))
                return
            body = self.rfile.read(length) if length else b""
            authorization = self.headers.get("Authorization")
            status, payload = stub.answer(method, self.path, authorization, body)
            stub._record(method, self.path, status, stub.authorized(authorization))
            self._send(status, payload)

        def _send(self, status: int, payload: Any) -> None:
            if isinstance(payload, _Stream):
                data, kind = payload.encode(), "text/event-stream"
            elif payload is None:
                data, kind = b"", "application/json"
            else:
                data, kind = json.dumps(payload).encode(), "application/json"
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a probe timeout): nothing left to tell it

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("stub %s: " + format, stub.url, *args)

    return Handler
