"""The bed the phases share: the capacity, the kinds read and written, an order's manifest,
and the children the floor writes again from the warm-up's."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.kubernetes.controller import DEFAULT_WORKERS
from adapters.kubernetes.rest import Resource
from adapters.simulator import capacity

__all__ = [
    "CHILD_KINDS",
    "CLAIMS",
    "DEPLOYMENTS",
    "EVENTS",
    "MODEL",
    "ORDERS",
    "PODS",
    "BenchOptions",
    "bench_capacity",
    "child_template",
    "deployment_available",
    "order_manifest",
]

ORDERS = Resource("ai.deckhouse.io", "v1alpha1", "inferenceservices", "InferenceService")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
PODS = Resource("", "v1", "pods", "Pod")
CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")
EVENTS = Resource("", "v1", "events", "Event")
# What a controller may render for an order; each is looked for by owner at warm-up.
CHILD_KINDS = (
    Resource("", "v1", "secrets", "Secret"),
    Resource("", "v1", "configmaps", "ConfigMap"),
    Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    Resource("", "v1", "services", "Service"),
    Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate"),
    Resource("policy", "v1beta1", "poddisruptionbudgets", "PodDisruptionBudget"),
    Resource("autoscaling", "v2beta2", "horizontalpodautoscalers", "HorizontalPodAutoscaler"),
    Resource("networking.k8s.io", "v1", "ingresses", "Ingress"),
    Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    DEPLOYMENTS,
)
MODEL = "Qwen/Qwen2.5-32B-Instruct-AWQ"
GPUS_PER_NODE = 16


def bench_capacity(orders: int) -> dict[str, Any]:
    """Nodes of whole A100s enough for the orders (and a tenth more), the default classes."""
    base = capacity.load_capacity().model_dump(by_alias=True, mode="json")
    gpu = {
        "product": "NVIDIA A100 80GB PCIe",
        "memory": "80Gi",
        "architecture": "Ampere",
        "cudaComputeCapability": "8.0.0",
    }
    nodes = math.ceil((orders + 1) * 1.1 / GPUS_PER_NODE)
    base["nodes"] = [
        {
            "name": f"bench-{index:03d}",
            "cpu": "1000",
            "memory": "16Ti",
            "pods": "250",
            "gpus": [dict(gpu) for _ in range(GPUS_PER_NODE)],
        }
        for index in range(nodes)
    ]
    return base


@dataclass
class BenchOptions:
    orders: int = 20
    namespace: str = "bench"
    idle_seconds: float = 300.0
    restart: bool = True
    floor: bool = True
    replay: bool = True
    ready_timeout: float = 900.0
    workers: int = DEFAULT_WORKERS
    simulator_only: bool = False
    large_log: int = 0  # events of the large log to read one history among (0: skip)
    rounds: int = 1  # floor and project, in turn, this many times (ratios: the medians)


def order_manifest(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": ORDERS.api_version,
        "kind": ORDERS.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "inferenceServiceClassName": "default-llm",
            "model": {"src": "HuggingFace", "ref": {"name": MODEL}},
        },
    }


_VOLATILE_META = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def child_template(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A child as the floor writes it again: no server-set fields, no status."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _VOLATILE_META}
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith("deployment.kubernetes.io/")
    }
    meta["annotations"] = annotations
    spec = dict(obj.get("spec") or {})
    for server_set in ("clusterIP", "clusterIPs"):
        spec.pop(server_set, None)
    out = {k: v for k, v in obj.items() if k not in ("status", "metadata", "spec")}
    out["metadata"] = meta
    if obj.get("spec") is not None:
        out["spec"] = spec
    return out


def deployment_available(deployment: Mapping[str, Any]) -> bool:
    want = int((deployment.get("spec") or {}).get("replicas", 1))
    status = deployment.get("status") or {}
    return int(status.get("availableReplicas") or 0) >= want > 0
