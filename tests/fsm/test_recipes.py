"""Launch recipes: the record's schema, the shipped set, the choice and the rendered args."""

from __future__ import annotations

from typing import Any

import pytest

from fsm.placement.recipes import (
    RecipeError,
    choose_recipe,
    parse_recipe,
    parse_recipes,
    render_args,
)
from fsm.reasons import Reason
from fsm.values import EndpointType, ModelFormat, PlacementMode, Quantization
from tests.support.planner_inputs import default_recipes

WHOLE, PARTITION = PlacementMode.WHOLE_DEVICE, PlacementMode.PARTITION
CHAT, EMBED, RERANK = EndpointType.CHAT, EndpointType.EMBEDDINGS, EndpointType.RERANK
ST, GGUF = ModelFormat.SAFETENSORS, ModelFormat.GGUF
Q = Quantization
A100, T4, H100, MI300 = (
    "NVIDIA A100 80GB PCIe",
    "Tesla T4",
    "NVIDIA H100 80GB HBM3",
    "AMD Instinct MI300X",
)


def _recipe(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "runtime": "vLLM",
        "image": "vllm/vllm-openai:v0.9.2",
        "placementModes": ["WholeDevice"],
        "formats": ["Safetensors"],
        "quantizations": ["None"],
        "endpointTypes": ["Chat"],
    }
    return {"kind": "LaunchRecipe", "metadata": {"name": "r"}, "spec": {**base, **spec}}


def test_the_record_reads_every_field() -> None:
    recipe = parse_recipe(
        _recipe(
            productNames=["A100"],
            toolCalling={"enabled": True, "parser": "hermes"},
            args=["--port={port}"],
            env=[{"name": "A", "value": "1"}],
            port=9000,
            preference=3,
        )
    )
    assert recipe.name == "r" and recipe.port == 9000 and recipe.preference == 3
    assert recipe.quantizations == (Q.NONE,) and recipe.product_names == ("A100",)
    assert recipe.tool_calling.parser == "hermes" and recipe.env[0].name == "A"
    assert parse_recipe(_recipe()).port == 8000


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        pytest.param({"args": ["--model={modelDir}"]}, "modelDir", id="unknown-placeholder"),
        pytest.param({"args": ["--port={port:d}"]}, "format spec", id="format-spec"),
        pytest.param({"args": ["--m={modelPath:>99999999999}"]}, "format spec", id="huge-width"),
        pytest.param({"args": ["--port={port!r}"]}, "conversion", id="conversion"),
        pytest.param({"args": ["--port={port"]}, "args", id="unclosed-brace"),
        pytest.param({"toolCalling": {"enabled": True}}, "parser", id="vllm-tools-need-parser"),
        pytest.param({"placementModes": []}, "placementModes", id="no-placement"),
        pytest.param({"quantizations": ["INT3"]}, "quantizations", id="unknown-quantization"),
        pytest.param({"port": 0}, "port", id="bad-port"),
        pytest.param({"runtimeClass": "x"}, "runtimeClass", id="unknown-field"),
    ],
)
def test_unusable_recipes_say_which_field(spec: dict[str, Any], problem: str) -> None:
    with pytest.raises(RecipeError, match=problem):
        parse_recipe(_recipe(**spec))


def test_parse_recipes_skips_the_unusable_and_says_why() -> None:
    good = _recipe()
    bad = _recipe(port=-1) | {"metadata": {"name": "broken"}}
    recipes, problems = parse_recipes([bad, good])
    assert [r.name for r in recipes] == ["r"]
    assert len(problems) == 1 and "broken" in problems[0]


def test_the_shipped_set_covers_what_the_platform_promises() -> None:
    recipes = default_recipes()
    chat = [r for r in recipes if CHAT in r.endpoint_types]
    assert {p for r in recipes if r.runtime == "vLLM" for p in r.placement_modes} == {
        WHOLE,
        PARTITION,
    }
    assert {Q.NONE, Q.AWQ, Q.GPTQ, Q.FP8} <= {q for r in chat for q in r.quantizations}
    assert {CHAT, EMBED, RERANK} <= {t for r in recipes for t in r.endpoint_types}
    assert all(r.tool_calling.enabled for r in chat)
    assert all(r.tool_calling.parser for r in chat if r.runtime == "vLLM")
    assert not any(r.tool_calling.enabled for r in recipes if CHAT not in r.endpoint_types)
    assert any(GGUF in r.formats for r in recipes)


