"""The HuggingFace resolver against the stand-in hub: outcomes, bounds, cache, secrecy."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.models import hub_facts
from adapters.models.caching import token_fingerprint
from adapters.models.huggingface import HubResolver, HubSettings
from adapters.models.lookup import ModelFound, ModelUnavailable
from adapters.simulator.hub import HubFile, HubFixture, StandInHub
from fsm.events import ModelResolved
from fsm.reasons import Reason
from fsm.values import EndpointType, ModelFormat, Quantization
from store import codec

GATED = "meta-llama/Llama-3.1-8B"
PUBLIC = "Qwen/Qwen2.5-7B-Instruct"


def unavailable(result: object) -> ModelUnavailable:
    assert isinstance(result, ModelUnavailable), result
    return result


def found(result: object) -> ModelFound:
    assert isinstance(result, ModelFound), result
    return result


# --- what the fixture's models resolve to ------------------------------------------------

# (id, endpoint types, format, quantization, parameter count, weight bytes, tool calling)
EXPECTED = [
    ("Qwen/Qwen2.5-32B-Instruct-AWQ", (EndpointType.CHAT,), ModelFormat.SAFETENSORS,
     Quantization.AWQ, 32_763_876_352, 19_328_895_152, True),
    ("Qwen/Qwen2.5-7B-Instruct", (EndpointType.CHAT,), ModelFormat.SAFETENSORS,
     Quantization.NONE, 7_615_616_512, 15_231_271_888, True),
    ("Qwen/Qwen2.5-0.5B-Instruct", (EndpointType.CHAT,), ModelFormat.SAFETENSORS,
     Quantization.NONE, 494_032_768, 988_097_824, True),
    ("Qwen/Qwen2.5-7B-Instruct-GGUF", (EndpointType.CHAT,), ModelFormat.GGUF,
     Quantization.GGUF, 7_615_616_512, 4_683_073_792, True),
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", (EndpointType.CHAT,), ModelFormat.SAFETENSORS,
     Quantization.GPTQ, None, 5_575_312_176, True),
    ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", (EndpointType.CHAT,), ModelFormat.SAFETENSORS,
     Quantization.FP8, 8_030_261_696, 9_081_260_112, True),
    ("BAAI/bge-m3", (EndpointType.EMBEDDINGS,), ModelFormat.SAFETENSORS,
     Quantization.NONE, 567_754_752, 2_271_064_456, False),
    ("intfloat/e5-large-v2", (EndpointType.EMBEDDINGS,), ModelFormat.SAFETENSORS,
     Quantization.NONE, 335_141_888, 1_340_616_616, False),
    ("BAAI/bge-reranker-v2-m3", (EndpointType.RERANK,), ModelFormat.SAFETENSORS,
     Quantization.NONE, 567_755_777, 2_271_071_852, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "types", "fmt", "quant", "params", "size", "tools"),
    EXPECTED,
    ids=[row[0] for row in EXPECTED],
)
def test_public_models_resolve_to_their_published_facts(
    resolver: HubResolver,
    hub: StandInHub,
    name: str,
    types: tuple[EndpointType, ...],
    fmt: ModelFormat,
    quant: Quantization,
    params: int | None,
    size: int,
    tools: bool,
) -> None:
    facts = found(resolver.resolve(name)).facts
    assert (facts.endpoint_types, facts.format, facts.quantization) == (types, fmt, quant)
    assert facts.weights_bytes == size
    if params is None:  # GPTQ's act-order index makes the unpacked count approximate
        assert facts.parameter_count == pytest.approx(7_615_616_512, rel=0.005)
    else:
        assert facts.parameter_count == params
    assert facts.supports_tool_calling is tools
    assert facts.revision == hub.fixture.models[name].sha
    assert facts.gated is False
    # The one file a GGUF runtime opens is the variant sized above (Q4_K_M, first part).
    gguf = "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf"
    assert facts.weights_file == (gguf if fmt is ModelFormat.GGUF else None)


def test_config_fields_are_read_at_the_resolved_commit(
    resolver: HubResolver, hub: StandInHub
) -> None:
    facts = found(resolver.resolve("Qwen/Qwen2.5-32B-Instruct-AWQ")).facts
    assert (facts.architecture, facts.dtype, facts.context_window_tokens) == (
        "Qwen2ForCausalLM", "float16", 32768,
    )  # fmt: skip
    sha = hub.fixture.models["Qwen/Qwen2.5-32B-Instruct-AWQ"].sha
    assert f"/Qwen/Qwen2.5-32B-Instruct-AWQ/resolve/{sha}/config.json" in [
        r.path for r in hub.requests
    ]


# --- gated models ------------------------------------------------------------------------


def test_gated_model_with_a_granted_token_resolves(
    resolver: HubResolver, tokens: dict[str, str]
) -> None:
    facts = found(resolver.resolve(GATED, token=tokens["alice"])).facts
    assert facts.gated is True
    assert facts.parameter_count == 8_030_261_248
    assert facts.endpoint_types == (EndpointType.CHAT,)
    assert facts.supports_tool_calling is False  # a base model ships no chat template


def test_token_from_a_secret_with_a_trailing_newline_still_works(
    resolver: HubResolver, tokens: dict[str, str]
) -> None:
    assert found(resolver.resolve(GATED, token=tokens["alice"] + "\n")).facts.gated


@pytest.mark.parametrize(
    ("who", "says"),
    [
        (None, "is gated: put a HuggingFace token"),
        ("bob", "has not been granted access"),
        ("hf_not_a_token_the_hub_knows", "rejected the given token"),
    ],
    ids=["no-token", "valid-token-not-granted", "invalid-token"],
)
def test_gated_model_without_the_right_token_is_access_denied(
    resolver: HubResolver, tokens: dict[str, str], who: str | None, says: str
) -> None:
    token = tokens.get(who, who) if who else None
    failure = unavailable(resolver.resolve(GATED, token=token))
    assert failure.reason is Reason.MODEL_ACCESS_DENIED
    assert says in failure.message
    assert not failure.transient
    if token:
        assert token not in failure.message and token not in repr(failure)


def test_no_token_is_read_from_the_machine(
    resolver: HubResolver, hub: StandInHub, tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", tokens["alice"])
    failure = unavailable(resolver.resolve(GATED))
    assert failure.reason is Reason.MODEL_ACCESS_DENIED
    assert hub.requests and not any(r.authenticated for r in hub.requests)


def test_the_token_never_reaches_the_logs(
    resolver: HubResolver, tokens: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        resolver.resolve(GATED, token=tokens["alice"])
        resolver.resolve(GATED, token=tokens["bob"])
        resolver.resolve("nobody/nothing", token=tokens["bob"])
    assert caplog.records  # the resolver does log what it did
    for token in (tokens["alice"], tokens["bob"]):
        assert token not in caplog.text


# --- the other failures ------------------------------------------------------------------


@pytest.mark.parametrize("token_of", [None, "bob"], ids=["anonymous", "authenticated"])
def test_missing_repo_is_not_found(
    resolver: HubResolver, tokens: dict[str, str], token_of: str | None
) -> None:
    failure = unavailable(
        resolver.resolve("Qwen/Qwen9-Imaginary", token=tokens[token_of] if token_of else None)
    )
    assert failure.reason is Reason.MODEL_NOT_FOUND
    assert "Qwen/Qwen9-Imaginary" in failure.message


def test_missing_revision_is_not_found(resolver: HubResolver) -> None:
    failure = unavailable(resolver.resolve(PUBLIC, revision="0" * 40))
    assert failure.reason is Reason.MODEL_NOT_FOUND
    assert "revision" in failure.message


@pytest.mark.parametrize("name", ["no-slash", "a/b/c", "org/../etc", ""], ids=repr)
def test_a_name_that_is_no_repo_id_is_not_found_without_asking(
    resolver: HubResolver, hub: StandInHub, name: str
) -> None:
    assert unavailable(resolver.resolve(name)).reason is Reason.MODEL_NOT_FOUND
    assert hub.requests == ()


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        pytest.param("no-slash", "expected 'org/name'", id="no-slash"),
        pytest.param("org/model--v2", "must not contain '--' or '..'", id="double-hyphen"),
        pytest.param("org/a..b", "must not contain '--' or '..'", id="double-dot"),
        pytest.param("my--org/model", "must not contain '--' or '..'", id="double-hyphen-in-org"),
        pytest.param("org/" + "m" * 97, "at most 96 characters", id="97-character-part"),
        pytest.param("org/model-", "must end with a letter, digit or '_'", id="hyphen-end"),
        pytest.param("org/.model", "must start with a letter or digit", id="dot-start"),
        pytest.param("org/café", "only ASCII letters, digits", id="non-ascii"),
        pytest.param("org/model.git", "must not end in '.git'", id="git-end"),
    ],
)
def test_a_refused_id_is_told_the_rule_it_breaks(
    resolver: HubResolver, hub: StandInHub, name: str, rule: str
) -> None:
    # Not "expected 'org/name'" for an id in org/name form: the CRD admitted these once.
    failure = unavailable(resolver.resolve(name))
    assert failure.reason is Reason.MODEL_NOT_FOUND
    assert rule in failure.message and repr(name) in failure.message
    assert hub.requests == ()


@pytest.mark.parametrize(
    "name",
    ["a/" + "b" * 96, "org_1/a-.-b_", "Qwen/Qwen2.5-7B-Instruct"],
    ids=["96-character-part", "single-separators", "ordinary"],
)
def test_an_id_the_hub_takes_is_asked_for(
    resolver: HubResolver, hub: StandInHub, name: str
) -> None:
    resolver.resolve(name)
    assert hub.requests


@pytest.mark.parametrize("files_only", [False, True], ids=["model-info", "config-json"])
def test_garbage_json_is_metadata_invalid(
    resolver: HubResolver, hub: StandInHub, files_only: bool
) -> None:
    hub.break_json(PUBLIC, files_only=files_only)
    failure = unavailable(resolver.resolve(PUBLIC))
    assert failure.reason is Reason.MODEL_METADATA_INVALID
    assert not failure.transient


def test_slow_hub_times_out_within_the_request_bound(hub: StandInHub) -> None:
    hub.delay = 3.0
    resolver = HubResolver(HubSettings(endpoint=hub.url, request_timeout=0.3, total_timeout=5))
    started = time.monotonic()
    failure = unavailable(resolver.resolve(PUBLIC))
    assert time.monotonic() - started < 1.5
    assert failure.reason is Reason.MODEL_SOURCE_UNREACHABLE
    assert "did not answer within 0.3s" in failure.message
    assert failure.transient


def test_a_resolution_never_outlasts_the_total_bound(hub: StandInHub) -> None:
    # Each answer alone is in time; together they are not.
    hub.delay = 0.3
    resolver = HubResolver(HubSettings(endpoint=hub.url, request_timeout=1.0, total_timeout=0.45))
    started = time.monotonic()
    failure = unavailable(resolver.resolve(PUBLIC))
    assert time.monotonic() - started < 1.0
    assert failure.reason is Reason.MODEL_SOURCE_UNREACHABLE
    assert "the 0.45s allowed for one resolution" in failure.message


def test_hub_down_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    resolver = HubResolver(HubSettings(endpoint=f"http://127.0.0.1:{port}", request_timeout=1))
    failure = unavailable(resolver.resolve(PUBLIC))
    assert failure.reason is Reason.MODEL_SOURCE_UNREACHABLE
    assert "could not be reached" in failure.message


def test_settings_refuse_an_endpoint_that_is_no_url() -> None:
    with pytest.raises(ValueError, match="http"):
        HubSettings(endpoint="huggingface.co")


# --- the cache ---------------------------------------------------------------------------


def cached_resolver(hub: StandInHub, clock: Any) -> HubResolver:
    settings = HubSettings(endpoint=hub.url, cache_ttl=60, failure_cache_ttl=10)
    return HubResolver(settings, clock=clock)


def test_a_repeated_question_is_answered_without_http(hub: StandInHub, clock: Any) -> None:
    resolver = cached_resolver(hub, clock)
    first = resolver.resolve(PUBLIC)
    asked = len(hub.requests)
    assert asked > 0
    assert resolver.resolve(PUBLIC) == first
    assert len(hub.requests) == asked


def test_answers_expire_after_the_ttl(hub: StandInHub, clock: Any) -> None:
    """An answer is kept for `cache_ttl` (60 s), not the failures' 10 s, and not beyond."""
    resolver = cached_resolver(hub, clock)
    resolver.resolve(PUBLIC)
    asked = len(hub.requests)
    clock.now += 59
    resolver.resolve(PUBLIC)
    assert len(hub.requests) == asked
    clock.now += 2
    resolver.resolve(PUBLIC)
    assert len(hub.requests) > asked


