"""The capacity snapshot: the cluster's devices and claims as the planner sees them.

`inventory` reads the DRA objects (`resource.k8s.io/v1`) into the frozen values here; this
module answers, from those values alone, the one question both the planner and the
controller's preemption ask: *where does a place of this shape fit now, and which
lower-priority claims would have to go for it?* The scheduler never preempts for devices
(DRA.md), so this answer is the controller's to act on.

Accounting is in share units: every device holds 100. A Dedicated claim takes all 100; a
Shared claim takes its share percent, but only on a device that allows multiple
allocations (Kubernetes' consumable-capacity model) — anywhere else any claim takes the
whole device. A Dedicated claim asks no capacity, which takes a shareable device whole
only where no requestPolicy default says otherwise (`Device.shared_by_default`): the
planner plans no Dedicated order where its claim could be given such a device. A Shared
claim asks only memory, and takes every other capacity at its default, else whole: a
device publishing one holds at most `Device.sharers_at_most` claims, whatever their
units leave free, so claims are counted too.
"""

from __future__ import annotations

from collections import ChainMap, Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from fsm.placement.kept import KeptFor
from fsm.values import PlacementMode, SharingMode

__all__ = [
    "FULL_SHARE",
    "ORDER_UID_LABEL",
    "PLACEMENT_LABEL",
    "SHARE_PERCENT_LABEL",
    "SHARING_LABEL",
    "Allocation",
    "Device",
    "DeviceClassInfo",
    "JudgedClaims",
    "Place",
    "Snapshot",
    "Version",
    "claim_freed",
    "claim_taken",
    "find_place",
    "free_on",
    "has_room",
    "priority_lookup",
    "uncovered_held",
    "usage_by_device",
    "with_counted",
    "with_holder_priorities",
]

PLACEMENT_LABEL = "ai.deckhouse.io/placement"
SHARING_LABEL = "ai.deckhouse.io/sharing"
SHARE_PERCENT_LABEL = "ai.deckhouse.io/share-percent"
# Put on the ResourceClaimTemplate's `spec.metadata.labels`: Kubernetes copies it onto
# every generated claim, which is how a claim is traced back to the order holding it.
ORDER_UID_LABEL = "ai.deckhouse.io/inference-service-uid"

FULL_SHARE = 100
DEFAULT_SHARE_PERCENT = 50


@dataclass(frozen=True, slots=True)
class Version:
    """A DRA `version` attribute (semver text); CEL sees it as a semver value."""

    text: str


