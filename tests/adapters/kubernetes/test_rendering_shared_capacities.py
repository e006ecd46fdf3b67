"""Shared claims on a device that publishes more than memory: as many as the allocator fits.

A Shared claim asks only memory (`capacity.requests.memory`, its share of the device's).
Every capacity it does not name is consumed at its requestPolicy `default`, else whole
(KEP-5075): on a shared GPU that also publishes, say, `cores` without a policy, the first
claim takes all the cores and no second one fits, whatever memory is left. The planner
(fsm/placement/capacity.py) counts how many such claims a device's other capacities
allow (`Device.sharers_at_most`); here its plans are rendered and allocated, one order
after another, by the simulator's allocator (adapters/simulator/allocation.py) on the
same objects.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_rendering_dedicated import _allocated, _rendered
from test_rendering_shares import GPU, SMALL

from adapters.simulator import allocation, capacity
from fsm.placement.capacity import SHARE_PERCENT_LABEL, SHARING_LABEL
from fsm.placement.planner import PlanRequest, plan
from fsm.reasons import Reason
from fsm.values import AcceleratorPolicy, SharingMode
from tests.support.planner_inputs import default_recipes, snapshot

RECIPES = default_recipes()
SHARED_T4 = {"product": "Tesla T4", "memory": "16Gi", "architecture": "Turing", "shared": True}
SHARED_ONLY = AcceleratorPolicy(allowed_sharing_modes=(SharingMode.SHARED,))


def _objects(
    cores: dict[str, Any] | None, share: int, gpus: int = 2
) -> tuple[list[Any], list[Any]]:
    """`gpus` shared T4s on node n, each also publishing `cores` (None: memory only), and
    a Shared class of `share` percent selecting them. Below 50% they have 40Gi: a quarter
    of 16Gi is too little for the model."""
    gpu = SHARED_T4 if share >= 50 else {**SHARED_T4, "memory": "40Gi"}
    node = capacity.NodeSpec.model_validate({"name": "n", "gpus": [gpu] * gpus})
    slices = [capacity.render_slice(node, "gpu.nvidia.com", name="n", generation=1)]
    if cores is not None:
        for device in slices[0]["spec"]["devices"]:
            device["capacity"]["cores"] = cores
    labels = {SHARING_LABEL: "Shared", SHARE_PERCENT_LABEL: str(share)}
    spec = capacity.DeviceClassSpec(name="shared", labels=labels, selectors=(GPU,))
    return slices, [capacity.render_device_class(spec)]


@pytest.mark.parametrize(
    ("cores", "share", "per_device"),
    [
        pytest.param(None, 50, 2, id="memory-only"),
        pytest.param({"value": "40"}, 50, 1, id="cores-without-a-policy-taken-whole"),
        pytest.param(
            {"value": "40", "requestPolicy": {"validValues": ["10", "20", "40"]}},
            50,
            1,
            id="cores-without-a-default-taken-whole",
        ),
        pytest.param(
            {"value": "40", "requestPolicy": {"default": "30"}}, 50, 1, id="cores-default-3/4"
        ),
        pytest.param(
            {"value": "40", "requestPolicy": {"default": "20"}}, 50, 2, id="cores-default-half"
        ),
        pytest.param(
            {"value": "40", "requestPolicy": {"default": "4"}}, 50, 2, id="cores-default-tenth"
        ),
        pytest.param(
            {"value": "30", "requestPolicy": {"default": "10"}}, 25, 3, id="cores-default-third"
        ),
        pytest.param(
            {"value": "40", "requestPolicy": {"default": "0"}}, 25, 4, id="cores-default-zero"
        ),
    ],
)
def test_shared_orders_take_what_the_allocator_gives_them(
    cores: dict[str, Any] | None, share: int, per_device: int
) -> None:
    """Orders are planned in turn until the planner finds no room: each plan's claim is
    allocated where the planner counted it, and the next, refused by both, by neither."""
    slices, classes = _objects(cores, share)
    inventory = allocation.Inventory.from_objects(slices, classes)
    usage = allocation.Usage()
    claims: list[dict[str, Any]] = []
    got: list[str] = []
    request = PlanRequest(facts=SMALL, accelerator=SHARED_ONLY)
    for index in range(2 * 100 // share + 1):
        outcome = plan(request, snapshot(classes, slices, claims), RECIPES)
        if outcome.plan is None:
            break
        assert outcome.plan.sharing_mode is SharingMode.SHARED
        assert outcome.plan.share_percent == share
        spec = _rendered(outcome.plan)
        results = allocation.allocate_claim(f"team/c{index}", spec, "n", inventory, usage)
        assert results is not None, f"order {index}: planned where the allocator has no room"
        got += [result["device"] for result in results]
        claims.append(_allocated(index, spec, results))
    assert sorted(got) == sorted(f"gpu-{i}" for i in range(2) for _ in range(per_device))
    assert outcome.reason is Reason.NO_CAPACITY  # the next order: none left, for both
    assert allocation.allocate_claim("team/next", spec, "n", inventory, usage) is None


def test_a_claim_asking_memory_only_takes_a_capacity_without_a_policy_whole() -> None:
    """Why: two 50% claims on one T4 that also publishes cores, the second refused with
    half the memory free."""
    slices, classes = _objects({"value": "40"}, 50, gpus=1)
    inventory = allocation.Inventory.from_objects(slices, classes)
    outcome = plan(
        PlanRequest(facts=SMALL, accelerator=SHARED_ONLY), snapshot(classes, slices), RECIPES
    )
    assert outcome.plan is not None
    spec, usage = _rendered(outcome.plan), allocation.Usage()
    (request,) = spec["devices"]["requests"]
    assert list(request["exactly"]["capacity"]["requests"]) == ["memory"]
    (first,) = allocation.allocate_claim("team/a", spec, "n", inventory, usage) or [None]
    assert first is not None and first["consumedCapacity"]["cores"] == "40"
    assert allocation.allocate_claim("team/b", spec, "n", inventory, usage) is None