def test_a_different_token_is_a_different_cache_entry(
    hub: StandInHub, clock: Any, tokens: dict[str, str]
) -> None:
    resolver = cached_resolver(hub, clock)
    assert isinstance(resolver.resolve(GATED, token=tokens["alice"]), ModelFound)
    asked = len(hub.requests)
    # bob must not inherit alice's answer: he is asked about afresh, and refused
    assert unavailable(resolver.resolve(GATED, token=tokens["bob"])).reason is (
        Reason.MODEL_ACCESS_DENIED
    )
    assert len(hub.requests) > asked
    assert unavailable(resolver.resolve(GATED)).reason is Reason.MODEL_ACCESS_DENIED


def test_lasting_failures_are_cached_briefly(hub: StandInHub, clock: Any) -> None:
    resolver = cached_resolver(hub, clock)
    resolver.resolve("nobody/nothing")
    resolver.resolve("nobody/nothing")
    assert len(hub.requests) == 1
    clock.now += 11
    resolver.resolve("nobody/nothing")
    assert len(hub.requests) == 2


def test_an_unreachable_hub_is_never_cached(hub: StandInHub, clock: Any) -> None:
    resolver = HubResolver(
        HubSettings(endpoint=hub.url, request_timeout=0.2, total_timeout=1),
        clock=clock,
    )
    hub.delay = 1.0
    assert unavailable(resolver.resolve(PUBLIC)).transient
    hub.delay = 0.0
    assert isinstance(resolver.resolve(PUBLIC), ModelFound)


