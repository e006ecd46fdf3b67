"""The planner: every Planned reason from a realistic cluster, the seed classes' decisions,
tensor parallelism, preferences, priority reclaim, replanning — and its properties."""

from __future__ import annotations

from typing import Any

import pytest

from fsm import policy
from fsm.placement.capacity import Snapshot
from fsm.placement.planner import PlanRequest, plan, room_for
from fsm.reasons import Reason
from fsm.values import (
    AcceleratorPolicy,
    EndpointType,
    ModelFacts,
    PlacementMode,
    SharingMode,
)
from tests.support.planner_inputs import (
    A100,
    BGE_M3,
    GGUF_05B,
    GPU_CLASS,
    LLAMA_8B_FP8,
    LLAMA_70B,
    QWEN_05B,
    QWEN_7B,
    QWEN_14B,
    QWEN_32B_AWQ,
    SDXL,
    T4,
    T4_MPS,
    T4_ONLY,
    claim,
    classes,
    cluster,
    default_recipes,
    device_class,
    gpu,
    mig,
    model,
    resource_slice,
    seed_class,
    snapshot,
)

RECIPES = default_recipes()
WHOLE, PART = PlacementMode.WHOLE_DEVICE, PlacementMode.PARTITION
DED, SHR = SharingMode.DEDICATED, SharingMode.SHARED


def request(facts: ModelFacts, **fields: Any) -> PlanRequest:
    return PlanRequest(facts=facts, **fields)


def accel(**fields: Any) -> AcceleratorPolicy:
    return AcceleratorPolicy.model_validate(fields)


A100_TAKEN = claim("other-llm-gpu-x", "node-a100", "gpu-0", holder="other")

# --- every reason of Planned (LaunchPlanInForce is the fold's) --------------------------


@pytest.mark.parametrize(
    ("req", "snap", "reason"),
    [
        pytest.param(request(QWEN_7B), cluster(), Reason.PLAN_COMPUTED, id="plan-computed"),
        pytest.param(request(QWEN_7B), cluster(A100_TAKEN), Reason.NO_CAPACITY, id="a100-taken"),
        pytest.param(
            request(QWEN_7B, priority_class_name="inference-high"),
            cluster(A100_TAKEN, priorities={"other": 1000}),
            Reason.NO_CAPACITY,
            id="equal-priority-is-not-reclaimable",
        ),
        pytest.param(
            request(LLAMA_70B),
            cluster(),
            Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY,
            id="70b-on-one-gpu",
        ),
        pytest.param(
            request(LLAMA_8B_FP8),
            cluster(),
            Reason.QUANTIZATION_MISMATCH,
            id="fp8-on-ampere-and-turing",
        ),
        pytest.param(
            request(SDXL), cluster(), Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE, id="diffusers-model"
        ),
        pytest.param(
            request(QWEN_7B),
            snapshot(
                [device_class("gpu.amd.com", "device.driver == 'gpu.amd.com'")],
                [
                    resource_slice(
                        "node-mi300",
                        gpu("gpu-0", "AMD Instinct MI300X", "192Gi"),
                        driver="gpu.amd.com",
                    )
                ],
            ),
            Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE,
            id="no-recipe-for-amd",
        ),
        pytest.param(
            request(QWEN_7B, tried_device_classes=("gpu.nvidia.com",)),
            cluster(),
            Reason.RESOURCE_CLAIM_EXHAUSTED,
            id="the-only-class-that-fits-was-tried",
        ),
        pytest.param(
            request(QWEN_7B, accelerator=accel(allowedDeviceClasses=["nvidia-h100-physical"])),
            cluster(),
            Reason.PLACEMENT_UNDECIDABLE,
            id="names-only-missing-classes",
        ),
        pytest.param(
            request(QWEN_7B),
            snapshot(
                [
                    device_class(
                        "typo", "device.attributes['gpu.nvidia.com'].productname == 'Tesla T4'"
                    )
                ],
                [resource_slice("node-t4", gpu("gpu-0", T4, "16Gi"))],
            ),
            Reason.PLACEMENT_UNDECIDABLE,
            id="selector-fails-to-evaluate",
        ),
        pytest.param(
            request(
                QWEN_7B,
                accelerator=accel(
                    allowedSharingModes=["Shared"], allowedPlacementTypes=["Partition"]
                ),
            ),
            cluster(),
            Reason.PLACEMENT_UNDECIDABLE,
            id="no-class-offers-shared-partitions",
        ),
        pytest.param(
            request(QWEN_7B), snapshot(), Reason.PLACEMENT_UNDECIDABLE, id="cluster-without-dra"
        ),
        pytest.param(
            request(QWEN_7B, priority_class_name="inference-urgent"),
            cluster(),
            Reason.PRIORITY_CLASS_NOT_FOUND,
            id="priority-class-missing",
        ),
    ],
)
def test_every_planned_reason(req: PlanRequest, snap: Snapshot, reason: Reason) -> None:
    outcome = plan(req, snap, RECIPES)
    assert outcome.reason is reason, outcome.message
    assert (outcome.plan is not None) is (reason is Reason.PLAN_COMPUTED)
    assert outcome.message
    if reason not in {Reason.PRIORITY_CLASS_NOT_FOUND} and snap.device_classes:
        assert outcome.candidates  # every failure explains its options


