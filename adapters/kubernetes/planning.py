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
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from adapters.kubernetes.rendering import UID_LABEL
from adapters.kubernetes.watching import Informer, Obj
from adapters.kubernetes.world import ClusterCache
from fsm import effects
from fsm.placement import capacity, demand, inventory, planner, recipes
from fsm.placement.recipes import Recipe
from fsm.state import OrderState, serving_basis
from fsm.values import (
    EffectivePolicy,
    EndpointType,
    ModelOutcome,
    Plan,
    PlanOutcome,
)

__all__ = ["Planning"]

log = logging.getLogger(__name__)
_Part = TypeVar("_Part")


class Planning:
    """The capacity as the planner and the arbiter see it, and the planner's calls."""

    def __init__(
        self,
        world: ClusterCache,
        states: Callable[[], Mapping[str, OrderState]],
        priorities_in_use: Callable[[], Iterable[str | None]],
    ) -> None:
        self._world = world
        self._states = states  # a copy of every order's folded state this process holds
        # The priority classes those states' policies name, kept as the states are.
        self._priorities_in_use = priorities_in_use
        self.lock = threading.Lock()
        self._recipes: tuple[str | None, tuple[recipes.Recipe, ...]] = ("", ())
        self._parts: dict[str, tuple[str | None, Any]] = {}  # by kind: (version, parsed)
        self._parsed_at: tuple[tuple[Any, ...], capacity.Snapshot] | None = None
        self._free: tuple[capacity.Snapshot | None, dict[tuple[str, str | None], int]] = (
            None,
            {},
        )
        self._claims = inventory.ClaimReader()
        # Give-backs written and not back through the watch yet: order UID -> (replicas,
        # the Deployment's UID, the version the give-back was decided from and made
        # conditional on). `_desired` counts these while the cache still shows that version.
        self._scales: dict[str, tuple[int, str, str]] = {}
        self._scales_lock = threading.Lock()
        # Read by plans (under the lock) and the arbiter (not): an entry is used only for
        # its very claim at the same priority, so a race costs a copy, never a wrong one.
        self._judged: capacity.JudgedClaims = {}
        self.parses = 0  # kinds of capacity parsed anew (for tests: per change, not per pass)
        self.snapshots = 0  # demand snapshots built (for tests: none where none can matter)

    @property
    def claims_parsed(self) -> int:
        """Claims parsed anew (for tests: each changed claim, once)."""
        return self._claims.parsed

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

    def recipe(self, name: str) -> Recipe | None:
        """The usable launch recipe `name`, if it is one."""
        return next((r for r in self.recipes() if r.name == name), None)

    def unusable_recipe(self, name: str) -> str | None:
        """Why the launch recipe `name` is not among the usable ones (deleted, or edited
        into one the controller refuses); None when it is usable."""
        if self.recipe(name) is not None:
            return None
        obj = self._world.recipes.get_by_name(None, name, copy_=False)
        if obj is None:
            return f"launch recipe {name!r} is gone"
        try:
            recipes.parse_recipe(obj)
        except recipes.RecipeError as exc:
            return f"launch recipe {name!r} is refused ({exc})"
        return None  # created since `recipes()` read the cache: usable at the next read

    def keyless(self, name: str) -> bool:
        """Can the usable recipe `name` not be given an API key? (Not usable: not known.)"""
        recipe = self.recipe(name)
        return recipe is not None and recipe.keyless is not None

    def keyless_recipe(self, name: str, state: OrderState) -> str | None:
        """Why the usable recipe `name` cannot run the order's workload: its runtime cannot
        be given the API key the workload's Token authentication needs (an admin edited
        its runtime, or a release before the planner looked planned it). None: it can."""
        recipe = self.recipe(name)
        policy = serving_basis(state).policy
        if recipe is None or policy is None:
            return None
        if not policy.exposure.needs_token:
            return None
        return recipe.keyless

    def replacement_recipe(self, plan: Plan, state: OrderState) -> Recipe | None:
        """The best usable recipe for the plan's hardware and the model and endpoint type
        its workload serves: what takes over from a recipe withdrawn under it."""
        basis = serving_basis(state)
        facts = basis.facts
        if facts is None:
            return None
        choice = recipes.choose_recipe(
            self.recipes(),
            placement=plan.placement_mode,
            product_name=plan.accelerator_product_name,
            model_format=facts.format,
            quantization=facts.quantization,
            endpoint_type=basis.endpoint_type or EndpointType.CHAT,
            api_key=basis.policy is not None and basis.policy.exposure.needs_token,
        )
        return choice.recipe

    def _parsed(self) -> capacity.Snapshot:
        """Device classes, devices, allocated claims and priority classes, each parsed
        once per change of its own kind and shared read-only by every pass (frozen):
        before, each pass deep-copied and parsed every slice and claim, O(N) per pass
        with N orders, and then every claim event of a rollout parsed every slice again.
        The versions are read before the objects, so a change that lands meanwhile only
        makes the next call parse again."""
        world = self._world
        parts = (
            self._part(world.device_classes, inventory.parse_device_classes),
            self._part(world.resource_slices, inventory.parse_devices),
            self._part(world.resource_claims, self._claims),
            self._part(world.priority_classes, inventory.parse_priority_classes),
        )
        cached = self._parsed_at
        if cached is not None and all(a is b for a, b in zip(cached[0], parts, strict=True)):
            return cached[1]
        parsed = inventory.assemble(*parts)
        self._parsed_at = (parts, parsed)
        return parsed

    def _part(self, informer: Informer, parse: Callable[[Iterable[Obj]], _Part]) -> _Part:
        # None (never listed, or the kind is not served) is a version too: the objects
        # of such an informer change only with an event or a LIST, which set one.
        version = informer.resource_version
        cached = self._parts.get(informer.resource.plural)
        if cached is not None and cached[0] == version:
            kept: _Part = cached[1]
            return kept
        part = parse(informer.objects(copy_=False))
        self._parts[informer.resource.plural] = (version, part)
        self.parses += 1
        return part

    def allocated_only(self) -> capacity.Snapshot:
        """Devices and the claims the scheduler allocated: what a device class offers."""
        return self._parsed()

    def free_units(self, device_class: str, besides: str | None = None) -> int:
        """Free share units on the class's devices, the claims of order `besides` counted
        free (demand.free_units); counted once per capacity change (a pass of every order
        that runs or waits reads it: O(devices + claims) each time)."""
        parsed = self._parsed()
        known = self._free
        if known[0] is not parsed:
            known = self._free = (parsed, {})
        key = (device_class, besides)
        if key not in known[1]:
            known[1][key] = demand.free_units(parsed, device_class, besides=besides)
        return known[1][key]

    def could_reclaim(self) -> Callable[[str | None], bool]:
        """Could an order at a priority (a PriorityClass's name; None: the cluster
        default) free anything? Only claims and demand of other orders of a lower
        priority value are ever freed (`capacity.find_place`), so with none below it in
        use no search can name a reclaim. Asked of many orders at once, so the lowest
        value in use is found once, from the priority classes the orders name (kept by
        the reconciler as it keeps their states: O(classes), where reading every state's
        policy was O(orders) on every capacity event). The arbiter's demand snapshot
        (every waiting plan placed again) was O(waiting plans x devices) in each pass of
        an order whose pod waits. The priority classes alone are read: the whole parse
        would read every claim again after each allocation of a rollout."""
        value = capacity.priority_lookup(
            *self._part(self._world.priority_classes, inventory.parse_priority_classes)
        )
        in_use = {value(name) for name in self._priorities_in_use()}
        lowest = min((v for v in in_use if v is not None), default=None)

        def could(name: str | None) -> bool:
            own = value(name)
            return own is not None and lowest is not None and own > lowest

        return could

    def snapshot(self, uid: str, holding: Plan | None = None) -> capacity.Snapshot:
        """The capacity as order `uid` sees it: allocated claims, the demand of other
        orders' plans not yet allocated (around `holding`, the place `uid` holds while it
        replans), and each holder's priority."""
        self.snapshots += 1
        states = self._states()
        parsed = self._parsed()
        value = parsed.priority_values()  # a map built per plan, not per order
        priorities = {
            other: prio
            for other, state in states.items()
            if state.policy is not None
            and (prio := value(state.policy.constraints.priority_class_name)) is not None
        }
        base = capacity.with_holder_priorities(parsed, priorities, self._judged)
        held = _held_by_holder(parsed)
        on_plan = _OnPlan(parsed)
        demands = []
        for other, state in states.items():
            running = None if other == uid or state.deleted else _running(state)
            if running is None:
                continue
            plan, policy = running
            desired = self._desired(other, state)
            if desired == 0:
                continue  # scaled to zero for a higher-priority order: it holds no place
            bounds = policy.constraints
            wanted = min(max(bounds.min_replicas, desired or 0), bounds.max_replicas)
            replicas = wanted - on_plan.count(held.get(other, ()), plan)
            if replicas <= 0:
                continue  # allocated: its claims are in the snapshot already
            demands.append(
                demand.Demand(
                    holder=other,
                    namespace=state.namespace,
                    name=state.name,
                    plan=plan,
                    replicas=replicas,
                    # None while its class fails, as for its claims: the arbiter judges
                    # none of its passes then, so what was taken would not come back.
                    priority=priorities.get(other),
                    reclaims=_reclaims(state, plan),
                )
            )
        return demand.with_demand(base, demands, for_uid=uid, held=holding)

    def scaled(self, uid: str, replicas: int, deployment_uid: str, decided_from: str) -> None:
        """Order `uid`'s Deployment was scaled to `replicas` by a give-back (under `lock`),
        in a patch conditional on version `decided_from`: counted so by every plan from
        now on, not from when the watch brings it back."""
        with self._scales_lock:
            self._scales[uid] = (replicas, deployment_uid, decided_from)

    def _desired(self, uid: str, state: OrderState) -> int | None:
        """The replicas order `uid`'s Deployment asks for now: as scaled by a give-back
        the cache does not show yet; else as cached; else as its last pass saw them;
        None: it has no workload yet.

        The cache's, not the pass's: a give-back (or an HPA) scales a Deployment between
        its order's passes. Counted from its last pass, a victim given back a device held
        no place there until its next pass, and the next plan, or another victim's
        give-back, was handed the same device; nor did a new leader, its log saying zero,
        count it until then. And the give-back's own, until the cache has it: waited for
        under the planning lock, a lagging watch held every plan up to the wait's bound,
        then gave the device away again anyway. The note holds while the cache shows the
        very version the give-back was made on: any other means its write, or a later
        one, is there (no memory of versions seen to outlive)."""
        deployment = self._world.deployments.get_by_name(state.namespace, state.name, copy_=False)
        meta = (deployment or {}).get("metadata") or {}
        noted = self._scales.get(uid)
        if noted is not None:
            replicas, deployment_uid, decided_from = noted
            if meta.get("uid") == deployment_uid and meta.get("resourceVersion") == decided_from:
                return replicas
            with self._scales_lock:
                if self._scales.get(uid) == noted:  # not a newer give-back's
                    del self._scales[uid]
        if deployment is not None and (meta.get("labels") or {}).get(UID_LABEL) == uid:
            return int((deployment.get("spec") or {}).get("replicas", 1))
        return state.workload.desired_replicas if state.workload is not None else None

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
            namespace=state.namespace,
            held=command.plan_in_force,
            tried_device_classes=command.excluded_device_classes,
        )
        snapshot = self.snapshot(uid, holding=command.plan_in_force)
        return planner.plan(request, snapshot, self.recipes())


