"""Shared claims: one device takes as many of them as the planner counted, no more, no fewer.

The planner counts `sharePercent` units of 100 per device (fsm/placement/capacity.py); the
scheduler fits claims by their consumable capacity. The claims rendered here are
allocated by the simulator's allocator (adapters/simulator/allocation.py, the 1.34
structured allocator's first fit by summed consumed capacity) on one shared device.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from workload_samples import FACTS, HF_REF, ORDER, PLAN, RECIPE, SETTINGS, policy

from adapters.kubernetes.rendering import render_workload
from adapters.simulator import allocation, capacity
from fsm.placement import sizing
from fsm.quantity import GIB, MIB, gib_rounded, parse_quantity
from fsm.values import ModelFacts, Plan, Quantization, SharingMode

GPU = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
PRODUCT = "Shared GPU"
SMALL = FACTS.model_copy(  # Qwen2.5-0.5B in bf16: ~3.9 GiB of need, the least a model takes
    update={"parameter_count": 494_000_000, "quantization": Quantization.NONE, "dtype": "bfloat16"}
)
DEVICES = {
    "t4-15360Mi": "15360Mi",  # what NVML reports for a T4
    "t4-16Gi": "16Gi",  # the simulator's T4
    "l4-23034Mi": "23034Mi",  # rounds to 22 GiB
    "a100-40Gi": "40Gi",
    "a100-80Gi": "80Gi",
    "h100-81559Mi": "81559Mi",  # rounds to 80 GiB, like the A100
    "mig-9856Mi": "9856Mi",  # a 1g.10gb's memory, rounded up to 10 GiB by the plan
}


def _plan(memory: Fraction, share: int, count: int = 1) -> Plan:
    return PLAN.model_copy(
        update={
            "device_class": "shared",
            "accelerator_product_name": PRODUCT,
            "accelerator_memory_gib": gib_rounded(memory),  # as the planner reports it
            "accelerator_count": count,
            "sharing_mode": SharingMode.SHARED,
            "share_percent": share,
            "cpu": "2",
        }
    )


def _claim(plan: Plan, facts: ModelFacts) -> dict[str, Any]:
    objects = render_workload(ORDER, plan, RECIPE, policy(), HF_REF, settings=SETTINGS, facts=facts)
    template = next(o for o in objects if o["kind"] == "ResourceClaimTemplate")
    return dict(template["spec"]["spec"])


def _inventory(memory: str, gpus: int = 1) -> allocation.Inventory:
    node = capacity.NodeSpec.model_validate(
        {"name": "n", "gpus": [{"product": PRODUCT, "memory": memory, "shared": True}] * gpus}
    )
    return allocation.Inventory.from_objects(
        [capacity.render_slice(node, "gpu.nvidia.com", name="n", generation=1)],
        [capacity.render_device_class(capacity.DeviceClassSpec(name="shared", selectors=(GPU,)))],
    )


def _fitting(claim: dict[str, Any], inventory: allocation.Inventory, usage: Any = None) -> int:
    """How many more such claims the allocator gives devices (at most 101)."""
    usage = usage if usage is not None else allocation.Usage()
    fitted = 0
    while fitted <= 100 and allocation.allocate_claim(f"c{fitted}", claim, "n", inventory, usage):
        fitted += 1
    return fitted


def _counted(share: int) -> int:
    return 100 // share  # the planner's consumers per device


def _fits(facts: ModelFacts, memory: Fraction, share: int, count: int = 1) -> bool:
    return sizing.fits(facts, count=count, device_memory=memory * share / 100)


# Every (device, share) the small model fits in by the planner's test, and two of a 7.6B
# AWQ model, whose need sets the claim's least device memory above the plan's G - 1/2 GiB.
TABLE = [
    pytest.param(memory, share, SMALL, id=f"{name}-{share}%-0.5b")
    for name, memory in DEVICES.items()
    for share in (50, 33, 25)
    if _fits(SMALL, parse_quantity(memory), share)
] + [
    pytest.param("24Gi", 50, FACTS, id="24Gi-50%-7.6b-awq"),
    pytest.param("40Gi", 25, FACTS, id="a100-40Gi-25%-7.6b-awq"),
    pytest.param(
        "9856Mi",
        50,
        FACTS.model_copy(update={"weights_bytes": 13 * GIB // 10, "parameter_count": None}),
        id="mig-9856Mi-50%-need-above-the-rounded-bound",
    ),
]


@pytest.mark.parametrize(("memory", "share", "facts"), TABLE)
def test_one_device_takes_the_claims_the_planner_counted(
    memory: str, share: int, facts: ModelFacts
) -> None:
    device = parse_quantity(memory)
    assert _fits(facts, device, share), "the table holds only plans the planner makes"
    claim = _claim(_plan(device, share), facts)
    assert _fitting(claim, _inventory(memory)) == _counted(share)


@pytest.mark.parametrize(("memory", "share", "facts"), TABLE)
def test_consumed_is_the_share_of_the_device_and_at_least_the_need(
    memory: str, share: int, facts: ModelFacts
) -> None:
    device = parse_quantity(memory)
    (request,) = _claim(_plan(device, share), facts)["devices"]["requests"]
    consumed = parse_quantity(request["exactly"]["capacity"]["requests"]["memory"])
    # At most the share of the device; below it by less than the share of one GiB (the
    # plan's G GiB says the device has G - 1/2 to G + 1/2) and a MiB (rounded down).
    assert device * share / 100 - GIB * share / 100 - MIB < consumed <= device * share / 100
    need = sizing.memory_need(facts, 1) / sizing.GPU_MEMORY_UTILIZATION
    assert consumed > need - MIB, "a claim consumes less than the model needs"


def test_shares_of_several_sizes_fill_one_device_as_counted() -> None:
    """50 + 25 + 25 units fill a device; claims of other orders' models mix as counted."""
    memory = "80Gi"
    device = parse_quantity(memory)
    inventory, usage = _inventory(memory), allocation.Usage()
    half, quarter = _claim(_plan(device, 50), FACTS), _claim(_plan(device, 25), SMALL)
    assert allocation.allocate_claim("half", half, "n", inventory, usage)
    assert _fitting(quarter, inventory, usage) == 2
    assert _fitting(half, inventory, usage) == 0


