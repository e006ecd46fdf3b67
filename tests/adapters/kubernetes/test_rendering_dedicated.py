"""Dedicated claims: a device the planner counts as an order's alone is the allocator's too.

A Dedicated claim asks no capacity (`capacity.requests`). On a device that allows
multiple allocations, such a claim consumes each capacity's requestPolicy `default`, else
all of it (KEP-5075): the whole device, unless a default says less. The planner (fsm/
placement/planner.py) plans no Dedicated order where its claim could be given a device
shared by default; here its plans are rendered and allocated, one order after another, by
the simulator's allocator (adapters/simulator/allocation.py) on the same objects.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_rendering_shares import GPU, SMALL, _claim
from workload_samples import PLAN, RECIPE

from adapters.simulator import allocation, capacity
from fsm.placement.capacity import ORDER_UID_LABEL
from fsm.placement.planner import PlanRequest, plan
from fsm.reasons import Reason
from fsm.values import Plan, SharingMode
from tests.support.planner_inputs import default_recipes, snapshot

RECIPES = default_recipes()
T4 = "Tesla T4"  # a product the shipped recipes serve
WHOLE = {"product": T4, "memory": "16Gi", "architecture": "Turing"}
SHARED = {**WHOLE, "shared": True}
WHOLE_ONLY = f"{GPU} && device.allowMultipleAllocations == false"


def _objects(gpus: list[dict[str, Any]], selector: str) -> tuple[list[Any], list[Any]]:
    node = capacity.NodeSpec.model_validate({"name": "n", "gpus": gpus})
    slices = [capacity.render_slice(node, "gpu.nvidia.com", name="n", generation=1)]
    spec = capacity.DeviceClassSpec(name="dedicated", selectors=(selector,))
    return slices, [capacity.render_device_class(spec)]


def _rendered(planned: Plan) -> dict[str, Any]:
    """The claim of a plan's template (whichever recipe: the claim does not depend on it)."""
    return _claim(planned.model_copy(update={"recipe": RECIPE.name}), SMALL)


def _allocated(index: int, spec: dict[str, Any], results: list[Any]) -> dict[str, Any]:
    """The claim as the API server then holds it, for the next plan to count."""
    return {
        "metadata": {
            "name": f"order-{index}-gpu",
            "namespace": "team",
            "labels": {ORDER_UID_LABEL: f"order-{index}"},
        },
        "spec": spec,
        "status": {"allocation": {"devices": {"results": results}}},
    }


def test_a_dedicated_claim_asks_no_capacity_and_nothing_a_server_may_refuse() -> None:
    """No `capacity.requests`: the plan knows the device's memory only to the GiB, and
    any amount short of all of it would leave room for another claim. No selector on
    `device.allowMultipleAllocations`: a server without DRAConsumableCapacity (the
    default in 1.34) refuses it, and every Dedicated order would be refused with it."""
    claim = _claim(PLAN, SMALL)
    (request,) = claim["devices"]["requests"]
    assert "capacity" not in request["exactly"] and "config" not in claim["devices"]
    assert not any(
        "allowMultipleAllocations" in selector["cel"]["expression"]
        for selector in request["exactly"]["selectors"]
    )


@pytest.mark.parametrize(
    ("gpus", "selector", "placed"),
    [
        pytest.param([WHOLE, WHOLE], GPU, 2, id="whole-gpus"),
        pytest.param([SHARED, SHARED], GPU, 2, id="shared-no-policy"),
        pytest.param(
            [{**SHARED, "request_policy": {"default": "16Gi"}}] * 2,
            GPU,
            2,
            id="shared-default-of-all-of-it",
        ),
        pytest.param(
            [{**SHARED, "request_policy": {"valid_values": ["4Gi", "8Gi", "16Gi"]}}] * 2,
            GPU,
            2,
            id="shared-valid-values-no-default",
        ),
        pytest.param(
            [{**SHARED, "request_policy": {"default": "1Gi"}}] * 2,
            GPU,
            0,
            id="shared-default-1Gi",
        ),
        pytest.param(
            [
                {
                    **SHARED,
                    "request_policy": {
                        "default": "2Gi",
                        "valid_range": {"min": "2Gi", "step": "2Gi"},
                    },
                }
            ]
            * 2,
            GPU,
            0,
            id="shared-range-default-2Gi",
        ),
        pytest.param(
            [WHOLE, {**SHARED, "request_policy": {"default": "1Gi"}}],
            GPU,
            0,
            id="one-whole-one-shared-by-default",
        ),
        pytest.param(
            [WHOLE, {**SHARED, "request_policy": {"default": "1Gi"}}],
            WHOLE_ONLY,
            1,
            id="a-class-of-whole-gpus-only",
        ),
    ],
)
def test_two_dedicated_orders_never_share_a_device(
    gpus: list[dict[str, Any]], selector: str, placed: int
) -> None:
    slices, classes = _objects(gpus, selector)
    inventory = allocation.Inventory.from_objects(slices, classes)
    usage = allocation.Usage()
    claims: list[dict[str, Any]] = []
    got: list[str] = []
    for index in range(len(gpus) + 1):
        outcome = plan(PlanRequest(facts=SMALL), snapshot(classes, slices, claims), RECIPES)
        if outcome.plan is None:
            break
        assert outcome.plan.sharing_mode is SharingMode.DEDICATED
        spec = _rendered(outcome.plan)
        results = allocation.allocate_claim(f"team/c{index}", spec, "n", inventory, usage)
        assert results is not None, f"order {index}: planned where the allocator has no room"
        got += [result["device"] for result in results]
        claims.append(_allocated(index, spec, results))
    assert len(got) == placed and len(set(got)) == placed  # every order a device of its own
    if placed:
        assert outcome.reason is Reason.NO_CAPACITY  # the next order: none left, for both
        assert allocation.allocate_claim("team/next", spec, "n", inventory, usage) is None
    else:
        assert outcome.reason is Reason.PLACEMENT_UNDECIDABLE


def test_what_the_planner_refuses_would_put_two_orders_on_one_device() -> None:
    """Why: a Dedicated claim rendered for such devices anyway is given one GPU twice."""
    slices, classes = _objects([{**SHARED, "request_policy": {"default": "1Gi"}}] * 2, GPU)
    inventory = allocation.Inventory.from_objects(slices, classes)
    forced = PLAN.model_copy(
        update={"device_class": "dedicated", "accelerator_product_name": T4, "cpu": "2"}
    )
    spec, usage = _claim(forced, SMALL), allocation.Usage()
    got = [allocation.allocate_claim(f"team/c{i}", spec, "n", inventory, usage) for i in (0, 1)]
    assert [results[0]["device"] for results in got if results] == ["gpu-0", "gpu-0"]
