"""The planner: from a model, a policy and a capacity snapshot to one launch plan.

Pure and deterministic — the same request, snapshot and recipes give the same outcome,
candidates and all — so a recorded PlanComputed can be explained and replayed. The rules
(docs/planner.md has them with examples):

1. Device classes: those the class names (in its order), else every DeviceClass. A
   class's placement and sharing come from its labels (capacity.PLACEMENT_LABEL, ...),
   else from the devices its CEL selectors pick (mig: Partition, otherwise WholeDevice;
   Dedicated). A missing class, unreadable labels, a selector that fails, a mixed
   unlabeled class or a mode the policy forbids leave that class nothing to offer.
2. Per class, devices are grouped by (product, memory). For each group: a recipe
   (recipes.choose_recipe), then the smallest power-of-two count up to
   maxAcceleratorCount whose memory holds the model (sizing.fits; a partition is never
   combined), then — unless a Dedicated class selects a device of the product that a
   claim would share (capacity.Device.shared_by_default) or the class was already
   tried — a place for minReplicas replicas (capacity.find_place: free shares first,
   else lower-priority claims).
3. The winner: no preemption over preemption, then the class's own order of device
   classes, placements and sharing modes, fewer devices, the tightest memory, the
   recipe's preference, names. Every other option is a Candidate saying why it lost.
4. No winner: the reason of the option that got furthest — NoCapacity (busy) >
   ResourceClaimExhausted (tried) > PlacementUndecidable (a Dedicated class that selects
   devices of the product a claim asking no capacity would share) >
   NoAcceleratorWithEnoughMemory > QuantizationMismatch > NoCompatibleRuntimeAvailable >
   PlacementUndecidable (nothing to try at all).

The order's held place is never offered to its own replan; replanCount and
LaunchPlanInForce belong to the fold, not here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from pydantic import Field

# A module import, not names: fsm.policy imports fsm.placement.sizing, so importing
# fsm.policy first runs this module while policy is only partly initialised.
from fsm import policy
from fsm.identity import reclaims_note
from fsm.placement import cel, sizing
from fsm.placement.capacity import FULL_SHARE, Device, DeviceClassInfo, Place, Snapshot, find_place
from fsm.placement.kept import KeptFor
from fsm.placement.recipes import Recipe, choose_recipe
from fsm.quantity import GIB, gib_rounded
from fsm.reasons import Reason
from fsm.values import (
    AcceleratorPolicy,
    Candidate,
    EffectivePolicy,
    EndpointType,
    Frozen,
    ModelFacts,
    ModelOutcome,
    PlacementMode,
    Plan,
    PlanOutcome,
    SharingMode,
)

__all__ = ["PlanRequest", "plan", "plan_devices", "room_for"]

# How far an option got; the furthest explains a failure (rule 4).
_PROGRESS: dict[Reason, int] = {
    Reason.PLACEMENT_UNDECIDABLE: 0,
    Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE: 2,
    Reason.QUANTIZATION_MISMATCH: 3,
    Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY: 4,
    Reason.RESOURCE_CLAIM_EXHAUSTED: 6,
    Reason.NO_CAPACITY: 7,
}
_EMPTY_CLASS = 1  # a class selecting no device: NoCapacity, but below every real option
# A Dedicated option that has a recipe and fits, but whose claim could be given a share
# (_shared_products): PlacementUndecidable, the class's to mend, and told over the
# options that got less far (no recipe, too little memory), not as "nothing to try".
_SHARED_BY_DEFAULT = 5


class PlanRequest(Frozen):
    """Everything about the order the planner needs; the snapshot and recipes come apart."""

    facts: ModelFacts
    endpoint_type: EndpointType | None = None  # None: classless, serve the model's own type
    accelerator: AcceleratorPolicy = AcceleratorPolicy()
    min_replicas: int = Field(default=1, ge=1)
    priority_class_name: str | None = None
    order_uid: str | None = None
    namespace: str = ""  # the order's: its messages name only that namespace's claims
    held: Plan | None = None  # the plan in force, whose place is not offered again
    tried_device_classes: tuple[str, ...] = ()
    api_key: bool = False  # Token authentication: only a runtime that takes a key

    @classmethod
    def for_order(
        cls,
        policy: EffectivePolicy,
        model: ModelOutcome,
        *,
        order_uid: str | None = None,
        namespace: str = "",
        held: Plan | None = None,
        tried_device_classes: Sequence[str] = (),
    ) -> PlanRequest:
        if model.facts is None:
            raise ValueError("a plan needs the model's facts (ModelResolved first)")
        return cls(
            facts=model.facts,
            endpoint_type=model.endpoint_type,
            accelerator=policy.accelerator,
            min_replicas=policy.constraints.min_replicas,
            priority_class_name=policy.constraints.priority_class_name,
            order_uid=order_uid,
            namespace=namespace,
            held=held,
            tried_device_classes=tuple(sorted(set(tried_device_classes))),
            api_key=policy.exposure.needs_token,
        )


@dataclass(frozen=True, slots=True)
class _Mode:
    placement: PlacementMode
    sharing: SharingMode
    share_percent: int  # FULL_SHARE when Dedicated


@dataclass(frozen=True, slots=True)
class _Option:
    """A feasible option: a plan, the place it takes and its rank (lower wins)."""

    rank: tuple[object, ...]
    plan: Plan
    place: Place
    candidate: Candidate


@dataclass(frozen=True, slots=True)
class _Loss:
    progress: int
    candidate: Candidate


def plan(request: PlanRequest, snapshot: Snapshot, recipes: Sequence[Recipe]) -> PlanOutcome:
    """The launch plan for one order, or the reason there is none (rule 4)."""
    priority = snapshot.priority_value(request.priority_class_name)
    if priority is None:
        return PlanOutcome(
            reason=Reason.PRIORITY_CLASS_NOT_FOUND,
            message=f"PriorityClass {request.priority_class_name!r} does not exist",
        )
    policy = request.accelerator
    names = (
        list(dict.fromkeys(policy.allowed_device_classes))
        if policy.allowed_device_classes is not None
        else [dc.name for dc in snapshot.device_classes]
    )
    options: list[_Option] = []
    losses: list[_Loss] = []
    for index, name in enumerate(names):
        found = _judge_class(snapshot, name, policy)
        if isinstance(found, _Loss):
            losses.append(found)
            continue
        info, mode, devices = found
        if not devices:
            losses.append(
                _lose(_EMPTY_CLASS, Reason.NO_CAPACITY, name, mode, "selects no published device")
            )
            continue
        context = _Context(request, snapshot, tuple(recipes), priority)
        shared = _shared_products(devices) if mode.sharing is SharingMode.DEDICATED else {}
        for group in _groups(devices):
            outcome = _consider(
                context, info, mode, group,
                class_index=index, shared=shared.get(group[0].product_name),
            )  # fmt: skip
            if isinstance(outcome, _Option):
                options.append(outcome)
            else:
                losses.append(outcome)
    if options:
        return _success(request, options, losses)
    return _failure(request, losses, names)


def plan_devices(snapshot: Snapshot, current: Plan) -> tuple[Device, ...] | None:
    """The devices a plan's claims may land on: its device class's selection, of the
    plan's product and memory (what the scheduler picks among). None: undecidable."""
    info = snapshot.device_class(current.device_class)
    if info is None:
        return None
    try:
        devices = cel.selected_devices(info, snapshot.devices)
    except cel.SelectorError:
        return None
    product, memory = current.accelerator_product_name, current.accelerator_memory_gib
    return _OF_PRODUCT.get(
        devices,
        (product, memory),
        lambda: tuple(
            d
            for d in devices
            if d.product_name == product
            and d.memory_bytes is not None
            and gib_rounded(d.memory_bytes) == memory
        ),
    )


