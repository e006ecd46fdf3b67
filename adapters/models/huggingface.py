"""Resolve a HuggingFace model ref (`org/name`) into ModelFacts, from a configurable hub.

The controller calls `HubResolver.resolve` while validating an order whose model source
is HuggingFace; the answer becomes the ModelResolved observation. It reads, through
`huggingface_hub`: the model's info (task tag, tags, files and sizes, safetensors counts,
gated flag, commit sha), `config.json` at that commit (architecture, dtype,
quantization), and the chat template (tool-calling hint). The rules that turn those into
facts live in `hub_facts` and docs/model-sources.md.

What callers can rely on:
- every failure is one of four distinct reasons: ModelAccessDenied (gated or refused
  token), ModelNotFound (no such repo or revision), ModelSourceUnreachable (hub down,
  slow, 429/5xx) and ModelMetadataInvalid (an answer that cannot be read, or one that
  made the code fail in a way no rule foresaw: `resolve` never raises);
- one resolution never takes longer than `total_timeout`, one request than
  `request_timeout` — however slowly a hub sends, its answers' heads included
  (hub_network.py); the library does no retries of its own on these calls;
- answers are cached per (endpoint, name, revision, token fingerprint) for `cache_ttl`
  (failures that will not fix themselves for `failure_cache_ttl`; unreachable is never
  cached), and callers asking the same while the hub is asked wait for that answer;
- the token is sent only to the configured endpoint, never logged, never in a message
  or a cache key (nor is the endpoint's `user:password@`); huggingface_hub neither reads
  a token from the machine, nor sends telemetry, nor keeps cookies between requests (set
  explicitly below, whatever the environment says).

Exceptions of huggingface_hub and httpx2 are translated once, in `_Resolution.errors`.
"""

from __future__ import annotations

import email.utils
import json
import logging
import re
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from http.cookiejar import CookieJar, DefaultCookiePolicy
from importlib import metadata
from typing import Any
from urllib.parse import quote, urlsplit

import httpx2
import pydantic
from huggingface_hub import (
    HfApi,
    constants,
    get_session,
    hf_hub_url,
    hf_raise_for_status,
    set_client_factory,
)
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import ModelInfo

# Public (documented) API; the package's lazy re-export hides it from type checkers.
from huggingface_hub.utils import (  # type: ignore[attr-defined]
    build_hf_headers,
    parse_ratelimit_headers,
)

# The library's own client factory (its request hook, redirects, no timeout of its own):
# not re-exported, and what `set_client_factory` replaces, so it is wrapped, not copied.
from huggingface_hub.utils._http import default_client_factory

from adapters.models import hub_facts
from adapters.models.caching import Flights, TtlCache, token_fingerprint
from adapters.models.hub_network import hold_to_deadlines
from adapters.models.lookup import ModelFound, ModelLookup, ModelUnavailable, short_name
from adapters.probes import deadlines
from adapters.probes.http import shown_url
from fsm.reasons import Reason
from fsm.values import INT64_MAX, ModelFacts, ModelFormat, ModelSource

__all__ = [
    "HubResolver",
    "HubSettings",
    "harden_huggingface_hub",
    "is_repo_id",
    "repo_id_problem",
    "token_problem",
]

log = logging.getLogger(__name__)


def _int64(literal: str) -> int:
    value = int(literal)
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(f"an integer beyond 64 bits: {literal[:40]}")
    return value


def _loads(raw: bytes) -> Any:
    """JSON from the hub, holding only what the event log can record: no integer beyond
    64 bits, no lone surrogate (`"\\ud800"` is valid JSON, and not UTF-8). Either would
    make the order's model event unrecordable in every pass, for ever; a ValueError here is
    ModelMetadataInvalid, said once."""
    try:
        data = json.loads(raw, parse_int=_int64)
    except RecursionError as deep:  # `[[[[...` a few KB long: not metadata either
        raise ValueError("JSON nested too deeply") from deep
    json.dumps(data, ensure_ascii=False).encode("utf-8")  # UnicodeEncodeError: a ValueError
    return data