def _together(resolver: HubResolver, asks: Sequence[tuple[str, str | None]]) -> list[Any]:
    """Resolve every (name, token) on a thread of its own, all released at once."""
    start = threading.Barrier(len(asks))

    def ask(name: str, token: str | None) -> Any:
        start.wait(timeout=10)
        return resolver.resolve(name, token=token)

    with ThreadPoolExecutor(len(asks)) as pool:
        return list(pool.map(lambda a: ask(*a), asks))


def test_orders_asking_at_once_share_one_resolution(hub: StandInHub, clock: Any) -> None:
    cached_resolver(hub, clock).resolve(PUBLIC)
    one = len(hub.requests)  # what one resolution asks of the hub
    hub.clear_requests()
    # Slow enough that all six ask while the first is still at the hub: each of them
    # found the cache empty, and each asked the hub, before answers were shared.
    hub.delay = 0.5
    answers = _together(cached_resolver(hub, clock), [(PUBLIC, None)] * 6)
    assert all(found(a) == found(answers[0]) for a in answers)
    assert len(hub.requests) == one


def test_only_the_same_question_is_shared(
    hub: StandInHub, clock: Any, tokens: dict[str, str]
) -> None:
    hub.delay = 0.3
    resolver = cached_resolver(hub, clock)
    asks = [(GATED, tokens["alice"]), (GATED, tokens["bob"])] * 2
    answers = _together(resolver, asks)
    # bob never gets alice's answer, asked for at the same moment
    assert [isinstance(a, ModelFound) for a in answers] == [True, False, True, False]
    assert unavailable(answers[1]).reason is Reason.MODEL_ACCESS_DENIED


