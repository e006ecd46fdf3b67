"""Capacity by priority, decided: who gives up which replicas, and when they come back.

The scheduler does not preempt to free DRA devices (DRA.md), so the controller does
(SPEC §3.2, docs/priority.md). This module is the decision, pure and table-tested; the
controller gathers what it weighs (adapters/kubernetes/arbiter.py), records each take in
the taker's and the victim's streams, and only then scales the victim's Deployment.

The rule: lowest priority first; an order's minimum replicas (its first placement) may
take any lower-priority replica, down to zero; its growth above the minimum takes only
replicas its victims hold above their own minimum. A victim gets its replicas back, from
free capacity only, once its takers have placed what they took and no higher-priority
pod waits for devices it would take back. While a victim holds more allocated claims
than its replicas (a scale-down under way) nothing more is taken from it, so no device
is taken twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fsm.identity import shown_to
from fsm.placement import planner
from fsm.placement.capacity import FULL_SHARE, ORDER_UID_LABEL, Allocation, Place, Snapshot
from fsm.reasons import Reason
from fsm.values import Plan

_MOST_REPLICAS = 2**31 - 1  # a Deployment's replicas are an int32

__all__ = [
    "TAKEN_ANNOTATION",
    "GiveBack",
    "Holding",
    "OrderView",
    "Ruling",
    "Take",
    "Taker",
    "Taking",
    "Verdict",
    "growth_room",
    "growth_snapshot",
    "rule",
    "take",
    "taken_verdict",
    "victims_of",
]

# Where a victim's Deployment carries the record of what was taken from it: the scale
# and the record travel in one conditional patch, so they never disagree.
TAKEN_ANNOTATION = "ai.deckhouse.io/capacity-taken"


@dataclass(frozen=True, slots=True)
class Taker:
    """One order that took replicas from a victim, and how many it still has."""

    order: str  # namespace/name
    priority_class_name: str | None
    replicas: int


@dataclass(frozen=True, slots=True)
class Taking:
    """Replicas a victim gave up and has not got back."""

    takers: tuple[Taker, ...]  # oldest first

    @property
    def replicas(self) -> int:
        return sum(t.replicas for t in self.takers)

    @property
    def by(self) -> str:
        return ", ".join(t.order for t in self.takers)

    @property
    def priority_class_name(self) -> str | None:
        return self.takers[-1].priority_class_name if self.takers else None

    def taken(self, by: str, priority_class_name: str | None, replicas: int) -> Taking:
        """This record after `by` took `replicas` more."""
        takers = [t for t in self.takers if t.order != by]
        had = sum(t.replicas for t in self.takers if t.order == by)
        takers.append(Taker(by, priority_class_name, had + replicas))
        return Taking(tuple(takers))

    def given_back(self, replicas: int, gone: Callable[[str], bool]) -> Taking | None:
        """This record after `replicas` came back: first those of takers that are gone,
        then the oldest takers'. None when nothing is taken any more."""
        order = sorted(self.takers, key=lambda t: not gone(t.order))  # stable: oldest first
        left: dict[str, int] = {t.order: t.replicas for t in self.takers}
        for taker in order:
            back = min(replicas, left[taker.order])
            left[taker.order] -= back
            replicas -= back
        takers = tuple(replace(t, replicas=left[t.order]) for t in self.takers if left[t.order])
        return Taking(takers) if takers else None

    def dump(self) -> str:
        takers = [
            {"order": t.order, "priorityClassName": t.priority_class_name, "replicas": t.replicas}
            for t in self.takers
        ]
        return json.dumps({"takers": takers}, sort_keys=True)

    @classmethod
    def parse(cls, raw: str | None) -> Taking | None:
        """The record from its text; None without one, or for one that is not the shape
        this module writes. Whoever edits Deployments in the victim's namespace can write
        it: `replicas: 1e400` overflowed int() and a priority class that was no string
        failed the CapacityTaken event, each on every pass of the victim and of any
        order that would take from it (another tenant's)."""
        if not raw:
            return None
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON; nested past the parser's depth
            return None
        listed = data.get("takers") if isinstance(data, dict) else None
        if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
            return None
        takers = []
        for t in listed:
            order, priority, replicas = (
                t.get("order"),
                t.get("priorityClassName"),
                t.get("replicas"),
            )
            if not isinstance(order, str) or not (priority is None or isinstance(priority, str)):
                return None
            if type(replicas) is not int or not 0 <= replicas <= _MOST_REPLICAS:
                return None
            takers.append(Taker(order, priority, replicas))
        taking = cls(tuple(takers))
        return taking if taking.replicas > 0 else None

    @classmethod
    def of(cls, deployment: Mapping[str, Any] | None) -> Taking | None:
        """The record a victim's Deployment carries."""
        annotations = ((deployment or {}).get("metadata") or {}).get("annotations") or {}
        return cls.parse(annotations.get(TAKEN_ANNOTATION))

    def message(self, namespace: str) -> str:
        """What the victim, of `namespace`, says: takers of other namespaces counted."""
        by_class = f" ({self.priority_class_name})" if self.priority_class_name else ""
        by = shown_to(namespace, [t.order for t in self.takers])
        return (
            f"{self.replicas} replica(s) taken by {by}{by_class}, of higher priority; "
            "they come back when capacity frees."
        )