# A plan's devices by its class's selection, product and memory (`kept.py`): a plan asks
# for every other order's demand, and filtering every device each time was
# O(demands x devices) a plan.
_OF_PRODUCT: KeptFor[tuple[Device, ...]] = KeptFor()


def room_for(
    snapshot: Snapshot,
    current: Plan,
    *,
    replicas: int = 1,
    priority_class_name: str | None = None,
    order_uid: str | None = None,
) -> Place | None:
    """A place for `replicas` more replicas of a plan in force, and the lower-priority
    claims to free for it (lowest priority first). None: no room even by preemption —
    the order that wants to grow is ScaleUpBlocked. The controller preempts with this."""
    priority = snapshot.priority_value(priority_class_name)
    group = plan_devices(snapshot, current)
    if group is None:
        return None
    if current.sharing_mode is SharingMode.DEDICATED and any(
        device.shared_by_default for device in group
    ):
        return None  # a claim there could be given a share: see _shared_products
    return find_place(
        snapshot,
        group,
        count=current.accelerator_count,
        share_percent=current.share_percent or FULL_SHARE,
        replicas=replicas,
        priority=priority,
        own_uid=order_uid,
    )


# --- rule 1: what a device class offers ------------------------------------------------


def _lose(
    progress: int,
    reason: Reason,
    name: str,
    mode: _Mode | None,
    detail: str,
    *,
    product_name: str | None = None,
    accelerator_count: int | None = None,
) -> _Loss:
    return _Loss(
        progress,
        Candidate(
            device_class=name,
            product_name=product_name,
            placement_mode=mode.placement if mode else None,
            sharing_mode=mode.sharing if mode else None,
            accelerator_count=accelerator_count,
            lost_because=reason,
            detail=detail,
        ),
    )