AttributeValue = str | int | bool | Version


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice. Attribute and capacity names are fully qualified.

    What the planner asks of a device (its id, product, type, memory) is worked out once,
    as it is made: a plan asks it of every device for each class and each other order's
    demand, and building the strings and the attribute map each time was most of a plan.
    """

    driver: str
    pool: str
    name: str
    node: str  # the slice's nodeName, else the pool: a place never spans it
    attributes: tuple[tuple[str, AttributeValue], ...] = ()
    capacity: tuple[tuple[str, Fraction], ...] = ()
    allow_multiple_allocations: bool = False
    # Shareable, and a claim that asks no capacity of it (`capacity.requests`) takes only a
    # part: each capacity's requestPolicy `default`, below its value (KEP-5075; a capacity
    # without a default is taken whole). A Dedicated claim asks none, so it would not hold
    # such a device alone: inventory.py reads it, the planner keeps Dedicated plans off it.
    shared_by_default: bool = False
    # How many claims asking only memory (every Shared one) it holds at once, whatever
    # memory is left: each such claim consumes every other capacity at its requestPolicy
    # `default`, else whole (KEP-5075), so a second capacity without a policy keeps the
    # device to one claim. A claim asking nothing (Dedicated) takes as much of them and
    # counts too. None: memory alone bounds them. inventory.py reads it; the accounting
    # counts claims against it (`_Use.count`).
    sharers_at_most: int | None = None
    id: str = field(init=False, compare=False, repr=False)
    product_name: str = field(init=False, compare=False, repr=False)
    device_type: str = field(init=False, compare=False, repr=False)
    memory_bytes: Fraction | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        known = object.__setattr__
        known(self, "id", f"{self.driver}/{self.pool}/{self.name}")
        product, kind = self.attribute("productName"), self.attribute("type")
        known(self, "product_name", product if isinstance(product, str) else "")
        known(self, "device_type", kind if isinstance(kind, str) else "")
        known(self, "memory_bytes", self._memory())

    def attribute(self, name: str) -> AttributeValue | None:
        """An attribute by its qualified name, or by a bare name in the driver's domain."""
        qualified = name if "/" in name else f"{self.driver}/{name}"
        return dict(self.attributes).get(qualified)

    def _memory(self) -> Fraction | None:
        caps = dict(self.capacity)
        if f"{self.driver}/memory" in caps:
            return caps[f"{self.driver}/memory"]
        # A driver may publish memory under another domain; take the first, by name.
        others = sorted(key for key in caps if key.rsplit("/", 1)[-1] == "memory")
        return caps[others[0]] if others else None


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    """A DeviceClass: its selectors and what its labels say of placement and sharing."""

    name: str
    generation: int = 0
    selectors: tuple[str, ...] = ()
    placement: PlacementMode | None = None  # None: from the devices it selects
    sharing: SharingMode = SharingMode.DEDICATED
    share_percent: int | None = None  # set iff sharing is Shared
    label_error: str | None = None  # labels that cannot be read make the class unjudgeable


@dataclass(frozen=True, slots=True)
class Allocation:
    """An allocated ResourceClaim: which devices it takes, at what share, for whom."""

    namespace: str
    name: str
    devices: tuple[str, ...]
    share_percent: int = FULL_SHARE
    holder: str | None = None  # the order's UID, from ORDER_UID_LABEL
    priority: int | None = None  # the holder's priority value; None: never reclaimable
    # A plan's replica not allocated yet (fsm/placement/demand.py): no claim stands
    # behind it, so no running replica goes when it is "freed".
    planned: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the planner saw. Sorted throughout, so the same cluster yields the same value."""

    device_classes: tuple[DeviceClassInfo, ...] = ()
    devices: tuple[Device, ...] = ()
    allocations: tuple[Allocation, ...] = ()
    priority_classes: tuple[tuple[str, int], ...] = ()
    default_priority: int = 0  # the globalDefault PriorityClass's value, else 0
    problems: tuple[str, ...] = ()  # pools or objects skipped, and why
    # `usage_of(self)`, where whoever made this snapshot had counted it already (demand:
    # `with_counted`). Not an argument, so `dataclasses.replace` drops it: a snapshot made
    # from this one with other allocations or devices is counted anew. Never changed.
    counted: Usage | None = field(default=None, init=False, compare=False, repr=False)

    def device_class(self, name: str) -> DeviceClassInfo | None:
        return next((dc for dc in self.device_classes if dc.name == name), None)

    def priority_value(self, priority_class_name: str | None) -> int | None:
        """A PriorityClass's value; the cluster default for None; None if it is missing."""
        return self.priority_values()(priority_class_name)

    def priority_values(self) -> Callable[[str | None], int | None]:
        """`priority_value` for many names in turn, the classes read into a map once."""
        return priority_lookup(self.priority_classes, self.default_priority)


def priority_lookup(
    priority_classes: Iterable[tuple[str, int]], default: int
) -> Callable[[str | None], int | None]:
    """A PriorityClass's value by name (the cluster default for None; None if missing),
    from (name, value) pairs read into a map once."""
    values = dict(priority_classes)
    return lambda name: default if name is None else values.get(name)


@dataclass(frozen=True, slots=True)
class Place:
    """Devices for each replica (one tuple per replica) and the claims to free first."""

    replicas: tuple[tuple[str, ...], ...]
    reclaims: tuple[str, ...] = ()

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(device for replica in self.replicas for device in replica)


