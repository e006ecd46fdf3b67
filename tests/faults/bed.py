"""The crash tests' bench: a control plane that audits the controller's writes, the
simulator, the stand-in hub, classes of their own — and the four kinds of order a mix holds.

Beside the mixes' capacity, one node with a single GPU of a product nothing else selects,
and two classes on it, low and high priority: the reclaim's contention
(test_crash_reclaim.py), which never touches a mix's devices.

The API server logs every write of the controller's identity (Leases apart) as JSON
lines (`local.up(audit=True)`): the oracle counts writes per object from the server's
own record, not from the controller's word.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from adapters.cluster import bootstrap, local
from adapters.kubernetes import kinds
from adapters.kubernetes.controller import LEASE_NAME, LEASE_NAMESPACE
from adapters.kubernetes.rendering import UID_LABEL
from adapters.kubernetes.rest import call
from adapters.platform import DEMO_SETTINGS, install_module
from adapters.simulator.capacity import CapacitySpec, DeviceClassSpec, GpuSpec, NodeSpec
from adapters.simulator.hub import StandInHub
from adapters.simulator.simulator import Simulator
from tests.support.controller_process import ControllerProcess

__all__ = ["KINDS", "NAMESPACE", "Bed", "up"]

GROUP, VERSION, PLURAL = "ai.deckhouse.io", "v1alpha1", "inferenceservices"
NAMESPACE = "support"
L4 = "NVIDIA L4"
QWEN_SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
QWEN_7B = "Qwen/Qwen2.5-7B-Instruct"
A10 = "NVIDIA A10"  # the reclaim's one device: no other DeviceClass selects it
GPU_SELECTOR = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)
WHOLE = {"ai.deckhouse.io/placement": "WholeDevice", "ai.deckhouse.io/sharing": "Dedicated"}

# The kinds of order in a mix: one Ready and cluster-local, one External behind a token,
# one whose model is edited once it is planned (a replan), one no device can hold.
KINDS = ("plain", "external", "replan", "nocap")
_CLASS_OF = {
    "plain": "crash-internal",
    "external": "crash-external",
    "replan": "crash-internal",
    "nocap": "crash-none",
}
# Children the controller makes, listed by the order-UID label (pods and ReplicaSets are
# the Deployment's, not the controller's).
CHILD_KINDS = (
    kinds.DEPLOYMENTS,
    kinds.SERVICES,
    kinds.SECRETS,
    kinds.INGRESSES,
    kinds.RESOURCE_CLAIM_TEMPLATES,
    kinds.autoscalers("autoscaling/v2beta2"),
)


def hf(name: str) -> dict[str, Any]:
    return {"src": "HuggingFace", "ref": {"name": name}}


def spec_of(kind: str) -> dict[str, Any]:
    return {"inferenceServiceClassName": _CLASS_OF[kind], "model": hf(QWEN_SMALL)}


REPLANNED_MODEL = hf(QWEN_7B)


def _class(name: str, device_class: str, exposure: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceServiceClass",
        "metadata": {"name": name},
        "spec": {
            "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
            "acceleratorPolicy": {
                "allowedDeviceClasses": [device_class],
                "allowedPlacementTypes": ["WholeDevice"],
                "allowedSharingModes": ["Dedicated"],
                "maxAcceleratorCount": 1,
            },
            "exposurePolicy": exposure,
            **more,
        },
    }


CLASSES = [
    _class("crash-internal", "crash-l4", {"type": "ClusterLocal", "authentication": "None"}),
    # Growth allowed: its orders get a HorizontalPodAutoscaler too.
    _class(
        "crash-external",
        "crash-l4",
        {"type": "External", "authentication": "Token"},
        scalingPolicy={"minReplicas": 1, "maxReplicas": 2},
    ),
    _class("crash-none", "crash-none", {"type": "ClusterLocal", "authentication": "None"}),
    # The reclaim's contention: one replica each, one device for both; the PriorityClasses
    # they name are the seed's (examples/priority-classes.yaml, installed with the module).
    *(
        _class(
            f"crash-reclaim-{level}",
            "crash-reclaim",
            {"type": "ClusterLocal", "authentication": "None"},
            scalingPolicy={
                "minReplicas": 1,
                "maxReplicas": 1,
                "allowedPriorityClassNames": [f"inference-{level}"],
            },
        )
        for level in ("low", "high")
    ),
]
RECLAIM_NODE = "crash-reclaim"

# Room for several mixes at once: orders of earlier runs are deleted without waiting
# for the garbage collector, and a replan needs a second device while it moves.
CAPACITY = CapacitySpec(
    nodes=(
        *(
            NodeSpec(
                name=f"crash-{i}",
                cpu="64",
                memory="512Gi",
                gpus=tuple(
                    GpuSpec(product=L4, memory="24Gi", architecture="Ada Lovelace")
                    for _ in range(4)
                ),
            )
            for i in range(10)
        ),
        NodeSpec(
            name=RECLAIM_NODE,
            cpu="64",
            memory="512Gi",
            gpus=(GpuSpec(product=A10, memory="24Gi", architecture="Ampere"),),
        ),
    ),
    device_classes=(
        DeviceClassSpec(
            name="crash-l4",
            labels=WHOLE,
            selectors=(GPU_SELECTOR, f"device.attributes['gpu.nvidia.com'].productName == '{L4}'"),
        ),
        DeviceClassSpec(
            name="crash-none",
            labels=WHOLE,
            selectors=(GPU_SELECTOR, "device.attributes['gpu.nvidia.com'].productName == 'None'"),
        ),
        DeviceClassSpec(
            name="crash-reclaim",
            labels=WHOLE,
            selectors=(GPU_SELECTOR, f"device.attributes['gpu.nvidia.com'].productName == '{A10}'"),
        ),
    ),
)


@dataclass
class Bed:
    folder: Path
    state: local.ClusterState
    admin: ApiClient
    hub: StandInHub
    simulator: Simulator
    store_url: str

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.admin)

    def controller(self, env: Mapping[str, str] | None = None) -> ControllerProcess:
        return ControllerProcess(
            self.state.kubeconfig("controller"),
            self.store_url,
            f"--hub-endpoint={self.hub.url}",
            # A host template (the demo's): the External order's Ingress is a boundary.
            f"--public-domain-template={DEMO_SETTINGS['publicDomainTemplate']}",
            "--probe-target=simulator",
            "--probe-interval=2",
            "--probe-timeout=1",
            env=env,
        )

    def free_lease(self) -> None:
        """What the Lease's expiry would do after a crash, without waiting its 15 s."""
        leases = client.CoordinationV1Api(self.admin)
        try:
            leases.delete_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise

    # -- orders ----------------------------------------------------------------------------

    def create(self, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": name},
            "spec": dict(spec),
        }
        return dict(
            self.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
        )

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_spec(self, name: str, spec: Mapping[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": dict(spec)}
        )

    def delete(self, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def children(self, uid: str) -> list[dict[str, Any]]:
        """Every object of the controller's kinds labelled with the order's UID."""
        out: list[dict[str, Any]] = []
        for resource in CHILD_KINDS:
            listing = call(
                self.admin,
                "GET",
                resource.collection_path(NAMESPACE),
                query=[("labelSelector", f"{UID_LABEL}={uid}")],
            )
            for item in listing.get("items") or []:
                item.setdefault("kind", resource.kind)
                out.append(item)
        return out

    # -- the API server's record of the controller's writes --------------------------------

    @property
    def audit_path(self) -> Path:
        return Path(self.state.folder) / local.AUDIT_LOG

    def audit_offset(self) -> int:
        return self.audit_path.stat().st_size if self.audit_path.exists() else 0

    def writes(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        """The controller's answered write requests logged between two offsets."""
        if not self.audit_path.exists():
            return []
        with self.audit_path.open("rb") as log:
            log.seek(start)
            data = log.read() if end is None else log.read(end - start)
        out = []
        for line in data.decode().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            if entry.get("stage") == "ResponseComplete":
                out.append(entry)
        return out


def up(folder: Path, store_url: str) -> Iterator[Bed]:
    state = local.up(folder, audit=True)
    hub: StandInHub | None = None
    simulator: Simulator | None = None
    try:
        bootstrap.bootstrap(state.kubeconfig("admin"))
        admin = bootstrap.api_client(state.kubeconfig("admin"))
        install_module(admin)
        custom = client.CustomObjectsApi(admin)
        for body in CLASSES:
            custom.create_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", body)
        hub = StandInHub()
        simulator = Simulator(bootstrap.api_client(state.kubeconfig("simulator")), CAPACITY)
        simulator.start()
        yield Bed(folder, state, admin, hub, simulator, store_url)
    finally:
        if simulator is not None:
            simulator.stop()
        if hub is not None:
            hub.close()
        local.down(folder)