# --- the seed classes: documented decisions ---------------------------------------------

# (class, model) -> (device class, product, placement, sharing, share %, recipe) or a reason
SEED_DECISIONS: list[tuple[str | None, ModelFacts, tuple[object, ...] | Reason]] = [
    ("llm-internal", QWEN_32B_AWQ, ("gpu.nvidia.com", A100, WHOLE, DED, None, "vllm-nvidia-awq")),
    ("llm-internal", QWEN_7B, ("gpu.nvidia.com", A100, WHOLE, DED, None, "vllm-nvidia")),
    ("llm-internal", BGE_M3, Reason.ENDPOINT_TYPE_POLICY_CONFLICT),
    ("llm-internal", GGUF_05B, ("gpu.nvidia.com", T4, WHOLE, DED, None, "llamacpp-nvidia-gguf")),
    (
        "llm-chat-external",
        QWEN_32B_AWQ,
        ("gpu.nvidia.com", A100, WHOLE, DED, None, "vllm-nvidia-awq"),
    ),
    ("llm-chat-external", QWEN_7B, ("gpu.nvidia.com", A100, WHOLE, DED, None, "vllm-nvidia")),
    ("llm-chat-external", BGE_M3, Reason.ENDPOINT_TYPE_POLICY_CONFLICT),
    ("llm-chat-external", GGUF_05B, (T4_MPS, T4, WHOLE, SHR, 50, "llamacpp-nvidia-gguf")),
    ("llm-chat-external", QWEN_05B, (T4_MPS, T4, WHOLE, SHR, 50, "vllm-nvidia-turing")),
    ("llm-strict", QWEN_32B_AWQ, Reason.PARAMETER_COUNT_NOT_ALLOWED),
    ("llm-strict", QWEN_7B, Reason.PARAMETER_COUNT_NOT_ALLOWED),
    ("llm-strict", BGE_M3, Reason.ENDPOINT_TYPE_POLICY_CONFLICT),
    ("llm-strict", GGUF_05B, (T4_MPS, T4, WHOLE, SHR, 50, "llamacpp-nvidia-gguf")),
    ("llm-strict", QWEN_05B, (T4_MPS, T4, WHOLE, SHR, 50, "vllm-nvidia-turing")),
    ("embeddings-only", QWEN_32B_AWQ, Reason.ENDPOINT_TYPE_POLICY_CONFLICT),
    ("embeddings-only", QWEN_7B, Reason.ENDPOINT_TYPE_POLICY_CONFLICT),
    ("embeddings-only", BGE_M3, (T4_MPS, T4, WHOLE, SHR, 50, "vllm-nvidia-embeddings")),
    ("embeddings-only", GGUF_05B, Reason.ENDPOINT_TYPE_POLICY_CONFLICT),
    (None, QWEN_32B_AWQ, ("gpu.nvidia.com", A100, WHOLE, DED, None, "vllm-nvidia-awq")),
    (None, QWEN_7B, ("gpu.nvidia.com", A100, WHOLE, DED, None, "vllm-nvidia")),
    (None, BGE_M3, ("gpu.nvidia.com", T4, WHOLE, DED, None, "vllm-nvidia-embeddings")),
    (None, GGUF_05B, ("gpu.nvidia.com", T4, WHOLE, DED, None, "llamacpp-nvidia-gguf")),
]