# By a parsed claim's id: that claim (held, so no other object takes its id while it is
# kept) and its copy judged by its holder's priority.
JudgedClaims = dict[int, tuple[Allocation, Allocation]]


def with_holder_priorities(
    snapshot: Snapshot, holder_priorities: Mapping[str, int], kept: JudgedClaims | None = None
) -> Snapshot:
    """`snapshot` as `inventory.parse_snapshot(..., holder_priorities=...)` would have read
    it: the same objects, parsed once, judged by the holders' priorities of the moment.

    `kept`, for a caller judging much the same claims for every plan: a claim judged
    before, whose holder's priority has not changed, is not made anew (every claim was,
    O(claims) new objects a plan)."""
    judged = []
    fresh: JudgedClaims = {}
    for alloc in snapshot.allocations:
        if alloc.holder is None:
            judged.append(alloc)
            continue
        priority = holder_priorities.get(alloc.holder)
        hit = kept.get(id(alloc)) if kept is not None else None
        if hit is None or hit[0] is not alloc or hit[1].priority != priority:
            hit = (alloc, replace(alloc, priority=priority))
        fresh[id(alloc)] = hit
        judged.append(hit[1])
    if kept is not None:  # only the claims of this snapshot: the others' ids may be reused
        kept.clear()
        kept.update(fresh)
    return replace(snapshot, allocations=tuple(judged))


# --- accounting -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Use:
    """Share units in use on one device, the claims (with their units) using them, and
    how many claims and places those units are (`Device.sharers_at_most` bounds it).

    Never changed in place: a usage map is copied with `dict(usage)` and its entries
    replaced, so maps share their entries, and every free device shares `_FREE` (one
    new object per device at each count of the usage was a tenth of the controller's
    CPU in `bench -n 500`, the rollout's claims changing the snapshot all the time)."""

    used: int = 0
    claims: tuple[tuple[Allocation, int], ...] = ()
    count: int = 0


_FREE = _Use()


def usage_by_device(
    snapshot: Snapshot,
    *,
    own_uid: str | None = None,
    held: Sequence[str] = (),
    held_share: int = FULL_SHARE,
) -> dict[str, int]:
    """Share units in use per device id, the order's own place included."""
    return {key: use.used for key, use in _usage(snapshot, own_uid, held, held_share).items()}


Usage = dict[str, _Use]  # share units in use, by device id


def usage_of(snapshot: Snapshot) -> Usage:
    """The units in use on every device, for `find_place(usage=...)` and `take_units`."""
    return _usage(snapshot, None, (), FULL_SHARE)


def take_units(
    usage: Usage,
    by_id: Mapping[str, Device],
    devices: Iterable[str],
    share_percent: int,
    *,
    sign: int = 1,
) -> None:
    """Count `devices` (published ones, by id in `by_id`) as taken at `share_percent` in
    `usage`: a place made elsewhere. `sign=-1` gives back what the same call took."""
    for device_id in devices:
        use = usage.get(device_id)
        if use is not None:
            units = _units(by_id[device_id], share_percent)
            usage[device_id] = _Use(use.used + sign * units, use.claims, use.count + sign)


def claim_taken(usage: Usage, by_id: Mapping[str, Device], alloc: Allocation) -> None:
    """Record `alloc` as a claim on its devices in `usage`, whose units `find_place` or
    `take_units` took for it already: `usage` then holds what counting a snapshot with
    `alloc` in it would (the claims feed reclaim, which frees whole claims)."""
    for device_id in alloc.devices:
        use = usage.get(device_id)
        if use is not None:
            entry = (alloc, _units(by_id[device_id], alloc.share_percent))
            claims = use.claims
            if claims and claims[-1][0].key > alloc.key:  # in key order, as a count has them
                taken = tuple(sorted((*claims, entry), key=lambda claim: claim[0].key))
            else:
                taken = (*claims, entry)
            usage[device_id] = _Use(use.used, taken, use.count)