def _judge_class(
    snapshot: Snapshot, name: str, policy: AcceleratorPolicy
) -> tuple[DeviceClassInfo, _Mode, tuple[Device, ...]] | _Loss:
    undecidable = Reason.PLACEMENT_UNDECIDABLE
    info = snapshot.device_class(name)
    if info is None:
        return _lose(0, undecidable, name, None, f"DeviceClass {name!r} does not exist")
    if info.label_error:
        return _lose(0, undecidable, name, None, f"labels cannot be read: {info.label_error}")
    try:
        devices = cel.selected_devices(info, snapshot.devices)
    except cel.SelectorError as err:
        return _lose(0, undecidable, name, None, str(err))
    placement = info.placement
    if placement is None:
        kinds = _KINDS.get(devices, None, lambda: _placements(devices))
        if len(kinds) > 1:
            return _lose(
                0,
                undecidable,
                name,
                None,
                "selects whole devices and partitions alike; label it ai.deckhouse.io/placement",
            )
        placement = next(iter(kinds), PlacementMode.WHOLE_DEVICE)
    mode = _Mode(placement, info.sharing, info.share_percent or FULL_SHARE)
    if placement not in policy.allowed_placement_types:
        allowed = ", ".join(policy.allowed_placement_types) or "none"
        return _lose(0, undecidable, name, mode, f"placement {placement} not allowed ({allowed})")
    if info.sharing not in policy.allowed_sharing_modes:
        allowed = ", ".join(policy.allowed_sharing_modes) or "none"
        return _lose(0, undecidable, name, mode, f"sharing {info.sharing} not allowed ({allowed})")
    return info, mode, devices


def _placements(devices: Sequence[Device]) -> frozenset[PlacementMode]:
    return frozenset(
        PlacementMode.PARTITION if d.device_type == "mig" else PlacementMode.WHOLE_DEVICE
        for d in devices
    )


# What a class's selection holds, kept for it (`kept.py`): every plan asks.
_KINDS: KeptFor[frozenset[PlacementMode]] = KeptFor()