def _order(class_name: str | None, facts: ModelFacts, snap: Snapshot) -> tuple[Any, Any, Any]:
    namespace = "analytics" if class_name == "embeddings-only" else "support"
    spec = seed_class(class_name) if class_name else None
    names = [name for name, _ in snap.priority_classes]
    resolved = policy.resolve_class(
        class_name,
        namespace,
        spec,
        priority_classes=names,
        device_classes=[dc.name for dc in snap.device_classes],
    )
    assert resolved.policy is not None, resolved.message
    return resolved, policy.resolve_model(resolved.policy, facts), resolved.policy


@pytest.mark.parametrize(
    ("class_name", "facts", "expected"),
    SEED_DECISIONS,
    ids=[f"{c or 'classless'}-{f.name.split('/')[1]}" for c, f, _ in SEED_DECISIONS],
)
def test_seed_classes_decide_as_documented(
    class_name: str | None, facts: ModelFacts, expected: tuple[object, ...] | Reason
) -> None:
    snap = cluster()
    _, resolved_model, effective = _order(class_name, facts, snap)
    if isinstance(expected, Reason) and not resolved_model.ok:
        assert resolved_model.reason is expected
        return
    assert resolved_model.ok, resolved_model.message
    outcome = plan(PlanRequest.for_order(effective, resolved_model), snap, RECIPES)
    assert outcome.plan is not None, outcome.message
    chosen = outcome.plan
    assert (
        chosen.device_class,
        chosen.accelerator_product_name,
        chosen.placement_mode,
        chosen.sharing_mode,
        chosen.share_percent,
        chosen.recipe,
    ) == expected
    assert chosen.tool_calling_supported is (facts.endpoint_types == (EndpointType.CHAT,))


def test_the_strict_class_never_leaves_its_device_class() -> None:
    # llm-strict names nvidia-t4-mps-physical only: with every T4 share taken it waits,
    # although the A100's partitions and the whole A100 are free.
    taken = [claim(f"c{i}", "node-t4", f"gpu-{i // 2}", mps_percent=50) for i in range(4)]
    _, resolved_model, effective = _order("llm-strict", QWEN_05B, cluster(*taken))
    outcome = plan(PlanRequest.for_order(effective, resolved_model), cluster(*taken), RECIPES)
    assert outcome.reason is Reason.NO_CAPACITY
    assert {c.device_class for c in outcome.candidates} == {T4_MPS}


def test_a_plan_reports_the_resolved_status() -> None:
    outcome = plan(request(QWEN_32B_AWQ), cluster(), RECIPES)
    assert outcome.plan is not None
    assert outcome.plan.model_dump(mode="json") == {
        "device_class": "gpu.nvidia.com",
        "accelerator_product_name": A100,
        "accelerator_memory_gib": 80,
        "accelerator_count": 1,
        "placement_mode": "WholeDevice",
        "sharing_mode": "Dedicated",
        "share_percent": None,
        "recipe": "vllm-nvidia-awq",
        "cpu": "4",  # 2 + 2 per whole device
        "memory": "24Gi",  # 19.3 GB of weights + 6 GiB, rounded up
        "model_volume": "25Gi",  # 19.3 GB x 5/4 + 2 GiB, rounded up
        "tool_calling_supported": True,
        "devices": ["gpu.nvidia.com/node-a100/gpu-0"],
    }
    assert outcome.candidates[0].lost_because is None  # the winner comes first
    assert outcome.reclaims == ()


# --- sizes and counts -------------------------------------------------------------------


def t4_cluster(*, nodes: int = 1, per_node: int = 4) -> Snapshot:
    return snapshot(
        [device_class("gpu.nvidia.com", GPU_CLASS)],
        [
            resource_slice(f"node-{n}", *(gpu(f"gpu-{i}", T4, "16Gi") for i in range(per_node)))
            for n in range(nodes)
        ],
    )


