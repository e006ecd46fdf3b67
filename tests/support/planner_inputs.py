"""Readable builders for the policy and planner tests: DRA objects, models, seed classes.

Every builder returns the plain dict the API server would (shapes from DRA.md), so the
tests exercise the same parsing the controller does. The seed classes are the four of
the examples page (seeds/001_*.txt), verbatim.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from fsm.placement.capacity import ORDER_UID_LABEL, Snapshot
from fsm.placement.inventory import parse_snapshot
from fsm.placement.recipes import Recipe, parse_recipes
from fsm.values import (
    ClassSpec,
    EndpointType,
    ModelFacts,
    ModelFormat,
    ModelSource,
    Quantization,
)

__all__ = [
    "A100",
    "BGE_M3",
    "GGUF_05B",
    "GPU_CLASS",
    "LLAMA_8B_FP8",
    "LLAMA_70B",
    "MIG_CLASS",
    "QWEN_05B",
    "QWEN_7B",
    "QWEN_14B",
    "QWEN_32B_AWQ",
    "SDXL",
    "SEED_CLASSES",
    "T4",
    "T4_MPS",
    "T4_ONLY",
    "Obj",
    "claim",
    "classes",
    "cluster",
    "default_recipes",
    "device_class",
    "gpu",
    "mig",
    "model",
    "priority_class",
    "resource_slice",
    "seed_class",
    "snapshot",
]

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
NVIDIA = "gpu.nvidia.com"

GPU_CLASS = f"device.driver == '{NVIDIA}' && device.attributes['{NVIDIA}'].type == 'gpu'"
MIG_CLASS = f"device.driver == '{NVIDIA}' && device.attributes['{NVIDIA}'].type == 'mig'"


def device_class(
    name: str,
    *selectors: str,
    placement: str | None = None,
    sharing: str | None = None,
    share_percent: str | None = None,
    generation: int = 1,
) -> Obj:
    labels = {}
    if placement:
        labels["ai.deckhouse.io/placement"] = placement
    if sharing:
        labels["ai.deckhouse.io/sharing"] = sharing
    if share_percent:
        labels["ai.deckhouse.io/share-percent"] = share_percent
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "generation": generation, "labels": labels},
        "spec": {"selectors": [{"cel": {"expression": s}} for s in selectors], "config": []},
    }


def gpu(name: str, product: str, memory: str, *, shareable: bool = False, **extra: Any) -> Obj:
    attributes: dict[str, Any] = {
        "type": {"string": "gpu"},
        "productName": {"string": product},
        "uuid": {"string": f"GPU-{name}"},
    }
    attributes.update({k: v for k, v in extra.items()})
    device: Obj = {
        "name": name,
        "attributes": attributes,
        "capacity": {"memory": {"value": memory}},
    }
    if shareable:
        device["allowMultipleAllocations"] = True
    return device


def mig(name: str, product: str, profile: str, memory: str) -> Obj:
    return {
        "name": name,
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile},
            "productName": {"string": product},
        },
        "capacity": {"memory": {"value": memory}, "multiprocessors": {"value": "14"}},
    }


def resource_slice(
    node: str, *devices: Obj, driver: str = NVIDIA, generation: int = 1, count: int = 1
) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}-x7k9m"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            "devices": list(devices),
        },
    }


def claim(
    name: str,
    node: str,
    *devices: str,
    holder: str | None = None,
    namespace: str = "team",
    mps_percent: int | None = None,
    driver: str = NVIDIA,
) -> Obj:
    spec: Obj = {"devices": {"requests": [{"name": "gpu"}], "config": []}}
    if mps_percent is not None:
        spec["devices"]["config"] = [
            {
                "requests": ["gpu"],
                "opaque": {
                    "driver": driver,
                    "parameters": {
                        "apiVersion": "resource.nvidia.com/v1beta1",
                        "kind": "GpuConfig",
                        "sharing": {
                            "strategy": "MPS",
                            "mpsConfig": {"defaultActiveThreadPercentage": mps_percent},
                        },
                    },
                },
            }
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {ORDER_UID_LABEL: holder} if holder else {},
        },
        "spec": spec,
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": driver, "pool": node, "device": d}
                        for d in devices
                    ]
                }
            }
        },
    }


def priority_class(name: str, value: int, *, default: bool = False) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }


SEED_PRIORITY_CLASSES = (
    priority_class("inference-low", 100),
    priority_class("inference-normal", 500),
    priority_class("inference-high", 1000),
)


def snapshot(
    classes: Iterable[Obj] = (),
    slices: Iterable[Obj] = (),
    claims: Iterable[Obj] = (),
    *,
    priorities: dict[str, int] | None = None,
    priority_classes: Sequence[Obj] = SEED_PRIORITY_CLASSES,
) -> Snapshot:
    return parse_snapshot(
        classes,
        slices,
        claims,
        priority_classes=priority_classes,
        holder_priorities=priorities or {},
    )


def model(
    name: str,
    *,
    params: float | None = None,
    weights_gb: float | None = None,
    types: Sequence[EndpointType] = (EndpointType.CHAT,),
    fmt: ModelFormat = ModelFormat.SAFETENSORS,
    quant: Quantization = Quantization.NONE,
    dtype: str | None = "bfloat16",
) -> ModelFacts:
    """`params` in billions, `weights_gb` in decimal gigabytes, as model cards state them."""
    return ModelFacts(
        source=ModelSource.HUGGING_FACE,
        name=name,
        endpoint_types=tuple(types),
        format=fmt,
        quantization=quant,
        parameter_count=round(params * 1e9) if params is not None else None,
        weights_bytes=round(weights_gb * 1e9) if weights_gb is not None else None,
        dtype=dtype,
    )


# --- a realistic cluster and the models the tables use -----------------------------------

A100, T4 = "NVIDIA A100 80GB PCIe", "Tesla T4"
T4_MPS = "nvidia-t4-mps-physical"
T4_ONLY = f"{GPU_CLASS} && device.attributes['gpu.nvidia.com'].productName == '{T4}'"

# The models of the tables, with the sizes their model cards state.
QWEN_32B_AWQ = model(
    "Qwen/Qwen2.5-32B-Instruct-AWQ", params=32.8, weights_gb=19.3, quant=Quantization.AWQ
)
QWEN_7B = model("Qwen/Qwen2.5-7B-Instruct", params=7.6, weights_gb=15.2)
QWEN_05B = model("Qwen/Qwen2.5-0.5B-Instruct", params=0.49, weights_gb=0.99)
BGE_M3 = model(
    "BAAI/bge-m3", params=0.568, weights_gb=2.27, types=[EndpointType.EMBEDDINGS], dtype="float32"
)
GGUF_05B = model(
    "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
    params=0.49,
    weights_gb=0.49,
    fmt=ModelFormat.GGUF,
    quant=Quantization.GGUF,
)
QWEN_14B = model("Qwen/Qwen2.5-14B-Instruct", params=14.8, weights_gb=29.5)
LLAMA_70B = model("meta-llama/Llama-3.1-70B-Instruct", params=70.6, weights_gb=141.1)
LLAMA_8B_FP8 = model(
    "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", params=8.0, weights_gb=9.1, quant=Quantization.FP8
)
SDXL = model("stabilityai/stable-diffusion-xl-base-1.0", weights_gb=6.9, fmt=ModelFormat.DIFFUSERS)


def classes() -> list[Obj]:
    return [
        device_class("gpu.nvidia.com", GPU_CLASS),
        device_class("mig.nvidia.com", MIG_CLASS),
        device_class(
            T4_MPS, T4_ONLY, placement="WholeDevice", sharing="Shared", share_percent="50"
        ),
    ]


def cluster(*claims: Obj, priorities: dict[str, int] | None = None, t4s: int = 2) -> Snapshot:
    """One A100 node (a whole A100 and two MIG 1g.10gb slices) and one T4 node."""
    return snapshot(
        classes(),
        [
            resource_slice(
                "node-a100",
                gpu("gpu-0", A100, "80Gi"),
                mig("gpu-1-mig-1g10gb-0", A100, "1g.10gb", "9856Mi"),
                mig("gpu-1-mig-1g10gb-1", A100, "1g.10gb", "9856Mi"),
            ),
            resource_slice(
                "node-t4", *(gpu(f"gpu-{i}", T4, "16Gi", shareable=True) for i in range(t4s))
            ),
        ],
        claims,
        priorities=priorities,
    )


def default_recipes() -> tuple[Recipe, ...]:
    """The shipped LaunchRecipes, read from deploy/recipes/ as the cluster would hold them."""
    objs = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "deploy/recipes").glob("*.yaml"))]
    recipes, problems = parse_recipes(objs)
    assert not problems, problems
    return recipes


# --- the seed classes (seeds/001_*.txt), verbatim ---------------------------------------

SEED_CLASSES_YAML = """
apiVersion: ai.deckhouse.io/v1alpha1
kind: InferenceServiceClass
metadata:
  name: llm-internal
