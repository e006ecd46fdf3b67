"""One reconcile pass of one order: observe, record, act — read top-down in `reconcile`.

The controller's workers call `Reconciler.reconcile(uid)` with nothing but the order's
UID (level-triggered, controller-runtime style). The pass reads the cached world as
observations (observing.py), lets the pure core decide which events they make and folds
them (`_record`), appends what it decided to the order's stream, in one append, *before*
each of its effects (`_commit`), and carries out the core's commands (acting.py) —
planning under the capacity lock (planning.py), the workload compared with the live
objects and repaired, the token Secret, the probe and the status write — each
idempotent, so a crash between any two steps is repaired by the next pass.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from adapters.kubernetes import arbiter, errors, queueing, sharing
from adapters.kubernetes.acting import Actor
from adapters.kubernetes.background import Background
from adapters.kubernetes.observing import Observer, model_ref_of, order_of
from adapters.kubernetes.planning import Planning, counts_as_demand
from adapters.kubernetes.settings import Settings
from adapters.kubernetes.world import ClusterCache
from adapters.kubernetes.writing import Writer
from adapters.models import HubResolver
from adapters.probes.http import Prober
from adapters.probes.targets import TargetResolver
from fsm import decide, effects
from fsm import observations as ob
from fsm.events import Event
from fsm.fold import fold
from fsm.identity import OrderRef
from fsm.placement import arbitration
from fsm.reasons import ConditionType, Reason
from fsm.state import DEVICE_ALLOCATION_GRACE_SECONDS, OrderState, state_layout
from store import EventLog, StreamKey

__all__ = ["MODULE_NAMESPACE", "Reconciler", "model_ref_of"]

log = logging.getLogger(__name__)

# The module's namespace on Deckhouse: the controller's, unless told otherwise.
MODULE_NAMESPACE = "d8-ai-inference"
SNAPSHOT_EVERY = 20  # events between snapshots of an order's state
_MAX_ROUNDS = 8  # command rounds in one pass; each round is caused by a new event
# A model source that cannot be reached is asked again soon, not at the next resync.
_TRANSIENT_RETRY = queueing.Backoff(initial=2.0, cap=60.0)
# A refused apply (a quota, a webhook, an API server that failed the request) is tried
# again on this backoff, as controller-runtime requeues an erring item: what refused it
# is seldom watched, so no event may come before the resync.
APPLY_RETRY = queueing.Backoff(initial=5.0, cap=300.0)
# Look again this soon at an order whose model is being asked for, should no answer come.
_MODEL_PENDING_RECHECK = 2.0
# Seconds until a give-back put off for the cache to catch up is decided again.
_GIVE_BACK_RECHECK = 1.0


@dataclass
class _Pass:
    """What one pass carries between its steps.

    `state` is the order as the pass has decided it; `recorded`, as the log holds it.
    The events between them (`pending`) are appended together before the pass's next
    effect (`Reconciler._commit`): a first pass appends spec, class and model in one
    append, not three."""

    order: OrderRef
    state: OrderState
    now: datetime
    recorded: OrderState = field(init=False)
    pending: list[Event] = field(default_factory=list)
    told: OrderState = field(init=False)  # the recorded state its Events were told up to
    requeue: list[float] = field(default_factory=list)
    transient: bool | None = None  # the model source unreachable; None: not asked now
    refused: bool | None = None  # the API server refused an apply; None: none tried now
    model_pending: bool = False  # no verdict on the model for this generation yet

    def __post_init__(self) -> None:
        self.recorded = self.told = self.state


class Reconciler:
    """Reconciles orders by UID against the cache; safe to call from several workers
    for different UIDs (the work queue never hands one UID to two workers)."""

    def __init__(
        self,
        *,
        world: ClusterCache,
        log_store: EventLog,
        epoch: Callable[[], int],
        writer: Writer,
        hub: HubResolver,
        targets: TargetResolver,
        settings: Callable[[], Settings],
        clock: Callable[[], datetime],
        hpa_api_version: str = "autoscaling/v2",
        rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        allocation_grace_seconds: float = DEVICE_ALLOCATION_GRACE_SECONDS,
        background: Background | None = None,
        namespace: str = MODULE_NAMESPACE,
        prober: Prober | None = None,
        proxy_env: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._world = world
        # How long pods may wait for devices before the plan's device class counts as
        # tried. Public so a test can shorten it; the verdict is an event, so a change
        # never alters a replay.
        self.allocation_grace_seconds = allocation_grace_seconds
        self._log = log_store
        self._epoch = epoch
        self._settings = settings
        self._clock = clock
        self._states: dict[str, OrderState] = {}
        # The orders whose decisions a capacity change can alter, kept with their states
        # so a capacity event costs a set copy, not a look at every state.
        self._waiting: set[str] = set()
        # Those whose pods wait for devices: a capacity change is news to them only when
        # the arbiter may act on it (`waiting_for_capacity`).
        self._pods_waiting: set[str] = set()
        # Of the kept states, those a capacity change may concern whatever the priorities
        # (`Arbiter.growth_may_matter`): at one priority, the pods waiting that a capacity
        # event wakes are these, found by a set intersection, not a look at each state.
        self._may_grow: set[str] = set()
        # The priority classes the kept states' policies name, and how many name each:
        # what `Planning.could_reclaim` asks on every capacity event and arbiter ruling
        # (it read every state's policy each time: O(orders) each).
        self._priorities: Counter[str | None] = Counter()
        self._states_lock = threading.Lock()
        # Orders the log holds a live stream of whose state is not in memory yet (None:
        # not listed since this reconciler began); see `states`.
        self._unloaded: set[str] | None = None
        # Called when an order's plan stops holding room for its waiting replicas (the
        # controller wakes the orders a capacity change can affect); None: nobody.
        self.demand_freed: Callable[[], None] | None = None
        self._transient_failures: dict[str, int] = {}
        self._refusals: dict[str, int] = {}  # applies refused in a row, by order
        # The stream version whose status this process recorded as the live one, by order.
        self._projected: dict[str, int] = {}
        self.planning = Planning(world, self.states, self.priorities_in_use)
        self._arbiter = arbiter.Arbiter(
            writer,
            world,
            snapshot=self.planning.snapshot,
            allocated=self.planning.allocated_only,
            could_reclaim=self.planning.could_reclaim,
            states=self.states,
        )
        # Probes and hub lookups run off the workers; without a pool (the pass's unit
        # tests) they run at once.
        self.background = background or Background(lambda _uid: None, inline=True)
        self._observer = Observer(world, hub, settings, self.background)
        # The probes' kept connections, closed by whoever stops the controller.
        self.prober = prober or Prober()
        self.actor = Actor(
            world=world,
            writer=writer,
            targets=targets,
            settings=settings,
            hpa_api_version=hpa_api_version,
            recipe=self.planning.recipe,
            unusable_recipe=self.planning.unusable_recipe,
            background=self.background,
            rewrite=rewrite,
            namespace=namespace,
            prober=self.prober,
            proxy_env=proxy_env,
        )

    # -- the pass ----------------------------------------------------------------------

    def reconcile(self, uid: str) -> queueing.Outcome:
        obj = self._world.orders.get(uid, copy_=False)  # read only
        now = self._clock()
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self._close(uid, now)
            return queueing.Done()
        p = _Pass(order_of(obj), self.state_of(uid), now)
        # Observe: what the order asks, what its class and model say, what runs.
        self._record(p, self._observer.spec(obj, now))
        self._record(p, self._observer.klass(p.order, p.state, now))
        model = self._observer.model(p.order, p.state, now)
        judged = p.state.model is not None and p.state.model.generation == p.state.generation
        if model is None and p.state.policy is not None and not judged:
            p.model_pending = True  # being asked off this worker: its answer wakes us
            p.requeue.append(_MODEL_PENDING_RECHECK)
        if model is not None:
            p.transient = model.outcome.reason is Reason.MODEL_SOURCE_UNREACHABLE
            self._record(p, model)
        self._record(p, self._observer.capacity(p.state, now, self._free_units_for(p)))
        self._record(p, self._observer.recipe(p.state, now, self.planning))
        self._observe_serving(p)
        self._arbitrate(p)  # priority and growth: takes on both streams, then scaled
        # Act: the core's commands until the state stops moving.
        before_acting = p.state.version
        self._act(p)
        if p.state.version != before_acting and not p.refused:
            # What acting recorded (a plan applied, a token issued) changes what this
            # pass observed and ruled before it (the workload and the endpoint are seen
            # again in `_act`; the arbiter rules on a plan now in force): look again at
            # once. The event that would wake the order may never come: an apply that
            # changed nothing live (the restart after a crash between the apply and its
            # record) makes none, and our status write's echo wakes nothing
            # (Writer.is_status_echo). Not after a refusal: its retry is the backoff's,
            # or a refusal whose message changes each time (a server that names a
            # generated object in it) would be tried again at once, for ever.
            p.requeue.append(0.0)
        self._commit(p)
        return self._outcome(p)

    def _observe_serving(self, p: _Pass) -> None:
        """The workload and the endpoint: observed only under a plan in force."""
        workload = self._observer.workload(
            p.order,
            p.state,
            p.now,
            grace_seconds=self.allocation_grace_seconds,
            free_units=self._free_units_for(p),
        )
        self._record(p, workload)
        self._record(p, self._observer.endpoint(p.order, p.state, p.now))

    def _free_units_for(self, p: _Pass) -> Callable[[str], int]:
        """What a device class offers the order: its own claims count as free."""
        return functools.partial(self.planning.free_units, besides=p.order.uid)

    def _arbitrate(self, p: _Pass) -> None:
        ruling = self._arbiter.ruling(p.order, p.state, p.now)
        if ruling is not None and ruling.give_back is not None:
            # A give-back hands out free room, as a plan does: ruled again and carried out
            # under the planning lock, its scale noted before the lock is released (the
            # demand counts from there until the cache has it: Planning._desired). Ruled
            # outside it, a plan made meanwhile, or another victim's give-back, was handed
            # the same device.
            with self.planning.lock:
                self._carry_out_ruling(p, self._arbiter.ruling(p.order, p.state, p.now))
            return
        self._carry_out_ruling(p, ruling)

    def _carry_out_ruling(self, p: _Pass, ruling: arbitration.Ruling | None) -> None:
        if ruling is None:
            return
        back = ruling.give_back
        if back is not None:
            cached = self._world.deployments.get_by_name(
                p.order.namespace, p.order.name, copy_=False
            )
            if ((cached or {}).get("metadata") or {}).get("resourceVersion") != (
                back.resource_version
            ):
                # Decided from a live read the cache does not show yet: carried out, its
                # note (Planning.scaled) would be dropped by the first snapshot, which
                # counts from the older copy, and the device handed out again. Nothing is
                # recorded of it either; decided again shortly. Not left to the watch
                # event: one that changes only what the cache trims wakes no one.
                p.requeue.append(_GIVE_BACK_RECHECK)
                return
        self._take(p, ruling.reclaims)
        if ruling.verdict is not None:
            self._record(p, _scaling_seen(ruling.verdict, p.now))
        if back is not None:
            self._commit(p)
            try:
                written = self.actor.scale(
                    p.order, back.replicas, back.record, back.resource_version
                )
            except errors.APIConflictError:
                # Decided from an older copy of the Deployment than the server's (this
                # give-back's own write, not back through the watch yet): decided again
                # from the newer copy shortly.
                log.info("%s: give-back decided from an older Deployment; again", p.order.key)
                p.requeue.append(_GIVE_BACK_RECHECK)
                return
            if back.resource_version:
                deployment_uid = str((written.get("metadata") or {}).get("uid"))
                self.planning.scaled(
                    p.order.uid, back.replicas, deployment_uid, back.resource_version
                )

    def _take(self, p: _Pass, reclaims: tuple[str, ...]) -> None:
        """Free `reclaims` for this order: each take is in the taker's and the victim's
        streams before the victim's Deployment is scaled."""
        for take in self._arbiter.takes(p.order, p.state, reclaims) if reclaims else []:
            reclaimed = ob.ReplicasReclaimed(
                at=p.now,
                victim=take.victim_key,
                replicas=take.taken,
                basis=take.resource_version,
            )
            self._record(p, reclaimed)
            self._commit(p)
            obj = self._world.orders.get(take.victim)
            if obj is None:
                continue
            victim = _Pass(order_of(obj), self.state_of(take.victim), p.now)
            verdict = arbitration.taken_verdict(take.record, victim.order.namespace)
            self._record(victim, _scaling_seen(verdict, p.now))
            self._commit(victim)
            self.actor.scale(victim.order, take.replicas, take.record, take.resource_version)

    def _act(self, p: _Pass) -> None:
        served = p.state.plan_in_force
        for _ in range(_MAX_ROUNDS):
            if p.state.plan_in_force != served:
                # A plan just came in force (its workload applied): its Deployment is in
                # the cache (Actor._read_own_write) and its endpoint is known, so the
                # status this pass publishes says so, rather than a status without them
                # and a second write from the next pass.
                served = p.state.plan_in_force
                self._observe_serving(p)
            commands = self._commands(p)
            if not any(self._carry_out(p, command) for command in commands):
                if not any(isinstance(c, effects.ScheduleProbe) for c in commands):
                    self.actor.stop_probing(p.order)  # not serving now: no probe timer
                return
        log.warning("order %s still changing after %d rounds", p.order.key, _MAX_ROUNDS)
        p.requeue.append(1.0)

    def _commands(self, p: _Pass) -> list[effects.Command]:
        interval = float(self._settings().probe.interval_seconds)
        timings = effects.ProbeTimings(
            pending_seconds=interval, ready_seconds=interval * 3, failing_seconds=interval / 2
        )
        return effects.effects(
            p.state, timings, allocation_grace_seconds=self.allocation_grace_seconds
        )

    def _carry_out(self, p: _Pass, command: effects.Command) -> bool:
        """Carry out one command; True when it moved the state (ask the core again)."""
        if isinstance(command, effects.RequestPlan):
            with self.planning.lock:  # the next plan must see this one: kept before
                outcome = self.planning.plan(p.order.uid, p.state, command)
                had = {plan.recipe for plan in (command.plan_in_force, p.state.plan) if plan}
                keyless = tuple(sorted(r for r in had if self.planning.keyless(r)))
                judged = ob.PlanJudged(at=p.now, outcome=outcome, keyless_recipes=keyless)
                moved = self._record(p, judged)
                self._commit(p, tell=False)
            self._tell(p)  # its Events are requests: not while other plans wait
            return moved
        if p.refused and isinstance(command, effects.ApplyWorkload | effects.EnsureAuthSecret):
            # One refusal a pass, then the backoff: two writes refused with different
            # messages (the token Secret's, the Deployment's: a namespace being deleted)
            # each replaced the other's, appending an event every round, every pass.
            return False
        if isinstance(command, effects.ApplyWorkload) and not command.repair:
            self._take(p, command.reclaims)  # the plan's place needs these claims freed
        if isinstance(command, effects.PublishStatus):
            if p.model_pending or self.background.waiting(p.order.uid):
                return False  # an answer is on its way and wakes the order: publish then
            self._commit(p)
            live = self.actor.publish(p.order, p.state, dict(command.status))
            if live and self._projected.get(p.order.uid) != p.state.version:
                # What `verify` and `list` read: the status the API holds, and the version
                # it was folded at. Recorded also when nothing was written: a status
                # written before a crash (or the log's loss) and its record never made
                # was found live, and left the record behind for good.
                self._log.record_projection(p.order.uid, p.state.version, command.status)
                self._projected[p.order.uid] = p.state.version
            return False
        self._commit(p)
        done = self.actor.act(p.order, p.state, command, p.now)
        p.requeue.extend(done.requeue)
        if isinstance(command, effects.ApplyWorkload | effects.EnsureAuthSecret):
            failed = done.observation
            p.refused = isinstance(failed, ob.ApplyFailed) and (
                failed.reason is Reason.WORKLOAD_APPLY_FAILED
            )
        return self._record(p, done.observation)

    def _outcome(self, p: _Pass) -> queueing.Outcome:
        cond = p.state.condition(ConditionType.MODEL_RESOLVED)
        if p.transient and cond is not None and cond.reason is Reason.MODEL_SOURCE_UNREACHABLE:
            failures = self._transient_failures.get(p.order.uid, 0) + 1
            self._transient_failures[p.order.uid] = failures
            p.requeue.append(_TRANSIENT_RETRY.delay(failures))
        elif p.transient is False:
            self._transient_failures.pop(p.order.uid, None)
        if p.refused:
            refusals = self._refusals.get(p.order.uid, 0) + 1
            self._refusals[p.order.uid] = refusals
            p.requeue.append(APPLY_RETRY.delay(refusals))
        elif p.refused is False:
            self._refusals.pop(p.order.uid, None)
        return queueing.RequeueAfter(min(p.requeue)) if p.requeue else queueing.Done()

    # -- the log -----------------------------------------------------------------------

    def _record(self, p: _Pass, observation: ob.Observation | None) -> bool:
        """decide → fold; the events wait in the pass for `_commit`. True when the
        observation changed something."""
        if observation is None:
            return False
        events = decide.decide(p.state, observation)
        if not events:
            return False
        p.pending.extend(events)
        p.state = fold(events, start=p.state)
        return True

    def _commit(self, p: _Pass, *, tell: bool = True) -> None:
        """Append the events the pass decided since it last appended, in one append.

        Called before each effect (an apply, the token, a scale, the status, a probe
        armed) and at the pass's end, so nothing is done on a decision the log does not
        hold; a plan is appended and kept under the planning lock, so the next plan
        sees its demand. Each append is a transaction (the fence, the head, the insert):
        one per effect rather than one per event. `tell=False` leaves the Events for
        `_tell`."""
        if not p.pending:
            return
        events, p.pending = p.pending, []
        before = p.recorded
        key = StreamKey(p.order.uid, p.order.namespace, p.order.name)
        version = self._log.append(
            key, events, expected_version=before.version, epoch=self._epoch(), recorded_at=p.now
        )
        # The pass goes on with the kept state: what it arms (the probe's judgement of
        # news) holds that one, not an unshared twin of it.
        p.state = p.recorded = self._keep(p.order.uid, p.state)
        if tell:
            self._tell(p)
        if version // SNAPSHOT_EVERY > before.version // SNAPSHOT_EVERY:
            snapshot = {"layout": state_layout(), "state": p.state.model_dump(mode="json")}
            self._log.save_snapshot(p.order.uid, version, snapshot)

    def _tell(self, p: _Pass) -> None:
        """The Kubernetes Events of what the pass appended since it last told them."""
        if p.told is not p.recorded:
            self.actor.tell(p.order, p.told, p.recorded)
            p.told = p.recorded

    def _keep(self, uid: str, state: OrderState, *, only_if_absent: bool = False) -> OrderState:
        """Keep the order's state between passes, and return it as kept: its parts
        shared with other orders' equal ones (the class's policy, the model's facts,
        ...), most of what a state holds and equal across orders. `only_if_absent`: a
        state read for another order's sake never replaces the one a pass keeps."""
        with self._states_lock:
            kept = self._states.get(uid)
        state = sharing.shared_parts(state, kept=kept)
        freed = kept is not None and counts_as_demand(kept) and not counts_as_demand(state)
        with self._states_lock:
            if self._unloaded is not None:
                self._unloaded.discard(uid)
            if only_if_absent and uid in self._states:
                return self._states[uid]
            self._count_priority(self._states.get(uid), -1)
            self._count_priority(state, +1)
            self._states[uid] = state
            for waits, members in (
                (decide.waits_for_capacity(state), self._waiting),
                (decide.pods_wait_for_devices(state), self._pods_waiting),
                (arbiter.Arbiter.growth_may_matter(state), self._may_grow),
            ):
                if waits:
                    members.add(uid)
                else:
                    members.discard(uid)
        if freed and self.demand_freed is not None:
            # A plan dropped (its class tried), an order deleted before its claims were
            # made: what others were refused for it is free, and no claim or slice
            # event says so. Without this, they waited for their resync (minutes).
            self.demand_freed()
        return state

    def waiting_for_capacity(self, unbound: Iterable[str] = ()) -> set[str]:
        """Orders a capacity change can affect, by their states; an order this process has
        not folded yet counts (its first pass has not run).

        Of those whose pods wait for devices, or that have a pod not on a node
        (`unbound`), only the ones the arbiter may rule on anew: one with a replica
        available (it judges growth), or one of a higher priority than some other order
        (it may reclaim). Woken by every claim event, the waiting orders of a rollout at
        one priority took a pass each per allocation anywhere, and they are most of them.
        """
        # Set operations throughout: a rollout's claim events each ask this, and most of
        # its orders have pods waiting (a look at each state was O(orders) in Python).
        uids = self._world.orders.uids()
        with self._states_lock:
            waiting = set(self._waiting)
            waiting |= set(uids) - self._states.keys()  # not folded yet
            pods = (self._pods_waiting | set(unbound)) - waiting
            if not pods:
                return waiting
            waiting |= pods - self._states.keys()
            waiting |= pods & self._may_grow
            rest = pods - waiting
        could_reclaim = self.planning.could_reclaim()
        if rest and any(could_reclaim(name) for name in self.priorities_in_use()):
            with self._states_lock:
                judged = [(uid, self._states.get(uid)) for uid in rest]
            waiting.update(
                uid
                for uid, state in judged
                if state is None or arbiter.Arbiter.capacity_may_matter(state, could_reclaim)
            )
        return waiting

    def states(self) -> dict[str, OrderState]:
        """A copy of every live order's state: the planner's and the arbiter's view of
        the others' plans (workers insert meanwhile).

        States are folded lazily, one order per pass, but a plan the log holds is a
        promise whether or not this process has passed over its order yet: after a
        restart, a new leader, or a StreamConflict that dropped one, an order planned
        before but not loaded since would be invisible, and its devices promised again.
        So the first call after any of those folds every such order (once: O(orders)
        queries after a take-over, nothing after)."""
        if self._unloaded is None or self._unloaded:
            self._load_unloaded()
        with self._states_lock:
            return dict(self._states)

    def gone_while_away(self) -> list[str]:
        """The orders the log holds live and the synced cache does not: deleted while
        no leader watched them."""
        return sorted(self._live_streams() - set(self._world.orders.uids()))

    def _live_streams(self) -> set[str]:
        """The log's live streams. The first read also says what `states` must fold
        (`_load_unloaded`), so a take-over reads them once."""
        streams = {s.uid for s in self._log.streams() if s.deleted_at is None}
        with self._states_lock:
            if self._unloaded is None:
                self._unloaded = streams - self._states.keys()
        return streams

    def _load_unloaded(self) -> None:
        if self._unloaded is None:
            self._live_streams()
        live = set(self._world.orders.uids())
        with self._states_lock:
            # Gone from the cache: its claims speak for it.
            self._unloaded = (self._unloaded or set()) & live
            pending = sorted(self._unloaded)
        for uid in pending:
            # Each leaves the set once kept (a log failure here leaves the rest for the
            # next call); a worker's pass may keep a newer state meanwhile: it stays.
            self._keep(uid, self._folded(uid), only_if_absent=True)

    def state_of(self, uid: str) -> OrderState:
        """The folded state of an order: memory, else snapshot + tail, else the full stream."""
        with self._states_lock:
            if uid in self._states:
                return self._states[uid]
        if self._log.stream(uid) is None:
            return OrderState()
        return self._keep(uid, self._folded(uid))

    def _folded(self, uid: str) -> OrderState:
        start, after = OrderState(), 0
        snap = self._log.load_snapshot(uid)
        if snap is not None and snap.state.get("layout") == state_layout():
            try:
                start, after = OrderState.model_validate(snap.state["state"]), snap.version
            except (ValueError, KeyError):
                start, after = OrderState(), 0  # unreadable: refold
        # Else none, or an older fold's (no tag or another): refold from the first event.
        return fold([r.event for r in self._log.read(uid, after_version=after)], start=start)

    def priorities_in_use(self) -> list[str | None]:
        """The priority classes the kept states' policies name (None: the default)."""
        with self._states_lock:
            return list(self._priorities)

    def _count_priority(self, state: OrderState | None, step: int) -> None:
        # Call holding _states_lock.
        if state is None or state.policy is None:
            return
        name = state.policy.constraints.priority_class_name
        self._priorities[name] += step
        if self._priorities[name] <= 0:
            del self._priorities[name]

    def forget(self, uid: str, *, closed: bool = False) -> None:
        """Drop what this process holds of an order: it is gone (`closed`), or its stream
        is to be read again (another writer moved it)."""
        with self._states_lock:
            self._count_priority(self._states.pop(uid, None), -1)
            if self._unloaded is not None and not closed:
                self._unloaded.add(uid)  # its plan still counts for the others
            self._waiting.discard(uid)
            self._pods_waiting.discard(uid)
            self._may_grow.discard(uid)
        self._transient_failures.pop(uid, None)
        self._refusals.pop(uid, None)
        self._projected.pop(uid, None)
        self.background.forget(uid)
        self.actor.converged.forget(uid)

    def _close(self, uid: str, now: datetime) -> None:
        state = self.state_of(uid)
        info = self._log.stream(uid) if state.version > 0 else None
        if info is not None and info.deleted_at is None:
            # Two writes: a pass that failed between them (the log went away) recorded the
            # deletion but never marked the stream; the retry marks it, with the time the
            # deletion was recorded at (its own, after an outage, disagreed with `history`,
            # and `status --at` in between showed the order not deleted).
            deleted_at = state.last_event_at if state.deleted else None
            if not state.deleted:
                closing = _Pass(OrderRef(info.name, info.namespace, uid), state, now)
                self._record(closing, ob.Deleted(at=now))
                self._commit(closing)
            self._log.mark_deleted(uid, deleted_at or now)
        self.forget(uid, closed=True)


def _scaling_seen(verdict: arbitration.Verdict, at: datetime) -> ob.ScalingSeen:
    return ob.ScalingSeen(
        at=at,
        reason=verdict.reason,
        message=verdict.message,
        taken_by=verdict.taken_by,
        priority_class_name=verdict.priority_class_name,
        replicas=verdict.replicas,
    )
