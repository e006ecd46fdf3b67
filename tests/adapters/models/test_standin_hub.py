"""The stand-in hub answers huggingface_hub the way the real hub does, metadata only."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError

from adapters.simulator.hub import FIXTURE, StandInHub, load_fixture
from tests.support import polling

SEEDS_AND_TASK_MODELS = {
    "Qwen/Qwen2.5-32B-Instruct-AWQ",
    "meta-llama/Llama-3.1-8B",
    "BAAI/bge-m3",
    "BAAI/bge-reranker-v2-m3",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct-GGUF",
    "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4",
    "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8",
}


def test_the_fixture_carries_the_models_the_platform_is_shown_with() -> None:
    fixture = load_fixture(FIXTURE)
    assert set(fixture.models) >= SEEDS_AND_TASK_MODELS
    for model in fixture.models.values():
        assert re.fullmatch(r"[0-9a-f]{40}", model.sha), model.id
        has_gguf = any(name.endswith(".gguf") for name in model.files)
        assert has_gguf or "config.json" in model.files, model.id
        assert all(f.size > 0 for f in model.files.values()), model.id


def test_model_info_reads_the_fixture(hub: StandInHub) -> None:
    info = HfApi(endpoint=hub.url).model_info(
        "Qwen/Qwen2.5-32B-Instruct-AWQ", files_metadata=True, securityStatus=True, token=False
    )
    assert info.pipeline_tag == "text-generation"
    assert info.safetensors is not None and info.safetensors.total == 5_733_225_472
    sizes = {s.rfilename: s.size for s in info.siblings or []}
    assert sizes["model-00001-of-00005.safetensors"] == 3_985_937_256
    assert info.security_repo_status == {"scansDone": True, "filesWithIssues": []}
    assert info.config is not None and info.config["quantization_config"]["quant_method"] == "awq"


def test_expand_returns_only_the_asked_fields(hub: StandInHub) -> None:
    info = HfApi(endpoint=hub.url).model_info(
        "BAAI/bge-m3", expand=["pipeline_tag", "sha"], token=False
    )
    assert (info.pipeline_tag, info.tags, info.siblings) == ("sentence-similarity", None, None)


def test_hf_hub_download_fetches_a_config_file(hub: StandInHub, tmp_path: Path) -> None:
    path = hf_hub_download(
        "Qwen/Qwen2.5-0.5B-Instruct", "config.json", endpoint=hub.url, token=False,
        cache_dir=tmp_path,
    )  # fmt: skip
    config = json.loads(Path(path).read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    sha = hub.fixture.models["Qwen/Qwen2.5-0.5B-Instruct"].sha
    assert sha in path  # the cache layout is keyed by the X-Repo-Commit the stand-in sent


def test_gated_files_need_a_granted_token(hub: StandInHub, tokens: dict[str, str]) -> None:
    url = hf_hub_url("meta-llama/Llama-3.1-8B", "config.json", endpoint=hub.url)
    with pytest.raises(GatedRepoError):
        get_hf_file_metadata(url, token=False)
    with pytest.raises(GatedRepoError):
        get_hf_file_metadata(url, token=tokens["bob"])
    assert get_hf_file_metadata(url, token=tokens["alice"]).size is not None


def test_weights_are_described_never_served(hub: StandInHub) -> None:
    name = "model-00001-of-00004.safetensors"
    url = hf_hub_url("Qwen/Qwen2.5-7B-Instruct", name, endpoint=hub.url)
    meta = get_hf_file_metadata(url, token=False)
    assert meta.size == hub.fixture.models["Qwen/Qwen2.5-7B-Instruct"].files[name].size
    assert meta.commit_hash == hub.fixture.models["Qwen/Qwen2.5-7B-Instruct"].sha
    response = httpx2.get(url)
    assert response.status_code == 501
    assert len(response.content) < 1024


def test_an_unknown_token_is_refused_everywhere(hub: StandInHub) -> None:
    with pytest.raises(HfHubHTTPError) as refused:
        HfApi(endpoint=hub.url).model_info("BAAI/bge-m3", token="hf_made_up")
    assert refused.value.response.status_code == 401


def test_the_request_log_keeps_no_token(hub: StandInHub, tokens: dict[str, str]) -> None:
    HfApi(endpoint=hub.url).model_info("BAAI/bge-m3", token=tokens["alice"])
    assert hub.requests[-1].authenticated is True
    assert tokens["alice"] not in repr(hub.requests)


def test_close_does_not_wait_for_a_delayed_answer() -> None:
    hub = StandInHub()
    hub.delay = 30.0
    asking = threading.Thread(target=lambda: httpx2.get(f"{hub.url}/api/models/BAAI/bge-m3"))
    asking.start()
    # The request must be in the hub's hands (not still connecting) when it closes.
    polling.eventually(lambda: hub.requests, timeout=10, what="the hub to receive the request")
    started = time.monotonic()
    hub.close()
    asking.join(timeout=5)
    assert time.monotonic() - started < 2
    assert not asking.is_alive()