_ID_CHARACTERS = re.compile(r"[A-Za-z0-9_.-]+")
_PART_LIMIT = 96
_LIBRARY = "ai-inference"
_MAX_REDIRECTS = 5  # a mirror's hop or two, the hub's CDN for a file; more is a loop
_ERROR_BODY_BYTES = 64 * 1024  # the hub's error message is JSON of a few hundred bytes
try:
    _VERSION = metadata.version(_LIBRARY)
except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    _VERSION = "0"


def harden_huggingface_hub() -> None:
    """Set the library's switches explicitly instead of inheriting the machine's.

    No implicit token (never ~/.cache/huggingface/token nor HF_TOKEN: only the order's),
    no telemetry, no update checks, no request dumps, no cookies kept, every read held to
    the resolution's deadline.
    """
    constants.HF_HUB_DISABLE_IMPLICIT_TOKEN = True
    constants.HF_HUB_DISABLE_TELEMETRY = True
    constants.HF_HUB_DISABLE_UPDATE_CHECK = True
    constants.HF_DEBUG = False
    # One client made now, and closed: a library release that moved what
    # hold_to_deadlines sets fails the import (the controller's start), not each lookup.
    _cookieless_client().close()
    set_client_factory(_cookieless_client)


def _cookieless_client() -> httpx2.Client:
    """The library's one client, as it makes it, with a cookie jar that keeps nothing.

    That client carries every tenant's requests: a cookie a mirror set in its answer to
    one tenant's token went with the next tenant's anonymous requests. The standard
    library's policy with no allowed domain neither stores nor sends one.
    """
    client = default_client_factory()
    client.cookies = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
    hold_to_deadlines(client)  # a hub dripping its answer's head ends at the deadline
    return client


harden_huggingface_hub()


def repo_id_problem(name: str) -> str | None:
    """Which rule of the hub's for repo ids `name` breaks, None when it keeps them all.

    The hub's rules (huggingface_hub's validate_repo_id refuses the rest before asking),
    with `org/` required and a part starting with a letter or digit; the CRD's checks of
    spec.model.ref.name say the same (crds/, tests/adapters/kubernetes/test_api.py).
    """
    parts = name.split("/")
    if len(parts) != 2 or not all(parts):
        return "expected 'org/name', for example 'Qwen/Qwen2.5-7B-Instruct'"
    if not _ID_CHARACTERS.fullmatch(name.replace("/", "")):
        return "it may hold only ASCII letters, digits, '-', '_' and '.' besides the one '/'"
    if any(len(part) > _PART_LIMIT for part in parts):
        return f"each part may have at most {_PART_LIMIT} characters"
    if not all(part[0].isalnum() for part in parts):
        return "each part must start with a letter or digit"
    if any(part[-1] in "-." for part in parts):
        return "each part must end with a letter, digit or '_'"
    if "--" in name or ".." in name:
        return "it must not contain '--' or '..'"
    if name.endswith(".git"):
        return "it must not end in '.git'"
    return None


def is_repo_id(name: str) -> bool:
    """`org/name` as the hub spells repo ids (the CRD's checks say the same)."""
    return repo_id_problem(name) is None


def token_problem(token: str) -> str | None:
    """Why `token` cannot go into an `Authorization` header, or None when it can.

    Only visible ASCII can: httpx refuses the rest, and the error it raises carries the
    header's value — the token — in its text, which would then reach a status message or
    a log. So an unsendable token is refused here, before any request, and the answer
    names the kind of character, never the token or the character itself.
    """
    kinds = []
    if "\n" in token:
        kinds.append("a line break")
    if "\r" in token:
        kinds.append("a carriage return")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in token if c not in "\r\n"):
        kinds.append("a control character")
    if " " in token or "\t" in token:
        kinds.append("a space")
    if not token.isascii():
        kinds.append("a non-ASCII character")
    return " and ".join(kinds) or None


