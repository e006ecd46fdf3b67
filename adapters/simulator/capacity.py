"""The simulated hardware: a capacity file read into values, rendered as the API objects a
1.34 cluster with the NVIDIA DRA driver shows.

The local control plane has no kubelets and no GPUs. The simulator publishes them from a
YAML file (format in docs/simulator.md; the default is `capacity-default.yaml` next to
this module): Nodes, one ResourceSlice per node and driver (pool = node name), and the
DeviceClasses the planner reads. Everything here is pure rendering; `publishing` writes
the objects. Names and UUIDs are derived from the node and the GPU's index, so the same
file always yields the same devices, and a republish changes only what the file changed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from fsm.quantity import QuantityError, parse_quantity

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_DRIVER",
    "MANAGED_LABEL",
    "NODE_LABEL",
    "CapacityError",
    "CapacitySpec",
    "DeviceClassSpec",
    "GpuSpec",
    "MigSpec",
    "NodeSpec",
    "load_capacity",
    "node_conditions",
    "render_device_class",
    "render_node",
    "render_slice",
    "render_slice_devices",
]

DEFAULT_CAPACITY = Path(__file__).with_name("capacity-default.yaml")
DEFAULT_DRIVER = "gpu.nvidia.com"
# Every object the simulator publishes carries this label: a republish deletes the ones
# the file no longer names and never touches objects someone else created.
MANAGED_LABEL = "simulator.ai-inference.deckhouse.io/managed"
NODE_LABEL = "simulator.ai-inference.deckhouse.io/node"

# The NVIDIA driver names a static MIG device `gpu-<index>-mig-<profile>-<profile id>-<start>`;
# profile ids as nvidia-smi reports them for the A100/H100 family (unknown: index only).
_MIG_PROFILE_IDS = {
    "1g.5gb": 19, "1g.10gb": 19, "1g.12gb": 19, "1g.20gb": 15, "1g.24gb": 15,
    "2g.10gb": 14, "2g.20gb": 14, "2g.24gb": 14, "3g.20gb": 9, "3g.40gb": 9, "3g.48gb": 9,
    "4g.20gb": 5, "4g.40gb": 5, "4g.48gb": 5, "7g.40gb": 0, "7g.80gb": 0, "7g.96gb": 0,
}  # fmt: skip
_NAMESPACE = uuid.UUID("6f1c3f0e-8d1b-4a53-9a2e-5b7f0c1d2e3f")


class CapacityError(ValueError):
    """The capacity file cannot be read; the message names the field."""


class _Spec(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


def _quantity(value: Any) -> str:
    text = str(value)
    try:
        parse_quantity(text)
    except QuantityError as err:
        raise ValueError(str(err)) from err
    return text


class MigSpec(_Spec):
    """Static MIG partitions of one profile on a GPU."""

    profile: str  # e.g. 1g.10gb
    memory: str  # e.g. 9856Mi
    multiprocessors: int = 0
    count: int = Field(default=1, ge=1)

    _check_memory = field_validator("memory", mode="before")(_quantity)


class RequestPolicySpec(_Spec):
    """`capacity.memory.requestPolicy` of a shared device (Kubernetes' consumable capacity)."""

    default: str | None = None
    valid_values: tuple[str, ...] = ()
    valid_range: dict[str, str] | None = None  # min, max, step


class GpuSpec(_Spec):
    """One physical GPU: whole, split into static MIG devices, or shared by consumers."""

    product: str
    memory: str
    architecture: str = "Ampere"
    cuda_compute_capability: str = "8.0.0"
    driver_version: str = "570.124.6"
    brand: str = "Nvidia"
    mig: tuple[MigSpec, ...] = ()
    # Shared: the device allows multiple allocations; each claim consumes the memory it
    # requests (`capacity.requests.memory`), or the policy's default, or all of it.
    shared: bool = False
    request_policy: RequestPolicySpec | None = None

    _check_memory = field_validator("memory", mode="before")(_quantity)

    @model_validator(mode="after")
    def _one_way_of_splitting(self) -> GpuSpec:
        if self.mig and self.shared:
            raise ValueError("a GPU is either split into MIG devices or shared, not both")
        if self.request_policy is not None and not self.shared:
            raise ValueError("requestPolicy needs shared: true (allowMultipleAllocations)")
        return self


class NodeSpec(_Spec):
    name: str
    cpu: str = "32"
    memory: str = "256Gi"
    pods: str = "110"
    labels: dict[str, str] = Field(default_factory=dict)
    unschedulable: bool = False
    gpus: tuple[GpuSpec, ...] = ()

    _check_quantities = field_validator("cpu", "memory", "pods", mode="before")(_quantity)


class DeviceClassSpec(_Spec):
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    selectors: tuple[str, ...] = ()  # CEL expressions, all must hold
    config: tuple[dict[str, Any], ...] = ()  # DeviceClassConfiguration, passed through


class CapacitySpec(_Spec):
    """The whole file: which nodes exist, what each holds, which classes are published."""

    driver: str = DEFAULT_DRIVER
    nodes: tuple[NodeSpec, ...] = ()
    device_classes: tuple[DeviceClassSpec, ...] = ()

    @model_validator(mode="after")
    def _unique_names(self) -> CapacitySpec:
        for kind, names in (
            ("node", [n.name for n in self.nodes]),
            ("deviceClass", [c.name for c in self.device_classes]),
        ):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"duplicate {kind} name(s): {', '.join(duplicates)}")
        return self

    def node(self, name: str) -> NodeSpec | None:
        return next((n for n in self.nodes if n.name == name), None)


