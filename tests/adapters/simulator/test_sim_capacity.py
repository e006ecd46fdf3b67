"""The capacity file and what it renders: objects shaped as a 1.34 cluster shows them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters.simulator import capacity
from fsm.placement.inventory import parse_snapshot
from fsm.values import PlacementMode, SharingMode


@pytest.fixture(scope="module")
def default() -> capacity.CapacitySpec:
    return capacity.load_capacity()


def slice_of(spec: capacity.CapacitySpec, name: str) -> dict[str, Any]:
    node = spec.node(name)
    assert node is not None
    return capacity.render_slice(node, spec.driver, name=f"{name}-x", generation=1)


def test_default_capacity_has_the_seed_hardware(default: capacity.CapacitySpec) -> None:
    products = {node.name: [g.product for g in node.gpus] for node in default.nodes}
    assert products == {
        "gpu-a": ["NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"],
        "gpu-b": ["NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"],
        "gpu-t": ["Tesla T4", "Tesla T4"],
    }
    assert {c.name for c in default.device_classes} >= {
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "nvidia-t4-mps-physical",
    }


def test_slice_is_one_pool_per_node(default: capacity.CapacitySpec) -> None:
    spec = slice_of(default, "gpu-a")["spec"]
    assert spec["driver"] == "gpu.nvidia.com"
    assert spec["nodeName"] == "gpu-a"
    assert spec["pool"] == {"name": "gpu-a", "generation": 1, "resourceSliceCount": 1}


def test_mig_devices_name_their_parent(default: capacity.CapacitySpec) -> None:
    devices = {d["name"]: d for d in slice_of(default, "gpu-a")["spec"]["devices"]}
    whole = devices["gpu-0"]
    assert whole["attributes"]["type"] == {"string": "gpu"}
    assert whole["capacity"] == {"memory": {"value": "80Gi"}}
    migs = [d for d in devices.values() if d["attributes"]["type"] == {"string": "mig"}]
    assert sorted(d["attributes"]["profile"]["string"] for d in migs) == [
        "1g.10gb",
        "1g.10gb",
        "1g.10gb",
        "1g.10gb",
        "3g.40gb",
    ]
    parents = {d["attributes"]["parentUUID"]["string"] for d in migs}
    assert len(parents) == 1
    assert parents.pop().startswith("GPU-")
    small = devices["gpu-1-mig-1g10gb-19-0"]
    assert small["capacity"] == {"memory": {"value": "9856Mi"}, "multiprocessors": {"value": "14"}}
    assert small["attributes"]["productName"] == {"string": "NVIDIA A100 80GB PCIe"}
    # In MIG mode the parent is not offered whole.
    assert "gpu-1" not in devices


def test_shared_devices_allow_multiple_allocations(default: capacity.CapacitySpec) -> None:
    devices = slice_of(default, "gpu-t")["spec"]["devices"]
    assert [d.get("allowMultipleAllocations") for d in devices] == [True, True]
    assert all(d["capacity"]["memory"]["value"] == "16Gi" for d in devices)


REPO = Path(__file__).resolve().parents[3]

_SLICE_IN_A_PROCESS = """
import json
from adapters.simulator import capacity
spec = capacity.load_capacity()
node = spec.node("gpu-a")
print(json.dumps(capacity.render_slice(node, spec.driver, name="gpu-a-x", generation=1)))
"""


@pytest.mark.parametrize("seed", ["0", "4242"])
def test_rendering_is_stable(default: capacity.CapacitySpec, seed: str) -> None:
    """The same file yields the same slice, byte for byte, in every process (whatever its
    hash seed): a simulator started again republishes what it published, and a
    difference would bump the pool's generation for nothing."""
    again = capacity.load_capacity()
    assert json.dumps(slice_of(again, "gpu-t")) == json.dumps(slice_of(default, "gpu-t"))
    there = subprocess.run(
        [sys.executable, "-c", _SLICE_IN_A_PROCESS],
        env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert there == json.dumps(slice_of(default, "gpu-a"))


def test_the_planner_reads_what_the_simulator_publishes(default: capacity.CapacitySpec) -> None:
    slices = [slice_of(default, n.name) for n in default.nodes]
    classes = [capacity.render_device_class(c) for c in default.device_classes]
    snapshot = parse_snapshot(classes, slices)
    assert snapshot.problems == ()
    assert len(snapshot.devices) == (1 + 5) + 2 + 2  # gpu-a (whole + MIG), gpu-b, gpu-t
    t4 = snapshot.device_class("nvidia-t4-mps-physical")
    assert t4 is not None
    assert (t4.placement, t4.sharing, t4.share_percent) == (
        PlacementMode.WHOLE_DEVICE,
        SharingMode.SHARED,
        50,
    )
    mig = snapshot.device_class("nvidia-a100-80gb-mig")
    assert mig is not None and mig.placement is PlacementMode.PARTITION


def test_node_is_ready_with_its_resources(default: capacity.CapacitySpec) -> None:
    node = default.node("gpu-t")
    assert node is not None
    obj = capacity.render_node(node)
    assert obj["status"]["allocatable"] == {"cpu": "32", "memory": "128Gi", "pods": "110"}
    assert obj["metadata"]["labels"][capacity.MANAGED_LABEL] == "true"
    ready = [c for c in capacity.node_conditions("2026-01-01T00:00:00Z") if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param(
            {"nodes": [{"name": "a"}, {"name": "a"}]}, "duplicate node", id="duplicate-node"
        ),
        pytest.param(
            {"nodes": [{"name": "a", "gpus": [{"product": "X", "memory": "lots"}]}]},
            "not a Kubernetes quantity",
            id="memory-not-a-quantity",
        ),
        pytest.param(
            {
                "nodes": [
                    {
                        "name": "a",
                        "gpus": [
                            {
                                "product": "X",
                                "memory": "80Gi",
                                "shared": True,
                                "mig": [{"profile": "1g.10gb", "memory": "10Gi"}],
                            }
                        ],
                    }
                ]
            },
            "either split into MIG devices or shared",
            id="mig-and-shared",
        ),
        pytest.param(
            {
                "nodes": [
                    {
                        "name": "a",
                        "gpus": [
                            {"product": "X", "memory": "8Gi", "requestPolicy": {"default": "1Gi"}}
                        ],
                    }
                ]
            },
            "requestPolicy needs shared",
            id="policy-without-sharing",
        ),
        pytest.param({"nodes": [{"name": "a", "gpu": []}]}, "Extra inputs", id="unknown-field"),
    ],
)
def test_bad_capacity_is_refused_with_the_field(data: dict[str, Any], problem: str) -> None:
    with pytest.raises(capacity.CapacityError, match=problem):
        capacity.load_capacity(data)


def test_capacity_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "capacity.yaml"
    bad.write_text("nodes: [", encoding="utf-8")
    with pytest.raises(capacity.CapacityError, match=str(bad)):
        capacity.load_capacity(bad)
