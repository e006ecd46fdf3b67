"""Launch recipes: how a runtime is started for a kind of hardware and model.

A recipe is the admin's record (cluster-scoped `LaunchRecipe`, `launchrecipes.ai.deckhouse.io`;
the module ships a default set in deploy/recipes/). The planner picks one for the hardware
it chose and the model it was given; nothing in an order can change it. This module is the
record's schema (the CRD is written from it), its parser, the choice, and the rendering of
its arguments for the workload.

    spec:
      runtime: vLLM                      # free text; vLLM and llama.cpp get tool-calling flags
      image: vllm/vllm-openai:v0.9.2
      placementModes: [WholeDevice]      # WholeDevice | Partition
      productNames: [NVIDIA, Tesla]      # substrings of the product name; empty = any
      formats: [Safetensors]             # Safetensors | GGUF | ...
      quantizations: ["None", AWQ]       # None | AWQ | GPTQ | FP8 | BitsAndBytes | GGUF
      endpointTypes: [Chat]              # Chat | Embeddings | Rerank
      toolCalling: {enabled: true, parser: hermes}
      args: ["--model={modelPath}", "--tensor-parallel-size={tensorParallelSize}"]
      env: [{name: VLLM_NO_USAGE_STATS, value: "1"}]
      port: 8000
      preference: 10                     # higher wins when several fit
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from fsm.placement.sizing import GPU_MEMORY_UTILIZATION
from fsm.reasons import Reason
from fsm.values import EndpointType, Frozen, ModelFormat, PlacementMode, Quantization

__all__ = [
    "API_KEY_ENV",
    "PLACEHOLDERS",
    "EnvVar",
    "Recipe",
    "RecipeChoice",
    "RecipeError",
    "ToolCalling",
    "choose_recipe",
    "parse_recipe",
    "parse_recipes",
    "render_args",
]

# What `args` may refer to; render_args fills them in for the chosen plan.
PLACEHOLDERS = frozenset(
    {"modelPath", "servedModelName", "port", "tensorParallelSize", "gpuMemoryUtilization"}
)
# Flags that turn tool calling on, per runtime; other runtimes spell them in `args`.
_TOOL_FLAGS: dict[str, tuple[str, ...]] = {
    "vllm": ("--enable-auto-tool-choice", "--tool-call-parser={parser}"),
    "llama.cpp": ("--jinja",),
}


# The variable each runtime reads its API key from. A runtime not named here is given no
# key: under Token authentication it would answer anyone, so no plan under such a class
# picks it (choose_recipe).
API_KEY_ENV: dict[str, str] = {"vllm": "VLLM_API_KEY", "llama.cpp": "LLAMA_API_KEY"}


class RecipeError(ValueError):
    """A LaunchRecipe object that cannot be used; the message says which field."""


class ToolCalling(Frozen):
    enabled: bool = False
    parser: str | None = None


class EnvVar(Frozen):
    name: str = Field(min_length=1)
    value: str = ""


class Recipe(Frozen):
    """LaunchRecipe.spec plus the object's name (`status.resolved.recipe`)."""

    name: str = Field(min_length=1)
    runtime: str = Field(min_length=1)
    image: str = Field(min_length=1)
    placement_modes: tuple[PlacementMode, ...] = Field(min_length=1)
    product_names: tuple[str, ...] = ()
    formats: tuple[ModelFormat, ...] = Field(min_length=1)
    quantizations: tuple[Quantization, ...] = Field(min_length=1)
    endpoint_types: tuple[EndpointType, ...] = Field(min_length=1)
    tool_calling: ToolCalling = ToolCalling()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    port: int = Field(default=8000, ge=1, le=65535)
    preference: int = 0

    @field_validator("args")
    @classmethod
    def _known_placeholders(cls, args: tuple[str, ...]) -> tuple[str, ...]:
        for arg in args:
            for _, field_name, format_spec, conversion in string.Formatter().parse(arg):
                if field_name is not None and field_name not in PLACEHOLDERS:
                    known = ", ".join(sorted(PLACEHOLDERS))
                    raise ValueError(f"arg {arg!r} names {{{field_name}}}; known: {known}")
                # A conversion or format spec is a Python formatting feature, not a value:
                # `{port:d}` fails at render time and `{modelPath:>99999999}` asks for
                # memory, both in every pass of every order the recipe serves.
                if format_spec or conversion:
                    raise ValueError(
                        f"arg {arg!r}: a placeholder is {{name}} alone, "
                        f"without a conversion or format spec"
                    )
        return args

    @model_validator(mode="after")
    def _parser_when_needed(self) -> Recipe:
        if (
            self.tool_calling.enabled
            and self.runtime.lower() == "vllm"
            and not self.tool_calling.parser
        ):
            raise ValueError("toolCalling.enabled on vLLM needs toolCalling.parser (e.g. hermes)")
        return self

    @property
    def api_key_env(self) -> str | None:
        """Where the runtime reads its API key; None: it cannot be given one."""
        return API_KEY_ENV.get(self.runtime.lower())

    @property
    def keyless(self) -> str | None:
        """Why the recipe cannot run under Token authentication; None when it can."""
        if self.api_key_env is not None:
            return None
        return (
            f"launch recipe {self.name!r} runs {self.runtime}, which cannot be given the API "
            "key Token authentication needs"
        )

    def fits_hardware(self, placement: PlacementMode, product_name: str) -> bool:
        if placement not in self.placement_modes:
            return False
        product = product_name.lower()
        return not self.product_names or any(p.lower() in product for p in self.product_names)


