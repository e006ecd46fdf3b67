"""Device allocation for ResourceClaims, as the 1.34 scheduler's structured allocator does it.

Pure: given the published devices (ResourceSlices), the DeviceClasses and what existing
claims already hold, find devices on one node for every request of a claim. A device
qualifies when its class's selectors AND the request's selectors are true (CEL, through
`fsm.placement.cel`, the same evaluation the planner uses). `ExactCount` takes `count` distinct
devices, `All` every matching device on the node, `firstAvailable` the first subrequest
that fits; `constraints[].matchAttribute` must agree across the devices it covers; the
search backtracks, within a step budget, like the real allocator.

Sharing is Kubernetes' consumable-capacity model: a device with
`allowMultipleAllocations: true` is shared; each allocation consumes, per capacity, what
the request's `capacity.requests` asks (rounded up by the device's `requestPolicy`), else
the policy's default, else the whole capacity; the sum never exceeds the capacity, and the
result records `shareID` and `consumedCapacity`. Any other device is held whole.
Nothing here ever frees a device: there is no preemption (DRA.md).
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from fsm.placement import cel
from fsm.placement.capacity import Device, DeviceClassInfo
from fsm.placement.inventory import parse_snapshot
from fsm.quantity import QuantityError, parse_quantity

__all__ = [
    "CANNOT_ALLOCATE",
    "AllocationError",
    "CapacityInfo",
    "Inventory",
    "SimDevice",
    "Usage",
    "allocate_claim",
    "format_quantity",
]

CANNOT_ALLOCATE = "cannot allocate all claims"
_BUDGET = 20000  # search steps per claim and node, as the allocator bounds its own
_CLAIM = "\x00claim\x00"  # stands for the claim's name in a cached verdict


class AllocationError(Exception):
    """The claim cannot be judged on any node (a missing class, a CEL error)."""


@dataclass(frozen=True, slots=True)
class CapacityInfo:
    """One capacity of a device and, for shared devices, how requests may consume it."""

    key: str  # as published, e.g. "memory"
    value: Fraction
    default: Fraction | None = None
    valid_values: tuple[Fraction, ...] = ()
    valid_range: tuple[Fraction, Fraction | None, Fraction | None] | None = None

    def consumption(self, requested: Fraction | None) -> Fraction | None:
        """What one allocation consumes; None when the request violates the policy."""
        if requested is None:
            return self.default if self.default is not None else self.value
        if self.valid_values:
            return next((v for v in self.valid_values if v >= requested), None)
        if self.valid_range is not None:
            low, high, step = self.valid_range
            amount = max(low, requested)
            if step:
                amount = low + math.ceil((amount - low) / step) * step
            return None if high is not None and amount > high else amount
        return requested


@dataclass(frozen=True, slots=True)
class SimDevice:
    device: Device  # what CEL sees
    capacity: tuple[CapacityInfo, ...] = ()

    @property
    def id(self) -> str:
        return self.device.id

    def capacity_of(self, key: str) -> CapacityInfo | None:
        bare = key.removeprefix(f"{self.device.driver}/")
        return next((c for c in self.capacity if c.key in (key, bare)), None)


def _q(value: Any) -> Fraction:
    return parse_quantity(str(value))


def _capacity(raw: Mapping[str, Any]) -> tuple[CapacityInfo, ...]:
    infos = []
    for key, cap in sorted(raw.items()):
        try:
            policy = cap.get("requestPolicy") or {}
            window = policy.get("validRange")
            infos.append(
                CapacityInfo(
                    key=key,
                    value=_q(cap.get("value", 0)),
                    default=_q(policy["default"]) if policy.get("default") is not None else None,
                    valid_values=tuple(sorted(_q(v) for v in policy.get("validValues") or ())),
                    valid_range=(
                        (
                            _q(window.get("min", 0)),
                            _q(window["max"]) if window.get("max") is not None else None,
                            _q(window["step"]) if window.get("step") is not None else None,
                        )
                        if window
                        else None
                    ),
                )
            )
        except QuantityError:
            continue  # unreadable: as good as unpublished, as the planner treats it
    return tuple(infos)


@dataclass(frozen=True, slots=True)
class Inventory:
    """The devices of complete pools (newest generation only) and the DeviceClasses."""

    devices: tuple[SimDevice, ...] = ()
    classes: Mapping[str, DeviceClassInfo] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    class_config: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    # Devices per node and candidates per (node, class, selectors): an inventory is
    # immutable, so what was judged once against it stays judged.
    _cache: dict[tuple[str, ...], Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_objects(
        cls, slices: Iterable[Mapping[str, Any]], device_classes: Iterable[Mapping[str, Any]]
    ) -> Inventory:
        slices = list(slices)
        device_classes = list(device_classes)
        snapshot = parse_snapshot(device_classes, slices)
        raw: dict[str, Mapping[str, Any]] = {}
        for obj in slices:
            spec = obj.get("spec") or {}
            pool = (spec.get("pool") or {}).get("name", "")
            for dev in spec.get("devices") or ():
                raw[f"{spec.get('driver', '')}/{pool}/{dev.get('name', '')}"] = (
                    dev.get("capacity") or {}
                )
        devices = tuple(SimDevice(d, _capacity(raw.get(d.id, {}))) for d in snapshot.devices)
        config = {
            str(c["metadata"]["name"]): tuple((c.get("spec") or {}).get("config") or ())
            for c in device_classes
        }
        return cls(devices, {c.name: c for c in snapshot.device_classes}, snapshot.problems, config)

    def on_node(self, node: str) -> tuple[SimDevice, ...]:
        by_node = self._cache.get(("node", node))
        if by_node is None:
            by_node = tuple(d for d in self.devices if d.device.node == node)
            self._cache[("node", node)] = by_node
        return by_node


@dataclass
class Usage:
    """What allocated claims hold: whole devices, and consumed capacity of shared ones."""

    exclusive: set[str] = field(default_factory=set)
    consumed: dict[str, dict[str, Fraction]] = field(default_factory=dict)

    @classmethod
    def from_claims(cls, claims: Iterable[Mapping[str, Any]]) -> Usage:
        usage = cls()
        for claim in claims:
            usage.add(_results(claim))
        return usage

    def add(self, results: Iterable[Mapping[str, Any]]) -> None:
        for result in results:
            device_id = f"{result['driver']}/{result['pool']}/{result['device']}"
            consumed = result.get("consumedCapacity")
            if consumed is None:
                self.exclusive.add(device_id)
                continue
            held = self.consumed.setdefault(device_id, {})
            for key, amount in consumed.items():
                try:
                    held[key] = held.get(key, Fraction(0)) + _q(amount)
                except QuantityError:
                    continue

    def remove(self, results: Iterable[Mapping[str, Any]]) -> None:
        """Undo `add` of the same results (a claim deallocated, changed or deleted)."""
        for result in results:
            device_id = f"{result['driver']}/{result['pool']}/{result['device']}"
            consumed = result.get("consumedCapacity")
            if consumed is None:
                self.exclusive.discard(device_id)
                continue
            held = self.consumed.get(device_id)
            if held is None:
                continue
            for key, amount in consumed.items():
                try:
                    left = held.get(key, Fraction(0)) - _q(amount)
                except QuantityError:
                    continue
                if left > 0:
                    held[key] = left
                else:
                    held.pop(key, None)
            if not held:
                del self.consumed[device_id]

    def copy(self) -> Usage:
        return Usage(set(self.exclusive), {k: dict(v) for k, v in self.consumed.items()})

    def in_use(self, device_id: str) -> bool:
        return device_id in self.exclusive or any(self.consumed.get(device_id, {}).values())


def _results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or ())


def format_quantity(amount: Fraction) -> str:
    """An exact quantity string: `8Gi`, `9856Mi`, `14`, `500m`."""
    for suffix, factor in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30),
                           ("Mi", 2**20), ("Ki", 2**10)):  # fmt: skip
        if amount and (amount / factor).denominator == 1:
            return f"{int(amount / factor)}{suffix}"
    if amount.denominator == 1:
        return str(amount.numerator)
    return f"{math.ceil(amount * 1000)}m"


# --- the search -------------------------------------------------------------------


@functools.lru_cache(maxsize=65536)
def _request_selects(expression: str, device: Device) -> bool | cel.SelectorError:
    try:
        return cel.evaluate(expression, device)
    except cel.SelectorError as err:
        return err


@dataclass(frozen=True, slots=True)
class _Slot:
    """One device to find: for request `name` (`parent/sub` for a subrequest)."""

    name: str
    parent: str
    candidates: tuple[SimDevice, ...]
    requests: Mapping[str, Fraction]  # capacity requests, keys as written


def _candidates(
    inventory: Inventory, node: str, claim_key: str, request_name: str, body: Mapping[str, Any]
) -> tuple[SimDevice, ...]:
    class_name = str(body.get("deviceClassName") or "")
    device_class = inventory.classes.get(class_name)
    if device_class is None:
        raise AllocationError(f"request {request_name}: device class {class_name} does not exist")
    selectors = [
        str((s.get("cel") or {}).get("expression", "")) for s in body.get("selectors") or ()
    ]
    cache_key = ("candidates", node, request_name, class_name, *selectors)
    cached = inventory._cache.get(cache_key)
    if cached is None:
        try:
            cached = _select(inventory, node, request_name, class_name, selectors)
        except AllocationError as err:
            cached = str(err)  # judged once; the claim's name is filled in per claim
        inventory._cache[cache_key] = cached
    if isinstance(cached, str):
        raise AllocationError(cached.replace(_CLAIM, claim_key))
    return tuple(cached)


def _select(
    inventory: Inventory,
    node: str,
    request_name: str,
    class_name: str,
    selectors: Sequence[str],
) -> tuple[SimDevice, ...]:
    claim_key = _CLAIM  # the verdict is the same for every claim asking this
    device_class = inventory.classes[class_name]
    chosen = []
    for device in inventory.on_node(node):
        try:
            if not cel.selects(device_class, device.device):
                continue
        except cel.SelectorError as err:
            raise AllocationError(
                f"claim {claim_key}, request {request_name}: class {class_name}: "
                f"CEL runtime error: {err.problem}"
            ) from err
        ok = True
        for index, expression in enumerate(selectors):
            verdict = _request_selects(expression, device.device)
            if isinstance(verdict, cel.SelectorError):
                raise AllocationError(
                    f"claim {claim_key}, request {request_name}: selector #{index}: "
                    f"CEL runtime error: {verdict.problem}"
                )
            if not verdict:
                ok = False
                break
        if ok:
            chosen.append(device)
    return tuple(chosen)


def _capacity_requests(body: Mapping[str, Any]) -> dict[str, Fraction]:
    requests = (body.get("capacity") or {}).get("requests") or {}
    try:
        return {str(k): _q(v) for k, v in requests.items()}
    except QuantityError as err:
        raise AllocationError(f"capacity request: {err}") from err


def _consumption(
    device: SimDevice, requests: Mapping[str, Fraction], usage: Usage
) -> dict[str, Fraction] | None:
    """What this allocation consumes on the device; None if it does not fit."""
    if any(device.capacity_of(key) is None for key in requests):
        return None  # asks for a capacity the device does not have
    if not device.device.allow_multiple_allocations:
        if usage.in_use(device.id):
            return None
        fits = all(
            (info := device.capacity_of(k)) is not None and amount <= info.value
            for k, amount in requests.items()
        )
        return {} if fits else None
    if device.id in usage.exclusive:
        return None
    held = usage.consumed.get(device.id, {})
    consumed: dict[str, Fraction] = {}
    for info in device.capacity:
        asked = next((a for k, a in requests.items() if device.capacity_of(k) is info), None)
        amount = info.consumption(asked)
        if amount is None or held.get(info.key, Fraction(0)) + amount > info.value:
            return None
        consumed[info.key] = amount
    return consumed


def _slots(
    claim_key: str, spec: Mapping[str, Any], node: str, inventory: Inventory
) -> list[list[list[_Slot]]]:
    """Per request, its alternatives (one for `exactly`), each a list of slots."""
    requests = (spec.get("devices") or {}).get("requests") or ()
    plan: list[list[list[_Slot]]] = []
    for request in requests:
        name = str(request.get("name", ""))
        alternatives: list[tuple[str, Mapping[str, Any]]]
        if request.get("firstAvailable"):
            alternatives = [
                (f"{name}/{sub.get('name', '')}", sub) for sub in request["firstAvailable"]
            ]
        else:
            alternatives = [(name, request.get("exactly") or request)]
        options: list[list[_Slot]] = []
        for label, body in alternatives:
            candidates = _candidates(inventory, node, claim_key, label, body)
            wanted = _capacity_requests(body)
            mode = body.get("allocationMode") or "ExactCount"
            if mode == "All":
                count = len(candidates)
                if count == 0:
                    continue
            elif mode == "ExactCount":
                count = int(body.get("count") or 1)
            else:
                raise AllocationError(f"request {label}: unknown allocationMode {mode}")
            options.append([_Slot(label, name, candidates, wanted) for _ in range(count)])
        plan.append(options)
    return plan


@dataclass
class _Search:
    usage: Usage
    constraints: list[tuple[frozenset[str], str]]
    steps: int = 0
    chosen: list[tuple[_Slot, SimDevice, dict[str, Fraction]]] = field(default_factory=list)
    bound: dict[int, object] = field(default_factory=dict)

    def fits_constraints(self, slot: _Slot, device: SimDevice) -> list[tuple[int, object]] | None:
        added: list[tuple[int, object]] = []
        for index, (names, attribute) in enumerate(self.constraints):
            if names and slot.parent not in names and slot.name not in names:
                continue
            value = device.device.attribute(attribute)
            if value is None:
                return None
            if index in self.bound:
                if self.bound[index] != value:
                    return None
            else:
                added.append((index, value))
        return added

    def run(self, groups: Sequence[list[_Slot]]) -> bool:
        if not groups:
            return True
        first, rest = groups[0], groups[1:]
        return self._place(first, 0, rest)

    def _place(self, slots: list[_Slot], index: int, rest: Sequence[list[_Slot]]) -> bool:
        if index == len(slots):
            return self.run(rest)
        slot = slots[index]
        taken = {device.id for _, device, _ in self.chosen}
        for device in slot.candidates:
            self.steps += 1
            if self.steps > _BUDGET:
                return False
            if device.id in taken:
                continue
            consumed = _consumption(device, slot.requests, self.usage)
            if consumed is None:
                continue
            bound = self.fits_constraints(slot, device)
            if bound is None:
                continue
            self._take(slot, device, consumed, bound)
            if self._place(slots, index + 1, rest):
                return True
            self._undo(bound)
        return False

    def _take(
        self,
        slot: _Slot,
        device: SimDevice,
        consumed: dict[str, Fraction],
        bound: list[tuple[int, object]],
    ) -> None:
        self.chosen.append((slot, device, consumed))
        self.bound.update(bound)
        self.usage.add([_result(slot, device, consumed, share_id="pending")])

    def _undo(self, bound: list[tuple[int, object]]) -> None:
        _, device, consumed = self.chosen.pop()
        for index, _ in bound:
            self.bound.pop(index, None)
        if consumed:
            held = self.usage.consumed[device.id]
            for key, amount in consumed.items():
                held[key] -= amount
        else:
            self.usage.exclusive.discard(device.id)


def _result(
    slot: _Slot, device: SimDevice, consumed: Mapping[str, Fraction], *, share_id: str
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "request": slot.name,
        "driver": device.device.driver,
        "pool": device.device.pool,
        "device": device.device.name,
    }
    if device.device.allow_multiple_allocations:
        result["shareID"] = share_id
        result["consumedCapacity"] = {k: format_quantity(v) for k, v in consumed.items()}
    return result


def allocate_claim(
    claim_key: str, spec: Mapping[str, Any], node: str, inventory: Inventory, usage: Usage
) -> list[dict[str, Any]] | None:
    """Results for every request of the claim on `node`, or None when they do not fit.

    On success `usage` is updated with what the claim now holds. AllocationError when the
    claim cannot be judged (a missing class, a CEL error, a bad request).
    """
    constraints = [
        (frozenset(str(r) for r in c.get("requests") or ()), str(c["matchAttribute"]))
        for c in (spec.get("devices") or {}).get("constraints") or ()
        if c.get("matchAttribute")
    ]
    plan = _slots(claim_key, spec, node, inventory)
    # Each request tries its alternatives in order; the cross product is small.
    for choice in _choices(plan):
        search = _Search(usage.copy(), constraints)
        if search.run(choice):
            results = [
                _result(slot, device, consumed, share_id=str(uuid.uuid4()))
                for slot, device, consumed in search.chosen
            ]
            usage.add(results)
            return results
    return None


def _choices(plan: list[list[list[_Slot]]]) -> Iterable[list[list[_Slot]]]:
    if not plan:
        yield []
        return
    head, tail = plan[0], plan[1:]
    for option in head:
        for rest in _choices(tail):
            yield [option, *rest]