def test_a_shared_unreachable_answer_is_asked_again_next_time(hub: StandInHub, clock: Any) -> None:
    resolver = HubResolver(
        HubSettings(endpoint=hub.url, request_timeout=0.3, total_timeout=1), clock=clock
    )
    hub.delay = 1.0
    answers = _together(resolver, [(PUBLIC, None)] * 4)
    assert all(unavailable(a).transient for a in answers)
    assert len(hub.requests) == 1  # one attempt, timed out, told to all four
    hub.delay = 0.0
    assert isinstance(resolver.resolve(PUBLIC), ModelFound)


def test_token_fingerprints_hide_the_token_and_tell_tokens_apart(
    tokens: dict[str, str],
) -> None:
    alice, bob = token_fingerprint(tokens["alice"]), token_fingerprint(tokens["bob"])
    assert alice == token_fingerprint(tokens["alice"])
    assert alice != bob
    assert tokens["alice"] not in alice and token_fingerprint(None) == "anonymous"


# --- repos shaped unusually (a hub built from altered fixture entries) --------------------


def altered_hub(hub: StandInHub, name: str, **changes: Any) -> StandInHub:
    models = dict(hub.fixture.models)
    models[name] = dataclasses.replace(models[name], **changes)
    return StandInHub(HubFixture(models=models, tokens=hub.fixture.tokens))


