"""The simulator's allocator, without a server: which devices a claim gets, and when none."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from adapters.simulator import allocation, capacity
from fsm.placement.inventory import parse_snapshot

GPU = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
T4 = "device.attributes['gpu.nvidia.com'].productName == 'Tesla T4'"


def node(name: str, *gpus: dict[str, Any]) -> capacity.NodeSpec:
    return capacity.NodeSpec.model_validate({"name": name, "gpus": list(gpus)})


A100 = {"product": "NVIDIA A100 80GB PCIe", "memory": "80Gi"}
A100_MIG = {
    **A100,
    "mig": [
        {"profile": "3g.40gb", "memory": "40192Mi", "multiprocessors": 42},
        {"profile": "1g.10gb", "memory": "9856Mi", "multiprocessors": 14, "count": 2},
    ],
}
T4_SHARED = {"product": "Tesla T4", "memory": "16Gi", "architecture": "Turing", "shared": True}


def inventory(*nodes: capacity.NodeSpec, classes: dict[str, list[str]] | None = None) -> Any:
    classes = classes or {"gpu.nvidia.com": [GPU], "mig.nvidia.com": [MIG], "t4": [GPU, T4]}
    slices = [capacity.render_slice(n, "gpu.nvidia.com", name=n.name, generation=1) for n in nodes]
    device_classes = [
        capacity.render_device_class(capacity.DeviceClassSpec(name=k, selectors=tuple(v)))
        for k, v in classes.items()
    ]
    return allocation.Inventory.from_objects(slices, device_classes)


def claim(*requests: dict[str, Any], constraints: list[Any] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def exactly(name: str, device_class: str, **body: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, **body}}


def devices(results: list[dict[str, Any]] | None) -> list[str] | None:
    return None if results is None else sorted(r["device"] for r in results)


CASES = [
    pytest.param(
        [node("n", A100, A100)],
        claim(exactly("gpu", "gpu.nvidia.com")),
        ["gpu-0"],
        id="one-whole-gpu-first-by-name",
    ),
    pytest.param(
        [node("n", A100, A100)],
        claim(exactly("gpu", "gpu.nvidia.com", count=2)),
        ["gpu-0", "gpu-1"],
        id="exact-count-two",
    ),
    pytest.param(
        [node("n", A100)],
        claim(exactly("gpu", "gpu.nvidia.com", count=2)),
        None,
        id="exact-count-more-than-the-node-has",
    ),
    pytest.param(
        [node("n", A100_MIG)],
        claim(exactly("gpu", "gpu.nvidia.com")),
        None,
        id="mig-split-gpu-is-not-a-whole-device",
    ),
    pytest.param(
        [node("n", A100_MIG)],
        claim(
            exactly(
                "part",
                "mig.nvidia.com",
                selectors=[
                    {
                        "cel": {
                            "expression": "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"
                        }
                    }
                ],
            )
        ),
        ["gpu-0-mig-3g40gb-9-0"],
        id="mig-partition-by-profile",
    ),
    pytest.param(
        [node("n", A100_MIG)],
        claim(
            exactly(
                "part",
                "mig.nvidia.com",
                count=2,
                selectors=[
                    {
                        "cel": {
                            "expression": "device.capacity['gpu.nvidia.com'].memory"
                            ".compareTo(quantity('10Gi')) < 0"
                        }
                    }
                ],
            )
        ),
        ["gpu-0-mig-1g10gb-19-0", "gpu-0-mig-1g10gb-19-1"],
        id="mig-partitions-by-memory-selector",
    ),
    pytest.param(
        [node("n", A100, T4_SHARED)],
        claim(exactly("gpu", "t4")),
        ["gpu-1"],
        id="class-selectors-pick-the-product",
    ),
    pytest.param(
        [node("n", A100, A100)],
        claim(exactly("gpu", "gpu.nvidia.com", allocationMode="All")),
        ["gpu-0", "gpu-1"],
        id="allocation-mode-all",
    ),
    pytest.param(
        [node("n", T4_SHARED)],
        claim(
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "a100", "deviceClassName": "gpu.nvidia.com", "count": 2},
                    {"name": "t4", "deviceClassName": "t4"},
                ],
            }
        ),
        ["gpu-0"],
        id="first-available-falls-through",
    ),
    pytest.param(
        [node("n", A100, T4_SHARED)],
        claim(
            exactly("a", "gpu.nvidia.com"),
            exactly("b", "gpu.nvidia.com"),
            constraints=[{"matchAttribute": "gpu.nvidia.com/productName"}],
        ),
        None,
        id="match-attribute-refuses-mixed-products",
    ),
]


@pytest.mark.parametrize(("nodes", "spec", "expected"), CASES)
def test_allocation_picks_devices(
    nodes: list[capacity.NodeSpec], spec: dict[str, Any], expected: list[str] | None
) -> None:
    inv = inventory(*nodes)
    usage = allocation.Usage()
    assert devices(allocation.allocate_claim("ns/c", spec, "n", inv, usage)) == expected


def test_first_available_names_the_subrequest() -> None:
    inv = inventory(node("n", T4_SHARED))
    spec = claim(
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 3},
                {"name": "small", "deviceClassName": "t4"},
            ],
        }
    )
    results = allocation.allocate_claim("ns/c", spec, "n", inv, allocation.Usage())
    assert results is not None
    assert [r["request"] for r in results] == ["gpu/small"]


def test_a_whole_device_is_held_until_its_claim_goes() -> None:
    inv = inventory(node("n", A100))
    spec = claim(exactly("gpu", "gpu.nvidia.com"))
    first = allocation.allocate_claim("ns/a", spec, "n", inv, allocation.Usage())
    assert first is not None
    held = {"status": {"allocation": {"devices": {"results": first}}}}
    # Usage is rebuilt from the claims that exist: with the holder, nothing is left.
    assert (
        allocation.allocate_claim("ns/b", spec, "n", inv, allocation.Usage.from_claims([held]))
        is None
    )
    # The holder deleted: the device is free again.
    assert devices(
        allocation.allocate_claim("ns/b", spec, "n", inv, allocation.Usage.from_claims([]))
    ) == ["gpu-0"]


def test_devices_on_another_node_are_not_offered() -> None:
    inv = inventory(node("m", A100), node("n"))
    assert (
        allocation.allocate_claim(
            "ns/c", claim(exactly("gpu", "gpu.nvidia.com")), "n", inv, allocation.Usage()
        )
        is None
    )


@pytest.mark.parametrize(
    ("request_memory", "holds"),
    [
        pytest.param("8Gi", 2, id="half-each-two-fit"),
        pytest.param("4Gi", 4, id="quarter-each-four-fit"),
        pytest.param("10Gi", 1, id="more-than-half-one-fits"),
        pytest.param(None, 1, id="no-request-consumes-all"),
    ],
)
def test_shared_device_holds_what_its_capacity_allows(
    request_memory: str | None, holds: int
) -> None:
    inv = inventory(node("n", T4_SHARED))
    body: dict[str, Any] = {}
    if request_memory is not None:
        body["capacity"] = {"requests": {"memory": request_memory}}
    spec = claim(exactly("gpu", "t4", **body))
    usage = allocation.Usage()
    granted = []
    while (results := allocation.allocate_claim("ns/c", spec, "n", inv, usage)) is not None:
        granted.append(results[0])
        assert len(granted) <= 8, "a shared device must run out"
    assert len(granted) == holds
    assert {g["device"] for g in granted} == {"gpu-0"}
    assert len({g["shareID"] for g in granted}) == holds
    expected = request_memory or "16Gi"
    assert all(g["consumedCapacity"] == {"memory": expected} for g in granted)


@pytest.mark.parametrize(
    ("policy", "asked", "consumed"),
    [
        pytest.param({"default": "4Gi"}, None, "4Gi", id="policy-default-when-not-asked"),
        pytest.param(
            {"default": "4Gi", "validValues": ["4Gi", "8Gi"]},
            "5Gi",
            "8Gi",
            id="rounded-up-to-a-valid-value",
        ),
        pytest.param(
            {"default": "4Gi", "validValues": ["4Gi", "8Gi"]},
            "9Gi",
            None,
            id="above-every-valid-value",
        ),
        pytest.param(
            {"default": "2Gi", "validRange": {"min": "2Gi", "step": "2Gi"}},
            "3Gi",
            "4Gi",
            id="rounded-up-to-a-step",
        ),
        pytest.param(
            {"default": "2Gi", "validRange": {"min": "2Gi", "max": "8Gi"}},
            "12Gi",
            None,
            id="above-the-range",
        ),
    ],
)
def test_request_policy_rounds_consumption(
    policy: dict[str, Any], asked: str | None, consumed: str | None
) -> None:
    shared = {**T4_SHARED, "requestPolicy": policy}
    inv = inventory(node("n", shared))
    body: dict[str, Any] = {"capacity": {"requests": {"memory": asked}}} if asked else {}
    results = allocation.allocate_claim(
        "ns/c", claim(exactly("gpu", "t4", **body)), "n", inv, allocation.Usage()
    )
    if consumed is None:
        assert results is None
    else:
        assert results is not None
        assert results[0]["consumedCapacity"] == {"memory": consumed}


def test_a_dedicated_claim_on_a_shared_device_excludes_sharers() -> None:
    inv = inventory(node("n", T4_SHARED))
    usage = allocation.Usage()
    whole = allocation.allocate_claim("ns/a", claim(exactly("gpu", "t4")), "n", inv, usage)
    assert whole is not None and whole[0]["consumedCapacity"] == {"memory": "16Gi"}
    half = claim(exactly("gpu", "t4", capacity={"requests": {"memory": "8Gi"}}))
    assert allocation.allocate_claim("ns/b", half, "n", inv, usage) is None


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(None, id="no-policy"),
        pytest.param({"default": "16Gi"}, id="default-of-all-of-it"),
        pytest.param({"validValues": ["4Gi", "16Gi"]}, id="no-default"),
        pytest.param({"default": "1Gi"}, id="default-1Gi"),
        pytest.param({"default": "2Gi", "validRange": {"min": "2Gi", "step": "2Gi"}}, id="range"),
    ],
)
def test_the_planner_knows_which_devices_a_claim_asking_no_capacity_would_share(
    policy: dict[str, Any] | None,
) -> None:
    """`Device.shared_by_default`, which keeps Dedicated plans off a device, is true
    exactly where this allocator gives two claims that ask no capacity one device."""
    shared = {**T4_SHARED, "requestPolicy": policy} if policy else T4_SHARED
    slices = [capacity.render_slice(node("n", shared), "gpu.nvidia.com", name="n", generation=1)]
    (device,) = parse_snapshot((), slices, ()).devices
    inv, usage = inventory(node("n", shared)), allocation.Usage()
    dedicated = claim(exactly("gpu", "t4"))
    assert allocation.allocate_claim("ns/a", dedicated, "n", inv, usage) is not None
    stacked = allocation.allocate_claim("ns/b", dedicated, "n", inv, usage) is not None
    assert device.shared_by_default is stacked


@pytest.mark.parametrize(
    "cores",
    [
        pytest.param(None, id="memory-only"),
        pytest.param({"value": "40"}, id="no-policy"),
        pytest.param(
            {"value": "40", "requestPolicy": {"validValues": ["8", "40"]}}, id="no-default"
        ),
        pytest.param({"value": "40", "requestPolicy": {"default": "30"}}, id="default-3/4"),
        pytest.param({"value": "40", "requestPolicy": {"default": "20"}}, id="default-half"),
        pytest.param({"value": "30", "requestPolicy": {"default": "10"}}, id="default-third"),
        pytest.param({"value": "40", "requestPolicy": {"default": "50"}}, id="default-above"),
        pytest.param({"value": "40", "requestPolicy": {"default": "0"}}, id="default-zero"),
    ],
)
def test_the_planner_knows_how_many_claims_asking_only_memory_a_device_holds(
    cores: dict[str, Any] | None,
) -> None:
    """`Device.sharers_at_most`, which bounds the Shared claims the planner counts on a
    device, is how many claims asking only memory (as Shared ones do) this allocator
    gives it, where memory would take 16."""
    slices = [capacity.render_slice(node("n", T4_SHARED), "gpu.nvidia.com", name="n", generation=1)]
    if cores is not None:
        slices[0]["spec"]["devices"][0]["capacity"]["cores"] = cores
    (device,) = parse_snapshot((), slices, ()).devices
    t4 = capacity.render_device_class(capacity.DeviceClassSpec(name="t4", selectors=(GPU, T4)))
    inv, usage = allocation.Inventory.from_objects(slices, [t4]), allocation.Usage()
    sharer = claim(exactly("gpu", "t4", capacity={"requests": {"memory": "1Gi"}}))
    fitted = 0
    while allocation.allocate_claim(f"ns/c{fitted}", sharer, "n", inv, usage) is not None:
        fitted += 1
    most = device.sharers_at_most
    assert fitted == (16 if most is None else min(most, 16))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            claim(exactly("gpu", "nvidia-h100")),
            "device class nvidia-h100 does not exist",
            id="missing-class",
        ),
        pytest.param(
            claim(
                exactly(
                    "gpu",
                    "gpu.nvidia.com",
                    selectors=[
                        {"cel": {"expression": "device.attributes['gpu.nvidia.com'].nosuch == 'x'"}}
                    ],
                )
            ),
            "CEL runtime error",
            id="unknown-attribute",
        ),
        pytest.param(
            claim(
                exactly(
                    "gpu", "gpu.nvidia.com", selectors=[{"cel": {"expression": "device.driver"}}]
                )
            ),
            "CEL runtime error",
            id="not-a-bool",
        ),
    ],
)
def test_claims_that_cannot_be_judged_raise(spec: dict[str, Any], message: str) -> None:
    inv = inventory(node("n", A100))
    with pytest.raises(allocation.AllocationError, match=message):
        allocation.allocate_claim("ns/c", spec, "n", inv, allocation.Usage())


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        pytest.param(8 * 2**30, "8Gi", id="gibibytes"),
        pytest.param(9856 * 2**20, "9856Mi", id="mebibytes"),
        pytest.param(14, "14", id="plain"),
    ],
)
def test_format_quantity(amount: int, text: str) -> None:
    assert allocation.format_quantity(Fraction(amount)) == text