def claim_freed(usage: Usage, alloc: Allocation) -> None:
    """Take `alloc` (an allocation of the snapshot `usage` counts) out of `usage`: its
    units and its claim on every device it holds, as a count without it would have."""
    _release(usage, alloc)


def with_counted(snapshot: Snapshot, usage: Usage) -> Snapshot:
    """`snapshot`, carrying `usage` (which must be `usage_of(snapshot)`, and which the
    caller then no longer changes) as its count: a plan from it counts no claim again."""
    object.__setattr__(snapshot, "counted", usage)
    return snapshot


def _units(device: Device, share_percent: int) -> int:
    return share_percent if device.allow_multiple_allocations else FULL_SHARE


def _usage(
    snapshot: Snapshot, own_uid: str | None, held: Sequence[str], held_share: int
) -> dict[str, _Use]:
    by_id = {device.id: device for device in snapshot.devices}
    # Counted as the demand was placed: a copy (the entries are never changed).
    usage = dict(snapshot.counted) if snapshot.counted is not None else _count(snapshot, by_id)
    take_units(usage, by_id, uncovered_held(snapshot, own_uid, held), held_share)
    return usage


def uncovered_held(snapshot: Snapshot, own_uid: str | None, held: Sequence[str]) -> list[str]:
    """The devices of `own_uid`'s held place (its plan in force) that its allocated
    claims do not cover yet: counted as taken even before its claims show up — only
    those, as the scheduler may have given the order other devices than the plan
    named, and those it holds are its place."""
    if not held:
        return []
    published = {device.id for device in snapshot.devices}
    # Counted, not a set: a Shared plan may name one device for two replicas, and one
    # claim there covered both (the other's half was offered to the order's own replan).
    own = Counter(
        device_id
        for alloc in snapshot.allocations
        if own_uid is not None and alloc.holder == own_uid
        for device_id in alloc.devices
        if device_id in published
    )
    left, not_own = Counter(own), []
    for device_id in held:
        if left[device_id] > 0:
            left[device_id] -= 1
        else:
            not_own.append(device_id)
    uncovered = max(0, len(held) - sum(own.values()))
    return [d for d in not_own if d in published][:uncovered]


def _count(snapshot: Snapshot, by_id: Mapping[str, Device]) -> dict[str, _Use]:
    """Every allocation's units and claim on each published device."""
    usage = dict.fromkeys(by_id, _FREE)
    claims: dict[str, list[tuple[Allocation, int]]] = {}
    for alloc in snapshot.allocations:
        for device_id in alloc.devices:
            if device_id not in usage:
                continue
            claims.setdefault(device_id, []).append(
                (alloc, _units(by_id[device_id], alloc.share_percent))
            )
    for device_id, on_device in claims.items():
        usage[device_id] = _Use(
            sum(units for _, units in on_device), tuple(on_device), len(on_device)
        )
    return usage


def _release(usage: dict[str, _Use], victim: Allocation) -> None:
    """Free a claim everywhere it holds devices (of those `usage` maps)."""
    for device_id in victim.devices:
        use = usage.get(device_id)
        if use is None:
            continue
        kept = tuple(entry for entry in use.claims if entry[0] is not victim)
        freed = sum(units for alloc, units in use.claims if alloc is victim)
        usage[device_id] = _Use(use.used - freed, kept, use.count - (len(use.claims) - len(kept)))