# --- taking -------------------------------------------------------------------------------


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def victims_of(
    reclaims: Sequence[str], claims: Iterable[Mapping[str, Any]], *, taker_uid: str
) -> dict[str, list[str]]:
    """The claims to free, grouped by the order holding them (its UID), in the order the
    planner listed them (lowest priority first). Claims gone already free nothing."""
    by_key = {_key(claim): claim for claim in claims}
    out: dict[str, list[str]] = {}
    for key in reclaims:
        claim = by_key.get(key)
        if claim is None:
            continue
        holder = ((claim.get("metadata") or {}).get("labels") or {}).get(ORDER_UID_LABEL)
        if holder and holder != taker_uid:
            out.setdefault(str(holder), []).append(key)
    return out


@dataclass(frozen=True, slots=True)
class Holding:
    """An order's replicas as the arbiter weighs them, from a live read of its Deployment."""

    uid: str
    key: str  # namespace/name
    desired: int  # the Deployment's spec.replicas
    held: int  # allocated claims (a pod going keeps its claim until it is gone)
    taking: Taking | None = None
    resource_version: str = ""  # of the read: the scale is conditional on it


@dataclass(frozen=True, slots=True)
class Take:
    """Scale `victim` to `replicas`, recording `record` on it: `taken` went to the taker."""

    victim: str  # UID
    victim_key: str  # namespace/name
    replicas: int
    taken: int
    record: Taking
    resource_version: str = ""


def take(victim: Holding, count: int, *, by: str, priority_class_name: str | None) -> Take | None:
    """Take up to `count` replicas from `victim` for order `by`; None: nothing to take."""
    if victim.held > victim.desired:
        return None  # a scale-down is under way: its claims are being freed
    # Replicas still waiting for devices free nothing: scale from what holds devices.
    current = min(victim.desired, victim.held)
    taken = min(count, current)
    if taken == 0:
        return None
    record = (victim.taking or Taking(())).taken(by, priority_class_name, taken)
    return Take(victim.uid, victim.key, current - taken, taken, record, victim.resource_version)


# --- growth -------------------------------------------------------------------------------


