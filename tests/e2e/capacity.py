"""What the end-to-end tests of capacity, probes, runtimes and convergence share: models
that fit the bed's devices, nodes and DeviceClasses of one product, a class that names
them, and waits on an order's conditions, a new class or the module's settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters.kubernetes.manifests import Applier
from adapters.platform import LocalPlatform
from adapters.simulator.capacity import CapacitySpec, DeviceClassSpec, GpuSpec, NodeSpec
from fsm import events as ev
from tests.e2e.conftest import CLASSES, GROUP, VERSION, Orders, wait_for

QWEN_SMALL = "Qwen/Qwen2.5-0.5B-Instruct"  # ~1 GB of weights: fits any accelerator here
QWEN_7B = "Qwen/Qwen2.5-7B-Instruct"  # ~15 GB in bf16: needs a 24 GiB device to itself
L4 = "NVIDIA L4"
L40S = "NVIDIA L40S"
GPU_SELECTOR = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)

CLASS = ("ClassResolved", "True", "ClassAdmitted")
MODEL = ("ModelResolved", "True", "ModelResolved")
PLANNED = ("Planned", "True", "PlanComputed")
WORKLOAD = ("WorkloadReady", "True", "WorkloadAvailable")
SERVING = ("Ready", "True", "EndpointServing")
GROWTH = ("ScalingHealthy", "True", "ScalingWithinBounds")
READY = [CLASS, MODEL, PLANNED, WORKLOAD, SERVING, GROWTH]


def hf(name: str) -> dict[str, Any]:
    return {"src": "HuggingFace", "ref": {"name": name}}


def gpu_node(name: str, products: list[tuple[str, str]], *, cordoned: bool = False) -> NodeSpec:
    """A node with one whole GPU per (product, memory); `cordoned`: its devices are
    published but the scheduler places nothing there."""
    return NodeSpec(
        name=name,
        cpu="64",
        memory="512Gi",
        unschedulable=cordoned,
        gpus=tuple(
            GpuSpec(product=product, memory=memory, architecture="Ada Lovelace")
            for product, memory in products
        ),
    )


def product_class(name: str, product: str) -> DeviceClassSpec:
    """A platform DeviceClass: whole devices of one product, held exclusively."""
    return DeviceClassSpec(
        name=name,
        labels={"ai.deckhouse.io/placement": "WholeDevice", "ai.deckhouse.io/sharing": "Dedicated"},
        selectors=(GPU_SELECTOR, f"device.attributes['gpu.nvidia.com'].productName == '{product}'"),
    )


Publish = Callable[[list[NodeSpec], list[DeviceClassSpec]], None]


@contextmanager
def extra_capacity(
    platform: LocalPlatform, nodes: list[NodeSpec], classes: list[DeviceClassSpec]
) -> Iterator[Publish]:
    """The capacity in force plus `nodes` and `classes`; yields a function that replaces
    the extras (the base stays), and restores the capacity in force on exit."""
    original: CapacitySpec = platform.simulator.capacity

    def publish(more_nodes: list[NodeSpec], more_classes: list[DeviceClassSpec]) -> None:
        platform.simulator.set_capacity(
            original.model_copy(
                update={
                    "nodes": (*original.nodes, *more_nodes),
                    "device_classes": (*original.device_classes, *more_classes),
                }
            )
        )

    publish(nodes, classes)
    try:
        yield publish
    finally:
        platform.simulator.set_capacity(original)


def class_spec(
    device_classes: list[str], *, scaling: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A cluster-local class without a token, one whole dedicated device per replica."""
    spec: dict[str, Any] = {
        "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
        "acceleratorPolicy": {
            "allowedDeviceClasses": device_classes,
            "allowedPlacementTypes": ["WholeDevice"],
            "allowedSharingModes": ["Dedicated"],
            "maxAcceleratorCount": 1,
        },
        "exposurePolicy": {"type": "ClusterLocal", "authentication": "None"},
    }
    if scaling is not None:
        spec["scalingPolicy"] = scaling
    return spec


def class_ready(platform: LocalPlatform, name: str) -> None:
    """Wait for the controller to judge a new class Ready, so orders see it admitted."""
    custom = client.CustomObjectsApi(platform.api("admin"))

    def ready() -> bool:
        obj = custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, name)
        return any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (obj.get("status") or {}).get("conditions") or []
        )

    wait_for(ready, timeout=30, what=f"class {name} Ready")


def events_of(platform: LocalPlatform, uid: str, kind: type[ev.Event]) -> list[Any]:
    return [r.event for r in platform.log.read(uid) if isinstance(r.event, kind)]


def waiting(phase: str, *, condition: str, reason: str) -> Callable[[dict[str, Any] | None], bool]:
    """A predicate: the order is in `phase` with `condition` carrying `reason`."""

    def check(obj: dict[str, Any] | None) -> bool:
        status = (obj or {}).get("status") or {}
        return status.get("phase") == phase and any(
            c["type"] == condition and c["reason"] == reason for c in status.get("conditions", [])
        )

    return check


def wait_order(
    who: Orders, name: str, check: Callable[[dict[str, Any] | None], bool], *, timeout: float = 60
) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        obj = who.get("support", name)
        return obj if check(obj) else None

    return wait_for(reached, timeout=timeout, what=f"support/{name}")


MODULE_CONFIG = ("deckhouse.io", "v1alpha1", "moduleconfigs")


@contextmanager
def module_config(
    admin: client.ApiClient, name: str, settings: dict[str, Any], version: int = 1
) -> Iterator[Callable[[dict[str, Any]], None]]:
    """ModuleConfig `name` with `settings`, editable through the callable yielded; the
    previous one (or none) is back afterwards."""
    custom = client.CustomObjectsApi(admin)
    try:
        previous = custom.get_cluster_custom_object(*MODULE_CONFIG, name)
    except ApiException as exc:
        if exc.status != 404:
            raise
        previous = None

    def put(new: dict[str, Any]) -> None:
        spec = {"enabled": True, "version": version, "settings": new}
        body = {
            "apiVersion": "deckhouse.io/v1alpha1",
            "kind": "ModuleConfig",
            "metadata": {"name": name},
            "spec": spec,
        }
        Applier(admin).apply_all([body])

    put(settings)
    try:
        yield put
    finally:
        if previous is None:
            custom.delete_cluster_custom_object(*MODULE_CONFIG, name)
        else:
            custom.replace_cluster_custom_object(
                *MODULE_CONFIG,
                name,
                {**previous, "metadata": {**previous["metadata"], "resourceVersion": None}},
            )


@contextmanager
def module_settings(platform: LocalPlatform, settings: dict[str, Any]) -> Iterator[None]:
    """`module_config`, once the controller has reloaded the probe settings it gives."""
    with module_config(platform.api("admin"), "ai-inference", settings):
        wait_for(
            lambda: (
                platform.controller.settings().probe.interval_seconds
                == settings["probe"]["intervalSeconds"]
            ),
            timeout=15,
            what="the controller to reload its settings",
        )
        yield