@pytest.mark.parametrize(
    ("max_count", "facts", "expected"),
    [
        pytest.param(1, QWEN_05B, 1, id="small-model-one-device"),
        pytest.param(1, QWEN_7B, Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY, id="7b-needs-two-t4"),
        pytest.param(2, QWEN_7B, 2, id="7b-tensor-parallel-2"),
        pytest.param(4, QWEN_7B, 2, id="the-smallest-count-that-fits"),
        pytest.param(4, QWEN_14B, 4, id="14b-on-four-t4"),
        pytest.param(
            3, QWEN_14B, Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY, id="three-is-not-tried"
        ),
        pytest.param(
            4, LLAMA_70B, Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY, id="70b-beyond-four-t4"
        ),
    ],
)
def test_tensor_parallel_counts(max_count: int, facts: ModelFacts, expected: int | Reason) -> None:
    snap = t4_cluster(per_node=4)
    outcome = plan(request(facts, accelerator=accel(maxAcceleratorCount=max_count)), snap, RECIPES)
    if isinstance(expected, Reason):
        assert outcome.reason is expected and "GiB" in outcome.message
        largest_power_of_two = 1 << (max_count.bit_length() - 1)
        assert f"{largest_power_of_two} x 16.0 GiB" in outcome.message
        return
    assert outcome.plan is not None and outcome.plan.accelerator_count == expected
    assert len(set(outcome.plan.devices)) == expected
    assert outcome.plan.cpu == str(2 + 2 * expected)


def test_devices_of_one_replica_share_a_node() -> None:
    outcome = plan(
        request(QWEN_7B, accelerator=accel(maxAcceleratorCount=2)),
        t4_cluster(nodes=2, per_node=1),
        RECIPES,
    )
    assert outcome.reason is Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY
    assert "on one node" in outcome.message


def test_a_partition_is_never_combined() -> None:
    only_mig = accel(allowedPlacementTypes=["Partition"], maxAcceleratorCount=2)
    assert plan(request(QWEN_05B, accelerator=only_mig), cluster(), RECIPES).plan is not None
    big = plan(request(QWEN_7B, accelerator=only_mig), cluster(), RECIPES)
    assert big.reason is Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY
    assert "1 x 9.6 GiB" in big.message


def test_a_model_of_unknown_size_gets_the_tightest_device() -> None:
    outcome = plan(request(model("someone/mystery", dtype=None)), cluster(), RECIPES)
    assert outcome.plan is not None
    assert outcome.plan.accelerator_product_name == T4 and outcome.plan.model_volume == "50Gi"


# --- preferences ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("placements", "sharing", "expected"),
    [
        pytest.param(
            ["Partition", "WholeDevice"],
            ["Dedicated"],
            ("mig.nvidia.com", PART, DED),
            id="partition-first",
        ),
        pytest.param(
            ["WholeDevice", "Partition"],
            ["Dedicated"],
            ("gpu.nvidia.com", WHOLE, DED),
            id="whole-first",
        ),
        pytest.param(
            ["WholeDevice"], ["Shared", "Dedicated"], (T4_MPS, WHOLE, SHR), id="shared-first"
        ),
        pytest.param(
            ["WholeDevice"],
            ["Dedicated", "Shared"],
            ("gpu.nvidia.com", WHOLE, DED),
            id="dedicated-first",
        ),
    ],
)
def test_the_class_lists_its_preferences(
    placements: list[str], sharing: list[str], expected: tuple[object, ...]
) -> None:
    policy_ = accel(allowedPlacementTypes=placements, allowedSharingModes=sharing)
    outcome = plan(request(QWEN_05B, accelerator=policy_), cluster(), RECIPES)
    assert outcome.plan is not None
    assert (
        outcome.plan.device_class,
        outcome.plan.placement_mode,
        outcome.plan.sharing_mode,
    ) == expected
    assert all(c.lost_because is not None for c in outcome.candidates[1:])


def test_named_device_classes_are_tried_in_the_class_order() -> None:
    names = accel(
        allowedDeviceClasses=["gpu.nvidia.com", T4_MPS], allowedSharingModes=["Shared", "Dedicated"]
    )
    outcome = plan(request(QWEN_05B, accelerator=names), cluster(), RECIPES)
    assert outcome.plan is not None and outcome.plan.device_class == "gpu.nvidia.com"


def test_tightest_memory_wins_among_equals() -> None:
    outcome = plan(request(QWEN_05B), cluster(), RECIPES)
    assert outcome.plan is not None and outcome.plan.accelerator_product_name == T4
    runner_up = next(c for c in outcome.candidates if c.product_name == A100)
    assert runner_up.lost_because is Reason.PLAN_COMPUTED and "better option" in runner_up.detail


