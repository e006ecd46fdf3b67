"""How much accelerator memory, CPU, host memory and disk a model needs: the formulas.

The planner asks "does this model fit on `n` devices of `m` bytes each?" and reports its
estimates in `status.resolved`. Every number here is documented in docs/planner.md; keep
the two in step. All arithmetic is exact (Fraction), so a fit never flips on rounding.

    weights W   = weights_bytes, if the source published it, else
                  parameter_count x bytes per parameter (by quantization, else by dtype)
    KV cache K  = max(2 GiB, W / 5)          room for the context of concurrent requests
    runtime R   = 1 GiB per device           CUDA context, activations, graphs
    fits(n, m)  : W + K + n*R <= n * m * U   U = 0.9, the runtime's memory utilisation

    cpu         = 2 + 2n cores for whole devices, 2 for a partition or a shared device
    memory      = max(8 GiB, W + 6 GiB)      host RAM: the loader maps the weights
    modelVolume = W * 5/4 + 2 GiB            weights, tokenizer, one partial download
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from fsm.quantity import GIB, format_count, format_gib
from fsm.values import ModelFacts, ModelFormat, Quantization

__all__ = [
    "GPU_MEMORY_UTILIZATION",
    "Estimate",
    "bytes_per_parameter",
    "estimate",
    "fits",
    "memory_need",
    "parameter_count",
    "weights_bytes",
]

GPU_MEMORY_UTILIZATION = Fraction(9, 10)
KV_CACHE_FLOOR = 2 * GIB
KV_CACHE_SHARE = Fraction(1, 5)
RUNTIME_PER_DEVICE = 1 * GIB
HOST_MEMORY_FLOOR = 8 * GIB
HOST_MEMORY_HEADROOM = 6 * GIB
VOLUME_FACTOR = Fraction(5, 4)
VOLUME_HEADROOM = 2 * GIB
UNKNOWN_VOLUME = 50 * GIB  # a model of unknown size gets a volume that holds a 13B in bf16

# 4-bit schemes keep scales, zero points and unquantized embeddings: ~4.8 bits a parameter.
_BY_QUANTIZATION: dict[Quantization, Fraction] = {
    Quantization.AWQ: Fraction(3, 5),
    Quantization.GPTQ: Fraction(3, 5),
    Quantization.BITSANDBYTES: Fraction(3, 5),
    Quantization.GGUF: Fraction(3, 5),
    Quantization.FP8: Fraction(1),
}
_BY_DTYPE: dict[str, Fraction] = {
    "float32": Fraction(4),
    "fp32": Fraction(4),
    "float": Fraction(4),
    "float16": Fraction(2),
    "fp16": Fraction(2),
    "half": Fraction(2),
    "bfloat16": Fraction(2),
    "bf16": Fraction(2),
    "float8_e4m3fn": Fraction(1),
    "float8_e5m2": Fraction(1),
    "fp8": Fraction(1),
    "int8": Fraction(1),
    "uint8": Fraction(1),
    "int4": Fraction(1, 2),
}
_DEFAULT_BYTES = Fraction(2)  # today's checkpoints are bf16 unless they say otherwise


def bytes_per_parameter(facts: ModelFacts) -> Fraction:
    """By quantization first (it decides the weights' width), then by torch dtype."""
    if facts.quantization in _BY_QUANTIZATION:
        return _BY_QUANTIZATION[facts.quantization]
    if facts.format is ModelFormat.GGUF:
        return _BY_QUANTIZATION[Quantization.GGUF]
    if facts.dtype is not None:
        return _BY_DTYPE.get(facts.dtype.lower().removeprefix("torch."), _DEFAULT_BYTES)
    return _DEFAULT_BYTES


def weights_bytes(facts: ModelFacts) -> Fraction | None:
    """The weights' size: published bytes win over a count times a width; None: unknown."""
    if facts.weights_bytes is not None and facts.weights_bytes > 0:
        return Fraction(facts.weights_bytes)
    if facts.parameter_count is not None and facts.parameter_count > 0:
        return facts.parameter_count * bytes_per_parameter(facts)
    return None


def parameter_count(facts: ModelFacts) -> int | None:
    """Published count, else the weights' size over the width; None: unknown. A count or
    a size of 0 is unknown, as `weights_bytes` takes it: no model has no parameters."""
    if facts.parameter_count is not None and facts.parameter_count > 0:
        return facts.parameter_count
    if facts.weights_bytes is not None and facts.weights_bytes > 0:
        return math.floor(facts.weights_bytes / bytes_per_parameter(facts))
    return None


def memory_need(facts: ModelFacts, count: int) -> Fraction:
    """Accelerator memory the model needs across `count` devices, runtime included.

    A model of unknown size needs only the fixed parts: the runtime then fails loudly
    if it does not fit, which is better than refusing a model that may well fit.
    """
    weights = weights_bytes(facts) or Fraction(0)
    kv_cache = max(Fraction(KV_CACHE_FLOOR), weights * KV_CACHE_SHARE)
    return weights + kv_cache + count * RUNTIME_PER_DEVICE


def fits(facts: ModelFacts, *, count: int, device_memory: Fraction) -> bool:
    """Whether `count` devices (or shares) of `device_memory` bytes each hold the model."""
    return memory_need(facts, count) <= count * device_memory * GPU_MEMORY_UTILIZATION


@dataclass(frozen=True, slots=True)
class Estimate:
    """The quantities the plan reports: `status.resolved.cpu`, `memory`, `modelVolume`."""

    cpu: str
    memory: str
    model_volume: str


def estimate(facts: ModelFacts, *, count: int, whole_devices: bool) -> Estimate:
    weights = weights_bytes(facts)
    cpu = 2 + 2 * count if whole_devices else 2
    host = max(Fraction(HOST_MEMORY_FLOOR), (weights or 0) + HOST_MEMORY_HEADROOM)
    volume = (
        weights * VOLUME_FACTOR + VOLUME_HEADROOM
        if weights is not None
        else Fraction(UNKNOWN_VOLUME)
    )
    return Estimate(cpu=format_count(cpu), memory=format_gib(host), model_volume=format_gib(volume))
