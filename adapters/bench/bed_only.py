"""The bed alone (`bench --simulator-only`): N bare pods with a device claim each, no
controller, to see what the simulator costs beside the API server it stands beside."""

from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

import httpx

from adapters.bench.bed import CHILD_KINDS, MODEL, PODS
from adapters.bench.measuring import per_order, percentile, request_counts, writes_between
from adapters.kubernetes import errors
from adapters.probes.targets import SIMULATOR_ENDPOINT_ANNOTATION as ENDPOINT

if TYPE_CHECKING:
    from adapters.bench.run import Benchmark

__all__ = ["measure"]


def measure(bench: Benchmark) -> dict[str, Any]:
    """The bed alone: N bare pods with a device claim each, driven to Ready by the
    simulator; its CPU beside the API server's, idle, and how fast the stubs answer."""
    n = bench.options.orders
    namespace = bench.options.namespace
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "bench-gpu", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": "nvidia-a100-80gb-physical"},
                        }
                    ]
                }
            }
        },
    }
    with contextlib.suppress(errors.APIConflictError):
        bench.create(CHILD_KINDS[4], template)
    claims = json.dumps([{"name": "gpu", "resourceClaimTemplateName": "bench-gpu"}])
    pods = bench.informer(PODS)
    ready_at: dict[str, float] = {}

    def on_pod(_event: str, obj: dict[str, Any]) -> None:
        conditions = (obj.get("status") or {}).get("conditions") or ()
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            ready_at.setdefault(obj["metadata"]["name"], time.monotonic())

    pods.add_handler(on_pod)
    before, cpu0 = request_counts(bench.admin), bench.cpu()
    started = time.monotonic()
    try:
        for index in range(n):
            bench.create(
                PODS,
                {
                    "metadata": {
                        "name": f"pod-{index:04d}",
                        "annotations": {
                            "simulator.ai-inference.deckhouse.io/resource-claims": claims
                        },
                    },
                    "spec": {
                        "containers": [
                            {
                                "name": "vllm",
                                "image": "vllm/vllm-openai:v0.10.1",
                                "args": ["--model", MODEL, "--served-model-name", f"m{index}"],
                                "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
                                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                            }
                        ]
                    },
                },
            )
        bench.wait(lambda: len(ready_at) >= n, bench.options.ready_timeout, "every pod Ready")
        wall = time.monotonic() - started
        after, cpu1 = request_counts(bench.admin), bench.cpu()
        window = min(60.0, bench.options.idle_seconds)
        cpu2 = bench.cpu()
        time.sleep(window)
        cpu3 = bench.cpu()
        urls = [
            str((p["metadata"].get("annotations") or {}).get(ENDPOINT, "")) for p in pods.objects()
        ]
    finally:
        pods.stop()
    latencies = []
    with httpx.Client(timeout=5) as web:
        for url in urls:
            began = time.perf_counter()
            web.get(url + "/v1/models").raise_for_status()
            latencies.append(time.perf_counter() - began)
    return {
        "pods": n,
        "wall_s": round(wall, 2),
        "cpu_s": {k: round(cpu1[k] - cpu0[k], 2) for k in cpu1},
        "writes_per_pod": per_order(writes_between(before, after), n),
        "idle_window_s": window,
        "idle_core_fraction": {k: round((cpu3[k] - cpu2[k]) / window, 4) for k in cpu3},
        "stub_ms": {
            "p50": round(percentile(latencies, 0.5) * 1000, 2),
            "p95": round(percentile(latencies, 0.95) * 1000, 2),
            "max": round(max(latencies, default=0.0) * 1000, 2),
        },
    }