def test_unlabeled_mixed_class_cannot_be_judged() -> None:
    snap = snapshot(
        [device_class("all-nvidia", "device.driver == 'gpu.nvidia.com'")],
        [
            resource_slice(
                "n", gpu("gpu-0", A100, "80Gi"), mig("gpu-1-mig", A100, "1g.10gb", "9856Mi")
            )
        ],
    )
    outcome = plan(request(QWEN_05B), snap, RECIPES)
    assert (
        outcome.reason is Reason.PLACEMENT_UNDECIDABLE
        and "ai.deckhouse.io/placement" in outcome.message
    )


def _t4(name: str, *, shareable: bool = True, default: str | None = None) -> dict[str, Any]:
    device = gpu(name, T4, "16Gi", shareable=shareable)
    if default is not None:
        device["capacity"]["memory"]["requestPolicy"] = {"default": default}
    return device


WHOLE_ONLY = f"{T4_ONLY} && device.allowMultipleAllocations == false"


@pytest.mark.parametrize(
    ("devices", "selector", "plans"),
    [
        pytest.param([_t4("gpu-0"), _t4("gpu-1")], T4_ONLY, True, id="shareable-no-policy"),
        pytest.param(
            [_t4("gpu-0", default="16Gi"), _t4("gpu-1", default="16Gi")],
            T4_ONLY,
            True,
            id="default-of-the-whole-memory",
        ),
        pytest.param(
            [_t4("gpu-0", default="1Gi"), _t4("gpu-1", default="1Gi")],
            T4_ONLY,
            False,
            id="default-below-the-memory",
        ),
        pytest.param(
            [_t4("gpu-0", shareable=False), _t4("gpu-1", default="1Gi")],
            T4_ONLY,
            False,
            id="the-claim-could-be-given-the-shared-one",
        ),
        pytest.param(
            [_t4("gpu-0", shareable=False), _t4("gpu-1", default="1Gi")],
            WHOLE_ONLY,
            True,
            id="a-class-of-whole-devices-only",
        ),
    ],
)
def test_dedicated_is_planned_only_where_its_claim_gets_the_device_whole(
    devices: list[dict[str, Any]], selector: str, plans: bool
) -> None:
    """A Dedicated claim asks no capacity, which takes a shareable device's requestPolicy
    default: with a default below the memory, two Dedicated orders counted on two T4s
    were given one, each runtime set to use 90% of it. The scheduler may give the claim
    any T4 of the class, so one such T4 in the class is enough to plan none there."""
    snap = snapshot([device_class("t4", selector)], [resource_slice("node-t4", *devices)])
    outcome = plan(request(QWEN_05B), snap, RECIPES)
    if plans:
        assert outcome.plan is not None and outcome.plan.sharing_mode is DED
        assert outcome.plan.devices == ("gpu.nvidia.com/node-t4/gpu-0",)
    else:
        assert outcome.reason is Reason.PLACEMENT_UNDECIDABLE
        assert "node-t4/gpu-1" in outcome.message
        assert "device.allowMultipleAllocations == false" in outcome.message
    # A Shared class's claims ask their share of the memory: the default does not matter.
    shared = snapshot(
        [device_class("t4", selector, sharing="Shared", share_percent="50")],
        [resource_slice("node-t4", *devices)],
    )
    both = accel(allowedSharingModes=["Shared", "Dedicated"])
    assert plan(request(QWEN_05B, accelerator=both), shared, RECIPES).plan is not None


def test_the_reason_a_dedicated_class_cannot_be_had_whole_is_told_over_lesser_ones() -> None:
    """Above an empty class (mig.nvidia.com on every NVIDIA cluster) and a model too big
    for another product: it is the one an admin can mend."""
    snap = snapshot(
        classes(),
        [
            resource_slice("node-t4", _t4("gpu-0", default="1Gi")),
            resource_slice("node-small", gpu("gpu-0", "NVIDIA T400", "2Gi")),
        ],
    )
    outcome = plan(request(QWEN_05B), snap, RECIPES)
    assert outcome.reason is Reason.PLACEMENT_UNDECIDABLE
    assert outcome.message.startswith("gpu.nvidia.com (Tesla T4): selects 1 device(s)")