@pytest.mark.parametrize(
    ("placement", "product", "fmt", "quant", "etype", "expected"),
    [
        pytest.param(WHOLE, A100, ST, Q.NONE, CHAT, "vllm-nvidia", id="a100-bf16-chat"),
        pytest.param(WHOLE, A100, ST, Q.AWQ, CHAT, "vllm-nvidia-awq", id="a100-awq"),
        pytest.param(WHOLE, A100, ST, Q.GPTQ, CHAT, "vllm-nvidia-gptq", id="a100-gptq"),
        pytest.param(WHOLE, H100, ST, Q.FP8, CHAT, "vllm-nvidia-fp8", id="h100-fp8"),
        pytest.param(WHOLE, T4, ST, Q.AWQ, CHAT, "vllm-nvidia-turing", id="t4-prefers-fp16-recipe"),
        pytest.param(PARTITION, A100, ST, Q.AWQ, CHAT, "vllm-nvidia-mig", id="mig-chat"),
        pytest.param(
            PARTITION, A100, ST, Q.NONE, EMBED, "vllm-nvidia-embeddings", id="mig-embeddings"
        ),
        pytest.param(WHOLE, T4, ST, Q.NONE, RERANK, "vllm-nvidia-rerank", id="t4-rerank"),
        pytest.param(WHOLE, T4, GGUF, Q.GGUF, CHAT, "llamacpp-nvidia-gguf", id="gguf"),
        pytest.param(WHOLE, T4, ST, Q.FP8, CHAT, Reason.QUANTIZATION_MISMATCH, id="fp8-on-turing"),
        pytest.param(WHOLE, A100, ST, Q.BITSANDBYTES, CHAT, Reason.QUANTIZATION_MISMATCH, id="bnb"),
        pytest.param(
            PARTITION, A100, ST, Q.AWQ, EMBED, Reason.QUANTIZATION_MISMATCH, id="awq-embeddings"
        ),
        pytest.param(
            WHOLE, MI300, ST, Q.NONE, CHAT, Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE, id="amd"
        ),
        pytest.param(
            WHOLE,
            A100,
            ModelFormat.DIFFUSERS,
            Q.NONE,
            CHAT,
            Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE,
            id="diffusers",
        ),
        pytest.param(
            PARTITION,
            A100,
            GGUF,
            Q.GGUF,
            EMBED,
            Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE,
            id="gguf-embeddings",
        ),
    ],
)
def test_choose_recipe(
    placement: PlacementMode,
    product: str,
    fmt: ModelFormat,
    quant: Quantization,
    etype: EndpointType,
    expected: str | Reason,
) -> None:
    choice = choose_recipe(
        default_recipes(),
        placement=placement,
        product_name=product,
        model_format=fmt,
        quantization=quant,
        endpoint_type=etype,
    )
    if isinstance(expected, Reason):
        assert choice.recipe is None and choice.reason is expected and choice.detail
    else:
        assert choice.recipe is not None and choice.recipe.name == expected


# A whole A100 serving an unquantized Safetensors model as Chat: what any test recipe fits.
A100_CHAT: dict[str, Any] = {
    "placement": WHOLE,
    "product_name": A100,
    "model_format": ST,
    "quantization": Q.NONE,
    "endpoint_type": CHAT,
}


def test_ties_go_to_the_higher_preference_then_the_name() -> None:
    low = parse_recipe(_recipe(preference=1) | {"metadata": {"name": "a-low"}})
    high = parse_recipe(_recipe(preference=9) | {"metadata": {"name": "z-high"}})
    twin = parse_recipe(_recipe(preference=9) | {"metadata": {"name": "b-twin"}})
    kwargs = A100_CHAT
    assert choose_recipe([low, high], **kwargs).recipe == high
    assert choose_recipe([high, low, twin], **kwargs).recipe == twin


def test_under_token_authentication_only_a_runtime_that_takes_a_key_is_chosen() -> None:
    """A recipe's runtime is free text: one the controller cannot give the key to (TEI
    reads `--api-key`) was chosen under a Token class, rendered with VLLM_API_KEY it
    ignores, and the endpoint answered anyone while the order said it needed a token."""
    tei = parse_recipe(
        _recipe(runtime="text-embeddings-inference", preference=9) | {"metadata": {"name": "tei"}}
    )
    vllm = parse_recipe(_recipe(preference=1) | {"metadata": {"name": "vllm"}})
    kwargs = A100_CHAT
    assert choose_recipe([tei, vllm], **kwargs).recipe == tei  # no token: preference wins
    assert choose_recipe([tei, vllm], api_key=True, **kwargs).recipe == vllm
    alone = choose_recipe([tei], api_key=True, **kwargs)
    assert alone.recipe is None and alone.reason is Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE
    assert "Token authentication" in alone.detail and "tei (text-embeddings-inference)" in (
        alone.detail
    )
    assert (tei.api_key_env, vllm.api_key_env) == (None, "VLLM_API_KEY")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(
            "vllm-nvidia-awq",
            (
                "--model=/models/qwen",
                "--served-model-name=qwen",
                "--host=0.0.0.0",
                "--port=8000",
                "--tensor-parallel-size=2",
                "--gpu-memory-utilization=0.9",
                "--max-model-len=8192",
                "--enable-auto-tool-choice",
                "--tool-call-parser=hermes",
            ),
            id="vllm-with-tools",
        ),
        pytest.param(
            "llamacpp-nvidia-gguf",
            (
                "--model=/models/qwen",
                "--alias=qwen",
                "--host=0.0.0.0",
                "--port=8000",
                "--n-gpu-layers=999",
                "--ctx-size=8192",
                "--jinja",
            ),
            id="llamacpp-jinja",
        ),
    ],
)
def test_render_args(name: str, expected: tuple[str, ...]) -> None:
    recipe = next(r for r in default_recipes() if r.name == name)
    args = render_args(
        recipe, model_path="/models/qwen", served_model_name="qwen", tensor_parallel_size=2
    )
    assert args == expected


def test_render_args_does_not_repeat_flags_the_recipe_spells() -> None:
    recipe = parse_recipe(
        _recipe(
            toolCalling={"enabled": True, "parser": "llama3_json"},
            args=["--tool-call-parser=pythonic"],
        )
    )
    args = render_args(recipe, model_path="/m", served_model_name="m", tensor_parallel_size=1)
    assert args == ("--tool-call-parser=pythonic", "--enable-auto-tool-choice")
