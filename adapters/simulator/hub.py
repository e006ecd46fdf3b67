"""A stand-in HuggingFace hub on 127.0.0.1, serving model metadata from a fixture file.

Tests, the local demo and the node simulator need a hub that answers like the real one
without the network: the resolver in `adapters.models.huggingface` talks to it through
`huggingface_hub` exactly as it talks to huggingface.co, so the library's own error
translation (GatedRepoError, RepositoryNotFoundError, ...) is exercised for real.

It serves what `HfApi.model_info` reads (`GET /api/models/{id}[/revision/{rev}]`, with
`blobs`, `securityStatus` and `expand` honoured) and what `hf_hub_download` and the
resolver read (`HEAD`/`GET /{id}/resolve/{rev}/{file}`, with `X-Repo-Commit`, `ETag`,
`X-Linked-Size`, `X-Linked-Etag`, `Content-Length`). It never serves weights: a weight
file answers HEAD with its published size and GET with 501.

Access rules follow the real hub: an unknown token is 401 "Invalid credentials"; an
unknown repo is 401 (anonymous) or 404 (authenticated) with `X-Error-Code: RepoNotFound`;
a gated repo's metadata is public but its files answer 401 (no token) or 403 (an account
not granted) with `X-Error-Code: GatedRepo`.

Knobs for tests: `delay` (seconds before every answer: a slow hub), `break_json(id)`
(garbage instead of JSON for one model) and `misbehave(id, mode)` (one repo id, known or
not, answered with garbage, a 50 MB body, after `slow_seconds`, or never). Run standalone with
`python -m adapters.simulator.hub --port 8765`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

__all__ = [
    "FIXTURE",
    "MISBEHAVIOURS",
    "HubFile",
    "HubFixture",
    "HubModel",
    "HubRequest",
    "StandInHub",
    "load_fixture",
    "main",
]

log = logging.getLogger(__name__)

FIXTURE = Path(__file__).with_name("hub_models.yaml")

# Files at least this large and not served are stored in git-lfs on the real hub.
_LFS_THRESHOLD = 1 << 20
_GARBAGE = b'{"id": "truncated", "siblings": [ <html><body>502 Bad Gateway</body></html>'
_HUGE_BYTES = 50 * 1024 * 1024


# What `misbehave` answers with, by mode ("slow" answers {} late; "hung" never answers).
def _huge() -> bytes:
    return b'{"id": "huge", "pad": "' + b"x" * _HUGE_BYTES + b'"}'


MISBEHAVIOURS: dict[str, Callable[[], bytes]] = {
    "garbage": lambda: _GARBAGE,
    "huge": _huge,
    "slow": lambda: b"{}",
    "hung": lambda: b"",
}
_INFO_FIELDS = (
    "createdAt", "lastModified", "downloads", "likes", "library_name", "tags",
    "pipeline_tag", "cardData", "gguf",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class HubFile:
    """One file of a repo: its bytes when the stand-in serves it, else only its size."""

    name: str
    size: int
    content: bytes | None

    @property
    def lfs(self) -> bool:
        return self.content is None and self.size >= _LFS_THRESHOLD

    @property
    def etag(self) -> str:
        # Git's blob id for small files, a stable stand-in sha256 for LFS objects.
        if self.content is not None:
            header = f"blob {len(self.content)}\0".encode()
            return hashlib.sha1(header + self.content, usedforsecurity=False).hexdigest()
        return hashlib.sha256(f"{self.name}:{self.size}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class HubModel:
    id: str
    sha: str
    gated: bool | str  # False, "auto" or "manual", as the hub spells it
    granted: frozenset[str]
    info: Mapping[str, Any]
    files: Mapping[str, HubFile]
    safetensors: Mapping[str, int] | None

    def api_answer(self, *, blobs: bool, security: bool, expand: list[str]) -> dict[str, Any]:
        """The body of `GET /api/models/{id}` for these query parameters."""
        siblings = [self._sibling(f, blobs=blobs) for f in self.files.values()]
        answer: dict[str, Any] = {
            "_id": self.sha[:24],
            "id": self.id,
            "modelId": self.id,
            "author": self.id.split("/")[0] if "/" in self.id else None,
            "sha": self.sha,
            "private": False,
            "disabled": False,
            "gated": self.gated,
            **{k: self.info[k] for k in _INFO_FIELDS if k in self.info},
            "config": self._config_summary(),
            "siblings": siblings,
            "spaces": [],
            "usedStorage": sum(f.size for f in self.files.values()),
        }
        if self.safetensors:
            answer["safetensors"] = {
                "parameters": dict(self.safetensors),
                "total": sum(self.safetensors.values()),
            }
        if security:
            answer["securityRepoStatus"] = {"scansDone": True, "filesWithIssues": []}
        if expand:
            keep = {"_id", "id", *expand}
            answer = {k: v for k, v in answer.items() if k in keep}
        return answer

    def _sibling(self, f: HubFile, *, blobs: bool) -> dict[str, Any]:
        if not blobs:
            return {"rfilename": f.name}
        entry: dict[str, Any] = {"rfilename": f.name, "size": f.size, "blobId": f.etag[:40]}
        if f.lfs:
            entry["lfs"] = {"size": f.size, "sha256": f.etag, "pointerSize": 135}
        return entry

    def _config_summary(self) -> dict[str, Any]:
        # The hub's own digest of config.json and tokenizer_config.json.
        summary: dict[str, Any] = {}
        config = _json_of(self.files.get("config.json"))
        for key in ("architectures", "model_type"):
            if key in config:
                summary[key] = config[key]
        quant = config.get("quantization_config")
        if isinstance(quant, dict):
            summary["quantization_config"] = {
                k: quant[k] for k in ("quant_method", "bits") if k in quant
            }
        tokenizer = _json_of(self.files.get("tokenizer_config.json"))
        picked = {
            k: tokenizer[k]
            for k in ("bos_token", "eos_token", "pad_token", "unk_token", "chat_template")
            if k in tokenizer
        }
        if picked:
            summary["tokenizer_config"] = picked
        return summary


def _json_of(f: HubFile | None) -> dict[str, Any]:
    if f is None or f.content is None:
        return {}
    loaded = json.loads(f.content)
    return loaded if isinstance(loaded, dict) else {}


@dataclass(frozen=True, slots=True)
class HubFixture:
    models: Mapping[str, HubModel]
    tokens: Mapping[str, str]  # token -> account name


def load_fixture(path: Path = FIXTURE) -> HubFixture:
    """Read a fixture file in the format documented at the top of hub_models.yaml."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    tokens = {str(token): str(account) for account, token in (raw.get("accounts") or {}).items()}
    models: dict[str, HubModel] = {}
    for entry in raw["models"]:
        files: dict[str, HubFile] = {}
        for f in entry.get("files", []):
            if "json" in f:
                content = (json.dumps(f["json"], indent=2, ensure_ascii=False) + "\n").encode()
                files[f["name"]] = HubFile(f["name"], len(content), content)
            else:
                files[f["name"]] = HubFile(f["name"], int(f["size"]), None)
        safetensors = (entry.get("safetensors") or {}).get("parameters")
        models[entry["id"]] = HubModel(
            id=entry["id"],
            sha=entry["sha"],
            gated=entry.get("gated", False),
            granted=frozenset(entry.get("granted", ())),
            info={k: entry[k] for k in _INFO_FIELDS if k in entry},
            files=files,
            safetensors={str(k): int(v) for k, v in safetensors.items()} if safetensors else None,
        )
    return HubFixture(models=models, tokens=tokens)


