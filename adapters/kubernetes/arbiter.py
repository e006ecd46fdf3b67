"""Capacity by priority: who gives up which replicas, and the scale-downs that free them.

The scheduler does not preempt to free DRA devices (DRA.md), so the controller does it
(SPEC §3.2, docs/priority.md). The reconciler calls this module at two points of an
order's pass:

- `Arbiter.reclaim` before applying a plan whose `PlanOutcome.reclaims` names
  lower-priority claims (the decision is in the order's own stream: `PlanComputed`);
- `Arbiter.verdict` after the workload is observed: level-triggered, it takes again what
  the order's minimum still waits for (a first take may have been skipped or lost),
  takes what its growth may take (`growth_room`), gives a victim its replicas back when
  capacity frees, and returns the order's `ScalingSeen` — replicas taken by priority
  (read back from its Deployment, where the taker wrote it), growth blocked, or growth
  healthy — which `fsm.decide` turns into CapacityTaken, ScalingBlocked or
  ScalingRecovered events.

A victim is scaled down through its Deployment's `spec.replicas`, and the same patch
writes the `TAKEN_ANNOTATION` record (which orders took how many replicas). Any replica
of the victim frees an equivalent device — its pods share one claim template, and a claim
names a device class and a memory floor, never a device — so which pod the ReplicaSet
removes does not matter. While a victim still holds more allocated claims than its
replicas (a scale-down under way) nothing more is taken from it, so a repeated pass does
not take one device twice.

The rule (docs/priority.md): lowest priority first; an order's minimum replicas (its
first placement) may take any lower-priority replica, down to zero; its growth above the
minimum takes only replicas its victims hold above their own minimum. A victim gets its
replicas back, from free capacity only, once its takers have placed what they took and
no higher-priority pod waits for devices.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from adapters.kubernetes import kinds
from adapters.kubernetes.rendering import OrderRef
from adapters.kubernetes.watching import Obj
from adapters.kubernetes.world import ClusterCache
from adapters.kubernetes.writing import Writer
from fsm import observations as ob
from fsm import planner
from fsm.capacity import ORDER_UID_LABEL, Allocation, Place, Snapshot
from fsm.reasons import Reason
from fsm.state import OrderState
from fsm.values import Plan

__all__ = [
    "TAKEN_ANNOTATION",
    "Arbiter",
    "Taker",
    "Taking",
    "growth_room",
    "growth_snapshot",
    "victims_of",
]

log = logging.getLogger(__name__)

TAKEN_ANNOTATION = "ai.deckhouse.io/capacity-taken"


@dataclass(frozen=True, slots=True)
class Taker:
    """One order that took replicas from a victim, and how many it still has."""

    order: str  # namespace/name
    priority_class_name: str | None
    replicas: int


@dataclass(frozen=True, slots=True)
class Taking:
    """Replicas a victim gave up and has not got back, as its Deployment records them."""

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
        return json.dumps(
            {
                "takers": [
                    {
                        "order": t.order,
                        "priorityClassName": t.priority_class_name,
                        "replicas": t.replicas,
                    }
                    for t in self.takers
                ],
            },
            sort_keys=True,
        )

    @classmethod
    def of(cls, deployment: Obj | None) -> Taking | None:
        """The record on a Deployment; None without one (or an unreadable one)."""
        annotations = ((deployment or {}).get("metadata") or {}).get("annotations") or {}
        raw = annotations.get(TAKEN_ANNOTATION)
        if not raw:
            return None
        try:
            data = json.loads(raw)
            taking = cls(
                takers=tuple(
                    Taker(str(t["order"]), t.get("priorityClassName"), int(t["replicas"]))
                    for t in data["takers"]
                ),
            )
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable %s annotation ignored: %r", TAKEN_ANNOTATION, raw)
            return None
        return taking if taking.replicas > 0 else None

    def message(self) -> str:
        by_class = f" ({self.priority_class_name})" if self.priority_class_name else ""
        return (
            f"{self.replicas} replica(s) taken by {self.by}{by_class}, of higher priority; "
            "they come back when capacity frees."
        )


# --- pure decisions -----------------------------------------------------------------------


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def victims_of(
    reclaims: Sequence[str], claims: Iterable[Obj], *, taker_uid: str
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


def growth_snapshot(snapshot: Snapshot, minimums: Mapping[str, int]) -> Snapshot:
    """`snapshot` as growth sees it: each holder's claims up to its minimum replicas are
    not reclaimable (their priority is forgotten); only the ones above it are."""
    by_holder: dict[str, list[Allocation]] = {}
    for alloc in snapshot.allocations:
        if alloc.holder is not None and alloc.priority is not None:
            by_holder.setdefault(alloc.holder, []).append(alloc)
    protected: set[str] = set()
    for holder, allocs in by_holder.items():
        keep = minimums.get(holder, len(allocs))  # unknown minimum: nothing to take
        protected.update(a.key for a in sorted(allocs, key=lambda a: a.key)[:keep])
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


# --- the adapter --------------------------------------------------------------------------


def _live(pod: Obj) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp")


def _unbound(pod: Obj) -> bool:
    """A live pod not on a node yet: it waits for the scheduler (and maybe for devices)."""
    return _live(pod) and not (pod.get("spec") or {}).get("nodeName")


class Arbiter:
    """Carries out priority decisions against the API; reads the controller's cache."""

    def __init__(
        self,
        writer: Writer,
        world: ClusterCache,
        *,
        snapshot: Callable[[str], Snapshot],
        states: Callable[[], Mapping[str, OrderState]],
    ) -> None:
        self._writer = writer
        self._world = world
        self._snapshot = snapshot  # the capacity as the planner sees it, for an order UID
        self._states = states

    # -- taking --------------------------------------------------------------------------

    def reclaim(
        self,
        taker: OrderRef,
        state: OrderState,
        reclaims: Sequence[str],
        snapshot: Snapshot | None = None,
    ) -> None:
        """Scale the holders of `reclaims` down by one replica per claim. `snapshot`: the
        capacity the reclaims were judged from, whose claims the victims are counted by."""
        policy = state.policy
        priority = policy.constraints.priority_class_name if policy is not None else None
        victims = victims_of(reclaims, self._world.resource_claims.objects(), taker_uid=taker.uid)
        for victim_uid, keys in victims.items():
            order = self._world.orders.get(victim_uid)
            if order is None:
                continue
            meta = order.get("metadata") or {}
            self._take(
                str(meta.get("namespace")),
                str(meta.get("name")),
                victim_uid,
                len(keys),
                by=f"{taker.namespace}/{taker.name}",
                priority_class_name=priority,
                snapshot=snapshot,
            )

    def _held(self, uid: str, snapshot: Snapshot | None = None) -> int:
        """Allocated claims of an order (a pod going keeps its claim until it is gone), in
        `snapshot` if given — a decision counts from the claims it was judged from."""
        if snapshot is not None:
            return sum(1 for a in snapshot.allocations if a.holder == uid)
        return sum(
            1
            for claim in self._world.resource_claims.objects()
            if ((claim.get("metadata") or {}).get("labels") or {}).get(ORDER_UID_LABEL) == uid
            and (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                "results"
            )
        )

    def _take(
        self,
        namespace: str,
        name: str,
        uid: str,
        count: int,
        *,
        by: str,
        priority_class_name: str | None,
        snapshot: Snapshot | None = None,
    ) -> None:
        # The replicas from a live read, not the cache: an earlier pass's scale-down must be
        # seen, or one claim would be taken twice.
        obj = self._writer.get(kinds.DEPLOYMENTS, namespace, name)
        if obj is None:
            return
        desired = int((obj.get("spec") or {}).get("replicas", 1))
        held = self._held(uid, snapshot)
        if held > desired:
            return  # a scale-down is under way: its claims are being freed
        # Replicas still waiting for devices free nothing: scale from what holds devices.
        current = min(desired, held)
        taken = min(count, current)
        if taken == 0:
            return
        record = (Taking.of(obj) or Taking(())).taken(by, priority_class_name, taken)
        self._patch(obj, current - taken, record)
        log.info(
            "%s/%s gives %d replica(s) to %s (%s)", namespace, name, taken, by, priority_class_name
        )

    def _patch(self, live: Obj, replicas: int, record: Taking | None) -> None:
        meta = live.get("metadata") or {}
        body: dict[str, Any] = {
            # The resourceVersion makes a concurrent change a 409: the next pass re-reads.
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {TAKEN_ANNOTATION: record.dump() if record else None},
            },
            "spec": {"replicas": replicas},
        }
        self._writer.patch(kinds.DEPLOYMENTS, meta.get("namespace"), str(meta.get("name")), body)

    # -- the verdict ---------------------------------------------------------------------

    def verdict(self, order: OrderRef, state: OrderState, now: datetime) -> ob.ScalingSeen | None:
        """The order's growth verdict, or None where growth is not judged. On the way it
        takes, level-triggered, what the order's minimum (or its growth) may take."""
        plan, policy, workload = state.plan_in_force, state.policy, state.workload
        if plan is None or policy is None or workload is None:
            return None
        deployment = self._world.deployments.get_by_name(order.namespace, order.name)
        if deployment is None:
            return None
        taking = Taking.of(deployment)
        if taking is not None:
            left = self._give_back(order, state, plan, taking)
            if left is not None:
                return ob.ScalingSeen(
                    at=now,
                    reason=Reason.CAPACITY_TAKEN_BY_PRIORITY,
                    message=left.message(),
                    taken_by=left.by,
                    priority_class_name=left.priority_class_name,
                    replicas=left.replicas,
                )
            return ob.ScalingSeen(at=now, reason=Reason.SCALING_WITHIN_BOUNDS)
        bounds = policy.constraints
        pods = [p for p in self._world.pods_of(order.uid) if _live(p)]
        if not any(_unbound(p) for p in pods):
            return ob.ScalingSeen(at=now, reason=Reason.SCALING_WITHIN_BOUNDS)
        # Something waits to be placed. One snapshot for the count and the room: a replica
        # is placed when bound or when it holds its devices (the claims cache may be ahead
        # of the pods cache), and the room must be judged from the same claims.
        snapshot = self._snapshot(order.uid)
        bound = sum(1 for p in pods if not _unbound(p))
        placed = max(bound, sum(1 for a in snapshot.allocations if a.holder == order.uid))
        if placed < bounds.min_replicas:
            # The minimum waits for devices: lower-priority replicas go, below their own
            # minimum if need be (the planner counted on them: PlanComputed.reclaims).
            place = planner.room_for(
                snapshot,
                plan,
                replicas=bounds.min_replicas - placed,
                priority_class_name=bounds.priority_class_name,
                order_uid=order.uid,
            )
            if place is not None and place.reclaims:
                self.reclaim(order, state, place.reclaims, snapshot)
        if workload.available_replicas < 1:
            return None  # growth is judged only while the order serves
        desired = min(int((deployment.get("spec") or {}).get("replicas", 1)), bounds.max_replicas)
        wanted = desired - max(placed, bounds.min_replicas)
        if wanted <= 0:
            return ob.ScalingSeen(at=now, reason=Reason.SCALING_WITHIN_BOUNDS)
        minimums = {
            uid: s.policy.constraints.min_replicas
            for uid, s in self._states().items()
            if s.policy is not None
        }
        place = growth_room(
            snapshot,
            plan,
            wanted=wanted,
            priority_class_name=bounds.priority_class_name,
            order_uid=order.uid,
            minimums=minimums,
        )
        if place is None:
            message = (
                f"wants {desired} replica(s), {placed} placed: no free "
                f"{plan.accelerator_product_name} in {plan.device_class} and no "
                "lower-priority replica above its minimum to take"
            )
            return ob.ScalingSeen(at=now, reason=Reason.SCALE_UP_BLOCKED, message=message)
        if place.reclaims:
            self.reclaim(order, state, place.reclaims, snapshot)
        return ob.ScalingSeen(at=now, reason=Reason.SCALING_WITHIN_BOUNDS)

    def _give_back(
        self, order: OrderRef, state: OrderState, plan: Plan, taking: Taking
    ) -> Taking | None:
        """Scale a victim back up as far as free capacity allows; what is still taken."""
        policy = state.policy
        priority_name = policy.constraints.priority_class_name if policy is not None else None
        snapshot = self._snapshot(order.uid)
        own = snapshot.priority_value(priority_name) or 0
        if any(
            _unbound(p) and int((p.get("spec") or {}).get("priority") or 0) > own
            for p in self._world.pods.objects()
        ):
            return taking  # a higher-priority pod waits for devices: it goes first
        if not all(self._satisfied(t.order) for t in taking.takers):
            return taking  # a taker still waits for what it took (its pods not placed yet)
        back = 0
        for count in range(taking.replicas, 0, -1):
            place = planner.room_for(
                snapshot, plan, replicas=count, priority_class_name=None, order_uid=order.uid
            )
            if place is not None and not place.reclaims:
                back = count
                break
        if back == 0:
            return taking
        obj = self._writer.get(kinds.DEPLOYMENTS, order.namespace, order.name)
        if obj is None:
            return None
        current = Taking.of(obj)
        if current is None:
            return None
        if self._held(order.uid, snapshot) < int((obj.get("spec") or {}).get("replicas", 0)):
            # What came back last is not placed yet (in the very snapshot the room was
            # judged from), so that room may be its own.
            return current
        back = min(back, current.replicas)
        left = current.given_back(back, gone=lambda name: self._order_named(name) is None)
        replicas = int((obj.get("spec") or {}).get("replicas", 0)) + back
        self._patch(obj, replicas, left)
        log.info("%s/%s gets %d replica(s) back", order.namespace, order.name, back)
        return left

    def _order_named(self, namespaced: str) -> Obj | None:
        namespace, _, name = namespaced.partition("/")
        return self._world.orders.get_by_name(namespace, name)

    def _satisfied(self, namespaced: str) -> bool:
        """Has the taker placed what it asked for (or gone)? Until then what it took may
        still be on its way to it: a freed device is not free for the victim."""
        order = self._order_named(namespaced)
        if order is None:
            return True
        meta = order.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        deployment = self._world.deployments.get_by_name(namespace, name)
        if deployment is None:
            return False
        desired = int((deployment.get("spec") or {}).get("replicas", 1))
        state = self._states().get(str(meta.get("uid")))
        if state is not None and state.policy is not None:
            desired = min(desired, state.policy.constraints.max_replicas)
        pods = self._world.pods_of(str(meta.get("uid")))
        return sum(1 for p in pods if _live(p) and not _unbound(p)) >= desired