def find_place(
    snapshot: Snapshot,
    devices: Sequence[Device],
    *,
    count: int,
    share_percent: int = FULL_SHARE,
    replicas: int = 1,
    priority: int | None = None,
    own_uid: str | None = None,
    held: Sequence[str] = (),
    held_share: int = FULL_SHARE,
    usage: Usage | None = None,
    full: FullNodes | None = None,
) -> Place | None:
    """A place for `replicas` replicas of `count` distinct devices on one node each.

    Free share units are used first. Where none are left, claims of lower priority than
    `priority` are freed, lowest priority first (a claim spanning several devices frees
    all of them). The order's own claims (`own_uid`) and its `held` devices are never
    offered and never reclaimed. None: no place, not even by reclaiming.

    `usage` (from `usage_of(snapshot)`, for a caller placing many places in turn with no
    `held` and no `priority`) is counted from instead of the snapshot, and takes the
    place's units: one count for all of them rather than one each. With it, `full` (kept
    by that caller across its calls) remembers the nodes found without room, so the next
    search starts after them.
    """
    if usage is None:
        usage = _usage(snapshot, own_uid, held, held_share)
    nodes = _by_node(devices)
    placed: list[tuple[str, ...]] = []
    reclaimed: dict[str, Allocation] = {}
    for _ in range(replicas):
        # Only while `usage` is still the caller's: a later replica's search sees this
        # call's own earlier replicas, which a failed call does not keep.
        remember = full is not None and priority is None and not placed
        # Free room on the first node (by name) that has it beats any reclaim, so free
        # room is looked for first, with no reclaim options weighed: weighing them on
        # every full node before it was O(devices x claims) a plan in a filling cluster.
        best = _search(
            usage, nodes, count, share_percent,
            priority=None, own_uid=own_uid, full=full, remember=remember,
        )  # fmt: skip
        if best is None and priority is not None:
            best = _search(
                usage, nodes, count, share_percent,
                priority=priority, own_uid=own_uid, full=full, remember=False,
            )  # fmt: skip
        if best is None:
            return None
        usage.update(best[2])
        for victim in best[4]:
            _release(usage, victim)  # off the node too: a claim is freed everywhere
        placed.append(tuple(best[3]))
        reclaimed.update((victim.key, victim) for victim in best[4])
    order = sorted(reclaimed.values(), key=lambda a: (a.priority or 0, a.key))
    return Place(replicas=tuple(placed), reclaims=tuple(a.key for a in order))


_Cost = tuple[int, int, int, int]
_Found = tuple[_Cost, str, dict[str, _Use], list[str], list[Allocation]]


def _cost(freed: Sequence[Allocation]) -> _Cost:
    """What freeing `freed` costs, lower first: nothing; then the highest priority freed;
    then how many running replicas stop (a waiting plan's place, `planned`, stops none:
    at equal priority a serving replica was taken where a waiting order's room would
    do, and that order then held the room the victim needed back); then how many."""
    return (
        int(bool(freed)),
        max((a.priority or 0 for a in freed), default=0),
        sum(1 for a in freed if not a.planned),
        len(freed),
    )


def _search(
    usage: Usage,
    nodes: tuple[tuple[str, tuple[Device, ...]], ...],
    count: int,
    share_percent: int,
    *,
    priority: int | None,
    own_uid: str | None,
    full: FullNodes | None,
    remember: bool,
) -> _Found | None:
    """The cheapest node for one replica: (cost, node, its usage after, devices, freed)."""
    best: _Found | None = None
    start = full.first(nodes, share_percent) if full is not None else 0
    for index in range(start, len(nodes)):
        node, on_node = nodes[index]
        node_devices = [device for device in on_node if device.id in usage]
        trial = (
            _take(usage, node_devices, count, share_percent, priority=priority, own_uid=own_uid)
            if node_devices
            else None
        )
        if trial is None:
            # Asked only of a node that gave no place: most searches of a rollout find
            # room on their first node, and looking for it twice there was a tenth of
            # placing each demand.
            if (
                full is not None
                and remember
                and index == start
                and not any(_room(usage, device, share_percent) for device in node_devices)
            ):
                start += 1
                full.passed(nodes, share_percent, start)
            continue
        after, chosen, freed = trial
        cost = _cost(freed)
        if best is None or (cost, node) < (best[0], best[1]):
            best = (cost, node, after, chosen, freed)
        if not freed:
            break  # free room on the first node (by name) that has it: none beats it
    return best