def counts_as_demand(state: OrderState) -> bool:
    """May the order's plan hold room for its waiting replicas in other orders' plans?
    When this stops being so, room may come free with no claim or slice changing."""
    if state.deleted or _running(state) is None:
        return False
    return state.workload is None or state.workload.desired_replicas != 0


def _running(state: OrderState) -> tuple[Plan, EffectivePolicy] | None:
    """The plan an order's replicas are to run on, and the policy that counts them.

    While its class fails (no policy now) the workload keeps running the plan in force,
    repaired from what it was applied with (`fsm.effects`, `_repair`): its waiting pods
    still compete for devices, so that plan is still demand. Left out, its devices were
    promised to another order."""
    if state.policy is not None:
        return (state.plan, state.policy) if state.plan is not None else None
    policy = serving_basis(state).policy
    if state.plan_in_force is None or policy is None:
        return None
    return state.plan_in_force, policy


def _reclaims(state: OrderState, plan: Plan) -> tuple[str, ...]:
    """The lower-priority claims `plan`, the order's running plan, frees: what its apply
    takes (fsm.effects, ApplyWorkload.reclaims); none once a later verdict failed."""
    attempt = state.attempt
    if attempt is None or not attempt.ok or not attempt.reclaims or plan != state.plan:
        return ()
    return attempt.reclaims


