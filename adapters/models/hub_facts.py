"""Pure rules that turn what a HuggingFace hub publishes into the core's model facts.

Kept apart from the HTTP code in `huggingface.py` so each rule is a table test: the
pipeline tag and tags decide the endpoint types, the file list decides the format,
`config.json`'s `quantization_config` decides the quantization, the per-dtype safetensors
counts (unpacked for packed 4-bit formats) decide the parameter count, and the chat
template hints at tool calling. docs/model-sources.md states the same rules for users.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from adapters.models.lookup import short_name
from fsm.values import INT64_MAX, EndpointType, ModelFormat, Quantization

__all__ = [
    "MAX_PARAMETER_COUNT",
    "InvalidValue",
    "UnknownQuantization",
    "chat_template_mentions_tools",
    "context_window",
    "endpoint_types",
    "gguf_context_window",
    "gguf_parameter_count",
    "gguf_variant",
    "model_format",
    "parameter_count",
    "quantization",
    "torch_dtype",
    "weight_files",
    "weights_bytes",
]

_CHAT_TASKS = frozenset({"text-generation", "conversational", "image-text-to-text"})
_EMBEDDING_TASKS = frozenset({"feature-extraction", "sentence-similarity"})
_RERANK_TASKS = frozenset({"text-ranking"})
_RERANK_MARKS = ("rerank", "cross-encoder")

_PYTORCH_SUFFIXES = (".bin", ".pt", ".pth")
_GGUF_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
_GGUF_PREFERRED = "q4_k_m"
_TOOLS_WORD = re.compile(r"\btools\b")

# Bit widths AWQ and GPTQ pack into int32 words (AWQ uses 4; GPTQ 2, 3, 4 or 8).
_PACKED_BITS = (2, 3, 4, 8)
# A group of weights sharing one scale: -1 (or 0) is one group per row.
_MAX_GROUP_SIZE = 1 << 20
# No model comes near it (the largest published have about 2e12 parameters): a count
# beyond it is a hub's mistake, and would pass any class's maxParameterCount unread.
MAX_PARAMETER_COUNT = 10**15


class UnknownQuantization(ValueError):
    """config.json names a quantization method the platform has no recipes for."""


class InvalidValue(ValueError):
    """A value the hub published that no rule can use (of the wrong type, or absurd);
    the message names the field and where it was read."""


def endpoint_types(
    pipeline_tag: str | None, tags: Iterable[str], repo_id: str
) -> tuple[EndpointType, ...]:
    """The inference contracts a model offers, judged from its task tag and tags.

    Rerankers are published as `text-classification` (or, lately, `text-ranking`); only a
    reranker/cross-encoder mark tells them from ordinary classifiers, which serve none of
    the contracts.
    """
    tag_set = {t.lower() for t in tags}
    task = (pipeline_tag or "").lower()
    if task in _RERANK_TASKS:
        return (EndpointType.RERANK,)
    if task == "text-classification":
        marked = [repo_id.lower(), *tag_set]
        if any(mark in text for text in marked for mark in _RERANK_MARKS):
            return (EndpointType.RERANK,)
        return ()
    if task in _EMBEDDING_TASKS:
        return (EndpointType.EMBEDDINGS,)
    if task in _CHAT_TASKS or (not task and "conversational" in tag_set):
        return (EndpointType.CHAT,)
    if not task and tag_set & _EMBEDDING_TASKS:
        return (EndpointType.EMBEDDINGS,)
    return ()


def model_format(filenames: Iterable[str]) -> ModelFormat:
    """Safetensors wins over GGUF over PyTorch pickles when a repo carries several."""
    names = [n.lower() for n in filenames]
    if "model_index.json" in names:
        return ModelFormat.DIFFUSERS
    if any(n.endswith(".safetensors") for n in names):
        return ModelFormat.SAFETENSORS
    if any(n.endswith(".gguf") for n in names):
        return ModelFormat.GGUF
    if any(n.endswith(_PYTORCH_SUFFIXES) for n in names):
        return ModelFormat.PYTORCH
    return ModelFormat.UNKNOWN


def gguf_variant(filenames: Iterable[str]) -> tuple[str, tuple[str, ...]] | None:
    """The GGUF variant the platform serves from a repo holding several, and its files.

    One repo often carries every quantization level (q2_k ... fp16), some split into
    `-0000N-of-0000M` parts. The platform serves Q4_K_M when present, the usual balance of
    size and quality, else the smallest variant by file count then name. A multimodal
    model's projector (`mmproj-*.gguf`) is no variant: it loads beside the model, never as
    it, and named first (it sorts before most names) it was taken for the variant.
    """
    variants: dict[str, list[str]] = {}
    for name in filenames:
        if not name.lower().endswith(".gguf") or "/" in name or _projector(name):
            continue
        stem = _GGUF_SPLIT.sub("", name)
        stem = stem.removesuffix(".gguf").removesuffix(".GGUF")
        variants.setdefault(stem, []).append(name)
    if not variants:
        return None
    preferred = [v for v in variants if v.lower().endswith(_GGUF_PREFERRED)]
    chosen = preferred[0] if preferred else min(variants, key=lambda v: (len(variants[v]), v))
    return chosen, tuple(sorted(variants[chosen]))


def _projector(filename: str) -> bool:
    """A multimodal model's projector (`mmproj-*.gguf`), which loads beside the model."""
    return "mmproj" in filename.lower()