def _take_free(
    usage: Mapping[str, _Use], node_devices: Sequence[Device], count: int, share_percent: int
) -> tuple[dict[str, _Use], list[str], list[Allocation]] | None:
    """`_take` with nothing to reclaim: the first `count` devices with room, in the node's
    order (by id, as `_take` picks among free devices), or None. Every demand of a
    rollout is placed this way on each plan, so it walks the node once; `_take`'s
    weighing built an option per device for each of `count` rounds."""
    if count <= 0:  # as `_take`: nothing to choose, on a node with room
        has_room = any(_room(usage, device, share_percent) for device in node_devices)
        return ({}, [], []) if has_room else None
    trial: dict[str, _Use] = {}
    for device in node_devices:
        units = _units(device, share_percent)
        use = usage[device.id]
        if _fits(device, FULL_SHARE - use.used, use.count, units):
            trial[device.id] = _Use(use.used + units, use.claims, use.count + 1)
            if len(trial) == count:
                return trial, list(trial), []
    return None


class FullNodes:
    """The nodes of a group found with no room for a share, for a caller whose usage only
    grows (demand takes and never frees): they stay without room, so each search starts
    after them. A rollout fills the nodes in order; without this, every other order's
    demand walked every full node again, O(demands x nodes) a plan."""

    def __init__(self) -> None:
        self._first: dict[int, tuple[tuple[Any, ...], dict[int, int]]] = {}

    def first(self, nodes: tuple[Any, ...], share_percent: int) -> int:
        kept = self._first.get(id(nodes))
        if kept is None or kept[0] is not nodes:  # the id is of this very tuple, still held
            return 0
        return kept[1].get(share_percent, 0)

    def passed(self, nodes: tuple[Any, ...], share_percent: int, first: int) -> None:
        kept = self._first.get(id(nodes))
        if kept is None or kept[0] is not nodes:
            kept = self._first[id(nodes)] = (nodes, {})
        kept[1][share_percent] = first


def _room(usage: Mapping[str, _Use], device: Device, share_percent: int) -> bool:
    use = usage[device.id]
    return _fits(device, FULL_SHARE - use.used, use.count, _units(device, share_percent))


def _fits(device: Device, free: int, count: int, units: int) -> bool:
    """Whether one more claim of `units` fits beside `count` claims leaving `free` units."""
    most = device.sharers_at_most
    return free >= units and (most is None or count < most)


def free_on(usage: Mapping[str, _Use], device: Device) -> int:
    """Free share units on `device` (published: in `usage`): none once it holds as many
    claims as it can (`Device.sharers_at_most`), whatever their units leave."""
    use = usage[device.id]
    if device.sharers_at_most is not None and use.count >= device.sharers_at_most:
        return 0
    return max(FULL_SHARE - use.used, 0)


def has_room(usage: Usage, device: Device, share_percent: int) -> bool:
    """Whether `device` (published: in `usage`) has room for a claim at `share_percent`."""
    return device.id in usage and _room(usage, device, share_percent)


def _by_node(devices: Sequence[Device]) -> tuple[tuple[str, tuple[Device, ...]], ...]:
    """The devices, once each, by node (nodes and devices sorted); kept for a plan's
    group (`kept.py`): each other order's demand asks for the same group, and grouping
    it every time was O(devices) a demand."""
    return _NODES.get(devices, None, lambda: _group_by_node(devices))


def _group_by_node(devices: Sequence[Device]) -> tuple[tuple[str, tuple[Device, ...]], ...]:
    by_node: dict[str, list[Device]] = {}
    for device in sorted({d.id: d for d in devices}.values(), key=lambda d: d.id):
        by_node.setdefault(device.node, []).append(device)
    return tuple((node, tuple(on_node)) for node, on_node in sorted(by_node.items()))


_NODES: KeptFor[tuple[tuple[str, tuple[Device, ...]], ...]] = KeptFor()