def with_config(hub: StandInHub, name: str, **config: Any) -> dict[str, HubFile]:
    files = dict(hub.fixture.models[name].files)
    content = json.dumps(config).encode()
    files["config.json"] = HubFile("config.json", len(content), content)
    return files


def test_a_heads_redirect_to_huggingface_co_is_the_answer_and_gets_no_token(
    hub: StandInHub, tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The access check's HEAD, redirected (a mirror, or the hub sending a file to its
    CDN): the library followed, with the tenant's token, any redirect to what it counts as
    the hub, huggingface.co included, whatever endpoint the settings name. The redirect
    to another origin is now the answer itself: nothing is sent there."""
    name = "Qwen/Qwen2.5-7B-Instruct-GGUF"
    with altered_hub(hub, name, gated="auto", granted=frozenset({"alice"})) as mirror:
        served = mirror.answer

        def to_huggingface_co(method: str, target: str, authorization: str | None) -> Any:
            answer = served(method, target, authorization)
            if method == "HEAD" and answer.status == 200:
                location = f"https://huggingface.co{target}"
                return dataclasses.replace(answer, status=302, headers={"Location": location})
            return answer

        monkeypatch.setattr(mirror, "answer", to_huggingface_co)
        looked_up: list[str] = []
        guarded = socket.getaddrinfo  # the conftest's: loopback only

        def recorded(host: Any, *args: Any, **kwargs: Any) -> Any:
            looked_up.append(host.decode() if isinstance(host, bytes) else str(host))
            return guarded(host, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", recorded)
        resolver = HubResolver(HubSettings(endpoint=mirror.url))
        assert found(resolver.resolve(name, token=tokens["alice"])).facts.gated
        assert unavailable(resolver.resolve(name)).reason is Reason.MODEL_ACCESS_DENIED
        assert any(r.method == "HEAD" for r in mirror.requests)
    assert set(looked_up) <= {"127.0.0.1", "localhost"}


def test_names_a_repo_reports_past_any_real_ones_length_are_not_recorded(
    hub: StandInHub,
) -> None:
    """Anyone may publish a config.json whose `architectures[0]` or `torch_dtype` holds
    megabytes: copied into the facts, each order of that model logged a 6 MB event and
    held it in memory. Names longer than any real one, or no strings, are left out."""
    name = "Qwen/Qwen2.5-0.5B-Instruct"
    huge = "Qwen2ForCausalLM" * 200_000  # 3.2 MB
    changed = with_config(hub, name, architectures=[huge], torch_dtype=huge)
    with altered_hub(hub, name, files=changed) as odd:
        facts = found(HubResolver(HubSettings(endpoint=odd.url)).resolve(name)).facts
    assert (facts.architecture, facts.dtype) == (None, None)
    resolved = ModelResolved(observed_at=datetime(2026, 1, 1, tzinfo=UTC), facts=facts)
    assert len(codec.encode(resolved).payload) < 4096
    changed = with_config(hub, name, architectures=[{"a": 1}], torch_dtype=["bfloat16"])
    with altered_hub(hub, name, files=changed) as odd:
        facts = found(HubResolver(HubSettings(endpoint=odd.url)).resolve(name)).facts
    assert (facts.architecture, facts.dtype) == (None, None)


def test_a_gated_gguf_repo_checks_access_on_the_weights_it_would_serve(
    hub: StandInHub, tokens: dict[str, str]
) -> None:
    name = "Qwen/Qwen2.5-7B-Instruct-GGUF"
    with altered_hub(hub, name, gated="auto", granted=frozenset({"alice"})) as gated:
        resolver = HubResolver(HubSettings(endpoint=gated.url))
        assert unavailable(resolver.resolve(name)).reason is Reason.MODEL_ACCESS_DENIED
        assert found(resolver.resolve(name, token=tokens["alice"])).facts.gated
        heads = [r.path for r in gated.requests if r.method == "HEAD"]
        assert heads and all("q4_k_m-00001-of-00002.gguf" in p for p in heads)


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ("no-config", "has no config.json"),
        ("unknown-quantization", "quantization method 'hqq'"),
        ("config-not-an-object", "not a JSON object"),
    ],
)
def test_repos_whose_config_cannot_be_used_are_metadata_invalid(
    hub: StandInHub, files: str, says: str
) -> None:
    name = "Qwen/Qwen2.5-0.5B-Instruct"
    if files == "no-config":
        changed = {k: v for k, v in hub.fixture.models[name].files.items() if k != "config.json"}
    elif files == "unknown-quantization":
        changed = with_config(
            hub, name, architectures=["X"], quantization_config={"quant_method": "hqq"}
        )
    else:
        changed = dict(hub.fixture.models[name].files)
        changed["config.json"] = HubFile("config.json", 2, b"[]")
    with altered_hub(hub, name, files=changed) as odd:
        failure = unavailable(HubResolver(HubSettings(endpoint=odd.url)).resolve(name))
    assert failure.reason is Reason.MODEL_METADATA_INVALID
    assert says in failure.message


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"torch_dtype": "bfloat16\ud800"}, "not valid model metadata"),  # a lone surrogate
        ({"max_position_embeddings": 10**30}, "not valid model metadata"),
    ],
    ids=["lone-surrogate", "beyond-64-bits"],
)
def test_values_the_log_cannot_record_are_metadata_invalid(
    hub: StandInHub, change: dict[str, Any], says: str
) -> None:
    # Valid JSON both, and neither can be written to the event log (msgpack takes UTF-8
    # and 64-bit integers): taken as facts, every pass of the order would fail for ever.
    name = "Qwen/Qwen2.5-0.5B-Instruct"
    changed = with_config(hub, name, architectures=["Qwen2ForCausalLM"], **change)
    with altered_hub(hub, name, files=changed) as odd:
        failure = unavailable(HubResolver(HubSettings(endpoint=odd.url)).resolve(name))
    assert failure.reason is Reason.MODEL_METADATA_INVALID
    assert says in failure.message


def test_counts_that_add_up_beyond_64_bits_are_metadata_invalid(hub: StandInHub) -> None:
    name = "Qwen/Qwen2.5-0.5B-Instruct"
    with altered_hub(hub, name, safetensors={"BF16": 2**62, "F32": 2**62}) as odd:
        failure = unavailable(HubResolver(HubSettings(endpoint=odd.url)).resolve(name))
    assert failure.reason is Reason.MODEL_METADATA_INVALID


AWQ = "Qwen/Qwen2.5-32B-Instruct-AWQ"


@pytest.mark.parametrize(
    ("quantization_config", "names"),
    [
        ({"bits": 0.5, "group_size": 128}, "quantization_config.bits 0.5"),
        ({"bits": "four", "group_size": 128}, "quantization_config.bits 'four'"),
        ({"bits": 4, "group_size": float("inf")}, "quantization_config.group_size inf"),
        ({"bits": 64, "group_size": 128}, "quantization_config.bits 64"),
        ({"bits": -4, "group_size": 128}, "quantization_config.bits -4"),
    ],
    ids=["bits-half", "bits-word", "group-size-1e400", "bits-64", "bits-negative"],
)
def test_config_values_no_rule_can_use_are_metadata_invalid_and_cached(
    hub: StandInHub, quantization_config: dict[str, Any], names: str
) -> None:
    """The first three raised out of `resolve` (ZeroDivisionError, ValueError,
    OverflowError): nothing cached, the order's lookup asked again every 2 s for ever with
    its status held back. The last two gave a count 16x too small, or negative: either
    passed any class's maxParameterCount."""
    changed = with_config(
        hub,
        AWQ,
        architectures=["Qwen2ForCausalLM"],
        quantization_config={"quant_method": "awq", **quantization_config},
    )
    with altered_hub(hub, AWQ, files=changed) as odd:
        resolver = HubResolver(HubSettings(endpoint=odd.url))
        failure = unavailable(resolver.resolve(AWQ))
        asked = len(odd.requests)
        assert resolver.resolve(AWQ) == failure  # cached: the hub is not asked again
        assert len(odd.requests) == asked
    assert failure.reason is Reason.MODEL_METADATA_INVALID
    assert names in failure.message and "config.json" in failure.message