def _held_by_holder(snapshot: capacity.Snapshot) -> dict[str, list[capacity.Allocation]]:
    out: dict[str, list[capacity.Allocation]] = {}
    for allocation in snapshot.allocations:
        if allocation.holder is not None:
            out.setdefault(allocation.holder, []).append(allocation)
    return out


class _OnPlan:
    """How many of an order's allocated claims serve its current plan: on the devices the
    plan selects, as many as one replica asks. A claim of the plan it replaces (its pod
    still rolling out) holds the old place, not the new one: counted, it hid the new
    plan's demand, and another order was planned onto the device it would need."""

    def __init__(self, snapshot: capacity.Snapshot) -> None:
        self._snapshot = snapshot
        self._ids: dict[tuple[str, str, int], frozenset[str] | None] = {}

    def count(self, claims: Iterable[capacity.Allocation], plan: Plan) -> int:
        claims = list(claims)
        if not claims:
            return 0
        shape = (plan.device_class, plan.accelerator_product_name, plan.accelerator_memory_gib)
        if shape not in self._ids:
            devices = planner.plan_devices(self._snapshot, plan)
            self._ids[shape] = None if devices is None else frozenset(d.id for d in devices)
        ids = self._ids[shape]
        if ids is None:  # undecidable: take them as the plan's, as before
            return len(claims)
        count = max(plan.accelerator_count, 1)
        return sum(1 for c in claims if len(c.devices) == count and ids.issuperset(c.devices))
