"""The OpenAI-compatible stub over real HTTP on 127.0.0.1: answers, the token, the knobs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.simulator.stub import EMBEDDING_DIMENSIONS, Stub

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def stub() -> Iterator[Stub]:
    with Stub(served_names=["support-llm"], api_key=TOKEN, hang_seconds=5) as running:
        yield running


def post(stub: Stub, route: str, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
    return httpx.post(stub.url + route, json=body, headers=AUTH, timeout=5, **kwargs)


def test_models_lists_the_served_name(stub: Stub) -> None:
    answer = httpx.get(stub.url + "/v1/models", headers=AUTH, timeout=5)
    assert answer.status_code == 200
    body = answer.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["support-llm"]


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-header"),
        pytest.param({"Authorization": "Bearer wrong"}, id="wrong-token"),
        pytest.param({"Authorization": TOKEN}, id="no-bearer-prefix"),
    ],
)
def test_without_the_token_every_api_call_is_refused(stub: Stub, headers: dict[str, str]) -> None:
    for method, route in (("GET", "/v1/models"), ("POST", "/v1/chat/completions")):
        answer = httpx.request(method, stub.url + route, headers=headers, json={}, timeout=5)
        assert answer.status_code == 401
        assert answer.json() == {"error": "Unauthorized"}


def test_health_needs_no_token(stub: Stub) -> None:
    assert httpx.get(stub.url + "/health", timeout=5).status_code == 200


def test_without_an_api_key_nothing_is_checked() -> None:
    with Stub(served_names=["open"]) as open_stub:
        assert httpx.get(open_stub.url + "/v1/models", timeout=5).status_code == 200


def test_chat_answers_like_an_openai_server(stub: Stub) -> None:
    body = {"model": "support-llm", "messages": [{"role": "user", "content": "ping"}]}
    answer = post(stub, "/v1/chat/completions", body).json()
    assert answer["object"] == "chat.completion"
    assert answer["model"] == "support-llm"
    assert answer["choices"][0]["message"] == {
        "role": "assistant",
        "content": "pong",
        "tool_calls": [],
    }
    usage = answer["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_chat_streams_server_sent_events(stub: Stub) -> None:
    body = {"messages": [{"role": "user", "content": "ping"}], "stream": True}
    answer = post(stub, "/v1/chat/completions", body)
    assert answer.headers["content-type"] == "text/event-stream"
    events = [line for line in answer.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert '"content": "pong"' in answer.text


def test_an_unknown_model_is_not_found(stub: Stub) -> None:
    body = {"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}
    answer = post(stub, "/v1/chat/completions", body)
    assert answer.status_code == 404
    assert "does not exist" in answer.json()["message"]


def test_embeddings_are_unit_vectors_one_per_input(stub: Stub) -> None:
    answer = post(stub, "/v1/embeddings", {"input": ["first", "second"]}).json()
    vectors = [item["embedding"] for item in answer["data"]]
    assert [item["index"] for item in answer["data"]] == [0, 1]
    assert all(len(v) == EMBEDDING_DIMENSIONS for v in vectors)
    assert all(abs(sum(x * x for x in v) - 1) < 1e-3 for v in vectors)
    assert vectors[0] != vectors[1]
    again = post(stub, "/v1/embeddings", {"input": "first"}).json()
    assert again["data"][0]["embedding"] == vectors[0]


def test_rerank_orders_by_relevance(stub: Stub) -> None:
    body = {
        "query": "reset my password",
        "documents": ["shipping times", "how to reset a password", "password policy"],
        "top_n": 2,
    }
    results = post(stub, "/v1/rerank", body).json()["results"]
    assert [r["index"] for r in results] == [1, 2]
    assert results[0]["relevance_score"] > results[1]["relevance_score"]


def test_bad_json_is_a_bad_request(stub: Stub) -> None:
    answer = httpx.post(
        stub.url + "/v1/chat/completions", content=b"{nope", headers=AUTH, timeout=5
    )
    assert answer.status_code == 400


@pytest.mark.parametrize("status", [500, 503])
def test_the_fail_knob_answers_that_status(stub: Stub, status: int) -> None:
    stub.failure = str(status)
    assert httpx.get(stub.url + "/v1/models", headers=AUTH, timeout=5).status_code == status
    # The process is alive: only the API fails.
    assert httpx.get(stub.url + "/health", timeout=5).status_code == 200
    stub.failure = None
    assert httpx.get(stub.url + "/v1/models", headers=AUTH, timeout=5).status_code == 200


def test_the_timeout_knob_hangs_past_a_probe_timeout(stub: Stub) -> None:
    stub.failure = "timeout"
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(stub.url + "/v1/models", headers=AUTH, timeout=0.5)
    assert time.monotonic() - started < 3


def test_requests_are_recorded_with_their_answer(stub: Stub) -> None:
    httpx.get(stub.url + "/v1/models", timeout=5)
    httpx.get(stub.url + "/v1/models", headers=AUTH, timeout=5)
    assert [(r.path, r.status, r.authorized) for r in stub.requests] == [
        ("/v1/models", 401, False),
        ("/v1/models", 200, True),
    ]


def test_close_ends_a_hang_and_frees_the_port() -> None:
    stub = Stub(served_names=["m"], hang_seconds=30)
    stub.failure = "timeout"
    url = stub.url
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(url + "/v1/models", timeout=0.3)
    started = time.monotonic()
    stub.close()
    assert time.monotonic() - started < 5
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=1)