def parse_recipe(obj: Mapping[str, Any]) -> Recipe:
    """A LaunchRecipe object (as the API returns it, or as a YAML file holds it)."""
    name = (obj.get("metadata") or {}).get("name")
    try:
        return Recipe.model_validate({**(obj.get("spec") or {}), "name": name})
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in err.errors()
        )
        raise RecipeError(f"LaunchRecipe {name!r}: {problems}") from err


def parse_recipes(objs: Iterable[Mapping[str, Any]]) -> tuple[tuple[Recipe, ...], tuple[str, ...]]:
    """Every usable recipe, sorted by name, and a message per recipe that was skipped."""
    recipes: list[Recipe] = []
    problems: list[str] = []
    for obj in objs:
        try:
            recipes.append(parse_recipe(obj))
        except RecipeError as err:
            problems.append(str(err))
    return tuple(sorted(recipes, key=lambda r: r.name)), tuple(problems)


@dataclass(frozen=True, slots=True)
class RecipeChoice:
    """The recipe for one piece of hardware, or the reason there is none."""

    recipe: Recipe | None
    reason: Reason | None = None
    detail: str = ""


def choose_recipe(
    recipes: Sequence[Recipe],
    *,
    placement: PlacementMode,
    product_name: str,
    model_format: ModelFormat,
    quantization: Quantization,
    endpoint_type: EndpointType,
    api_key: bool = False,
) -> RecipeChoice:
    """Hardware, format and endpoint type first; only then the quantization, so that a
    model whose quantization no recipe takes is told so (QuantizationMismatch) rather
    than that nothing runs here at all (NoCompatibleRuntimeAvailable).

    `api_key`: the class asks for Token authentication, so only a runtime that can be
    given the key will do (`API_KEY_ENV`); another one would serve anyone."""
    hardware = [r for r in recipes if r.fits_hardware(placement, product_name)]
    if not hardware:
        return RecipeChoice(
            None,
            Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE,
            f"no recipe for {placement} on {product_name or 'this device'}",
        )
    runnable = [
        r for r in hardware if model_format in r.formats and endpoint_type in r.endpoint_types
    ]
    if not runnable:
        return RecipeChoice(
            None,
            Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE,
            f"no recipe on {product_name or 'this device'} serves {model_format} models as "
            f"{endpoint_type} (recipes for this hardware: {', '.join(r.name for r in hardware)})",
        )
    if api_key:
        keyless = [r for r in runnable if r.api_key_env is None]
        runnable = [r for r in runnable if r.api_key_env is not None]
        if not runnable:
            return RecipeChoice(
                None,
                Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE,
                "the class asks for Token authentication, and no recipe that fits can be "
                f"given an API key (runtimes {', '.join(sorted(API_KEY_ENV))} can): "
                + ", ".join(f"{r.name} ({r.runtime})" for r in keyless),
            )
    taking = [r for r in runnable if quantization in r.quantizations]
    if not taking:
        offered = sorted({q.value for r in runnable for q in r.quantizations})
        return RecipeChoice(
            None,
            Reason.QUANTIZATION_MISMATCH,
            f"recipes for {model_format} {endpoint_type} on {product_name or 'this device'} "
            f"take {', '.join(offered)}, not {quantization}",
        )
    best = min(taking, key=lambda r: (-r.preference, r.name))
    return RecipeChoice(best)


def render_args(
    recipe: Recipe,
    *,
    model_path: str,
    served_model_name: str,
    tensor_parallel_size: int,
    gpu_memory_utilization: str = str(float(GPU_MEMORY_UTILIZATION)),
) -> tuple[str, ...]:
    """The runtime's arguments for a plan: placeholders filled, tool-calling flags added.

    The utilisation defaults to the one the planner's memory formula assumed."""
    values = {
        "modelPath": model_path,
        "servedModelName": served_model_name,
        "port": str(recipe.port),
        "tensorParallelSize": str(tensor_parallel_size),
        "gpuMemoryUtilization": gpu_memory_utilization,
    }
    args = [arg.format_map(values) for arg in recipe.args]
    if recipe.tool_calling.enabled:
        parser = recipe.tool_calling.parser or ""
        flags = _TOOL_FLAGS.get(recipe.runtime.lower(), ())
        present = {arg.split("=")[0] for arg in args}
        args.extend(
            flag.format(parser=parser) for flag in flags if flag.split("=")[0] not in present
        )
    return tuple(args)
