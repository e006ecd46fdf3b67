"""Capacity by priority, gathered: what `fsm.arbitration` weighs, read from the cluster.

The decision is pure (fsm/arbitration.py, docs/priority.md); this module only reads —
the cache for pods, claims and orders, and a live read of a Deployment where a decision
must not count from a stale copy (its replicas and its record of what was taken). The
pass records every take in the taker's and the victim's streams, and then scales the
victim (reconciling.py, acting.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from adapters.kubernetes import kinds
from adapters.kubernetes.watching import Obj
from adapters.kubernetes.world import ClusterCache
from adapters.kubernetes.writing import Writer
from fsm import arbitration
from fsm.arbitration import Holding, OrderView, Ruling, Take, Taking
from fsm.capacity import Snapshot
from fsm.identity import OrderRef
from fsm.reasons import Reason
from fsm.state import OrderState

__all__ = ["Arbiter"]


def _live(pod: Obj) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp")


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
        states: Callable[[], Mapping[str, OrderState]],
    ) -> None:
        self._writer = writer  # for live reads only
        self._world = world
        self._snapshot = snapshot  # the capacity as the planner sees it, for an order UID
        self._states = states

    def ruling(self, order: OrderRef, state: OrderState) -> Ruling | None:
        """The order's ruling, or None where growth and taking are not judged."""
        plan, policy, workload = state.plan_in_force, state.policy, state.workload
        if plan is None or policy is None or workload is None:
            return None
        deployment = self._world.deployments.get_by_name(order.namespace, order.name)
        if deployment is None:
            return None
        taking = Taking.of(deployment)
        if taking is not None:  # judged from a live read: the record must not be stale
            deployment = self._writer.get(kinds.DEPLOYMENTS, order.namespace, order.name)
            taking = Taking.of(deployment)
        pods = [p for p in self._world.pods_of(order.uid) if _live(p)]
        waiting = any(_unbound(p) for p in pods)
        if taking is None and not waiting:
            return Ruling(arbitration.Verdict(Reason.SCALING_WITHIN_BOUNDS))
        snapshot = self._snapshot(order.uid)
        bounds = policy.constraints
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
        )
        if taking is not None:
            own = snapshot.priority_value(bounds.priority_class_name) or 0
            view = replace(
                view,
                higher_priority_waiting=self._higher_priority_waits(own),
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

    def takes(self, taker: OrderRef, state: OrderState, reclaims: Sequence[str]) -> list[Take]:
        """What freeing `reclaims` takes from each holder: one replica per claim, counted
        from a live read of the holder's Deployment (an earlier take must be seen)."""
        policy = state.policy
        priority = policy.constraints.priority_class_name if policy is not None else None
        claims = self._world.resource_claims.objects()
        victims = arbitration.victims_of(reclaims, claims, taker_uid=taker.uid)
        snapshot = self._snapshot(taker.uid)
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
                held=sum(1 for a in snapshot.allocations if a.holder == victim_uid),
                taking=Taking.of(live),
                resource_version=str(live["metadata"].get("resourceVersion")),
            )
            decided = arbitration.take(
                holding, len(keys), by=taker.key, priority_class_name=priority
            )
            if decided is not None:
                out.append(decided)
        return out

    # -- what the give-back waits for ----------------------------------------------------

    def _higher_priority_waits(self, own: int) -> bool:
        return any(
            _unbound(p) and int((p.get("spec") or {}).get("priority") or 0) > own
            for p in self._world.pods.objects()
        )

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
        desired = _replicas(deployment)
        state = self._states().get(str(meta.get("uid")))
        if state is not None and state.policy is not None:
            desired = min(desired, state.policy.constraints.max_replicas)
        pods = self._world.pods_of(str(meta.get("uid")))
        return sum(1 for p in pods if _live(p) and not _unbound(p)) >= desired