def test_a_plan_of_another_size_does_not_take_the_device() -> None:
    """A claim consumes its share of a device of the plan's size; one of another size
    (the same product, another memory) is not one the planner counted for it."""
    (request,) = _claim(_plan(Fraction(80 * GIB), 50), SMALL)["devices"]["requests"]
    claim = _claim(_plan(Fraction(80 * GIB), 50), SMALL)
    assert request["exactly"]["capacity"]["requests"]["memory"] == "40704Mi"  # 50% of 79.5Gi
    assert _fitting(claim, _inventory("40Gi")) == 0
    assert _fitting(claim, _inventory("96Gi")) == 0
    assert _fitting(claim, _inventory("81559Mi")) == 2


def _exact_for_any_device_of(gib: int, share: int) -> bool:
    """Whether `counted + 1` claims consume more than any device of `gib` GiB (rounded)
    has: the plan says only G, so the least the claim assumes is G - 1/2 GiB
    (docs/workload.md, "Shared claims")."""
    least = (gib - Fraction(1, 2)) * GIB
    consumed = Fraction(math.floor(least * share / 100 / MIB) * MIB)
    return (_counted(share) + 1) * consumed >= (gib + Fraction(1, 2)) * GIB


@given(
    device_mib=st.integers(min_value=8 * 1024, max_value=96 * 1024),
    share=st.sampled_from([50, 40, 34, 33, 25, 20, 10]),
    billions=st.sampled_from([Fraction(1, 2), Fraction(3, 2), 3, 7]),
    count=st.sampled_from([1, 2]),
)
def test_never_fewer_and_exact_above_the_rounding_limit(
    device_mib: int, share: int, billions: Fraction, count: int
) -> None:
    device = Fraction(device_mib * MIB)
    facts = SMALL.model_copy(update={"parameter_count": int(billions * 10**9)})
    if not _fits(facts, device, share, count):
        return  # the planner makes no such plan
    claim = _claim(_plan(device, share, count), facts)
    fitted = _fitting(claim, _inventory(f"{device_mib}Mi", gpus=count))
    assert fitted >= _counted(share), "a claim does not fit where the planner placed it"
    if _exact_for_any_device_of(gib_rounded(device), share):
        assert fitted == _counted(share), "more claims on a device than the planner counted"
