"""Sample inputs of render_workload shared by the rendering tests (pure and cluster)."""

from __future__ import annotations

from adapters.kubernetes.rendering import OrderRef
from adapters.kubernetes.settings import Settings
from fsm.placement.recipes import EnvVar, Recipe, ToolCalling
from fsm.values import (
    AcceleratorPolicy,
    Authentication,
    Constraints,
    EffectivePolicy,
    ExposurePolicy,
    ExposureType,
    HttpsPolicy,
    ModelFacts,
    ModelFormat,
    ModelRef,
    ModelSource,
    PlacementMode,
    Plan,
    Quantization,
    SharingMode,
    UpdateStrategy,
)

ORDER = OrderRef(
    name="support-llm", namespace="support", uid="0f6c7a8e-1111-4c3b-9d7e-a1b2c3d4e5f6"
)
# A host template, as a plain cluster's settings file or the platform's global one gives:
# without one no Ingress is made.
DOMAIN = "%s.example.com"
SETTINGS = Settings(hugging_face={"endpoint": "http://127.0.0.1:9"}, publicDomainTemplate=DOMAIN)
RECIPE = Recipe(
    name="vllm-nvidia",
    runtime="vLLM",
    image="vllm/vllm-openai:v0.9.2",
    placement_modes=(PlacementMode.WHOLE_DEVICE, PlacementMode.PARTITION),
    formats=(ModelFormat.SAFETENSORS,),
    quantizations=(Quantization.NONE, Quantization.AWQ),
    endpoint_types=("Chat",),
    tool_calling=ToolCalling(enabled=True, parser="hermes"),
    args=("--model={modelPath}", "--max-model-len=8192"),
    env=(EnvVar(name="VLLM_NO_USAGE_STATS", value="1"), EnvVar(name="HF_TOKEN", value="leak")),
    port=8000,
)
FACTS = ModelFacts(
    source=ModelSource.HUGGING_FACE,
    name="Qwen/Qwen2.5-7B-Instruct-AWQ",
    parameter_count=7_600_000_000,
    quantization=Quantization.AWQ,
    format=ModelFormat.SAFETENSORS,
)
HF_REF = ModelRef(src=ModelSource.HUGGING_FACE, name="Qwen/Qwen2.5-7B-Instruct-AWQ")
PLAN = Plan(
    device_class="gpu.nvidia.com",
    accelerator_product_name="Tesla T4",
    accelerator_memory_gib=15,
    accelerator_count=1,
    placement_mode=PlacementMode.WHOLE_DEVICE,
    sharing_mode=SharingMode.DEDICATED,
    recipe="vllm-nvidia",
    cpu="4",
    memory="12Gi",
    model_volume="9Gi",
    tool_calling_supported=True,
    devices=("gpu.nvidia.com/node1/gpu-0",),
)


def policy(
    exposure: ExposureType = ExposureType.EXTERNAL,
    auth: Authentication = Authentication.TOKEN,
    https: HttpsPolicy | None = None,
    min_replicas: int = 1,
    max_replicas: int = 1,
    priority: str | None = None,
    strategy: UpdateStrategy = UpdateStrategy.ROLLING_UPDATE,
) -> EffectivePolicy:
    return EffectivePolicy(
        class_name="llm",
        model_policy=None,
        accelerator=AcceleratorPolicy(),
        exposure=ExposurePolicy(type=exposure, authentication=auth, https=https),
        constraints=Constraints(
            min_replicas=min_replicas, max_replicas=max_replicas, priority_class_name=priority
        ),
        update_strategy=strategy,
    )
