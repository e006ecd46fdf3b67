"""The inventory: the cluster's DRA and priority objects, read into a capacity snapshot.

The controller lists DeviceClasses, ResourceSlices and ResourceClaims (`resource.k8s.io/v1`)
and PriorityClasses, and hands them over as plain dicts; this module turns them into the
frozen values of `capacity`. It is its own module because it is the one part of placement
that knows those objects' shapes (labels, pools, typed attributes, allocation results, MPS
configs): a change of the API is read here, and the rest works on the model.

Pools follow the scheduler: per (driver, pool) only the newest generation counts, and an
incomplete pool or one with duplicate device names offers nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from fsm.placement.capacity import (
    DEFAULT_SHARE_PERCENT,
    FULL_SHARE,
    ORDER_UID_LABEL,
    PLACEMENT_LABEL,
    SHARE_PERCENT_LABEL,
    SHARING_LABEL,
    Allocation,
    AttributeValue,
    Device,
    DeviceClassInfo,
    Snapshot,
    Version,
)
from fsm.quantity import QuantityError, parse_quantity
from fsm.values import PlacementMode, SharingMode

__all__ = [
    "ClaimReader",
    "Devices",
    "Priorities",
    "assemble",
    "parse_allocations",
    "parse_device_classes",
    "parse_devices",
    "parse_priority_classes",
    "parse_snapshot",
]


def parse_snapshot(
    device_classes: Iterable[Mapping[str, Any]] = (),
    resource_slices: Iterable[Mapping[str, Any]] = (),
    resource_claims: Iterable[Mapping[str, Any]] = (),
    *,
    priority_classes: Iterable[Mapping[str, Any]] = (),
    holder_priorities: Mapping[str, int] | None = None,
) -> Snapshot:
    """Read the API's objects (dicts shaped as `resource.k8s.io/v1` returns them).

    `holder_priorities` maps an order UID to its priority value; a claim whose holder is
    not in it (another workload, or an order of unknown priority) is never reclaimable.
    """
    return assemble(
        parse_device_classes(device_classes),
        parse_devices(resource_slices),
        parse_allocations(resource_claims, holder_priorities),
        parse_priority_classes(priority_classes),
    )


# The parts of a snapshot, each read from one kind: a caller that knows which kind
# changed (the controller, by its informers' versions) parses only that one again — in a
# rollout the claims change with every order, the slices and classes hardly ever.
Devices = tuple[tuple[Device, ...], tuple[str, ...]]  # sorted by id; problems
Priorities = tuple[tuple[tuple[str, int], ...], int]  # sorted (name, value); the default


def parse_device_classes(objs: Iterable[Mapping[str, Any]]) -> tuple[DeviceClassInfo, ...]:
    return tuple(sorted((_device_class(obj) for obj in objs), key=lambda dc: dc.name))


def parse_devices(resource_slices: Iterable[Mapping[str, Any]]) -> Devices:
    problems: list[str] = []
    devices = _devices(resource_slices, problems)
    return tuple(sorted(devices, key=lambda d: d.id)), tuple(problems)


def parse_allocations(
    resource_claims: Iterable[Mapping[str, Any]], holder_priorities: Mapping[str, int] | None = None
) -> tuple[Allocation, ...]:
    allocations = [
        alloc
        for obj in resource_claims
        if (alloc := _allocation(obj, holder_priorities or {})) is not None
    ]
    return tuple(sorted(allocations, key=lambda a: a.key))


class ClaimReader:
    """`parse_allocations` for a caller that reads the same claims again and again (the
    controller, on each change of any claim): each claim is parsed once per
    resourceVersion. In a rollout one claim changes at a time, and parsing every claim
    again on each change made an allocation cost O(claims): 80,000 claims parsed for 500
    orders in `benchmarks/rollout.py -n 500 --lag 100`. A claim with no version (never
    so from the API server) is parsed every time."""

    def __init__(self) -> None:
        # by "namespace/name" (an allocation's key): (resourceVersion, what it holds)
        self._kept: dict[str, tuple[str | None, Allocation | None]] = {}
        self.parsed = 0  # claims parsed (for tests: each changed claim, once)

    def __call__(self, resource_claims: Iterable[Mapping[str, Any]]) -> tuple[Allocation, ...]:
        kept, fresh = self._kept, {}
        for obj in resource_claims:
            meta = obj.get("metadata") or {}
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            version = meta.get("resourceVersion")
            hit = kept.get(key)
            if hit is None or version is None or hit[0] != version:
                hit = (version, _allocation(obj, {}))
                self.parsed += 1
            fresh[key] = hit
        self._kept = fresh  # a deleted claim is forgotten with the call that misses it
        return tuple(alloc for _, (_, alloc) in sorted(fresh.items()) if alloc is not None)


def parse_priority_classes(objs: Iterable[Mapping[str, Any]]) -> Priorities:
    prios: dict[str, int] = {}
    default = 0
    for obj in objs:
        name = str(obj.get("metadata", {}).get("name", ""))
        value = int(obj.get("value", 0))
        prios[name] = value
        if obj.get("globalDefault"):
            default = value
    return tuple(sorted(prios.items())), default


def assemble(
    device_classes: tuple[DeviceClassInfo, ...],
    devices: Devices,
    allocations: tuple[Allocation, ...],
    priorities: Priorities,
) -> Snapshot:
    """A snapshot of parsed parts; the claims that hold unpublished devices are named."""
    published, problems = devices
    known = {device.id for device in published}
    held_unknown = [
        f"claim {alloc.key} holds unpublished device(s) {', '.join(unknown)}"
        for alloc in allocations
        if (unknown := [device for device in alloc.devices if device not in known])
    ]
    return Snapshot(
        device_classes=device_classes,
        devices=published,
        allocations=allocations,
        priority_classes=priorities[0],
        default_priority=priorities[1],
        problems=(*problems, *held_unknown),
    )


def _device_class(obj: Mapping[str, Any]) -> DeviceClassInfo:
    meta = obj.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    selectors = tuple(
        str((sel.get("cel") or {}).get("expression", ""))
        for sel in (obj.get("spec") or {}).get("selectors") or ()
    )
    name = str(meta.get("name", ""))
    generation = int(meta.get("generation") or 0)
    errors: list[str] = []
    placement: PlacementMode | None = None
    if PLACEMENT_LABEL in labels:
        try:
            placement = PlacementMode(labels[PLACEMENT_LABEL])
        except ValueError:
            errors.append(
                f"{PLACEMENT_LABEL}={labels[PLACEMENT_LABEL]!r} is not WholeDevice|Partition"
            )
    sharing = SharingMode.DEDICATED
    if SHARING_LABEL in labels:
        try:
            sharing = SharingMode(labels[SHARING_LABEL])
        except ValueError:
            errors.append(f"{SHARING_LABEL}={labels[SHARING_LABEL]!r} is not Dedicated|Shared")
    share: int | None = None
    if sharing is SharingMode.SHARED:
        raw = labels.get(SHARE_PERCENT_LABEL, str(DEFAULT_SHARE_PERCENT))
        if raw.isdigit() and 1 <= int(raw) <= FULL_SHARE:
            share = int(raw)
        else:
            errors.append(f"{SHARE_PERCENT_LABEL}={raw!r} is not a whole percent in 1..100")
    return DeviceClassInfo(
        name=name,
        generation=generation,
        selectors=selectors,
        placement=placement,
        sharing=sharing,
        share_percent=share,
        label_error="; ".join(errors) or None,
    )


def _devices(slices: Iterable[Mapping[str, Any]], problems: list[str]) -> list[Device]:
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        pools.setdefault(
            (str(spec.get("driver", "")), str((spec.get("pool") or {}).get("name", ""))), []
        ).append(obj)
    devices: list[Device] = []
    for (driver, pool), members in sorted(pools.items()):
        newest = max(int(m["spec"]["pool"].get("generation", 0)) for m in members)
        current = [m for m in members if int(m["spec"]["pool"].get("generation", 0)) == newest]
        expected = {int(m["spec"]["pool"].get("resourceSliceCount", 1)) for m in current}
        if expected != {len(current)}:
            problems.append(
                f"pool {driver}/{pool} generation {newest} is incomplete: "
                f"{len(current)} of {sorted(expected)} slice(s)"
            )
            continue
        pool_devices = [
            _device(driver, pool, m["spec"], dev)
            for m in current
            for dev in m["spec"].get("devices") or ()
        ]
        names = [d.name for d in pool_devices]
        if len(names) != len(set(names)):
            problems.append(f"pool {driver}/{pool} is invalid: duplicate device names")
            continue
        devices.extend(pool_devices)
    return devices


# No device has 2 EiB of anything. Past it a published capacity is a driver's bug, and a
# plan could not even say it: a memory that large planned onto overflowed the log's
# encoder (every pass raised) or the status's int32 `acceleratorMemoryGiB` (never written).
_MOST_CAPACITY = Fraction(2**61)


def _device(driver: str, pool: str, spec: Mapping[str, Any], dev: Mapping[str, Any]) -> Device:
    body = dev.get("basic") or dev  # v1beta1 nested devices under `basic`; v1 does not
    attributes: list[tuple[str, AttributeValue]] = []
    for key, typed in (body.get("attributes") or {}).items():
        qualified = key if "/" in key else f"{driver}/{key}"
        if "version" in typed:
            attributes.append((qualified, Version(str(typed["version"]))))
        elif "bool" in typed:
            attributes.append((qualified, bool(typed["bool"])))
        elif "int" in typed:
            attributes.append((qualified, int(typed["int"])))
        elif "string" in typed:
            attributes.append((qualified, str(typed["string"])))
    capacity: list[tuple[str, Fraction]] = []
    for key, cap in (body.get("capacity") or {}).items():
        qualified = key if "/" in key else f"{driver}/{key}"
        try:
            amount = parse_quantity(cap.get("value", 0))
        except QuantityError:
            continue  # an unreadable capacity is as good as unpublished
        if amount > _MOST_CAPACITY:
            continue  # a driver's bug, not a device: as good as unpublished too
        capacity.append((qualified, amount))
    node = spec.get("nodeName") or f"{driver}/{pool}"
    shareable = bool(body.get("allowMultipleAllocations", False))
    unasked = _unasked(body.get("capacity") or {}) if shareable else ()
    return Device(
        driver=driver,
        pool=pool,
        name=str(dev["name"]),
        node=str(node),
        attributes=tuple(sorted(attributes)),
        capacity=tuple(sorted(capacity)),
        allow_multiple_allocations=shareable,
        shared_by_default=shareable and _shared_by_default(unasked),
        sharers_at_most=_sharers_at_most(driver, unasked) if shareable else None,
    )


def _unasked(capacity: Mapping[str, Any]) -> tuple[tuple[str, Fraction, Fraction], ...]:
    """Each capacity of a shareable device as (name, value, what a claim that does not
    name it in `capacity.requests` consumes of it): its requestPolicy `default`, else all
    of it (KEP-5075, as the 1.34 allocator and the simulator's do).

    A capacity that cannot be read, of nothing, or of more than any device has is left
    out: unpublished, as above, nothing of it is taken. So is one whose default cannot be
    read (the simulator drops such a capacity; the planner promises no device it cannot
    tell is whole)."""
    unasked = []
    for key, cap in capacity.items():
        try:
            value = parse_quantity(cap.get("value", 0))
            default = (cap.get("requestPolicy") or {}).get("default")
            taken = value if default is None else parse_quantity(default)
        except QuantityError:
            continue
        if 0 < value <= _MOST_CAPACITY:
            unasked.append((str(key), value, taken))
    return tuple(unasked)


def _shared_by_default(unasked: Iterable[tuple[str, Fraction, Fraction]]) -> bool:
    """Whether a claim that asks no capacity of a shareable device leaves room on it.

    A capacity taken whole keeps every other claim off the device; with none taken
    whole, two Dedicated claims (which ask no capacity) were given one GPU, each runtime
    set to use 90% of its memory."""
    return all(taken < value for _, value, taken in unasked)


def _sharers_at_most(driver: str, unasked: Iterable[tuple[str, Fraction, Fraction]]) -> int | None:
    """How many claims that ask only memory (every Shared one: `capacity.requests.memory`)
    a shareable device holds at once by its other capacities; None: as many as its memory
    holds (no other capacity, or each taken so little that 100 claims of 1% fit).

    Each such claim consumes every capacity it does not name (`_unasked`): a second
    capacity without a policy is taken whole by the first claim, and two 50% orders the
    planner counted on one GPU got one, the second's pod never allocated."""
    most: int | None = None
    for key, value, taken in unasked:
        if key in ("memory", f"{driver}/memory") or taken <= 0:
            continue  # the one the claim names, or one consumed not at all
        fit = int(value // taken)
        most = fit if most is None else min(most, fit)
    return most if most is not None and most < FULL_SHARE else None


def _allocation(obj: Mapping[str, Any], priorities: Mapping[str, int]) -> Allocation | None:
    results = [
        r
        for r in (((obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        )
        or ()
        # Admin access (monitoring, a DaemonSet on every GPU) takes no device: Kubernetes'
        # allocator does not count such results as using it, nor does the planner.
        if not (isinstance(r, Mapping) and r.get("adminAccess") is True)
    ]
    if not results:
        return None  # pending claims hold nothing, nor do admin-access ones
    meta = obj.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    holder = labels.get(ORDER_UID_LABEL)
    return Allocation(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        devices=tuple(f"{r['driver']}/{r['pool']}/{r['device']}" for r in results),
        share_percent=_claim_share(obj, labels),
        holder=holder,
        priority=priorities.get(holder) if holder is not None else None,
    )


def _claim_share(obj: Mapping[str, Any], labels: Mapping[str, str]) -> int:
    """The share of its devices a claim holds: our label, else an MPS config's thread
    percentage, else the whole device.

    Any claim of the cluster is read, and Kubernetes asks of an opaque config's
    `parameters` only that it be an object: another driver's (or a hostile tenant's)
    `sharing: "x"` is as valid as NVIDIA's mapping. So every level is checked for what it
    is; before, one such claim raised in every order's planning pass, cluster-wide."""
    raw = labels.get(SHARE_PERCENT_LABEL, "")
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and 1 <= int(raw) <= FULL_SHARE:
        return int(raw)
    configs = _mapping(_mapping(obj.get("spec")).get("devices")).get("config")
    for config in configs if isinstance(configs, list) else ():
        parameters = _mapping(_mapping(_mapping(config).get("opaque")).get("parameters"))
        sharing = _mapping(parameters.get("sharing"))
        percent = _mapping(sharing.get("mpsConfig")).get("defaultActiveThreadPercentage")
        if (
            sharing.get("strategy") == "MPS"
            and type(percent) is int  # not a bool, which is an int to isinstance
            and 1 <= percent <= FULL_SHARE
        ):
            return percent
    return FULL_SHARE


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
