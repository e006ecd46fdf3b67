"""What one request of each kind the controller makes costs the API server and etcd.

`ai-inference bench` showed the bed bound by its CPU, the API server's the largest share,
and the project's extra API work against the floor to be its Events, its status writes
and server-side apply. This prices each, and each child an order gets (the Deployment
without replicas) created as the floor does and applied as the controller does: on a
fresh local control plane (nothing else writing, no watchers), N requests of a kind one
after another, and the CPU the API server and etcd used for them, per request. Times are
noisy on a shared machine: compare the kinds within one run.

    PYTHONPATH=. .venv/bin/python benchmarks/api_costs.py [-n 400]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.bench.bed import MODEL, ORDERS
from adapters.bench.measuring import cpu_seconds
from adapters.cluster import bootstrap, local
from adapters.kubernetes import kinds, oldservers
from adapters.kubernetes.rendering import OrderRef, render_workload
from adapters.kubernetes.rest import CONFIG_MAPS, EVENTS, Resource, call
from tests.adapters.kubernetes.workload_samples import FACTS, HF_REF, PLAN, RECIPE, SETTINGS, policy

NAMESPACE = "costs"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


def _event(index: int) -> dict[str, Any]:
    """An Event as the controller's writer records one (writing.py)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"order-{index}.{time.time_ns():x}", "namespace": NAMESPACE},
        "involvedObject": {
            "apiVersion": ORDERS.api_version,
            "kind": ORDERS.kind,
            "name": f"order-{index}",
            "namespace": NAMESPACE,
            "uid": f"uid-{index}",
        },
        "reason": "PlanComputed",
        "message": "Planned=True: gpu.nvidia.com (NVIDIA A100 80GB PCIe) x1, WholeDevice "
        "Dedicated, recipe vllm-nvidia",
        "type": "Normal",
        "source": {"component": "ai-inference"},
        "firstTimestamp": "2026-12-04T12:00:00Z",
        "lastTimestamp": "2026-12-04T12:00:00Z",
        "count": 1,
    }


def _order(index: int) -> dict[str, Any]:
    return {
        "apiVersion": ORDERS.api_version,
        "kind": ORDERS.kind,
        "metadata": {"name": f"order-{index}", "namespace": NAMESPACE},
        "spec": {
            "inferenceServiceClassName": "default-llm",
            "model": {"src": "HuggingFace", "ref": {"name": MODEL}},
        },
    }


def _status(phase: str) -> dict[str, Any]:
    """A status the size of an order's: six conditions."""
    conditions = [
        {
            "type": kind,
            "status": "True",
            "reason": "Fine",
            "message": "m" * 60,
            "lastTransitionTime": "2026-12-04T12:00:00Z",
            "observedGeneration": 1,
        }
        for kind in ("ClassResolved", "ModelResolved", "Planned", "WorkloadReady", "Ready")
    ]
    return {"status": {"phase": phase, "observedGeneration": 1, "conditions": conditions}}


def _config_map(name: str) -> dict[str, Any]:
    data = {f"key{i}": "x" * 40 for i in range(20)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": data,
    }


# The children an order gets, as the controller renders them for a 1.20 server (its
# HPAs are autoscaling/v2beta2). The Deployment has no replicas: its pods would be the
# simulator's work, not the request's.
HPA_VERSION = "autoscaling/v2beta2"
CHILDREN = (kinds.DEPLOYMENTS, kinds.SERVICES, kinds.INGRESSES, kinds.autoscalers(HPA_VERSION))


def _children() -> dict[str, dict[str, Any]]:
    order = OrderRef(name="o", namespace=NAMESPACE, uid="0f6c7a8e-1111-4c3b-9d7e-a1b2c3d4e5f6")
    docs = render_workload(
        order, PLAN, RECIPE, policy(max_replicas=3), HF_REF, settings=SETTINGS, facts=FACTS,
        hpa_api_version=HPA_VERSION,
    )  # fmt: skip
    out = {}
    for doc in map(oldservers.for_old_server, docs):
        doc["metadata"].pop("ownerReferences", None)  # no such owner here: kept, not collected
        if doc["kind"] == "Deployment":
            doc["spec"]["replicas"] = 0
        out[doc["kind"]] = doc
    return out