def _take(
    usage: dict[str, _Use],
    node_devices: Sequence[Device],
    count: int,
    share_percent: int,
    *,
    priority: int | None,
    own_uid: str | None,
) -> tuple[dict[str, _Use], list[str], list[Allocation]] | None:
    """Greedy over the usage, free devices first, then the cheapest reclaim; the trial
    holds only the devices it changes (copying the whole node each call was O(devices on
    the node) per demand: 45,000 calls copied 15 million entries for 300 orders planned
    at once on one 330-device node)."""
    if priority is None:
        return _take_free(usage, node_devices, count, share_percent)
    trial: dict[str, _Use] = {}
    on_node = {device.id for device in node_devices}
    chosen: list[str] = []
    freed: list[Allocation] = []
    for _ in range(count):
        options: list[tuple[_Cost, str, list[Allocation]]] = []
        for device in node_devices:
            if device.id in chosen:
                continue
            need = _units(device, share_percent)
            use = trial[device.id] if device.id in trial else usage[device.id]
            free, held = FULL_SHARE - use.used, use.count
            if _fits(device, free, held, need):
                options.append((_cost([]), device.id, []))
                continue
            if priority is None:
                continue
            victims = sorted(
                (
                    (alloc, units)
                    for alloc, units in use.claims
                    if alloc.priority is not None
                    and alloc.priority < priority
                    and (own_uid is None or alloc.holder != own_uid)
                ),
                # A waiting plan's place before a running replica of the same priority.
                key=lambda entry: (entry[0].priority or 0, not entry[0].planned, entry[0].key),
            )
            picked: list[Allocation] = []
            for alloc, units in victims:
                if _fits(device, free, held, need):
                    break
                picked.append(alloc)
                free += units
                held -= 1
            if _fits(device, free, held, need):
                options.append((_cost(picked), device.id, picked))
        if not options:
            return None
        _, device_id, picked = min(options, key=lambda o: (o[0], o[1]))
        for victim in picked:
            for held_id in victim.devices:
                if held_id in on_node and held_id not in trial:
                    trial[held_id] = usage[held_id]  # _release replaces it in the trial
            _release(trial, victim)
            freed.append(victim)
        device = next(d for d in node_devices if d.id == device_id)
        use = trial[device_id] if device_id in trial else usage[device_id]
        trial[device_id] = _Use(use.used + _units(device, share_percent), use.claims, use.count + 1)
        chosen.append(device_id)
    if len(freed) > 1:
        return _reprieved(usage, node_devices, count, share_percent, freed) or (
            trial,
            chosen,
            freed,
        )
    return trial, chosen, freed


def _reprieved(
    usage: Usage,
    node_devices: Sequence[Device],
    count: int,
    share_percent: int,
    freed: list[Allocation],
) -> tuple[dict[str, _Use], list[str], list[Allocation]] | None:
    """The greedy's victims less those the place does not need once the others are
    freed, highest priority first, as the scheduler's preemption gives victims back; None
    when each is needed. Greedy device by device, a replica of two devices freed x for
    one and then y, whose other device would have done: a running replica stopped for
    nothing (two claims of 25 % and 50 % freed for a 75 % share, too)."""
    keep = list(freed)
    for victim in sorted(freed, key=lambda a: (-(a.priority or 0), a.key)):
        others = [a for a in keep if a is not victim]
        if _placed_after(usage, node_devices, count, share_percent, others) is not None:
            keep = others
    if len(keep) == len(freed):
        return None
    return _placed_after(usage, node_devices, count, share_percent, keep)


def _placed_after(
    usage: Usage,
    node_devices: Sequence[Device],
    count: int,
    share_percent: int,
    victims: list[Allocation],
) -> tuple[dict[str, _Use], list[str], list[Allocation]] | None:
    """A place of free room once `victims` are freed on the node, as `_take` returns it."""
    on_node = {device.id for device in node_devices}
    released: dict[str, _Use] = {}
    for victim in victims:
        for held_id in victim.devices:
            if held_id in on_node and held_id not in released:
                released[held_id] = usage[held_id]
        _release(released, victim)
    found = _take_free(ChainMap(released, usage), node_devices, count, share_percent)
    if found is None:
        return None
    trial, chosen, _ = found
    return {**released, **trial}, chosen, list(victims)