def load_capacity(source: Path | str | Mapping[str, Any] | None = None) -> CapacitySpec:
    """A capacity file (path), its parsed YAML (mapping), or the default file (None)."""
    if source is None:
        source = DEFAULT_CAPACITY
    if isinstance(source, Mapping):
        data: Any = dict(source)
        where = "capacity"
    else:
        where = str(source)
        try:
            data = yaml.safe_load(Path(source).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as err:
            raise CapacityError(f"{where}: {err}") from err
    try:
        return CapacitySpec.model_validate(data)
    except ValueError as err:  # pydantic's ValidationError names every bad field
        raise CapacityError(f"{where}: {err}") from err


# --- rendering --------------------------------------------------------------------


def _labels(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {MANAGED_LABEL: "true", **(extra or {})}


def render_node(node: NodeSpec) -> dict[str, Any]:
    """A Ready Node; `status` is written separately (create ignores it)."""
    resources = {"cpu": node.cpu, "memory": node.memory, "pods": node.pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": _labels(
                {
                    "kubernetes.io/hostname": node.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    **({"nvidia.com/gpu.present": "true"} if node.gpus else {}),
                    **node.labels,
                }
            ),
        },
        "spec": {"unschedulable": True} if node.unschedulable else {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": node.name},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.34.0-simulated",
                "kubeProxyVersion": "v1.34.0-simulated",
                "containerRuntimeVersion": "simulator://1",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "ai-inference simulator",
                "kernelVersion": "6.1.0",
                "machineID": uuid.uuid5(_NAMESPACE, node.name).hex,
                "systemUUID": str(uuid.uuid5(_NAMESPACE, "system/" + node.name)),
                "bootID": str(uuid.uuid5(_NAMESPACE, "boot/" + node.name)),
            },
        },
    }


def node_conditions(now: str) -> list[dict[str, str]]:
    """The conditions of a healthy node at `now` (RFC 3339)."""
    healthy = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
        ("Ready", "True", "KubeletReady"),
    ]
    return [
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": "simulated by ai-inference",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for kind, status, reason in healthy
    ]


def _uuid(prefix: str, *parts: object) -> str:
    return f"{prefix}-{uuid.uuid5(_NAMESPACE, '/'.join(str(p) for p in parts))}"


def render_slice_devices(node: NodeSpec) -> list[dict[str, Any]]:
    """The devices of the node's slice, shaped as the NVIDIA driver publishes them.

    A MIG-split GPU appears only as its partitions (in MIG mode the parent is not
    allocatable as a whole); a shared GPU carries `allowMultipleAllocations: true`.
    """
    devices: list[dict[str, Any]] = []
    for index, gpu in enumerate(node.gpus):
        parent_uuid = _uuid("GPU", node.name, index)
        common = {
            "productName": {"string": gpu.product},
            "brand": {"string": gpu.brand},
            "architecture": {"string": gpu.architecture},
            "cudaComputeCapability": {"version": gpu.cuda_compute_capability},
            "driverVersion": {"version": gpu.driver_version},
        }
        if not gpu.mig:
            memory: dict[str, Any] = {"value": gpu.memory}
            if gpu.request_policy is not None:
                memory["requestPolicy"] = gpu.request_policy.model_dump(
                    by_alias=True, exclude_none=True, exclude_defaults=True
                )
            device: dict[str, Any] = {
                "name": f"gpu-{index}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "uuid": {"string": parent_uuid},
                    "index": {"int": index},
                    "minor": {"int": index},
                    **common,
                },
                "capacity": {"memory": memory},
            }
            if gpu.shared:
                device["allowMultipleAllocations"] = True
            devices.append(device)
            continue
        for mig in gpu.mig:
            compact = mig.profile.replace(".", "")
            profile_id = _MIG_PROFILE_IDS.get(mig.profile)
            for start in range(mig.count):
                suffix = f"{profile_id}-{start}" if profile_id is not None else f"{start}"
                capacity: dict[str, Any] = {"memory": {"value": mig.memory}}
                if mig.multiprocessors:
                    capacity["multiprocessors"] = {"value": str(mig.multiprocessors)}
                devices.append(
                    {
                        "name": f"gpu-{index}-mig-{compact}-{suffix}",
                        "attributes": {
                            "type": {"string": "mig"},
                            "uuid": {"string": _uuid("MIG", node.name, index, mig.profile, start)},
                            "profile": {"string": mig.profile},
                            "parentUUID": {"string": parent_uuid},
                            "parentIndex": {"int": index},
                            **common,
                        },
                        "capacity": capacity,
                    }
                )
    return devices


def render_slice(node: NodeSpec, driver: str, *, name: str, generation: int) -> dict[str, Any]:
    """The node's one ResourceSlice for the driver: pool = node name, one slice per pool."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": name,
            "labels": _labels({NODE_LABEL: node.name}),
        },
        "spec": {
            "driver": driver,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": generation, "resourceSliceCount": 1},
            "devices": render_slice_devices(node),
        },
    }


def render_device_class(spec: DeviceClassSpec) -> dict[str, Any]:
    body: dict[str, Any] = {
        "selectors": [{"cel": {"expression": expression}} for expression in spec.selectors]
    }
    if spec.config:
        body["config"] = [dict(item) for item in spec.config]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": spec.name, "labels": _labels(spec.labels)},
        "spec": body,
    }