def test_an_error_no_rule_foresaw_is_an_answer_and_the_token_stays_out_of_the_log(
    hub: StandInHub,
    tokens: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = tokens["alice"]

    def broken(template: object) -> bool:
        raise RuntimeError(f"a bug holding {token}")

    monkeypatch.setattr(hub_facts, "chat_template_mentions_tools", broken)
    resolver = HubResolver(HubSettings(endpoint=hub.url))
    with caplog.at_level(logging.ERROR):
        failure = unavailable(resolver.resolve(GATED, token=token))
    assert failure.reason is Reason.MODEL_METADATA_INVALID
    assert "could not read (RuntimeError" in failure.message and token not in failure.message
    assert "Traceback" in caplog.text and "a bug holding [redacted]" in caplog.text
    assert token not in caplog.text
    hub.clear_requests()
    assert resolver.resolve(GATED, token=token) == failure  # cached as any invalid answer
    assert hub.requests == ()


# --- the settings change the hub ---------------------------------------------------------


def test_use_endpoint_re_points_the_resolver_and_forgets_the_old_hubs_answers(
    hub: StandInHub,
) -> None:
    other = StandInHub()
    try:
        resolver = HubResolver(HubSettings(endpoint=other.url))
        found(resolver.resolve(PUBLIC))
        assert other.requests and not hub.requests
        assert not resolver.use_endpoint(other.url + "/")  # the same hub: nothing to do
        assert resolver.use_endpoint(hub.url)
        assert resolver.settings.endpoint == hub.url
        other.clear_requests()
        found(resolver.resolve(PUBLIC))  # not served from the old hub's cached answer
        assert hub.requests and not other.requests
    finally:
        other.close()


def test_credentials_in_the_hub_url_are_never_shown(
    hub: StandInHub, caplog: pytest.LogCaptureFixture
) -> None:
    """A mirror's `https://user:password@…` went into every ModelResolved message (the
    status, Events) and the log line of a changed endpoint."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there
    with caplog.at_level(logging.DEBUG):
        resolver = HubResolver(HubSettings(endpoint=hub.url))
        assert resolver.use_endpoint(f"http://mirror-user:pa55word@127.0.0.1:{port}")
        failure = unavailable(resolver.resolve(PUBLIC))
        with pytest.raises(ValueError) as refused:
            HubSettings(endpoint="ftp://mirror-user:pa55word@127.0.0.1/")
    assert failure.reason is Reason.MODEL_SOURCE_UNREACHABLE
    assert f"The hub (http://127.0.0.1:{port})" in failure.message
    assert f"hub endpoint is now http://127.0.0.1:{port}" in caplog.text
    for text in (failure.message, caplog.text, str(refused.value)):
        assert "pa55word" not in text and "mirror-user" not in text