def test_a_dedicated_order_does_not_grow_onto_a_device_it_would_share() -> None:
    """The class came to select a T4 shared by default after the plan was made."""
    snap = snapshot([device_class("t4", T4_ONLY)], [resource_slice("node-t4", _t4("gpu-0"))])
    current = plan(request(QWEN_05B), snap, RECIPES).plan
    assert current is not None and room_for(snap, current) is not None
    later = snapshot(
        [device_class("t4", T4_ONLY)],
        [resource_slice("node-t4", _t4("gpu-0"), _t4("gpu-1", default="1Gi"))],
        [claim("me-0", "node-t4", "gpu-0", holder="me")],
    )
    assert room_for(later, current, order_uid="me") is None


def _t4_with_cores(name: str) -> dict[str, Any]:
    device = _t4(name)
    device["capacity"]["cores"] = {"value": "40"}  # no policy: a claim not asking takes all
    return device


def test_a_shared_order_is_not_planned_beside_a_claim_that_took_a_capacity_whole() -> None:
    """A Shared claim asks only memory, so it takes all of a T4's cores: a second 50%
    order planned beside it was never allocated (its class then marked tried). It goes
    to the other T4, and past that there is no room, nor any to grow into."""
    half = [device_class("t4", T4_ONLY, sharing="Shared", share_percent="50")]
    slices = [resource_slice("node-t4", _t4_with_cores("gpu-0"), _t4_with_cores("gpu-1"))]
    shared = request(QWEN_05B, accelerator=accel(allowedSharingModes=["Shared"]))
    first = claim("first-0", "node-t4", "gpu-0", holder="first", mps_percent=50)
    outcome = plan(shared, snapshot(half, slices, [first]), RECIPES)
    assert outcome.plan is not None and outcome.plan.sharing_mode is SHR
    assert outcome.plan.devices == ("gpu.nvidia.com/node-t4/gpu-1",)
    second = claim("second-0", "node-t4", "gpu-1", holder="second", mps_percent=50)
    full = snapshot(half, slices, [first, second])
    assert plan(shared, full, RECIPES).reason is Reason.NO_CAPACITY
    assert room_for(full, outcome.plan, order_uid="second") is None


def test_a_device_publishing_an_absurd_memory_is_no_place_and_the_order_says_so() -> None:
    snap = snapshot(classes()[:1], [resource_slice("n", gpu("gpu-0", T4, "1e30"))])
    outcome = plan(request(QWEN_05B), snap, RECIPES)
    assert not outcome.ok
    assert outcome.reason is Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY


def test_a_class_without_devices_does_not_hide_the_real_reason() -> None:
    # mig.nvidia.com exists on every NVIDIA cluster, often with no MIG configured.
    snap = snapshot(classes()[:2], [resource_slice("n", gpu("gpu-0", T4, "16Gi"))])
    outcome = plan(
        request(QWEN_7B, accelerator=accel(allowedPlacementTypes=["WholeDevice", "Partition"])),
        snap,
        RECIPES,
    )
    assert outcome.reason is Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY
    empty = plan(request(QWEN_05B), snapshot(classes()[:1]), RECIPES)
    assert empty.reason is Reason.NO_CAPACITY and "selects a published device" in empty.message


# --- priority: reclaim from lower-priority orders ---------------------------------------


def test_a_higher_priority_order_reclaims_the_lowest_first() -> None:
    snap = cluster(
        claim("low-llm-gpu-a", "node-a100", "gpu-0", holder="low"),
        priorities={"low": 100},
    )
    high = plan(
        request(QWEN_7B, priority_class_name="inference-high", namespace="team"), snap, RECIPES
    )
    assert high.reason is Reason.PLAN_COMPUTED and high.reclaims == ("team/low-llm-gpu-a",)
    assert "team/low-llm-gpu-a" in high.message
    # An order of another tenant is told there is one to free, not whose it is.
    other = plan(
        request(QWEN_7B, priority_class_name="inference-high", namespace="shop"), snap, RECIPES
    )
    assert other.reclaims == ("team/low-llm-gpu-a",)
    assert other.message.endswith("needs lower-priority claim(s) freed: 1 in another namespace")
    normal = plan(request(QWEN_7B, priority_class_name="inference-low"), snap, RECIPES)
    assert normal.reason is Reason.NO_CAPACITY and not normal.reclaims