@dataclass(frozen=True, slots=True)
class HubSettings:
    """Where the hub is and how patient to be with it (from the controller's config)."""

    endpoint: str  # e.g. https://huggingface.co; no default here on purpose
    request_timeout: float = 5.0
    total_timeout: float = 15.0
    cache_ttl: float = 300.0
    failure_cache_ttl: float = 30.0
    max_file_bytes: int = 8 << 20
    # A hub's Retry-After is kept for at most this long: one asking for a day (or a
    # hostile one asking for a year) still gets asked again within the quarter hour.
    longest_quiet: float = 900.0

    def __post_init__(self) -> None:
        if not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(
                f"hub endpoint must be an http(s) URL, got {shown_url(self.endpoint)!r}"
            )
        object.__setattr__(self, "endpoint", self.endpoint.rstrip("/"))
        if self.request_timeout <= 0 or self.total_timeout <= 0:
            raise ValueError("hub timeouts must be positive")


_Key = tuple[str, str, str, str]  # endpoint, name, revision, token fingerprint


class _Failed(Exception):
    def __init__(
        self, reason: Reason, message: str, *, retry_after: float | None = None, status: int = 0
    ) -> None:
        super().__init__(reason, message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after  # seconds the hub asked to be left alone
        self.status = status


@dataclass(frozen=True, slots=True)
class _Quiet:
    """The hub asked for quiet (429 or 503 with Retry-After): until then no model is
    asked of it with that token. Without this, each order naming a model it refused asked
    again on its own backoff, once a minute each, while the hub had asked for an hour.
    Per token, as a hub limits each account: one tenant's spent token must not silence
    the hub for the others."""

    until: float  # on the resolver's clock
    status: int
    seconds: float
    hub: str  # "The hub (…)", the endpoint shown without its credentials

    def answer(self, name: str) -> ModelUnavailable:
        # The same words for the whole quiet: a message that moved would be a new event.
        return ModelUnavailable(
            Reason.MODEL_SOURCE_UNREACHABLE,
            f"{self.hub} answered HTTP {self.status} and asked for {self.seconds:.0f} s "
            f"without requests; {name!r} is read after that.",
        )


def _origin(url: httpx2.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def _retry_after(response: Any) -> float | None:
    """The seconds the hub asks to be left alone, or None: its Retry-After (a number, or
    an HTTP date), else its rate limit spent (`RateLimit: "api";r=0;t=N`, the IETF
    draft's header, which huggingface.co's 429 carries without a Retry-After: read
    only the other, every order asked again on its own backoff an account told to wait)."""
    headers = getattr(response, "headers", None) or {}
    value = str(headers.get("Retry-After") or "").strip()
    if not value:
        limit = parse_ratelimit_headers(headers)
        if limit is not None and limit.remaining == 0 and limit.reset_in_seconds > 0:
            return float(limit.reset_in_seconds)
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


class HubResolver:
    """Resolves HuggingFace refs; one per controller, shared by every worker thread."""

    def __init__(self, settings: HubSettings, *, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self._api = HfApi(
            endpoint=settings.endpoint, token=False, library_name=_LIBRARY, library_version=_VERSION
        )
        # By endpoint, name, revision and token fingerprint: an answer of a hub the
        # settings left, cached after they changed, never answers for the new one.
        # `clock` is the cache's alone: a resolution's bound is the machine's (_Resolution).
        self._cache: TtlCache[_Key, ModelLookup] = TtlCache(clock)
        self._flights: Flights[_Key, ModelLookup] = Flights()
        self._clock = clock
        # By endpoint and token fingerprint (the cache's key less the model and revision).
        self._quiet: dict[tuple[str, str], _Quiet] = {}

    def resolve(
        self, name: str, *, token: str | None = None, revision: str = "main"
    ) -> ModelLookup:
        """The facts of `name` at `revision`, read with `token` (None: anonymous)."""
        token = (token or "").strip() or None  # Secrets made with `echo` end in a newline
        broken = repo_id_problem(name)
        if broken:
            return ModelUnavailable(
                Reason.MODEL_NOT_FOUND, f"{name!r} is not a HuggingFace model id: {broken}."
            )
        problem = token_problem(token) if token else None
        if problem:
            return ModelUnavailable(
                Reason.AUTH_SECRET_INVALID,
                f"The token given for {name!r} holds {problem}, so it cannot be sent in an "
                "HTTP header; nothing was sent to the hub.",
            )
        key = self._key(name, revision, token)
        cached = self._cache.get(key)
        if cached is not None:
            log.debug("hub answer for %s@%s served from cache", name, revision)
            return cached
        quiet = self._quiet.get(key[:1] + key[3:])
        if quiet is not None and self._clock() < quiet.until:
            return quiet.answer(name)
        # Orders naming one model ask together (a controller's start): one asks the hub.
        return self._flights.share(key, lambda: self._ask(key, name, revision, token))

    def _key(self, name: str, revision: str, token: str | None) -> _Key:
        return (self.settings.endpoint, name, revision, token_fingerprint(token))

    def _ask(self, key: _Key, name: str, revision: str, token: str | None) -> ModelLookup:
        cached = self._cache.get(key)  # answered by a call that ended since we looked
        if cached is not None:
            return cached
        resolution = _Resolution(self, name, revision, token)
        result: ModelLookup
        try:
            # Every read ends by the resolution's bound, the answers' heads included.
            with deadlines.until(resolution.deadline):
                result = ModelFound(resolution.facts())
        except _Failed as failed:
            result = ModelUnavailable(failed.reason, resolution.redacted(failed.message))
            if failed.retry_after is not None and failed.reason is Reason.MODEL_SOURCE_UNREACHABLE:
                seconds = min(failed.retry_after, resolution.settings.longest_quiet)
                quiet = _Quiet(self._clock() + seconds, failed.status, seconds, resolution.the_hub)
                # Kept for the hub it answered for: the endpoint may have changed meanwhile
                # (an admin moving away from a hub that throttles), and `key` names it.
                self._quiet[key[:1] + key[3:]] = quiet
                log.warning("%s asked for %.0f s without requests", resolution.the_hub, seconds)
                # In the quiet's words from the start: one message for the whole quiet.
                result = quiet.answer(name)
        except Exception as unexpected:
            # No rule foresaw it (a bug, a library's new error). Raised, it reached no
            # order: nothing was cached, and the order asked again every 2 s, for ever,
            # its status held back meanwhile. So it is an answer too, said once.
            trace = "".join(traceback.format_exception(unexpected))
            log.error("resolving %s@%s raised: %s", name, revision, resolution.redacted(trace))
            result = ModelUnavailable(
                Reason.MODEL_METADATA_INVALID,
                f"{resolution.the_hub} described {name!r} in a way the controller could not "
                f"read ({type(unexpected).__name__}; the controller's log has the details).",
            )
        if isinstance(result, ModelFound):
            self._cache.put(key, result, self.settings.cache_ttl)
            log.info("resolved %s@%s at %s", name, revision, result.facts.revision)
        else:
            if not result.transient:
                self._cache.put(key, result, self.settings.failure_cache_ttl)
            log.info("could not resolve %s@%s: %s", name, revision, result.reason)
        return result

    def peek(
        self, name: str, *, token: str | None = None, revision: str = "main"
    ) -> ModelLookup | None:
        """The answer `resolve` would give without asking the hub, or None: an id that is
        not one, or a cached answer. The controller asks the hub off its workers."""
        token = (token or "").strip() or None
        if not is_repo_id(name) or (token and token_problem(token)):
            return self.resolve(name, token=token, revision=revision)  # without HTTP
        return self._cache.get(self._key(name, revision, token))

    def clear_cache(self) -> None:
        self._cache.clear()
        self._quiet.clear()

    def use_endpoint(self, endpoint: str) -> bool:
        """Point at another hub (the settings changed); True if it was another one.

        Answers cached from the old hub are dropped: they describe another hub's models.
        A resolution already running finishes against the hub it started with.
        """
        settings = replace(self.settings, endpoint=endpoint)
        if settings.endpoint == self.settings.endpoint:
            return False
        api = HfApi(
            endpoint=settings.endpoint, token=False, library_name=_LIBRARY, library_version=_VERSION
        )
        self.settings, self._api = settings, api
        self._cache.clear()
        self._quiet.clear()  # the old hub's
        log.info("hub endpoint is now %s", shown_url(settings.endpoint))
        return True


class _Resolution:
    """One resolution: its deadline, its token, and every call it makes to the hub."""

    def __init__(self, resolver: HubResolver, name: str, revision: str, token: str | None):
        self.api = resolver._api
        self.settings = resolver.settings
        self.name = name
        self.revision = revision
        self.token = token
        self.sha = revision
        # On the machine's clock, which the network reads it bounds use too.
        self.deadline = time.monotonic() + self.settings.total_timeout
        self.cut_short = False  # the last request had less than request_timeout left
        shown = shown_url(self.settings.endpoint)  # never a `user:password@` of the URL
        self.hub = f"the hub ({shown})"
        self.the_hub = f"The hub ({shown})"  # at a sentence's start

    def redacted(self, text: str) -> str:
        """`text` without the token or the endpoint's password, whoever wrote it."""
        try:
            password = urlsplit(self.settings.endpoint).password
        except ValueError:  # not even urlsplit reads it ("http://[::1"): no password then
            password = None
        for secret in (self.token, password):
            if secret:
                text = text.replace(secret, "[redacted]")
        return text

    # --- the facts ----------------------------------------------------------------------

    def facts(self) -> ModelFacts:
        info = self.model_info()
        if not info.sha:
            raise _Failed(
                Reason.MODEL_METADATA_INVALID,
                f"{self.the_hub} described {self.name!r} without a commit sha.",
            )
        self.sha = info.sha
        siblings = info.siblings or []
        names = [s.rfilename for s in siblings]
        sizes = {s.rfilename: s.size for s in siblings}
        fmt = hub_facts.model_format(names)
        weights = hub_facts.weight_files(fmt, names)
        gguf: dict[str, Any] = info.gguf if isinstance(info.gguf, dict) else {}
        config: dict[str, Any] | None = None
        if fmt is ModelFormat.GGUF:
            if info.gated and weights:
                self.head(weights[0])  # the metadata is public; the files tell who may read
        else:
            config = self.fetch_json("config.json")  # for a gated repo: the access check
            if config is None:
                raise _Failed(
                    Reason.MODEL_METADATA_INVALID,
                    f"Model {self.name!r} has no config.json at {self.sha[:12]}, so its "
                    "architecture and quantization are unknown.",
                )
        try:
            quant = hub_facts.quantization(config, fmt)
        except hub_facts.UnknownQuantization as unknown:
            raise _Failed(
                Reason.MODEL_METADATA_INVALID,
                f"Model {self.name!r} uses {unknown}, which no launch recipe of the platform "
                "takes (known: AWQ, GPTQ, FP8, BitsAndBytes, GGUF).",
            ) from unknown
        by_dtype = info.safetensors.parameters if info.safetensors else None
        architectures = (config or {}).get("architectures")
        try:
            return ModelFacts(
                source=ModelSource.HUGGING_FACE,
                name=self.name,
                endpoint_types=hub_facts.endpoint_types(
                    info.pipeline_tag, info.tags or [], self.name
                ),
                format=fmt,
                quantization=quant,
                parameter_count=(
                    hub_facts.gguf_parameter_count(gguf)
                    if fmt is ModelFormat.GGUF
                    else hub_facts.parameter_count(by_dtype, quant, config)
                ),
                weights_bytes=hub_facts.weights_bytes(weights, sizes),
                weights_file=hub_facts.served_file(fmt, names),
                dtype=hub_facts.torch_dtype(config),
                architecture=short_name(
                    architectures[0]
                    if isinstance(architectures, list) and architectures
                    else gguf.get("architecture")
                ),
                context_window_tokens=hub_facts.context_window(config)
                or hub_facts.gguf_context_window(gguf),
                gated=bool(info.gated),
                supports_tool_calling=hub_facts.chat_template_mentions_tools(
                    self.chat_template(info, names, gguf)
                ),
                revision=self.sha,
            )
        except hub_facts.InvalidValue as invalid:
            raise _Failed(
                Reason.MODEL_METADATA_INVALID,
                f"{self.the_hub} described {self.name!r} with a value no rule can use: {invalid}.",
            ) from invalid
        except pydantic.ValidationError as invalid:
            fields = sorted({".".join(map(str, e["loc"])) for e in invalid.errors()})
            raise _Failed(
                Reason.MODEL_METADATA_INVALID,
                f"{self.the_hub} described {self.name!r} with values of the wrong type "
                f"({', '.join(fields)}).",
            ) from invalid
        except TypeError as invalid:
            raise _Failed(
                Reason.MODEL_METADATA_INVALID,
                f"{self.the_hub} described {self.name!r} with values of the wrong type.",
            ) from invalid

    def chat_template(self, info: ModelInfo, names: list[str], gguf: dict[str, Any]) -> object:
        summary = info.config.get("tokenizer_config") if isinstance(info.config, dict) else None
        if isinstance(summary, dict) and summary.get("chat_template") is not None:
            return summary["chat_template"]
        if gguf.get("chat_template") is not None:
            return gguf["chat_template"]
        if "chat_template.jinja" in names:
            raw = self.fetch("chat_template.jinja")
            return raw.decode("utf-8", errors="replace") if raw is not None else None
        if "tokenizer_config.json" in names:
            return (self.fetch_json("tokenizer_config.json") or {}).get("chat_template")
        return None

    # --- calls to the hub ---------------------------------------------------------------

    def budget(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise _Failed(
                Reason.MODEL_SOURCE_UNREACHABLE,
                f"{self.the_hub} did not finish answering about {self.name!r} within "
                f"{self.settings.total_timeout:g}s; retrying later.",
            )
        self.cut_short = remaining < self.settings.request_timeout
        return min(self.settings.request_timeout, remaining)

    def send_token(self) -> str | bool:
        return self.token if self.token else False  # False: send none, read none

    def model_info(self) -> ModelInfo:
        """`HfApi.model_info(files_metadata=True)`, with the answer's size capped: the
        library reads a body whole, and a hub may answer with 50 MB."""
        path = f"{self.settings.endpoint}/api/models/{self.name}"
        if self.revision != "main":
            path += f"/revision/{quote(self.revision, safe='')}"
        what = "the model's info"
        raw = self.read_capped(path, what, params={"blobs": True})
        with self.errors(what):
            data = _loads(raw)
            if not isinstance(data, dict):
                raise TypeError("the model's info is not a JSON object")
            return ModelInfo(**data)  # type: ignore[no-untyped-call]

    def head(self, filename: str) -> None:
        """Whether the token may read `filename`: a HEAD of it that is not refused.

        Redirects are followed within the endpoint's origin only; one elsewhere (the hub's
        CDN) is the answer itself, as for the library's HEAD. But the library follows, with
        the token, any redirect to what it counts as the hub (huggingface.co, hf.co): a
        mirror that redirected there sent the tenant's token to huggingface.co, and in an
        air-gapped cluster the order read "could not be reached"."""
        url = hf_hub_url(self.name, filename, revision=self.sha, endpoint=self.settings.endpoint)
        headers = self.headers()
        headers["Accept-Encoding"] = "identity"  # as the library's HEAD: the file's own size
        with self.errors(filename):
            session = get_session()
            request = session.build_request("HEAD", url, headers=headers)
            response = self.follow(session, request, same_origin=True)
            try:
                if response.status_code >= 400:
                    hf_raise_for_status(self.with_capped_body(response))
            finally:
                response.close()

    def fetch(self, filename: str) -> bytes | None:
        """A small file's bytes at the resolved commit, None when the repo lacks it."""
        url = hf_hub_url(self.name, filename, revision=self.sha, endpoint=self.settings.endpoint)
        try:
            return self.read_capped(url, filename)
        except RemoteEntryNotFoundError:
            return None

    def headers(self) -> dict[str, str]:
        """The library's headers for a request of this resolution (its token, if any)."""
        return dict(
            build_hf_headers(
                token=self.send_token(), library_name=_LIBRARY, library_version=_VERSION
            )
        )

    def read_capped(self, url: str, what: str, params: dict[str, Any] | None = None) -> bytes:
        """The body of a GET, read in chunks: never more than `max_file_bytes` of it, and
        never past the resolution's deadline (a hub that trickles bytes still meets it).
        An error's body and a redirect's are capped too: the client reads both whole."""
        headers = self.headers()
        limit = self.settings.max_file_bytes
        with self.errors(what):
            session = get_session()
            request = session.build_request("GET", url, headers=headers, params=params)
            response = self.follow(session, request)
            try:
                if response.status_code >= 400:
                    hf_raise_for_status(self.with_capped_body(response))
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > limit:
                        raise _Failed(
                            Reason.MODEL_METADATA_INVALID,
                            f"{self.the_hub} answered {what} of {self.name!r} with more than "
                            f"{limit} bytes; the answer was not read further.",
                        )
                    self.budget()
                return bytes(body)
            finally:
                response.close()

    def follow(
        self, session: httpx2.Client, request: httpx2.Request, *, same_origin: bool = False
    ) -> httpx2.Response:
        """`request` sent, its redirects followed as the client would (Authorization
        dropped across origins), but no redirect's body read: the client reads each one
        whole, and a mirror's 302 with a 300 MB body took 600 MB of the controller.
        `same_origin`: a redirect to another origin is not followed but answered."""
        origin = _origin(request.url)
        for _ in range(_MAX_REDIRECTS + 1):
            request.extensions["timeout"] = httpx2.Timeout(self.budget()).as_dict()
            response = session.send(request, stream=True, follow_redirects=False)
            following = response.next_request
            if following is None or (same_origin and _origin(following.url) != origin):
                return response
            response.close()
            request = following
        raise _Failed(
            Reason.MODEL_SOURCE_UNREACHABLE,
            f"{self.the_hub} redirected {self.name!r} more than {_MAX_REDIRECTS} times; "
            "retrying later.",
        )

    def with_capped_body(self, response: httpx2.Response) -> httpx2.Response:
        """`response` with at most `_ERROR_BODY_BYTES` of its body, for the library to read
        the hub's error from: a 503 answered with gigabytes is an outage, not a reason to
        hold them."""
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) >= _ERROR_BODY_BYTES:
                break
            self.budget()
        # The body is decoded already: the headers that would have it decoded again go.
        framing = {"content-encoding", "content-length", "transfer-encoding"}
        return httpx2.Response(
            response.status_code,
            headers=[(k, v) for k, v in response.headers.items() if k.lower() not in framing],
            content=bytes(body[:_ERROR_BODY_BYTES]),
            request=response.request,
        )

    def fetch_json(self, filename: str) -> dict[str, Any] | None:
        raw = self.fetch(filename)
        if raw is None:
            return None
        with self.errors(filename):
            loaded = _loads(raw)
        if not isinstance(loaded, dict):
            raise _Failed(
                Reason.MODEL_METADATA_INVALID, f"{filename} of {self.name!r} is not a JSON object."
            )
        return loaded

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """Translate the libraries' exceptions into the four outcomes, once, here."""
        try:
            yield
        except GatedRepoError as gated:  # before RepositoryNotFoundError: it is a subclass
            raise _Failed(Reason.MODEL_ACCESS_DENIED, self.gated_message(gated)) from gated
        except RevisionNotFoundError as missing:
            raise _Failed(
                Reason.MODEL_NOT_FOUND,
                f"Model {self.name!r} has no revision {self.revision!r} at {self.hub}.",
            ) from missing
        except RepositoryNotFoundError as missing:
            seen_by = "the given token cannot see it" if self.token else "it is private"
            raise _Failed(
                Reason.MODEL_NOT_FOUND,
                f"Model {self.name!r} does not exist at {self.hub}, or {seen_by}: "
                "check spec.model.ref.name.",
            ) from missing
        except RemoteEntryNotFoundError:
            raise  # a missing file: the caller decides what that means
        except HfHubHTTPError as refused:
            raise self.http_failure(what, refused) from refused
        except httpx2.TimeoutException as slow:
            # Past the resolution's bound however slowly the hub was sending, or one
            # request past its own.
            over = self.cut_short or time.monotonic() >= self.deadline
            late = (
                f"did not finish answering within the {self.settings.total_timeout:g}s "
                "allowed for one resolution"
                if over
                else f"did not answer within {self.settings.request_timeout:g}s"
            )
            raise _Failed(
                Reason.MODEL_SOURCE_UNREACHABLE,
                f"{self.the_hub} {late} while reading {what} of {self.name!r}; retrying later.",
            ) from slow
        except (httpx2.TransportError, OfflineModeIsEnabled) as down:
            raise _Failed(
                Reason.MODEL_SOURCE_UNREACHABLE,
                f"{self.the_hub} could not be reached ({type(down).__name__}: {str(down)[:120]}); "
                "retrying later.",
            ) from down
        except (ValueError, TypeError, KeyError, AttributeError) as garbage:
            raise _Failed(
                Reason.MODEL_METADATA_INVALID,
                f"{self.the_hub} answered {what} of {self.name!r} with data that is not valid "
                "model metadata.",
            ) from garbage

    def gated_message(self, gated: GatedRepoError) -> str:
        if not self.token:
            return (
                f"Model {self.name!r} is gated: put a HuggingFace token of an account that has "
                "been granted access into a Secret and name it in spec.model.authSecretRef."
            )
        status = gated.response.status_code if gated.response is not None else None
        if status == 401:
            return f"{self.the_hub} rejected the token given for gated model {self.name!r}."
        return (
            f"Model {self.name!r} is gated and the account of the given token has not been "
            "granted access: request access at the hub with that account."
        )

    def http_failure(self, what: str, refused: HfHubHTTPError) -> _Failed:
        status = refused.response.status_code if refused.response is not None else 0
        if status in (401, 403):
            given = (
                "rejected the given token (is it valid and unexpired?)"
                if self.token
                else "refused anonymous access"
            )
            return _Failed(Reason.MODEL_ACCESS_DENIED, f"{self.the_hub} {given} for {self.name!r}.")
        # 408 and 425 are a proxy's "try again", as 429 and 5xx are: taken as the model's
        # fault, they demoted a Ready order for what was an outage.
        if status in (408, 425, 429) or status >= 500:
            return _Failed(
                Reason.MODEL_SOURCE_UNREACHABLE,
                f"{self.the_hub} answered HTTP {status} while reading {what} of {self.name!r}; "
                "retrying later.",
                retry_after=_retry_after(refused.response),
                status=status,
            )
        return _Failed(
            Reason.MODEL_METADATA_INVALID,
            f"{self.the_hub} refused to serve {what} of {self.name!r} (HTTP {status}).",
        )