spec:
  admissionPolicy:
    allowedNamespaces:
      - support
  modelPolicy:
    allowedEndpointTypes:
      - Chat
  exposurePolicy:
    type: ClusterLocal
    authentication: None
  updatePolicy:
    strategy: RollingUpdate
---
apiVersion: ai.deckhouse.io/v1alpha1
kind: InferenceServiceClass
metadata:
  name: llm-chat-external
spec:
  admissionPolicy:
    allowedNamespaces:
      - support
      - analytics
  modelPolicy:
    allowedEndpointTypes:
      - Chat
  exposurePolicy:
    type: External
    authentication: Token
    https:
      mode: CertManager
      certManager:
        clusterIssuerName: letsencrypt
  scalingPolicy:
    minReplicas: 1
    maxReplicas: 4
  acceleratorPolicy:
    allowedSharingModes:
      - Shared
      - Dedicated
    allowedPlacementTypes:
      - WholeDevice
      - Partition
    maxAcceleratorCount: 1
  updatePolicy:
    strategy: RollingUpdate
---
apiVersion: ai.deckhouse.io/v1alpha1
kind: InferenceServiceClass
metadata:
  name: llm-strict
spec:
  admissionPolicy:
    allowedNamespaces:
      - support
  modelPolicy:
    allowedEndpointTypes:
      - Chat
    maxParameterCount: 1B
  acceleratorPolicy:
    allowedSharingModes:
      - Shared
      - Dedicated
    allowedPlacementTypes:
      - Partition
      - WholeDevice
    allowedDeviceClasses:
      - nvidia-t4-mps-physical
    maxAcceleratorCount: 1
  exposurePolicy:
    type: External
    authentication: Token
    https:
      mode: CertManager
      certManager:
        clusterIssuerName: selfsigned
  scalingPolicy:
    allowedPriorityClassNames:
      - inference-normal
    minReplicas: 1
    maxReplicas: 4
  updatePolicy:
    strategy: RollingUpdate
---
apiVersion: ai.deckhouse.io/v1alpha1
kind: InferenceServiceClass
metadata:
  name: embeddings-only
spec:
  admissionPolicy:
    allowedNamespaces:
      - analytics
  modelPolicy:
    allowedEndpointTypes:
      - Embeddings
  exposurePolicy:
    type: ClusterLocal
    authentication: None
  acceleratorPolicy:
    allowedSharingModes:
      - Shared
    allowedPlacementTypes:
      - WholeDevice
      - Partition
    maxAcceleratorCount: 1
  updatePolicy:
    strategy: RollingUpdate
"""

SEED_CLASSES: dict[str, Obj] = {
    doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(SEED_CLASSES_YAML)
}


def seed_class(name: str) -> ClassSpec:
    return ClassSpec.model_validate(SEED_CLASSES[name]["spec"])