def _named(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return {**doc, "metadata": {**doc["metadata"], "name": name}}


def measure(folder: Path, n: int) -> dict[str, float]:
    state = local.up(folder / "cluster")
    try:
        bootstrap.bootstrap(state.kubeconfig("admin"))
        api = bootstrap.api_client(state.kubeconfig("admin"))
        pids = [pid for name, pid in state.pids.items() if name in ("kube-apiserver", "etcd")]
        call(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})

        def priced(send: Callable[[int], object]) -> float:
            time.sleep(1.0)  # the previous kind's tail (etcd's compaction, GC) settles
            before = sum(cpu_seconds(p) for p in pids)
            for index in range(n):
                send(index)
            time.sleep(0.5)
            return round((sum(cpu_seconds(p) for p in pids) - before) * 1000 / n, 2)

        maps, orders, children = CONFIG_MAPS, ORDERS, _children()
        # The controller applies each child where the floor creates it.
        by_child: dict[str, float] = {}
        for resource in CHILDREN:
            doc = children[resource.kind]

            def create(i: int, doc: dict[str, Any] = doc, kind: Resource = resource) -> object:
                return call(
                    api, "POST", kind.collection_path(NAMESPACE), body=_named(doc, f"c-{i}")
                )

            def apply(i: int, doc: dict[str, Any] = doc, kind: Resource = resource) -> object:
                return call(
                    api, "PATCH", kind.object_path(NAMESPACE, f"a-{i}"),
                    query=[("fieldManager", "costs"), ("force", True)],
                    body=_named(doc, f"a-{i}"), content_type=APPLY,
                )  # fmt: skip

            by_child[f"{resource.kind.lower()}_create_ms"] = priced(create)
            by_child[f"{resource.kind.lower()}_apply_create_ms"] = priced(apply)
        return by_child | {
            "configmap_create_ms": priced(
                lambda i: call(
                    api, "POST", maps.collection_path(NAMESPACE), body=_config_map(f"c-{i}")
                )
            ),
            "configmap_apply_create_ms": priced(
                lambda i: call(
                    api, "PATCH", maps.object_path(NAMESPACE, f"a-{i}"),
                    query=[("fieldManager", "costs"), ("force", True)],
                    body=_config_map(f"a-{i}"), content_type=APPLY,
                )
            ),
            "configmap_merge_patch_ms": priced(
                lambda i: call(
                    api, "PATCH", maps.object_path(NAMESPACE, f"c-{i}"),
                    body={"data": {"key0": f"y{i}"}}, content_type=MERGE,
                )
            ),
            "event_create_ms": priced(
                lambda i: call(api, "POST", EVENTS.collection_path(NAMESPACE), body=_event(i))
            ),
            "order_create_ms": priced(
                lambda i: call(api, "POST", orders.collection_path(NAMESPACE), body=_order(i))
            ),
            "order_status_first_ms": priced(
                lambda i: call(
                    api, "PATCH", orders.object_path(NAMESPACE, f"order-{i}", "status"),
                    body=_status("Pending"), content_type=MERGE,
                )
            ),
            "order_status_next_ms": priced(
                lambda i: call(
                    api, "PATCH", orders.object_path(NAMESPACE, f"order-{i}", "status"),
                    body=_status("Ready"), content_type=MERGE,
                )
            ),
        }  # fmt: skip
    finally:
        local.down(folder / "cluster")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=400, help="requests of each kind")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="api-costs-") as tmp:
        result = {"requests_each": args.n, "server_cpu_per_request": measure(Path(tmp), args.n)}
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
