"""Capacity by priority, gathered: what `fsm.placement.arbitration` weighs, read from the cluster.

The decision is pure (fsm/arbitration.py, docs/priority.md); this module only reads —
the cache for pods, claims and orders, and a live read of a Deployment where a decision
must not count from a stale copy (its replicas and its record of what was taken). The
pass records every take in the taker's and the victim's streams, and then scales the
victim (reconciling.py, acting.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from adapters.kubernetes import kinds, taken_records
from adapters.kubernetes.rendering import UID_LABEL
from adapters.kubernetes.watching import Obj
from adapters.kubernetes.world import ClusterCache
from adapters.kubernetes.writing import Writer
from fsm.identity import OrderRef
from fsm.placement import arbitration, planner
from fsm.placement.arbitration import Holding, OrderView, Ruling, Take
from fsm.placement.capacity import FULL_SHARE, Snapshot, find_place
from fsm.reasons import ConditionType, Reason
from fsm.state import OrderState
from fsm.values import Plan

__all__ = ["TAKE_WRITE_SECONDS", "Arbiter"]

# How long a take may be in the log before its scale is in the API: the taker records,
# then patches, in one pass; longer means the patch was lost (the taker takes again).
TAKE_WRITE_SECONDS = 30.0


def _live(pod: Obj) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp")


def _current(pod: Obj) -> bool:
    """A live pod that has not ended on its node: an evicted one (Failed, kept until the
    pod collector's threshold, often for good) is no replica; its replacement is."""
    return _live(pod) and (pod.get("status") or {}).get("phase") not in ("Failed", "Succeeded")


def _unbound(pod: Obj) -> bool:
    """A live pod not on a node yet: it waits for the scheduler (and maybe for devices)."""
    return _live(pod) and not (pod.get("spec") or {}).get("nodeName")


def _replicas(deployment: Obj | None, default: int = 1) -> int:
    return int(((deployment or {}).get("spec") or {}).get("replicas", default))


class Arbiter:
    """Reads what the arbitration weighs; never writes."""

    def __init__(
        self,
        writer: Writer,
        world: ClusterCache,
        *,
        snapshot: Callable[[str], Snapshot],
        allocated: Callable[[], Snapshot],
        could_reclaim: Callable[[], Callable[[str | None], bool]],
        states: Callable[[], Mapping[str, OrderState]],
    ) -> None:
        self._writer = writer  # for live reads only
        self._world = world
        self._snapshot = snapshot  # the capacity as the planner sees it, for an order UID
        self._allocated = allocated  # the devices and the claims the scheduler allocated
        self._could_reclaim = could_reclaim  # may an order at that priority free anything?
        self._states = states

    def ruling(self, order: OrderRef, state: OrderState, now: datetime) -> Ruling | None:
        """The order's ruling, or None where growth and taking are not judged."""
        plan, policy, workload = state.plan_in_force, state.policy, state.workload
        if plan is None or policy is None or workload is None:
            return None
        deployment = self._world.deployments.get_by_name(order.namespace, order.name, copy_=False)
        if deployment is None:
            return None
        taking = taken_records.read(deployment, self._world.orders)
        logged = state.scaling is not None and (
            state.scaling.reason is Reason.CAPACITY_TAKEN_BY_PRIORITY
        )
        if taking is not None or logged:  # judged from a live read, never a stale copy
            deployment = self._writer.get(kinds.DEPLOYMENTS, order.namespace, order.name)
            taking = taken_records.read(deployment, self._world.orders)
        if taking is None and logged and self._take_pending(state, now):
            # The log says replicas were taken and the taker has not scaled this order
            # yet (it records first, then scales): judging now would flap the verdict.
            return None
        # Counted as placed, an evicted replica made its order's minimum look met while
        # the replacement waited, and nothing was reclaimed for it.
        pods = [p for p in self._world.pods_of(order.uid, order.namespace) if _current(p)]
        waiting = any(_unbound(p) for p in pods)
        if taking is None and not waiting:
            return Ruling(arbitration.Verdict(Reason.SCALING_WITHIN_BOUNDS))
        bounds = policy.constraints
        if taking is None and not self.capacity_may_matter(state, self._could_reclaim()):
            return Ruling(None)  # what `arbitration.rule` would say, without its snapshot
        snapshot = self._snapshot(order.uid)
        view = OrderView(
            uid=order.uid,
            plan=plan,
            min_replicas=bounds.min_replicas,
            max_replicas=bounds.max_replicas,
            priority_class_name=bounds.priority_class_name,
            available=workload.available_replicas,
            desired=_replicas(deployment),
            bound=sum(1 for p in pods if not _unbound(p)),
            waiting=waiting,
            taking=taking,
            held=sum(1 for a in snapshot.allocations if a.holder == order.uid),
            resource_version=str(((deployment or {}).get("metadata") or {}).get("resourceVersion")),
            namespace=order.namespace,
        )
        if taking is not None:
            own = snapshot.priority_value(bounds.priority_class_name) or 0
            view = replace(
                view,
                higher_priority_waiting=self._higher_priority_waits(own, snapshot, plan),
                takers_satisfied=all(self._satisfied(t.order) for t in taking.takers),
                gone_takers=frozenset(
                    t.order for t in taking.takers if self._order_named(t.order) is None
                ),
            )
        minimums = {
            uid: s.policy.constraints.min_replicas
            for uid, s in self._states().items()
            if s.policy is not None
        }
        return arbitration.rule(view, snapshot, minimums)

    @staticmethod
    def capacity_may_matter(state: OrderState, could_reclaim: Callable[[str | None], bool]) -> bool:
        """May the capacity change the ruling of an order whose pods wait (nothing taken
        from it)? Only by growth, judged while a replica is available, or by a reclaim,
        which needs something of a lower priority to free: otherwise `arbitration.rule`
        rules nothing, whatever the capacity. (The reconciler asks it too: a capacity
        event wakes such an order only then.)"""
        if Arbiter.growth_may_matter(state):
            return True
        policy = state.policy
        return policy is not None and could_reclaim(policy.constraints.priority_class_name)

    @staticmethod
    def growth_may_matter(state: OrderState) -> bool:
        """`capacity_may_matter` whatever the priorities: a replica is available (growth
        is judged), or the order is not judged yet (its pass will say)."""
        workload = state.workload
        return workload is None or state.policy is None or workload.available_replicas >= 1

    def takes(self, taker: OrderRef, state: OrderState, reclaims: Sequence[str]) -> list[Take]:
        """What freeing `reclaims` takes from each holder: one replica per claim, counted
        from a live read of the holder's Deployment (an earlier take must be seen)."""
        policy = state.policy
        priority = policy.constraints.priority_class_name if policy is not None else None
        # Judged again now: the plan named them maybe passes ago (its apply held back by
        # a refusal), and a victim's class may have risen to the taker's priority since.
        # The planner's rule: only a claim of a known, strictly lower priority is taken.
        snapshot = self._snapshot(taker.uid)
        own = snapshot.priority_value(priority)
        lower = {
            a.key
            for a in snapshot.allocations
            if own is not None and a.priority is not None and a.priority < own
        }
        reclaims = [key for key in reclaims if key in lower]
        claims = self._world.resource_claims.objects()
        victims = arbitration.victims_of(reclaims, claims, taker_uid=taker.uid)
        # What a victim holds is its allocated claims: its replicas still waiting (the
        # planner's demand placeholders) hold nothing, and a take counted from them would
        # scale away a pending pod, free nothing, and then find the victim "at" its hold.
        allocated = self._allocated()
        out = []
        for victim_uid, keys in victims.items():
            order = self._world.orders.get(victim_uid)
            if order is None:
                continue
            meta = order.get("metadata") or {}
            namespace, name = str(meta.get("namespace")), str(meta.get("name"))
            live = self._writer.get(kinds.DEPLOYMENTS, namespace, name)
            if live is None:
                continue
            holding = Holding(
                uid=victim_uid,
                key=f"{namespace}/{name}",
                desired=_replicas(live),
                held=sum(1 for a in allocated.allocations if a.holder == victim_uid),
                taking=taken_records.read(live, self._world.orders),
                resource_version=str(live["metadata"].get("resourceVersion")),
            )
            decided = arbitration.take(
                holding, len(keys), by=taker.key, priority_class_name=priority
            )
            if decided is not None:
                out.append(decided)
        return out

    def _take_pending(self, state: OrderState, now: datetime) -> bool:
        """A take in the log whose scale is not written yet: recent, and some taker still
        exists (a record only disappears by this order's own give-back, logged first; a
        Deployment recreated without it is judged afresh after TAKE_WRITE_SECONDS)."""
        cond = state.condition(ConditionType.SCALING_HEALTHY)
        since = cond.last_transition_time if cond is not None else None
        if since is None or (now - since).total_seconds() > TAKE_WRITE_SECONDS:
            return False
        takers = (state.scaling.taken_by or "") if state.scaling is not None else ""
        return any(self._order_named(t.strip()) for t in takers.split(",") if t.strip())

    # -- what the give-back waits for ----------------------------------------------------

    def _higher_priority_waits(self, own: int, snapshot: Snapshot, plan: Plan) -> bool:
        """Does a pod of a higher priority wait for devices the victim's replicas would
        take back, and could it be placed on them now? Any waiting pod of a higher
        priority, as first written, held every give-back for as long as a higher order's
        T4 pod waited (ScaleUpBlocked), with the victim's A100s free. One of the same
        devices that fits nowhere held it too: a replica of two devices, its node half
        held by the victim's own last replica, kept the victim down beside a free device
        it could never use. So did an order whose plan was dropped (its class tried),
        for good: it pursues no device. An order not folded yet counts, as does one
        whose devices cannot be judged.

        The order label is anyone's to write on a pod of their own: a pod counts only as
        a pending replica of an order of its namespace that has not every replica it
        wants, at that order's priority. A tenant's unschedulable pod labelled as no
        order, at a priority of its choosing, held every give-back in the cluster."""
        mine = planner.plan_devices(snapshot, plan)
        ours = None if mine is None else {device.id for device in mine}
        states = self._states()
        for pod in self._world.pods.objects(copy_=False):
            if not _unbound(pod):
                continue
            uid = ((pod.get("metadata") or {}).get("labels") or {}).get(UID_LABEL)
            if not uid:
                continue
            other = states.get(uid)
            priority = int((pod.get("spec") or {}).get("priority") or 0)
            if other is not None and other.policy is not None:
                priority = (
                    snapshot.priority_value(other.policy.constraints.priority_class_name) or 0
                )
            # The priority first: the cheaper question, and most waiting pods end there.
            if priority <= own or not self._pending_replica(uid, pod, states):
                continue
            if other is None:
                return True
            wanted = other.plan or other.plan_in_force
            if wanted is None:
                continue
            theirs = planner.plan_devices(snapshot, wanted)
            if ours is None or theirs is None:
                return True
            if not ours & {device.id for device in theirs}:
                continue
            place = find_place(
                snapshot,
                theirs,
                count=wanted.accelerator_count,
                share_percent=wanted.share_percent or FULL_SHARE,
                own_uid=uid,
            )
            if place is not None and ours & set(place.devices):
                return True
        return False

    def _pending_replica(self, uid: str, pod: Obj, states: Mapping[str, OrderState]) -> bool:
        """Is `pod` a replica its order still waits for: the order is of the pod's
        namespace, and not every replica it wants is placed?"""
        order = self._world.orders.get(uid, copy_=False)
        meta = (order or {}).get("metadata") or {}
        namespace = str((pod.get("metadata") or {}).get("namespace"))
        if order is None or meta.get("namespace") != namespace:
            return False
        return not self._placed_all(uid, namespace, str(meta.get("name")), states.get(uid))

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
        uid = str(meta.get("uid"))
        name = str(meta.get("name"))
        return self._placed_all(uid, str(meta.get("namespace")), name, self._states().get(uid))

    def _placed_all(self, uid: str, namespace: str, name: str, state: OrderState | None) -> bool:
        """Has the order every replica its Deployment wants (at most its maximum) on a
        node?"""
        deployment = self._world.deployments.get_by_name(namespace, name)
        if deployment is None:
            return False
        desired = _replicas(deployment)
        if state is not None and state.policy is not None:
            desired = min(desired, state.policy.constraints.max_replicas)
        pods = self._world.pods_of(uid, namespace)
        return sum(1 for p in pods if _current(p) and not _unbound(p)) >= desired