def _shared_products(devices: tuple[Device, ...]) -> Mapping[str, str]:
    """The products of a Dedicated class's selection that its claims could be stacked on,
    each with why: a device of theirs is shared by default (`Device.shared_by_default`).

    A Dedicated claim asks no capacity, which takes such a device only in part, and the
    scheduler may give it any device of the plan's product the class selects: the whole
    product is no Dedicated place, or two orders the planner counted on two GPUs ran on
    one. The claim cannot steer clear by itself: a selector sees no requestPolicy, and one
    on `device.allowMultipleAllocations` does not compile on a server without
    DRAConsumableCapacity (every Dedicated order there would fail). The class's can."""
    return _SHARED.get(devices, None, lambda: _shared_by_product(devices))


def _shared_by_product(devices: Sequence[Device]) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    for device in devices:
        if device.shared_by_default:
            found.setdefault(device.product_name, []).append(f"{device.pool}/{device.name}")
    notes = {}
    for product, names in found.items():
        shown = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
        notes[product] = (
            f"selects {len(names)} device(s) a Dedicated claim would only share ({shown}: "
            "they allow multiple allocations, and a claim that asks no capacity takes their "
            "requestPolicy default, not all of them); keep them out of the class for "
            "Dedicated orders (device.allowMultipleAllocations == false)"
        )
    return notes


_SHARED: KeptFor[Mapping[str, str]] = KeptFor()


def _groups(devices: Sequence[Device]) -> tuple[tuple[Device, ...], ...]:
    """The devices by (product, memory); kept for the class's selection (`kept.py`): it
    was O(devices) a plan, and a group kept the same tuple lets the search find its
    nodes kept too."""
    return _GROUPS.get(devices, None, lambda: _grouped(devices))


def _grouped(devices: Sequence[Device]) -> tuple[tuple[Device, ...], ...]:
    by_kind: dict[tuple[str, Fraction], list[Device]] = {}
    for device in devices:
        memory = device.memory_bytes if device.memory_bytes is not None else Fraction(0)
        by_kind.setdefault((device.product_name, memory), []).append(device)
    return tuple(tuple(by_kind[key]) for key in sorted(by_kind))


_GROUPS: KeptFor[tuple[tuple[Device, ...], ...]] = KeptFor()


# --- rule 2: one (class, product, memory) group ----------------------------------------


def _counts(policy: AcceleratorPolicy, placement: PlacementMode) -> list[int]:
    # One CUDA process sees one MIG partition; tensor parallelism wants a power of two.
    if placement is PlacementMode.PARTITION:
        return [1]
    counts, count = [], 1
    while count <= policy.max_accelerator_count:
        counts.append(count)
        count *= 2
    return counts


@dataclass(frozen=True, slots=True)
class _Context:
    request: PlanRequest
    snapshot: Snapshot
    recipes: tuple[Recipe, ...]
    priority: int