def growth_snapshot(snapshot: Snapshot, minimums: Mapping[str, int]) -> Snapshot:
    """`snapshot` as growth sees it: each holder's claims up to its minimum replicas are
    not reclaimable (their priority is forgotten); only the ones above it are.

    Allocated claims are kept first, then the holder's demand placeholders: those hold
    no replica, and one kept in the stead of a claim (by its name sorting first) left the
    holder's running replica to be taken, below its minimum (docs/priority.md, rule 3)."""
    by_holder: dict[str, list[Allocation]] = {}
    for alloc in snapshot.allocations:
        if alloc.holder is not None and alloc.priority is not None:
            by_holder.setdefault(alloc.holder, []).append(alloc)
    protected: set[str] = set()
    for holder, allocs in by_holder.items():
        keep = minimums.get(holder, len(allocs))  # unknown minimum: nothing to take
        kept_first = sorted(allocs, key=lambda a: (a.planned, a.key))
        protected.update(a.key for a in kept_first[:keep])
    allocations = tuple(
        replace(a, priority=None) if a.key in protected else a for a in snapshot.allocations
    )
    return replace(snapshot, allocations=allocations)


def growth_room(
    snapshot: Snapshot,
    plan: Plan,
    *,
    wanted: int,
    priority_class_name: str | None,
    order_uid: str,
    minimums: Mapping[str, int],
) -> Place | None:
    """Room for `wanted` more replicas of `plan`: free devices first, else lower-priority
    replicas above their holders' minimum. None: growth is blocked."""
    return planner.room_for(
        growth_snapshot(snapshot, minimums),
        plan,
        replicas=wanted,
        priority_class_name=priority_class_name,
        order_uid=order_uid,
    )


# --- the ruling ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OrderView:
    """What the arbiter weighs of the order under judgement."""

    uid: str
    plan: Plan
    min_replicas: int
    max_replicas: int
    priority_class_name: str | None
    available: int  # available replicas (growth is judged only while it serves)
    desired: int  # its Deployment's spec.replicas
    bound: int  # live pods on a node
    waiting: bool  # some live pod waits for the scheduler
    taking: Taking | None = None  # what was taken from it (a live read when present)
    held: int = 0  # its allocated claims (with `taking`: from the same live read)
    higher_priority_waiting: bool = False  # a pod of higher priority waits for devices
    takers_satisfied: bool = True  # every taker has placed what it took (or is gone)
    gone_takers: frozenset[str] = frozenset()  # takers deleted since
    resource_version: str = ""  # of the Deployment read: a give-back is conditional on it
    namespace: str = ""  # the order's: its verdicts name only that namespace's takers


@dataclass(frozen=True, slots=True)
class Verdict:
    """The order's ScalingHealthy verdict (an `fsm.observations.ScalingSeen` to be)."""

    reason: Reason
    message: str = ""
    taken_by: str | None = None
    priority_class_name: str | None = None
    replicas: int = 0


@dataclass(frozen=True, slots=True)
class GiveBack:
    """Scale the order back up to `replicas`; what stays taken is `record`."""

    replicas: int
    record: Taking | None
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class Ruling:
    verdict: Verdict | None = None  # None: growth is not judged now
    reclaims: tuple[str, ...] = ()  # claims of lower-priority orders to free, in order
    give_back: GiveBack | None = None


_WITHIN = Verdict(Reason.SCALING_WITHIN_BOUNDS)


def taken_verdict(record: Taking, namespace: str) -> Verdict:
    return Verdict(
        Reason.CAPACITY_TAKEN_BY_PRIORITY,
        message=record.message(namespace),
        taken_by=record.by,
        priority_class_name=record.priority_class_name,
        replicas=record.replicas,
    )


