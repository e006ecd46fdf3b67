"""Planning against the capacity every order shares: read, plan and record under one lock.

Two workers planning at once from the same free devices would promise one device twice
(seen here: three orders, two A100s, all three Planned). So a plan is made under
`Planning.lock`, from a snapshot that counts every other order's planned-but-unallocated
replicas as demand (fsm/demand.py), and the pass records the verdict in the log and the
in-memory state before the lock is released — the next plan sees it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from adapters.kubernetes.watching import Obj
from adapters.kubernetes.world import ClusterCache
from fsm import effects
from fsm.placement import capacity, demand, planner, recipes
from fsm.state import OrderState
from fsm.values import ModelOutcome, PlanOutcome

__all__ = ["Planning"]

log = logging.getLogger(__name__)


def _allocated(claim: Obj) -> bool:
    return bool(
        (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
    )


def _holder(claim: Obj) -> str | None:
    labels = (claim.get("metadata") or {}).get("labels") or {}
    return labels.get(capacity.ORDER_UID_LABEL)


class Planning:
    """The capacity as the planner and the arbiter see it, and the planner's calls."""

    def __init__(self, world: ClusterCache, states: Callable[[], Mapping[str, OrderState]]) -> None:
        self._world = world
        self._states = states  # a copy of every order's folded state this process holds
        self.lock = threading.Lock()
        self._recipes: tuple[str | None, tuple[recipes.Recipe, ...]] = ("", ())

    def recipes(self) -> tuple[recipes.Recipe, ...]:
        """The launch recipes, parsed once per change of any of them (not every pass)."""
        version = self._world.recipes.resource_version
        cached_version, parsed = self._recipes
        if version is None or version != cached_version:
            found, problems = recipes.parse_recipes(self._world.recipes.objects(copy_=False))
            for problem in problems:
                log.warning("launch recipe skipped: %s", problem)
            parsed = tuple(found)
            self._recipes = (version, parsed)
        return parsed

    def priority_value(self, name: str | None) -> int | None:
        objs = self._world.priority_classes.objects()
        if name is None:
            return next((int(o.get("value", 0)) for o in objs if o.get("globalDefault")), 0)
        for obj in objs:
            if (obj.get("metadata") or {}).get("name") == name:
                return int(obj.get("value", 0))
        return None

    def allocated_only(self) -> capacity.Snapshot:
        """Devices and the claims the scheduler allocated: what a device class offers."""
        return capacity.parse_snapshot(
            self._world.device_classes.objects(),
            self._world.resource_slices.objects(),
            self._world.resource_claims.objects(),
        )

    def free_units(self, device_class: str) -> int:
        return demand.free_units(self.allocated_only(), device_class)

    def snapshot(self, uid: str) -> capacity.Snapshot:
        """The capacity as order `uid` sees it: allocated claims, the demand of other
        orders' plans not yet allocated, and each holder's priority."""
        states = self._states()
        priorities = {
            other: prio
            for other, state in states.items()
            if state.policy is not None
            and (prio := self.priority_value(state.policy.constraints.priority_class_name))
            is not None
        }
        claims = self._world.resource_claims.objects()
        base = capacity.parse_snapshot(
            self._world.device_classes.objects(),
            self._world.resource_slices.objects(),
            claims,
            priority_classes=self._world.priority_classes.objects(),
            holder_priorities=priorities,
        )
        held: dict[str, int] = {}
        for claim in claims:
            holder = _holder(claim)
            if holder and _allocated(claim):
                held[holder] = held.get(holder, 0) + 1
        demands = []
        for other, state in states.items():
            plan = state.plan
            if other == uid or state.deleted or plan is None or state.policy is None:
                continue
            if state.workload is not None and state.workload.desired_replicas == 0:
                continue  # scaled to zero for a higher-priority order: it holds no place
            wanted = state.policy.constraints.min_replicas
            if state.workload is not None:
                wanted = max(wanted, state.workload.desired_replicas)
            demands.append(
                demand.Demand(
                    holder=other,
                    namespace=state.namespace,
                    name=state.name,
                    plan=plan,
                    replicas=wanted - held.get(other, 0),
                    priority=priorities.get(other),
                )
            )
        return demand.with_demand(base, demands)

    def plan(self, uid: str, state: OrderState, command: effects.RequestPlan) -> PlanOutcome:
        """The planner's verdict for the order; call it holding `lock`."""
        effective, model = state.policy, state.model
        assert effective is not None and model is not None  # the core asks only then
        request = planner.PlanRequest.for_order(
            effective,
            ModelOutcome(
                reason=model.reason,
                message=model.message,
                facts=model.facts,
                endpoint_type=model.endpoint_type,
            ),
            order_uid=uid,
            held=command.plan_in_force,
            tried_device_classes=command.excluded_device_classes,
        )
        return planner.plan(request, self.snapshot(uid), self.recipes())
