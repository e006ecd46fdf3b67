"""The simulator's test bed against the real local API server (fixtures in conftest.py).

The module's capacity is the default file plus a node `sim-test` whose GPUs carry
product names no other test uses, with DeviceClasses that select only them: tests count
on exactly the devices they see there, whatever else the session left in the cluster.
Each test gets its own namespace and a Simulator limited to it; on the way out the pods
are deleted while the simulator still runs (it confirms their deletion as a kubelet
does and releases their claims), then the namespace goes. Waits poll with a bound.
"""

from __future__ import annotations

from typing import Any, TypeVar

from adapters.simulator import capacity, podclaims
from adapters.simulator.kube import JSON, Kube, path
from adapters.simulator.simulator import Simulator
from tests.support.polling import eventually

T = TypeVar("T")

TEST_NODE = "sim-test"
WHOLE = "sim-test-whole"  # one whole "Simulated A100 80GB"
SHARED = "sim-test-shared"  # one "Simulated T4 16GB", shared by consumable capacity
MIG = "sim-test-mig"  # one "Simulated A100 MIG" split into 3g.40gb + 2x 1g.10gb
RESOURCE = "resource.k8s.io/v1"


def _class(name: str, product: str, kind: str) -> dict[str, Any]:
    return {
        "name": name,
        "selectors": [
            "device.driver == 'gpu.nvidia.com'",
            f"device.attributes['gpu.nvidia.com'].type == '{kind}'",
            f"device.attributes['gpu.nvidia.com'].productName == '{product}'",
        ],
    }


def bed_capacity_spec() -> capacity.CapacitySpec:
    base = capacity.load_capacity().model_dump(by_alias=True, mode="json")
    base["nodes"].append(
        {
            "name": TEST_NODE,
            "cpu": "16",
            "memory": "64Gi",
            "gpus": [
                {"product": "Simulated A100 80GB", "memory": "80Gi"},
                {"product": "Simulated T4 16GB", "memory": "16Gi", "shared": True},
                {
                    "product": "Simulated A100 MIG",
                    "memory": "80Gi",
                    "mig": [
                        {"profile": "3g.40gb", "memory": "40192Mi", "multiprocessors": 42},
                        {
                            "profile": "1g.10gb",
                            "memory": "9856Mi",
                            "multiprocessors": 14,
                            "count": 2,
                        },
                    ],
                },
            ],
        }
    )
    base["deviceClasses"] += [
        _class(WHOLE, "Simulated A100 80GB", "gpu"),
        _class(SHARED, "Simulated T4 16GB", "gpu"),
        _class(MIG, "Simulated A100 MIG", "mig"),
    ]
    return capacity.load_capacity(base)


class Bed:
    """One test's namespace, its simulator, and shorthands for what tests create."""

    def __init__(self, kube: Kube, sim: Simulator, namespace: str) -> None:
        self.kube = kube
        self.sim = sim
        self.ns = namespace

    # --- objects ------------------------------------------------------------------------

    def template(self, name: str, device_class: str, **exactly: Any) -> JSON:
        body = {
            "apiVersion": RESOURCE,
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": device_class, **exactly}}
                        ]
                    }
                }
            },
        }
        return self.kube.create(path(RESOURCE, "resourceclaimtemplates", namespace=self.ns), body)

    def secret(self, name: str, data: dict[str, str]) -> None:
        body = {"metadata": {"name": name}, "stringData": data, "type": "Opaque"}
        self.kube.create(path("v1", "secrets", namespace=self.ns), body)

    def pod_manifest(
        self,
        name: str,
        *,
        template: str | None = None,
        priority_class: str | None = None,
        annotations: dict[str, str] | None = None,
        env: list[dict[str, Any]] | None = None,
        cpu: str = "1",
    ) -> JSON:
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.10.1",
                    "args": ["--model", "Qwen/Qwen2.5-7B-Instruct", "--served-model-name", name],
                    "env": env or [],
                    "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
                }
            ],
        }
        if template is not None:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
            spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        if priority_class is not None:
            spec["priorityClassName"] = priority_class
        manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.ns, "annotations": annotations or {}},
            "spec": spec,
        }
        # The 1.20 server drops spec.resourceClaims: the claims travel in the annotation.
        return podclaims.for_old_server(manifest)

    def pod(self, name: str, **options: Any) -> JSON:
        return self.kube.create(
            path("v1", "pods", namespace=self.ns), self.pod_manifest(name, **options)
        )

    def get_pod(self, name: str) -> JSON | None:
        return self.kube.get(path("v1", "pods", name, namespace=self.ns))

    def claims(self) -> list[JSON]:
        return self.kube.list(path(RESOURCE, "resourceclaims", namespace=self.ns))[0]

    def claim_of(self, pod: JSON) -> JSON | None:
        uid = pod["metadata"]["uid"]
        owned = [
            c
            for c in self.claims()
            if any(r.get("uid") == uid for r in c["metadata"].get("ownerReferences") or ())
        ]
        return owned[0] if owned else None

    # --- waiting ------------------------------------------------------------------------

    def running(self, name: str, *, timeout: float = 20) -> JSON:
        def probe() -> JSON | None:
            pod = self.get_pod(name)
            if pod is None or (pod.get("status") or {}).get("phase") != "Running":
                return None
            ready = any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in pod["status"].get("conditions") or ()
            )
            return pod if ready else None

        return eventually(probe, timeout=timeout, what=f"pod {name} Running and Ready")

    def unschedulable(self, name: str, *, timeout: float = 20) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            pod = self.get_pod(name) or {}
            for condition in (pod.get("status") or {}).get("conditions") or ():
                if condition["type"] == "PodScheduled" and condition["status"] == "False":
                    return dict(condition)
            return None

        return eventually(probe, timeout=timeout, what=f"pod {name} PodScheduled=False")

    def gone(self, name: str, *, timeout: float = 20) -> None:
        eventually(lambda: self.get_pod(name) is None, timeout=timeout, what=f"pod {name} gone")