def rule(view: OrderView, snapshot: Snapshot, minimums: Mapping[str, int]) -> Ruling:
    """The order's verdict, what it takes, and what it gets back."""
    if view.taking is not None:
        return _give_back(view, snapshot)
    if not view.waiting:
        return Ruling(_WITHIN)
    # A replica is placed when bound or when it holds its devices (the claims may be
    # ahead of the pods); the room is judged from the same snapshot.
    placed = max(view.bound, sum(1 for a in snapshot.allocations if a.holder == view.uid))
    reclaims: tuple[str, ...] = ()
    if placed < view.min_replicas:
        # The minimum waits for devices: lower-priority replicas go, below their own
        # minimum if need be (the planner counted on them: PlanComputed.reclaims).
        place = planner.room_for(
            snapshot,
            view.plan,
            replicas=view.min_replicas - placed,
            priority_class_name=view.priority_class_name,
            order_uid=view.uid,
        )
        if place is not None:
            reclaims = place.reclaims
            # Growth is judged after the minimum: the room it found is not room twice.
            snapshot = _with_place(snapshot, view, place)
    if view.available < 1:
        return Ruling(None, reclaims)
    desired = min(view.desired, view.max_replicas)
    wanted = desired - max(placed, view.min_replicas)
    if wanted <= 0:
        return Ruling(_WITHIN, reclaims)
    place = growth_room(
        snapshot,
        view.plan,
        wanted=wanted,
        priority_class_name=view.priority_class_name,
        order_uid=view.uid,
        minimums=minimums,
    )
    if place is None:
        message = (
            f"wants {desired} replica(s), {placed} placed: no free "
            f"{view.plan.accelerator_product_name} in {view.plan.device_class} and no "
            "lower-priority replica above its minimum to take"
        )
        return Ruling(Verdict(Reason.SCALE_UP_BLOCKED, message=message), reclaims)
    return Ruling(_WITHIN, (*reclaims, *place.reclaims))


def _with_place(snapshot: Snapshot, view: OrderView, place: Place) -> Snapshot:
    """`snapshot` with `place` taken by the order and the claims it frees gone."""
    freed = set(place.reclaims)
    share = view.plan.share_percent or FULL_SHARE
    allocations = [a for a in snapshot.allocations if a.key not in freed]
    allocations += [
        Allocation(
            namespace="",
            name=f"{view.uid}-minimum-{index}",
            devices=devices,
            share_percent=share,
            holder=view.uid,
            planned=True,
        )
        for index, devices in enumerate(place.replicas)
    ]
    # A new snapshot counts its usage anew (`counted` is not carried over).
    return replace(snapshot, allocations=tuple(sorted(allocations, key=lambda a: a.key)))


def _give_back(view: OrderView, snapshot: Snapshot) -> Ruling:
    """A victim scaled back up as far as free capacity allows; what is still taken."""
    taking = view.taking
    assert taking is not None
    room = max(0, view.max_replicas - view.desired)
    if taking.replicas > room:
        # More than the class's maximum lets come back: a maximum lowered since the take,
        # or a record no taker wrote (the annotation is anyone's who may edit the
        # Deployment, and one of 100 replicas grew the order onto every free device).
        # What cannot come back is owed no more.
        gone = view.gone_takers
        kept = taking.given_back(taking.replicas - room, gone=lambda name: name in gone)
        if kept is None:
            return Ruling(_WITHIN, give_back=GiveBack(view.desired, None, view.resource_version))
        taking = kept
    if view.higher_priority_waiting or not view.takers_satisfied:
        return Ruling(taken_verdict(taking, view.namespace))  # a higher pod or a taker first
    back = 0
    for count in range(taking.replicas, 0, -1):
        place = planner.room_for(
            snapshot, view.plan, replicas=count, priority_class_name=None, order_uid=view.uid
        )
        if place is not None and not place.reclaims:
            back = count
            break
    if back == 0 or view.held < view.desired:
        # Nothing free; or what came back last is not placed yet (in the very snapshot
        # the room was judged from), so that room may be its own.
        return Ruling(taken_verdict(taking, view.namespace))
    left = taking.given_back(back, gone=lambda name: name in view.gone_takers)
    verdict = taken_verdict(left, view.namespace) if left is not None else _WITHIN
    return Ruling(verdict, give_back=GiveBack(view.desired + back, left, view.resource_version))