@dataclass(frozen=True, slots=True)
class HubRequest:
    """What the stand-in saw; the token itself is never kept."""

    method: str
    path: str
    authenticated: bool


@dataclass(slots=True)
class _Answer:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def _error(status: int, code: str | None, message: str) -> _Answer:
    headers = {"X-Error-Message": message, "Content-Type": "application/json"}
    if code:
        headers["X-Error-Code"] = code
    return _Answer(status, json.dumps({"error": message}).encode(), headers)


class StandInHub:
    """The stand-in hub, listening on `url` from construction until `close()`."""

    def __init__(
        self, fixture: HubFixture | Path | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        if fixture is None or isinstance(fixture, Path):
            fixture = load_fixture(fixture or FIXTURE)
        self.fixture = fixture
        self.delay = 0.0
        self._broken: dict[str, str] = {}  # repo id -> "all" | "files"
        self._misbehaving: dict[str, str] = {}  # repo id -> a MISBEHAVIOURS mode
        self.slow_seconds = 8.0  # how late a "slow" repo answers
        self._requests: list[HubRequest] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        bound_host, bound_port = self._server.server_address[:2]
        self.url = f"http://{bound_host!s}:{bound_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # close() returns within one poll
            name="standin-hub",
            daemon=True,
        )
        self._thread.start()

    # --- knobs -------------------------------------------------------------------------

    def break_json(self, repo_id: str, *, files_only: bool = False) -> None:
        """Answer garbage instead of JSON for this model's info and JSON files.

        `files_only`: the info stays valid and only files such as config.json break.
        """
        with self._lock:
            self._broken[repo_id] = "files" if files_only else "all"

    def misbehave(self, repo_id: str, mode: str) -> None:
        """Answer every request about `repo_id` as `mode` says (MISBEHAVIOURS)."""
        if mode not in MISBEHAVIOURS:
            raise ValueError(f"{mode!r} is not one of {sorted(MISBEHAVIOURS)}")
        with self._lock:
            self._misbehaving[repo_id] = mode

    def mend(self, repo_id: str) -> None:
        with self._lock:
            self._broken.pop(repo_id, None)
            self._misbehaving.pop(repo_id, None)

    @property
    def requests(self) -> tuple[HubRequest, ...]:
        with self._lock:
            return tuple(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    # --- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        self._closing.set()  # wakes handlers sleeping in `delay`
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> StandInHub:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- answering ---------------------------------------------------------------------

    def answer(self, method: str, target: str, authorization: str | None) -> _Answer:
        """Decide the answer to one request; the HTTP handler only writes it out."""
        token = (
            authorization[7:].strip()
            if authorization and authorization[:7].lower() == "bearer "
            else None
        )
        split = urlsplit(target)
        path = unquote(split.path)
        with self._lock:
            self._requests.append(HubRequest(method, path, token is not None))
            broken = dict(self._broken)
            misbehaving = dict(self._misbehaving)
        mode = next((m for repo, m in misbehaving.items() if f"/{repo}/" in f"{path}/"), None)
        if mode is not None:
            return self._misbehaviour(mode)
        if self.delay > 0 and self._closing.wait(self.delay):
            return _error(503, None, "the stand-in hub is shutting down")
        account = None
        if token is not None:
            account = self.fixture.tokens.get(token)
            if account is None:
                return _error(401, None, "Invalid credentials in Authorization header")
        if path.startswith("/api/models/"):
            if method not in ("GET", "HEAD"):
                return _error(405, None, "method not allowed")
            return self._api(
                path.removeprefix("/api/models/"), parse_qs(split.query), account, broken
            )
        if "/resolve/" in path:
            return self._resolve(method, path, account, broken)
        return _error(404, None, "Not Found")

    def _misbehaviour(self, mode: str) -> _Answer:
        if mode == "slow" and self._closing.wait(self.slow_seconds):
            return _error(503, None, "the stand-in hub is shutting down")
        if mode == "hung":
            self._closing.wait()  # until close(): no answer at all
            return _error(503, None, "the stand-in hub is shutting down")
        body = MISBEHAVIOURS[mode]()
        return _Answer(200, body, {"Content-Type": "application/json"})

    def _repo(self, repo_id: str, account: str | None) -> HubModel | _Answer:
        model = self.fixture.models.get(repo_id)
        if model is None:
            return _error(401 if account is None else 404, "RepoNotFound", "Repository not found")
        return model

    def _api(
        self, rest: str, query: dict[str, list[str]], account: str | None, broken: dict[str, str]
    ) -> _Answer:
        repo_id, _, revision = rest.partition("/revision/")
        model = self._repo(repo_id, account)
        if isinstance(model, _Answer):
            return model
        if revision and revision not in ("main", model.sha):
            return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if broken.get(repo_id) == "all":
            return _Answer(200, _GARBAGE, {"Content-Type": "application/json"})
        flag = {k: v[-1].lower() in ("1", "true") for k, v in query.items()}
        body = model.api_answer(
            blobs=flag.get("blobs", False),
            security=flag.get("securityStatus", False),
            expand=query.get("expand", []),
        )
        return _Answer(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _resolve(
        self, method: str, path: str, account: str | None, broken: dict[str, str]
    ) -> _Answer:
        head, _, tail = path.lstrip("/").partition("/resolve/")
        revision, _, filename = tail.partition("/")
        model = self._repo(head, account)
        if isinstance(model, _Answer):
            return model
        if revision not in ("main", model.sha):
            return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if model.gated and account is None:
            return _error(
                401, "GatedRepo",
                f"Access to model {model.id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
            )  # fmt: skip
        if model.gated and account not in model.granted:
            return _error(
                403, "GatedRepo",
                f"Access to model {model.id} is restricted and you are not in the authorized "
                f"list. Visit {self.url}/{model.id} to ask for access.",
            )  # fmt: skip
        f = model.files.get(filename)
        if f is None:
            return _error(404, "EntryNotFound", f"{filename} does not exist on {revision}")
        headers = {"X-Repo-Commit": model.sha, "ETag": f'"{f.etag}"'}
        if f.lfs:
            headers |= {"X-Linked-Size": str(f.size), "X-Linked-Etag": f'"{f.etag}"'}
        if f.content is None:
            if method == "HEAD":
                return _Answer(200, b"", headers | {"Content-Length": str(f.size)})
            return _error(501, None, "the stand-in hub serves metadata only, never weights")
        body = _GARBAGE if model.id in broken and filename.endswith(".json") else f.content
        return _Answer(200, body, headers | {"Content-Type": "application/json"})


def _handler_for(hub: StandInHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._serve("GET")

        def do_HEAD(self) -> None:
            self._serve("HEAD")

        def _serve(self, method: str) -> None:
            answer = hub.answer(method, self.path, self.headers.get("Authorization"))
            self.send_response(answer.status)
            headers = {"Content-Length": str(len(answer.body))} | answer.headers
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if method != "HEAD":
                # The client may stop reading (a capped read of a huge answer).
                with contextlib.suppress(OSError):
                    self.wfile.write(answer.body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("stand-in hub: " + format, *args)

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Serve the fixture until interrupted (for the demo and manual runs)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--fixture", type=Path, default=FIXTURE)
    args = parser.parse_args(argv)
    hub = StandInHub(args.fixture, host=args.host, port=args.port)
    sys.stdout.write(f"stand-in hub serving {len(hub.fixture.models)} models at {hub.url}\n")
    sys.stdout.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        hub.close()


if __name__ == "__main__":
    main()