def test_free_room_is_preferred_to_preemption() -> None:
    snap = cluster(claim("low-a100", "node-a100", "gpu-0", holder="low"), priorities={"low": 100})
    names = accel(allowedDeviceClasses=["gpu.nvidia.com"])
    outcome = plan(
        request(QWEN_05B, accelerator=names, priority_class_name="inference-high"), snap, RECIPES
    )
    assert (
        outcome.plan is not None
        and outcome.plan.accelerator_product_name == T4
        and not outcome.reclaims
    )


def test_room_for_growth_and_scale_up_blocked() -> None:
    snap = cluster()
    current = plan(request(QWEN_7B, order_uid="me"), snap, RECIPES).plan
    assert current is not None
    held = cluster(claim("me-0", "node-a100", "gpu-0", holder="me"), priorities={"me": 500})
    assert (
        room_for(held, current, replicas=1, order_uid="me", priority_class_name="inference-normal")
        is None
    )
    bigger = snapshot(
        classes(),
        [resource_slice("node-a100", gpu("gpu-0", A100, "80Gi"), gpu("gpu-1", A100, "80Gi"))],
        [
            claim("me-0", "node-a100", "gpu-0", holder="me"),
            claim("low-0", "node-a100", "gpu-1", holder="low"),
        ],
        priorities={"me": 500, "low": 100},
    )
    place = room_for(bigger, current, order_uid="me", priority_class_name="inference-normal")
    assert place is not None and place.reclaims == ("team/low-0",)
    assert place.devices == ("gpu.nvidia.com/node-a100/gpu-1",)


# --- replanning -------------------------------------------------------------------------


def test_the_held_place_is_not_offered_to_its_own_replan() -> None:
    snap = cluster()
    first = plan(request(QWEN_7B, order_uid="me"), snap, RECIPES)
    assert first.plan is not None
    replan = plan(request(QWEN_7B, order_uid="me", held=first.plan), snap, RECIPES)
    assert replan.reason is Reason.NO_CAPACITY
    small = plan(request(QWEN_05B, order_uid="me", held=first.plan), snap, RECIPES)
    assert small.plan is not None and not set(small.plan.devices) & set(first.plan.devices)


def test_tried_classes_are_excluded_and_others_remain() -> None:
    shared = accel(allowedSharingModes=["Shared", "Dedicated"])
    outcome = plan(
        request(QWEN_05B, accelerator=shared, tried_device_classes=(T4_MPS,)), cluster(), RECIPES
    )
    assert outcome.plan is not None and outcome.plan.device_class == "gpu.nvidia.com"
    tried = next(c for c in outcome.candidates if c.device_class == T4_MPS)
    assert tried.lost_because is Reason.RESOURCE_CLAIM_EXHAUSTED


def test_min_replicas_need_a_place_each() -> None:
    two = plan(
        request(
            QWEN_05B, min_replicas=2, accelerator=accel(allowedDeviceClasses=["gpu.nvidia.com"])
        ),
        cluster(t4s=2),
        RECIPES,
    )
    assert two.plan is not None and two.plan.accelerator_product_name == T4
    assert len(set(two.plan.devices)) == 2  # two Dedicated replicas, two devices
    three = plan(request(QWEN_7B, min_replicas=2), cluster(), RECIPES)
    assert three.reason is Reason.NO_CAPACITY and "2 replica(s)" in three.message


def test_same_input_same_outcome() -> None:
    outcomes = {plan(request(QWEN_05B), cluster(), RECIPES).model_dump_json() for _ in range(3)}
    assert len(outcomes) == 1


def test_a_token_order_is_never_planned_onto_a_runtime_that_takes_no_key() -> None:
    """Classless orders ask for Token authentication: with every recipe's runtime one
    the controller cannot give the key to, none is planned, and the message says why."""
    snap = cluster()
    _, resolved_model, effective = _order(None, QWEN_05B, snap)
    request = PlanRequest.for_order(effective, resolved_model)
    assert request.api_key
    keyless = tuple(r.model_copy(update={"runtime": "tgi"}) for r in RECIPES)
    outcome = plan(request, snap, keyless)
    assert outcome.plan is None and outcome.reason is Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE
    assert "Token authentication" in outcome.message
    assert plan(request.model_copy(update={"api_key": False}), snap, keyless).plan is not None
