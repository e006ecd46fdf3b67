"""Properties of the planner over random clusters, policies, models and held places.

Whatever the cluster: the plan never takes more than is free (counting the order's own
place as taken, and only what it reclaims from lower priorities as freed), never a
placement, sharing mode, device class or count the class forbids, never a tried class,
always a size that holds the model — and the same input always gives the same outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm.placement import sizing
from fsm.placement.capacity import FULL_SHARE, Snapshot, usage_by_device
from fsm.placement.planner import PlanRequest, plan
from fsm.values import AcceleratorPolicy, ModelFacts, PlacementMode, Plan, PlanOutcome, SharingMode
from tests.support.planner_inputs import (
    BGE_M3,
    GGUF_05B,
    GPU_CLASS,
    LLAMA_8B_FP8,
    QWEN_05B,
    QWEN_7B,
    QWEN_32B_AWQ,
    Obj,
    claim,
    classes,
    default_recipes,
    device_class,
    gpu,
    mig,
    model,
    resource_slice,
    snapshot,
)

RECIPES = default_recipes()
PRODUCTS = [
    ("Tesla T4", "16Gi"),
    ("NVIDIA L4", "24Gi"),
    ("NVIDIA A100-SXM4-40GB", "40Gi"),
    ("NVIDIA A100 80GB PCIe", "80Gi"),
]
HOLDERS = {"low": 100, "normal": 500, "high": 1000, "me": 500}
PRIORITY_CLASSES = [None, "inference-low", "inference-normal", "inference-high"]
MODELS = [
    QWEN_05B,
    QWEN_7B,
    QWEN_32B_AWQ,
    BGE_M3,
    GGUF_05B,
    LLAMA_8B_FP8,
    model("x/unsized", dtype=None),
]
CLASS_OBJS = [
    *classes(),
    device_class("shared-quarter", GPU_CLASS, sharing="Shared", share_percent="25"),
]
CLASS_NAMES = [c["metadata"]["name"] for c in CLASS_OBJS]


@dataclass(frozen=True)
class World:
    slices: tuple[Obj, ...]
    claims: tuple[Obj, ...]
    request: PlanRequest

    def snapshot(self, *, reverse: bool = False) -> Snapshot:
        order = (lambda xs: list(reversed(xs))) if reverse else list
        return snapshot(
            order(CLASS_OBJS),
            order(list(self.slices)),
            order(list(self.claims)),
            priorities=HOLDERS,
        )


@st.composite
def slices(draw: st.DrawFn) -> tuple[Obj, ...]:
    result = []
    for n in range(draw(st.integers(1, 3))):
        devices = []
        for i in range(draw(st.integers(0, 3))):
            product, memory = draw(st.sampled_from(PRODUCTS))
            if draw(st.integers(0, 3)) == 0:
                devices.append(mig(f"mig-{i}", product, "1g.10gb", "9856Mi"))
            else:
                devices.append(gpu(f"gpu-{i}", product, memory, shareable=draw(st.booleans())))
        result.append(resource_slice(f"node-{n}", *devices))
    return tuple(result)


def _device_names(slices: tuple[Obj, ...]) -> list[tuple[str, str]]:
    return [(s["spec"]["nodeName"], d["name"]) for s in slices for d in s["spec"]["devices"]]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    drawn = draw(slices())
    names = _device_names(drawn)
    claims = []
    if names:
        for i in range(draw(st.integers(0, len(names) + 1))):
            node, device = draw(st.sampled_from(names))
            holder = draw(st.sampled_from(["low", "normal", "high", None]))
            share = draw(st.sampled_from([None, 25, 50]))
            claims.append(claim(f"c{i}", node, device, holder=holder, mps_percent=share))
    accelerator = AcceleratorPolicy(
        allowed_placement_types=tuple(
            draw(
                st.lists(st.sampled_from(list(PlacementMode)), min_size=1, max_size=2, unique=True)
            )
        ),
        allowed_sharing_modes=tuple(
            draw(st.lists(st.sampled_from(list(SharingMode)), min_size=1, max_size=2, unique=True))
        ),
        allowed_device_classes=draw(
            st.none()
            | st.lists(st.sampled_from([*CLASS_NAMES, "missing"]), max_size=3, unique=True).map(
                tuple
            )
        ),
        max_accelerator_count=draw(st.integers(1, 4)),
    )
    facts: ModelFacts = draw(st.sampled_from(MODELS))
    request = PlanRequest(
        facts=facts,
        endpoint_type=facts.endpoint_types[0] if draw(st.booleans()) else None,
        accelerator=accelerator,
        min_replicas=draw(st.integers(1, 2)),
        priority_class_name=draw(st.sampled_from(PRIORITY_CLASSES)),
        order_uid="me",
        tried_device_classes=tuple(
            draw(st.lists(st.sampled_from(CLASS_NAMES), max_size=2, unique=True))
        ),
    )
    world = World(drawn, tuple(claims), request)
    if draw(st.booleans()):
        # Replan: first plan as this order, then hold that place (its claims may or may
        # not have shown up yet) and ask again, maybe for another model.
        first = plan(
            request.model_copy(update={"tried_device_classes": ()}), world.snapshot(), RECIPES
        )
        if first.plan is not None:
            own = []
            if draw(st.booleans()):
                for j, device_id in enumerate(first.plan.devices):
                    _, node, device = device_id.split("/")
                    own.append(
                        claim(
                            f"me-{j}",
                            node,
                            device,
                            holder="me",
                            mps_percent=first.plan.share_percent,
                        )
                    )
            replan = request.model_copy(
                update={"held": first.plan, "facts": draw(st.sampled_from(MODELS))}
            )
            world = World(drawn, (*claims, *own), replan)
    return world


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_planner_properties(world: World) -> None:
    """One draw, every property: drawing the worlds is most of the cost."""
    snap = world.snapshot()
    outcome = plan(world.request, snap, RECIPES)
    same_input_same_outcome_in_any_listing_order(world, snap, outcome)
    never_what_the_class_forbids(world, outcome)
    never_more_than_is_free(world, snap, outcome)
    the_held_place_is_never_offered_again(world, snap, outcome)
    the_size_holds_the_model(world, snap, outcome)


def same_input_same_outcome_in_any_listing_order(
    world: World, snap: Snapshot, outcome: PlanOutcome
) -> None:
    assert plan(world.request, snap, RECIPES) == outcome
    assert plan(world.request, world.snapshot(reverse=True), RECIPES) == outcome


def never_what_the_class_forbids(world: World, outcome: PlanOutcome) -> None:
    chosen, policy = outcome.plan, world.request.accelerator
    if chosen is None:
        return
    assert chosen.placement_mode in policy.allowed_placement_types
    assert chosen.sharing_mode in policy.allowed_sharing_modes
    assert 1 <= chosen.accelerator_count <= policy.max_accelerator_count
    if chosen.placement_mode is PlacementMode.PARTITION:
        assert chosen.accelerator_count == 1
    if policy.allowed_device_classes is not None:
        assert chosen.device_class in policy.allowed_device_classes
    assert chosen.device_class not in world.request.tried_device_classes
    assert (chosen.share_percent is None) is (chosen.sharing_mode is SharingMode.DEDICATED)


def never_more_than_is_free(world: World, snap: Snapshot, outcome: PlanOutcome) -> None:
    chosen = outcome.plan
    if chosen is None:
        assert not outcome.reclaims
        return
    held = world.request.held
    used = usage_by_device(
        snap,
        own_uid="me",
        held=held.devices if held else (),
        held_share=(held.share_percent or FULL_SHARE) if held else FULL_SHARE,
    )
    by_id = {d.id: d for d in snap.devices}
    priority = snap.priority_value(world.request.priority_class_name)
    for alloc in snap.allocations:
        if alloc.key not in outcome.reclaims:
            continue
        assert alloc.priority is not None and priority is not None and alloc.priority < priority
        assert alloc.holder != "me"
        for device_id in alloc.devices:
            units = (
                alloc.share_percent if by_id[device_id].allow_multiple_allocations else FULL_SHARE
            )
            used[device_id] -= units
    for device_id in chosen.devices:
        device = by_id[device_id]
        share = chosen.share_percent or FULL_SHARE
        used[device_id] += share if device.allow_multiple_allocations else FULL_SHARE
    assert all(used[device_id] <= FULL_SHARE for device_id in chosen.devices), used


def the_held_place_is_never_offered_again(
    world: World, snap: Snapshot, outcome: PlanOutcome
) -> None:
    held = world.request.held
    if held is None or outcome.plan is None:
        return
    exclusive = {d.id for d in snap.devices if not d.allow_multiple_allocations}
    assert not set(held.devices) & set(outcome.plan.devices) & exclusive
    if held.sharing_mode is SharingMode.DEDICATED:
        assert not set(held.devices) & set(outcome.plan.devices)


def the_size_holds_the_model(world: World, snap: Snapshot, outcome: PlanOutcome) -> None:
    chosen: Plan | None = outcome.plan
    if chosen is None:
        return
    device = next(d for d in snap.devices if d.id == chosen.devices[0])
    assert device.memory_bytes is not None
    per_consumer = device.memory_bytes * (chosen.share_percent or FULL_SHARE) / FULL_SHARE
    assert sizing.fits(
        world.request.facts, count=chosen.accelerator_count, device_memory=per_consumer
    )
    assert len(chosen.devices) == chosen.accelerator_count * world.request.min_replicas