def _consider(
    context: _Context,
    info: DeviceClassInfo,
    mode: _Mode,
    group: tuple[Device, ...],
    *,
    class_index: int,
    shared: str | None = None,
) -> _Option | _Loss:
    request, facts = context.request, context.request.facts
    product = group[0].product_name
    memory = group[0].memory_bytes or Fraction(0)
    serving = request.endpoint_type or policy.choose_endpoint_type(
        policy.ENDPOINT_PREFERENCE, facts.endpoint_types
    )
    choice = choose_recipe(
        context.recipes,
        placement=mode.placement,
        product_name=product,
        model_format=facts.format,
        quantization=facts.quantization,
        endpoint_type=serving or EndpointType.CHAT,
        api_key=request.api_key,
    )
    if choice.recipe is None or choice.reason is not None:
        reason = choice.reason or Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE
        return _lose(
            _PROGRESS[reason], reason, info.name, mode, choice.detail, product_name=product
        )
    recipe = choice.recipe
    per_consumer = memory * mode.share_percent / FULL_SHARE
    counts = _counts(request.accelerator, mode.placement)
    count = next(
        (c for c in counts if sizing.fits(facts, count=c, device_memory=per_consumer)), None
    )
    too_small = Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY
    if count is None:
        most = counts[-1]
        usable = most * per_consumer * sizing.GPU_MEMORY_UTILIZATION
        return _lose(
            _PROGRESS[too_small], too_small, info.name, mode,
            f"needs {_gib(sizing.memory_need(facts, most))} GiB; {most} x "
            f"{_gib(per_consumer)} GiB holds {_gib(usable)} GiB at "
            f"{float(sizing.GPU_MEMORY_UTILIZATION):.0%} use",
            product_name=product,
        )  # fmt: skip
    per_node = max(Counter(d.node for d in group).values())
    if count > per_node:
        return _lose(
            _PROGRESS[too_small], too_small, info.name, mode,
            f"needs {count} devices on one node; nodes have at most {per_node}",
            product_name=product, accelerator_count=count,
        )  # fmt: skip
    if shared is not None:  # a Dedicated claim could be given a share (_shared_products)
        return _lose(
            _SHARED_BY_DEFAULT, Reason.PLACEMENT_UNDECIDABLE, info.name, mode, shared,
            product_name=product, accelerator_count=count,
        )  # fmt: skip
    if info.name in request.tried_device_classes:
        exhausted = Reason.RESOURCE_CLAIM_EXHAUSTED
        return _lose(
            _PROGRESS[exhausted], exhausted, info.name, mode,
            "already tried for this order and did not hold it",
            product_name=product, accelerator_count=count,
        )  # fmt: skip
    held = request.held
    place = find_place(
        context.snapshot,
        group,
        count=count,
        share_percent=mode.share_percent,
        replicas=request.min_replicas,
        priority=context.priority,
        own_uid=request.order_uid,
        held=held.devices if held else (),
        held_share=(held.share_percent or FULL_SHARE) if held else FULL_SHARE,
    )
    if place is None:
        return _lose(
            _PROGRESS[Reason.NO_CAPACITY], Reason.NO_CAPACITY, info.name, mode,
            f"{len(group)} device(s), no room for {request.min_replicas} replica(s) of "
            f"{count} even after reclaiming lower-priority claims",
            product_name=product, accelerator_count=count,
        )  # fmt: skip
    return _option(
        context, info, mode,
        recipe=recipe, place=place, product=product, count=count, memory=memory,
        class_index=class_index,
    )  # fmt: skip


def _option(
    context: _Context,
    info: DeviceClassInfo,
    mode: _Mode,
    *,
    recipe: Recipe,
    place: Place,
    product: str,
    count: int,
    memory: Fraction,
    class_index: int,
) -> _Option:
    facts, policy = context.request.facts, context.request.accelerator
    estimate = sizing.estimate(
        facts,
        count=count,
        whole_devices=mode.placement is PlacementMode.WHOLE_DEVICE
        and mode.sharing is SharingMode.DEDICATED,
    )
    chosen = Plan(
        device_class=info.name,
        accelerator_product_name=product,
        accelerator_memory_gib=gib_rounded(memory),
        accelerator_count=count,
        placement_mode=mode.placement,
        sharing_mode=mode.sharing,
        share_percent=mode.share_percent if mode.sharing is SharingMode.SHARED else None,
        recipe=recipe.name,
        cpu=estimate.cpu,
        memory=estimate.memory,
        model_volume=estimate.model_volume,
        tool_calling_supported=recipe.tool_calling.enabled,
        devices=place.devices,
    )
    victims = [a for a in context.snapshot.allocations if a.key in place.reclaims]
    rank: tuple[object, ...] = (
        bool(place.reclaims),
        max((a.priority or 0 for a in victims), default=0),
        len(place.reclaims),
        class_index if policy.allowed_device_classes is not None else 0,
        policy.allowed_placement_types.index(mode.placement),
        policy.allowed_sharing_modes.index(mode.sharing),
        count,
        memory * mode.share_percent / FULL_SHARE,
        -recipe.preference,
        info.name,
        product,
    )
    detail = f"recipe {recipe.name}, devices {', '.join(place.devices)}"
    if place.reclaims:
        detail += f"; frees lower-priority claim(s) {', '.join(place.reclaims)}"
    candidate = Candidate(
        device_class=info.name,
        product_name=product,
        placement_mode=mode.placement,
        sharing_mode=mode.sharing,
        accelerator_count=count,
        detail=detail,
    )
    return _Option(rank, chosen, place, candidate)


