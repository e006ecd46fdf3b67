"""Tables for the pure rules that turn hub metadata into model facts."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.models import hub_facts
from fsm.values import EndpointType, ModelFormat, Quantization

CHAT, EMB, RERANK = EndpointType.CHAT, EndpointType.EMBEDDINGS, EndpointType.RERANK

ENDPOINT_TYPES = [
    ("text-generation", [], "org/base-model", (CHAT,)),
    ("conversational", [], "org/chat", (CHAT,)),
    (None, ["conversational"], "org/untagged-chat", (CHAT,)),
    ("feature-extraction", [], "intfloat/e5-large-v2", (EMB,)),
    ("sentence-similarity", ["sentence-transformers"], "BAAI/bge-m3", (EMB,)),
    (None, ["sentence-similarity"], "org/untagged-embedder", (EMB,)),
    ("text-classification", ["reranker"], "org/scorer", (RERANK,)),
    ("text-classification", ["rerank"], "org/scorer", (RERANK,)),
    ("text-classification", [], "BAAI/bge-reranker-v2-m3", (RERANK,)),
    ("text-classification", [], "cross-encoder/ms-marco-MiniLM-L-6-v2", (RERANK,)),
    ("text-ranking", [], "org/ranker", (RERANK,)),
    ("text-classification", ["sentiment"], "org/sentiment-classifier", ()),
    ("image-classification", [], "google/vit-base-patch16-224", ()),
    (None, [], "org/unknown", ()),
]


@pytest.mark.parametrize(
    ("task", "tags", "repo", "expected"),
    ENDPOINT_TYPES,
    ids=[f"{row[0]}-{row[2]}" for row in ENDPOINT_TYPES],
)
def test_endpoint_types(
    task: str | None, tags: list[str], repo: str, expected: tuple[EndpointType, ...]
) -> None:
    assert hub_facts.endpoint_types(task, tags, repo) == expected


FORMATS = [
    (["config.json", "model.safetensors", "pytorch_model.bin"], ModelFormat.SAFETENSORS),
    (["model-00001-of-00002.safetensors", "original/consolidated.00.pth"], ModelFormat.SAFETENSORS),
    (["qwen2.5-7b-instruct-q4_k_m.gguf", "README.md"], ModelFormat.GGUF),
    (["config.json", "pytorch_model.bin"], ModelFormat.PYTORCH),
    (["model_index.json", "unet/diffusion_pytorch_model.safetensors"], ModelFormat.DIFFUSERS),
    (["README.md", ".gitattributes"], ModelFormat.UNKNOWN),
]


@pytest.mark.parametrize(
    ("files", "expected"), FORMATS, ids=[f.value + str(i) for i, (_, f) in enumerate(FORMATS)]
)
def test_model_format(files: list[str], expected: ModelFormat) -> None:
    assert hub_facts.model_format(files) is expected


def q(**quantization_config: Any) -> dict[str, Any]:
    return {"quantization_config": quantization_config}


FP8_GROUP = {"group_0": {"weights": {"num_bits": 8, "type": "float"}, "targets": ["Linear"]}}
INT4_GROUP = {"group_0": {"weights": {"num_bits": 4, "type": "int"}, "targets": ["Linear"]}}

QUANTIZATIONS = [
    ("no-config", None, ModelFormat.SAFETENSORS, Quantization.NONE),
    ("unquantized", {"torch_dtype": "bfloat16"}, ModelFormat.SAFETENSORS, Quantization.NONE),
    ("awq", q(quant_method="awq", bits=4), ModelFormat.SAFETENSORS, Quantization.AWQ),
    ("gptq", q(quant_method="gptq", bits=4), ModelFormat.SAFETENSORS, Quantization.GPTQ),
    ("fp8", q(quant_method="fp8"), ModelFormat.SAFETENSORS, Quantization.FP8),
    ("fbgemm-fp8", q(quant_method="fbgemm_fp8"), ModelFormat.SAFETENSORS, Quantization.FP8),
    ("modelopt-fp8", q(quant_method="modelopt", quant_algo="FP8"), ModelFormat.SAFETENSORS,
     Quantization.FP8),
    ("compressed-tensors-fp8", q(quant_method="compressed-tensors", config_groups=FP8_GROUP),
     ModelFormat.SAFETENSORS, Quantization.FP8),
    ("bitsandbytes", q(quant_method="bitsandbytes", load_in_4bit=True), ModelFormat.SAFETENSORS,
     Quantization.BITSANDBYTES),
    ("gguf-ignores-config", None, ModelFormat.GGUF, Quantization.GGUF),
]  # fmt: skip


@pytest.mark.parametrize(
    ("config", "fmt", "expected"),
    [row[1:] for row in QUANTIZATIONS],
    ids=[row[0] for row in QUANTIZATIONS],
)
def test_quantization(
    config: dict[str, Any] | None, fmt: ModelFormat, expected: Quantization
) -> None:
    assert hub_facts.quantization(config, fmt) is expected


@pytest.mark.parametrize(
    "config",
    [
        q(quant_method="compressed-tensors", config_groups=INT4_GROUP),
        q(quant_method="hqq"),
        {"quantization_config": "awq"},
    ],
    ids=["compressed-tensors-int4", "hqq", "not-an-object"],
)
def test_quantization_the_platform_cannot_serve_is_refused(config: dict[str, Any]) -> None:
    with pytest.raises(hub_facts.UnknownQuantization):
        hub_facts.quantization(config, ModelFormat.SAFETENSORS)


# Qwen2.5-32B-Instruct-AWQ as the hub counts it: 4-bit weights packed 8 per int32, one
# fp16 scale per 128 weights. Its real size is 32,763,876,352 parameters.
AWQ_32B = {"I32": 3_931_176_960, "F16": 1_802_048_512}
AWQ_CONFIG = q(quant_method="awq", bits=4, group_size=128)


@pytest.mark.parametrize(
    ("by_dtype", "quant", "config", "expected"),
    [
        ({"BF16": 7_615_616_512}, Quantization.NONE, None, 7_615_616_512),
        (AWQ_32B, Quantization.AWQ, AWQ_CONFIG, 32_763_876_352),
        ({"I32": 800, "F16": 100}, Quantization.GPTQ, q(bits=4, group_size=-1), 6_500),
        ({"U8": 1_000, "BF16": 10}, Quantization.BITSANDBYTES, q(load_in_4bit=True), 2_010),
        ({"I8": 1_000, "BF16": 10}, Quantization.BITSANDBYTES, q(load_in_8bit=True), 1_010),
        (None, Quantization.NONE, None, None),
    ],
    ids=["bf16", "awq-unpacked", "gptq-ungrouped", "bnb-4bit", "bnb-8bit", "no-safetensors"],
)
def test_parameter_count(
    by_dtype: dict[str, int] | None,
    quant: Quantization,
    config: dict[str, Any] | None,
    expected: int | None,
) -> None:
    assert hub_facts.parameter_count(by_dtype, quant, config) == expected


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (q(quant_method="awq", bits=4.0, group_size=128.0), 32_763_876_352),
        (q(quant_method="awq", w_bit=4, q_group_size=128), 32_763_876_352),
        (q(quant_method="awq", bits=4, group_size=0), 33_251_464_192),  # 0: ungrouped
    ],
    ids=["integral-floats", "autoawq-keys", "group-zero-is-ungrouped"],
)
def test_parameter_count_takes_every_spelling_of_a_setting(
    config: dict[str, Any], expected: int
) -> None:
    assert hub_facts.parameter_count(AWQ_32B, Quantization.AWQ, config) == expected


INF = float("inf")

# (id, per-dtype counts, config, what the message names). Each used to crash the lookup
# (ZeroDivisionError, ValueError, OverflowError) or to give an absurd count that passes
# any class's maxParameterCount (bits 64: 16x smaller; bits -4: negative).
INVALID_COUNTS = [
    ("bits-half", AWQ_32B, q(bits=0.5, group_size=128), "quantization_config.bits 0.5"),
    ("bits-word", AWQ_32B, q(bits="four", group_size=128), "quantization_config.bits 'four'"),
    ("bits-true", AWQ_32B, q(bits=True), "quantization_config.bits True"),
    ("bits-64", AWQ_32B, q(bits=64, group_size=128), "quantization_config.bits 64"),
    ("bits-negative", AWQ_32B, q(bits=-4, group_size=128), "quantization_config.bits -4"),
    ("w_bit-16", AWQ_32B, q(w_bit=16), "quantization_config.w_bit 16"),
    ("group-infinite", AWQ_32B, q(bits=4, group_size=INF), "quantization_config.group_size inf"),
    ("group-nan", AWQ_32B, q(bits=4, group_size=float("nan")),
     "quantization_config.group_size nan"),
    ("group-negative", AWQ_32B, q(bits=4, group_size=-4), "quantization_config.group_size -4"),
    ("group-huge", AWQ_32B, q(bits=4, group_size=2**40), "quantization_config.group_size"),
    ("count-negative", {"BF16": -7}, None, "safetensors.parameters['BF16'] -7"),
    ("count-word", {"BF16": "7B"}, None, "safetensors.parameters['BF16'] '7B'"),
    ("count-float", {"BF16": 1.5}, None, "safetensors.parameters['BF16'] 1.5"),
    ("count-beyond-any-model", {"BF16": 10**16}, None, "safetensors.parameters['BF16']"),
    ("counts-add-up-to-zero", {"BF16": 0}, None, "add up to 0 parameters"),
    ("counts-cancel-out", {"BF16": 10, "F32": -10}, None, "safetensors.parameters['F32']"),
    ("counts-not-an-object", ["BF16"], None, "safetensors.parameters ['BF16']"),
    ("dtype-not-a-name", {7: 10}, None, "safetensors.parameters[7]"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("by_dtype", "config", "names"),
    [row[1:] for row in INVALID_COUNTS],
    ids=[row[0] for row in INVALID_COUNTS],
)
def test_a_count_no_rule_can_use_is_an_invalid_value_naming_the_field(
    by_dtype: Any, config: dict[str, Any] | None, names: str
) -> None:
    quant = Quantization.AWQ if config else Quantization.NONE
    with pytest.raises(hub_facts.InvalidValue) as invalid:
        hub_facts.parameter_count(by_dtype, quant, config)
    assert names in str(invalid.value)


@pytest.mark.parametrize(
    ("gguf", "names"),
    [
        ({"total": -1}, "gguf.total -1"),
        ({"total": 0}, "gguf.total 0"),
        ({"total": "7B"}, "gguf.total '7B'"),
        ({"total": 10**16}, "gguf.total"),
        ({"total": 1, "context_length": -4096}, "gguf.context_length -4096"),
        ({"total": 1, "context_length": 0.5}, "gguf.context_length 0.5"),
    ],
    ids=["negative", "zero", "word", "beyond-any-model", "negative-window", "fraction-window"],
)
def test_gguf_counts_no_rule_can_use_are_invalid_values(gguf: dict[str, Any], names: str) -> None:
    with pytest.raises(hub_facts.InvalidValue) as invalid:
        hub_facts.gguf_parameter_count(gguf)
        hub_facts.gguf_context_window(gguf)
    assert names in str(invalid.value)


def test_gguf_counts_and_weight_sizes_that_are_fine() -> None:
    assert hub_facts.gguf_parameter_count({"total": 7_615_616_512}) == 7_615_616_512
    assert hub_facts.gguf_parameter_count({}) is None
    assert hub_facts.gguf_context_window({"context_length": 32768}) == 32768
    assert hub_facts.weights_bytes(["a", "b"], {"a": 1, "b": 2}) == 3
    assert hub_facts.weights_bytes(["a", "b"], {"a": 1}) is None  # a size unknown
    assert hub_facts.weights_bytes([], {}) is None
    with pytest.raises(hub_facts.InvalidValue, match="size of 'a' -1"):
        hub_facts.weights_bytes(["a"], {"a": -1})
    with pytest.raises(hub_facts.InvalidValue, match="add up beyond"):
        hub_facts.weights_bytes(["a", "b"], {"a": 2**62, "b": 2**62})


GGUF_REPO = [
    "qwen2.5-7b-instruct-q2_k.gguf",
    "qwen2.5-7b-instruct-q4_k_m-00002-of-00002.gguf",
    "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf",
    "qwen2.5-7b-instruct-q8_0-00001-of-00003.gguf",
    "README.md",
]


@pytest.mark.parametrize(
    ("files", "variant", "parts"),
    [
        (GGUF_REPO, "qwen2.5-7b-instruct-q4_k_m", 2),
        ([f for f in GGUF_REPO if "q4_k_m" not in f], "qwen2.5-7b-instruct-q2_k", 1),
        (["model-Q5_K_M.gguf"], "model-Q5_K_M", 1),
        (
            ["nanollava-text-model-f16.gguf", "nanollava-mmproj-f16.gguf"],
            "nanollava-text-model-f16",
            1,
        ),
        (
            ["qwen2.5-omni-3b-q8_0.gguf", "mmproj-qwen2.5-omni-3b-f16.gguf"],
            "qwen2.5-omni-3b-q8_0",
            1,
        ),
    ],
    ids=[
        "prefers-q4_k_m",
        "else-fewest-files",
        "single-file",
        "projector-after",
        "projector-first",
    ],
)
def test_gguf_variant(files: list[str], variant: str, parts: int) -> None:
    picked = hub_facts.gguf_variant(files)
    assert picked is not None
    assert picked[0] == variant
    assert len(picked[1]) == parts
    assert list(picked[1]) == sorted(picked[1])


def test_weight_files_prefer_top_level_files() -> None:
    files = ["model.safetensors", "onnx/model.safetensors", "pytorch_model.bin"]
    assert hub_facts.weight_files(ModelFormat.SAFETENSORS, files) == ("model.safetensors",)
    assert hub_facts.weight_files(ModelFormat.PYTORCH, ["original/consolidated.00.pth"]) == (
        "original/consolidated.00.pth",
    )


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{%- if tools %}<tools>{{ tools | tojson }}</tools>{%- endif %}", True),
        ("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}", False),
        ("{{ custom_toolset }}", False),
        ([{"name": "default", "template": "{{ m }}"}, {"name": "tool_use", "template": "x"}], True),
        ([{"name": "default", "template": "{% if tools %}{% endif %}"}], True),
        (None, False),
    ],
    ids=["mentions-tools", "plain-chat", "word-boundary", "tool_use-entry", "listed", "none"],
)
def test_chat_template_tool_hint(template: object, expected: bool) -> None:
    assert hub_facts.chat_template_mentions_tools(template) is expected


@pytest.mark.parametrize(
    ("config", "dtype", "window"),
    [
        ({"torch_dtype": "bfloat16", "max_position_embeddings": 32768}, "bfloat16", 32768),
        ({"dtype": "float16", "n_positions": 2048}, "float16", 2048),
        ({}, None, None),
    ],
    ids=["modern", "renamed-keys", "empty"],
)
def test_dtype_and_context_window(
    config: dict[str, Any], dtype: str | None, window: int | None
) -> None:
    assert hub_facts.torch_dtype(config) == dtype
    assert hub_facts.context_window(config) == window


@pytest.mark.parametrize(
    ("files", "served"),
    [
        (GGUF_REPO, "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf"),
        (["gemma-3-4b-it-Q4_K_M.gguf", "mmproj-model-f16.gguf"], None),
        (["model.safetensors"], None),
    ],
    ids=["gguf", "multimodal", "not-gguf"],
)
def test_the_served_file_is_named_unless_llama_cpp_must_find_a_projector(
    files: list[str], served: str | None
) -> None:
    """llama.cpp finds a vision model's projector only when it chooses the file itself:
    told `--hf-file`, it loads the text model alone."""
    fmt = hub_facts.model_format(files)
    assert hub_facts.served_file(fmt, files) == served