def served_file(fmt: ModelFormat, filenames: Sequence[str]) -> str | None:
    """The one file a GGUF runtime is told to open: the served variant's first part. None
    for a repository with a multimodal projector: llama.cpp finds the projector only when
    it chooses the file itself (`-hf` without `--hf-file`), and a vision model loaded
    without it answers text alone."""
    if fmt is not ModelFormat.GGUF or any(_projector(name) for name in filenames):
        return None
    files = weight_files(fmt, filenames)
    return files[0] if files else None


def weight_files(fmt: ModelFormat, filenames: Sequence[str]) -> tuple[str, ...]:
    """The files a runtime loads for this format (what the model volume must hold)."""
    if fmt is ModelFormat.GGUF:
        picked = gguf_variant(filenames)
        return picked[1] if picked else ()
    if fmt is ModelFormat.SAFETENSORS:
        suffixes: tuple[str, ...] = (".safetensors",)
    elif fmt is ModelFormat.PYTORCH:
        suffixes = _PYTORCH_SUFFIXES
    else:
        return ()
    matching = [n for n in filenames if n.lower().endswith(suffixes)]
    # Top-level weights are the model; subfolders hold other exports (original/, onnx/).
    top = [n for n in matching if "/" not in n]
    return tuple(top or matching)


def quantization(config: Mapping[str, Any] | None, fmt: ModelFormat) -> Quantization:
    """Map `quantization_config` to the platform's quantization names.

    Raises UnknownQuantization for a method the platform cannot serve, rather than
    calling the model unquantized and letting a recipe fail at load time.
    """
    if fmt is ModelFormat.GGUF:
        return Quantization.GGUF
    quant = (config or {}).get("quantization_config")
    if not quant:
        return Quantization.NONE
    if not isinstance(quant, Mapping):
        raise UnknownQuantization("quantization_config is not an object")
    method = str(quant.get("quant_method", "")).lower()
    if method == "awq":
        return Quantization.AWQ
    if method == "gptq":
        return Quantization.GPTQ
    if method in ("fp8", "fbgemm_fp8"):
        return Quantization.FP8
    if method == "bitsandbytes":
        return Quantization.BITSANDBYTES
    if method == "modelopt" and str(quant.get("quant_algo", "")).upper() == "FP8":
        return Quantization.FP8
    if method == "compressed-tensors" and _compressed_tensors_fp8(quant):
        return Quantization.FP8
    raise UnknownQuantization(f"quantization method {method or '(unnamed)'!r}")


def _compressed_tensors_fp8(quant: Mapping[str, Any]) -> bool:
    groups = quant.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        return False
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping):
            return False
        if weights.get("type") != "float" or weights.get("num_bits") != 8:
            return False
    return True