def _gib(amount: Fraction) -> str:
    return f"{float(amount / GIB):.1f}"


# --- rules 3 and 4: the outcome --------------------------------------------------------


def _sorted_losses(losses: Sequence[_Loss]) -> list[_Loss]:
    """Furthest first; ties by name, so the order never depends on the cluster's listing."""
    return sorted(
        losses,
        key=lambda loss: (
            -loss.progress,
            loss.candidate.device_class,
            loss.candidate.product_name or "",
        ),
    )


def _rank_key(option: _Option) -> tuple[object, ...]:
    return option.rank


def _success(
    request: PlanRequest, options: Sequence[_Option], losses: Sequence[_Loss]
) -> PlanOutcome:
    ranked = sorted(options, key=_rank_key)
    best = ranked[0]
    runners_up = [
        option.candidate.model_copy(
            update={
                "lost_because": Reason.PLAN_COMPUTED,
                "detail": f"a better option won; {option.candidate.detail}",
            }
        )
        for option in ranked[1:]
    ]
    chosen = best.plan
    message = (
        f"{chosen.device_class} ({chosen.accelerator_product_name}) x{chosen.accelerator_count}, "
        f"{chosen.placement_mode} {chosen.sharing_mode}"
        + (f" {chosen.share_percent}%" if chosen.share_percent else "")
        + f", recipe {chosen.recipe}"
    )
    if best.place.reclaims:
        message += reclaims_note(request.namespace, best.place.reclaims)
    return PlanOutcome(
        reason=Reason.PLAN_COMPUTED,
        message=message,
        plan=chosen,
        candidates=(best.candidate, *runners_up, *(x.candidate for x in _sorted_losses(losses))),
        reclaims=best.place.reclaims,
    )


def _failure(request: PlanRequest, losses: Sequence[_Loss], names: Sequence[str]) -> PlanOutcome:
    if not losses:
        return PlanOutcome(
            reason=Reason.PLACEMENT_UNDECIDABLE,
            message="nothing to try: the cluster publishes no DeviceClass"
            if not names
            else "nothing to try",
        )
    ordered = _sorted_losses(losses)
    candidates = tuple(loss.candidate for loss in ordered)
    best = ordered[0]
    if best.progress == _PROGRESS[Reason.PLACEMENT_UNDECIDABLE]:
        reason = Reason.PLACEMENT_UNDECIDABLE
        message = "nothing to try: " + "; ".join(
            f"{c.device_class}: {c.detail}" for c in candidates
        )
        return PlanOutcome(reason=reason, message=message, candidates=candidates)
    if best.progress == _EMPTY_CLASS:
        reason = Reason.NO_CAPACITY
        message = "no allowed DeviceClass selects a published device yet"
    elif best.candidate.lost_because is Reason.RESOURCE_CLAIM_EXHAUSTED:
        reason = Reason.RESOURCE_CLAIM_EXHAUSTED
        tried = ", ".join(request.tried_device_classes)
        message = f"every device class that could hold the model was tried ({tried})"
    else:
        reason = best.candidate.lost_because or Reason.NO_CAPACITY
        where = best.candidate.device_class
        if best.candidate.product_name:
            where += f" ({best.candidate.product_name})"
        message = f"{where}: {best.candidate.detail}"
    if len(candidates) > 1:
        message += f" (and {len(candidates) - 1} other option(s) in candidates)"
    return PlanOutcome(reason=reason, message=message, candidates=candidates)