def parameter_count(
    by_dtype: Mapping[str, int] | None,
    quant: Quantization,
    config: Mapping[str, Any] | None,
) -> int | None:
    """The model's logical parameter count from the hub's per-dtype safetensors counts.

    The hub counts stored tensor elements. AWQ and GPTQ pack 32/bits weights into each
    int32 and add one fp16 scale per `group_size` weights, so a 32.8B AWQ model shows
    as 5.7B; undo both so class limits (maxParameterCount) compare real sizes.
    BitsAndBytes 4-bit stores two weights per uint8.

    Raises InvalidValue for a count that is no whole number from 0 up, for `bits` other
    than 2, 3, 4 or 8 and a `group_size` other than -1 or a positive whole number (each
    used to crash the lookup, or to shrink or negate the count), and for a result outside
    1..MAX_PARAMETER_COUNT.
    """
    if not by_dtype:
        return None
    if not isinstance(by_dtype, Mapping):
        raise InvalidValue(f"the info's safetensors.parameters {_clip(by_dtype)} is not an object")
    counts: dict[str, int] = {}
    for dtype, value in by_dtype.items():
        field = f"the info's safetensors.parameters[{_clip(dtype)}]"
        if not isinstance(dtype, str):
            raise InvalidValue(f"{field} is not keyed by a dtype name")
        counts[dtype.upper()] = _whole(value, field, low=0, high=MAX_PARAMETER_COUNT)
    total = sum(counts.values())
    qc = (config or {}).get("quantization_config")
    qc = qc if isinstance(qc, Mapping) else {}
    if quant in (Quantization.AWQ, Quantization.GPTQ) and counts.get("I32"):
        field, bits = _setting(qc, ("bits", "w_bit"), 4)
        if bits not in _PACKED_BITS:
            raise InvalidValue(f"{field} {bits} is not one of {', '.join(map(str, _PACKED_BITS))}")
        field, group = _setting(qc, ("group_size", "q_group_size"), -1)
        if group < -1 or group > _MAX_GROUP_SIZE:
            raise InvalidValue(
                f"{field} {group} is neither -1 nor a group of 1 to {_MAX_GROUP_SIZE} weights"
            )
        packed = counts["I32"]
        per_group = 1 / group if group > 0 else 0.0
        linear = packed * 32 / (bits * (1 + per_group))  # qweight + qzeros, unpacked
        scales = linear * per_group
        total = round(linear + (total - packed) - scales)
    elif quant is Quantization.BITSANDBYTES and qc.get("load_in_4bit") and counts.get("U8"):
        total += counts["U8"]
    if not 1 <= total <= MAX_PARAMETER_COUNT:
        raise InvalidValue(
            f"the info's safetensors.parameters add up to {total} parameters, not 1 to "
            f"{MAX_PARAMETER_COUNT:.0e}"
        )
    return total


def _setting(qc: Mapping[str, Any], keys: tuple[str, ...], default: int) -> tuple[str, int]:
    """The first of `keys` present in `quantization_config`, named, as a whole number."""
    for key in keys:
        value = qc.get(key)
        field = f"config.json's quantization_config.{key}"
        if value is not None:
            return field, _whole(value, field)
    return f"config.json's quantization_config.{keys[0]}", default


def _whole(value: object, field: str, *, low: int | None = None, high: int | None = None) -> int:
    """`value` as a whole number (a float only when integral: 4.0, not 0.5 or 1e400),
    within [low, high]; else InvalidValue naming `field`."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidValue(f"{field} {_clip(value)} is not a whole number")
    if (low is not None and value < low) or (high is not None and value > high):
        raise InvalidValue(f"{field} {_clip(value)} is not from {low} to {high}")
    return value


def gguf_parameter_count(gguf: Mapping[str, Any]) -> int | None:
    """The hub's `gguf.total`: a count from 1 to MAX_PARAMETER_COUNT, when present."""
    value = gguf.get("total")
    if value is None:
        return None
    return _whole(value, "the info's gguf.total", low=1, high=MAX_PARAMETER_COUNT)


def gguf_context_window(gguf: Mapping[str, Any]) -> int | None:
    """The hub's `gguf.context_length`: a positive number of tokens, when present."""
    value = gguf.get("context_length")
    if value is None:
        return None
    return _whole(value, "the info's gguf.context_length", low=1, high=INT64_MAX)


def weights_bytes(weights: Sequence[str], sizes: Mapping[str, object]) -> int | None:
    """The bytes of the weight files, None when any size is unknown (or there are none)."""
    if not weights or any(sizes.get(w) is None for w in weights):
        return None
    total = sum(
        _whole(sizes[w], f"the info's size of {_clip(w)}", low=0, high=INT64_MAX) for w in weights
    )
    if total > INT64_MAX:
        raise InvalidValue(f"the info's sizes of the weight files add up beyond {INT64_MAX}")
    return total


def _clip(value: object, limit: int = 60) -> str:
    """A value's repr short enough for a condition message (never a whole answer)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def torch_dtype(config: Mapping[str, Any] | None) -> str | None:
    # transformers >= 4.56 writes `dtype`; older configs `torch_dtype`.
    value = (config or {}).get("torch_dtype") or (config or {}).get("dtype")
    return short_name(value)


def context_window(config: Mapping[str, Any] | None) -> int | None:
    for key in ("max_position_embeddings", "max_seq_len", "seq_length", "n_positions"):
        value = (config or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def chat_template_mentions_tools(template: object) -> bool:
    """True when a chat template renders a `tools` list (or ships a tool_use template).

    A hint, not a proof: it says the model was trained to read tool schemas, which is
    what a recipe needs before turning tool calling on.
    """
    if isinstance(template, str):
        return bool(_TOOLS_WORD.search(template))
    if isinstance(template, list):
        for entry in template:
            if isinstance(entry, Mapping):
                if str(entry.get("name", "")).lower() == "tool_use":
                    return True
                if chat_template_mentions_tools(entry.get("template")):
                    return True
    return False
