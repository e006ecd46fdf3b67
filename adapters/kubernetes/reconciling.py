"""One reconcile pass of one order: observe, decide, append, evolve, act.

The controller's workers call `Reconciler.reconcile(uid)` with nothing but the order's
UID (level-triggered, controller-runtime style). The pass reads the cached world, turns
each reading into an observation, lets the pure core decide which events it makes,
appends them to the order's stream *before* acting, folds them, and then carries out the
core's commands — planning, server-side apply, the token Secret, probing, and the status
write — each idempotent, so a crash between any two steps is repaired by the next pass.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from kubernetes import client

from adapters.kubernetes import arbiter, errors, queueing, tokens
from adapters.kubernetes.manifests import Applier
from adapters.kubernetes.rendering import OrderRef, RenderError, endpoint_url, render_workload
from adapters.kubernetes.settings import CatalogMode, Settings
from adapters.kubernetes.watching import Obj
from adapters.kubernetes.world import ClusterCache
from adapters.kubernetes.writing import Writer
from adapters.models import (
    CatalogReader,
    HubResolver,
    ModelFound,
    ModelLookup,
    ModelUnavailable,
    catalog_target,
    facts_from_catalog,
)
from adapters.probes.http import probe
from adapters.probes.targets import TargetResolver
from fsm import capacity, decide, effects, planner, policy, recipes
from fsm import observations as ob
from fsm.fold import fold
from fsm.reasons import ConditionStatus, Reason
from fsm.state import DEVICE_ALLOCATION_GRACE_SECONDS, OrderState
from fsm.values import (
    ClassOutcome,
    ClassSpec,
    ModelOutcome,
    ModelRef,
    ModelSource,
)
from store import EventLog, StreamKey

__all__ = ["Reconciler", "merge_patch", "model_ref_of"]

log = logging.getLogger(__name__)

SNAPSHOT_EVERY = 20  # events between snapshots of an order's state
_MAX_ROUNDS = 8  # command rounds in one pass; each round is caused by a new event


def model_ref_of(spec: dict[str, Any]) -> ModelRef:
    model = spec.get("model") or {}
    ref = model.get("ref") or {}
    secret = model.get("authSecretRef") or {}
    return ModelRef(
        src=ModelSource(str(model.get("src"))),
        name=str(ref.get("name", "")),
        kind=ref.get("kind"),
        namespace=ref.get("namespace"),
        auth_secret_name=secret.get("name"),
        auth_secret_key=secret.get("key") or "token",
    )


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch turning `old` into `new`: removed fields become null."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            patch[key] = merge_patch(before, value)
        else:
            patch[key] = value
    return patch


def _names(objs: Sequence[Obj]) -> list[str]:
    return [str((o.get("metadata") or {}).get("name")) for o in objs]


def _secret_value(secret: Obj | None, key: str) -> str | None:
    data = (secret or {}).get("data") or {}
    if key not in data:
        return None
    return base64.b64decode(data[key]).decode("utf-8", "replace")


@dataclass
class _Pass:
    """What one pass carries between its steps."""

    uid: str
    key: StreamKey
    order: OrderRef
    state: OrderState
    now: datetime
    model: ModelOutcome | None = None
    requeue: list[float] = field(default_factory=list)


class Reconciler:
    """Reconciles orders by UID against the cache; safe to call from several workers
    for different UIDs (the work queue never hands one UID to two workers)."""

    def __init__(
        self,
        *,
        world: ClusterCache,
        log_store: EventLog,
        epoch: Callable[[], int],
        api: client.ApiClient,
        hub: HubResolver,
        targets: TargetResolver,
        settings: Callable[[], Settings],
        clock: Callable[[], datetime],
        hpa_api_version: str = "autoscaling/v2",
        rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        allocation_grace_seconds: float = DEVICE_ALLOCATION_GRACE_SECONDS,
    ) -> None:
        self._world = world
        # How long pods may wait for devices before the plan's device class counts as
        # tried. Public so a test can shorten it; the verdict is an event, so a change
        # never alters a replay.
        self.allocation_grace_seconds = allocation_grace_seconds
        self._rewrite = rewrite
        self._log = log_store
        self._epoch = epoch
        self._api = api
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._applier = Applier(api)
        self._writer = Writer(api)
        self._hub = hub
        self._catalog = CatalogReader(self._custom)
        self._targets = targets
        self._settings = settings
        self._clock = clock
        self._hpa_api_version = hpa_api_version
        self._states: dict[str, OrderState] = {}
        self._written: dict[str, dict[str, Any]] = {}
        self._arbiter = arbiter.Arbiter(
            api, world, snapshot=self._snapshot, states=lambda: dict(self._states)
        )

    # -- state -----------------------------------------------------------------------------

    def state_of(self, uid: str) -> OrderState:
        """The folded state of an order: memory, else snapshot + tail, else the full stream."""
        if uid in self._states:
            return self._states[uid]
        if self._log.stream(uid) is None:
            return OrderState()
        start = OrderState()
        after = 0
        snap = self._log.load_snapshot(uid)
        if snap is not None:
            try:
                start, after = OrderState.model_validate(snap.state), snap.version
            except ValueError:
                start, after = OrderState(), 0  # a snapshot of an older layout: refold
        tail = [r.event for r in self._log.read(uid, after_version=after)]
        state = fold(tail, start=start)
        self._states[uid] = state
        return state

    def forget(self, uid: str) -> None:
        self._states.pop(uid, None)
        self._written.pop(uid, None)

    def _observe(self, p: _Pass, observation: ob.Observation) -> bool:
        """decide → append → evolve. True when the observation changed something."""
        events = decide.decide(p.state, observation)
        if not events:
            return False
        version = self._log.append(
            p.key, events, expected_version=p.state.version, epoch=self._epoch(), recorded_at=p.now
        )
        before = p.state.version
        previous = p.state
        p.state = fold(events, start=p.state)
        self._states[p.uid] = p.state
        self._tell(p, previous)
        if version // SNAPSHOT_EVERY > before // SNAPSHOT_EVERY:
            self._log.save_snapshot(p.uid, version, p.state.model_dump(mode="json"))
        return True

    def _tell(self, p: _Pass, previous: OrderState) -> None:
        """A Kubernetes Event per judged condition change, so `kubectl describe` tells
        the story; the log, not these Events, is the record (they expire)."""
        old = {c.type: (c.status, c.reason) for c in previous.conditions}
        involved = {
            "apiVersion": "ai.deckhouse.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": p.order.name, "namespace": p.order.namespace, "uid": p.uid},
        }
        for cond in p.state.conditions:
            if cond.status is ConditionStatus.UNKNOWN or old.get(cond.type) == (
                cond.status,
                cond.reason,
            ):
                continue
            kind: Literal["Normal", "Warning"] = (
                "Warning" if cond.status is ConditionStatus.FALSE else "Normal"
            )
            try:
                self._writer.event(
                    involved,
                    str(cond.reason),
                    f"{cond.type}={cond.status}: {cond.message}"[:1000],
                    event_type=kind,
                )
            except errors.APIError as exc:
                log.warning(
                    "could not record an Event for %s/%s: %s", p.order.namespace, p.order.name, exc
                )

    # -- the pass --------------------------------------------------------------------------

    def reconcile(self, uid: str) -> queueing.Done | queueing.RequeueAfter:
        obj = self._world.orders.get(uid)
        now = self._clock()
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self._close(uid, now)
            return queueing.Done()
        meta = obj["metadata"]
        order = OrderRef(meta["name"], meta["namespace"], uid, int(meta.get("generation", 1)))
        p = _Pass(
            uid=uid,
            key=StreamKey(uid, order.namespace, order.name),
            order=order,
            state=self.state_of(uid),
            now=now,
        )
        spec = obj.get("spec") or {}
        ref = model_ref_of(spec)
        self._observe(
            p,
            ob.SpecSeen(
                at=now,
                generation=order.generation,
                model_ref=ref,
                class_name=spec.get("inferenceServiceClassName"),
                name=order.name,
                namespace=order.namespace,
            ),
        )
        self._observe(p, ob.ClassJudged(at=now, outcome=self._judge_class(p)))
        if p.state.policy is not None:
            p.model = self._judge_model(p, ref)
            self._observe(p, ob.ModelJudged(at=now, outcome=p.model))
        self._observe_workload(p)
        scaling = self._arbiter.verdict(p.order, p.state, now)  # priority and growth
        if scaling is not None:
            self._observe(p, scaling)
        self._act(p)
        return queueing.RequeueAfter(min(p.requeue)) if p.requeue else queueing.Done()

    def _close(self, uid: str, now: datetime) -> None:
        state = self.state_of(uid)
        if state.version > 0 and not state.deleted:
            info = self._log.stream(uid)
            if info is not None and info.deleted_at is None:
                p = _Pass(
                    uid=uid,
                    key=info.key,
                    order=OrderRef(info.name, info.namespace, uid),
                    state=state,
                    now=now,
                )
                self._observe(p, ob.Deleted(at=now))
                self._log.mark_deleted(uid, now)
        self.forget(uid)

    # -- judging ---------------------------------------------------------------------------

    def _judge_class(self, p: _Pass) -> ClassOutcome:
        name = p.state.class_name
        priority = _names(self._world.priority_classes.objects())
        devices = _names(self._world.device_classes.objects())
        klass = self._world.classes.get_by_name(None, name) if name else None
        spec: ClassSpec | None = None
        if klass is not None:
            try:
                spec = ClassSpec.model_validate(klass.get("spec") or {})
            except ValueError as exc:
                return ClassOutcome(
                    reason=Reason.CLASS_NOT_READY,
                    message=f"InferenceServiceClass {name!r} cannot be read: {exc}",
                )
        return policy.resolve_class(
            name, p.order.namespace, spec, priority_classes=priority, device_classes=devices
        )

    def _judge_model(self, p: _Pass, ref: ModelRef) -> ModelOutcome:
        lookup = self._lookup(p, ref)
        effective = p.state.policy
        if isinstance(lookup, ModelFound) and effective is not None:
            return policy.resolve_model(effective, lookup.facts)
        return ModelOutcome(reason=lookup.reason, message=lookup.message)  # type: ignore[union-attr]

    def _lookup(self, p: _Pass, ref: ModelRef) -> ModelLookup:
        if ref.src is ModelSource.AI_MODELS:
            if self._settings().catalog.mode is CatalogMode.NONE:
                return ModelUnavailable(
                    Reason.CATALOG_DISABLED,
                    "the ai-models catalog is turned off in the module settings "
                    "(settings.catalog.mode: None); name a HuggingFace model instead",
                )
            kind, namespace, name = catalog_target(ref, p.order.namespace)
            if not self._world.catalog_installed(str(kind)):
                return ModelUnavailable(
                    Reason.CATALOG_DISABLED,
                    f"this cluster does not serve {kind} (the ai-models module is not "
                    "installed); name a HuggingFace model instead",
                )
            obj = self._world.catalog_object(str(kind), namespace, name)
            if obj is None:
                where = f" in namespace {namespace}" if namespace else ""
                return ModelUnavailable(
                    Reason.MODEL_NOT_FOUND, f"{kind} {name!r}{where} does not exist"
                )
            return facts_from_catalog(obj)
        token = None
        if ref.auth_secret_name:
            secret = self._world.secrets.get_by_name(p.order.namespace, ref.auth_secret_name)
            if secret is None:
                return ModelUnavailable(
                    Reason.AUTH_SECRET_NOT_FOUND,
                    f"Secret {ref.auth_secret_name!r} named by spec.model.authSecretRef does not "
                    f"exist in namespace {p.order.namespace}",
                )
            token = _secret_value(secret, ref.auth_secret_key)
            if token is None:
                return ModelUnavailable(
                    Reason.AUTH_SECRET_KEY_MISSING,
                    f"Secret {ref.auth_secret_name!r} has no key {ref.auth_secret_key!r}",
                )
        return self._hub.resolve(ref.name, token=token)

    def _observe_workload(self, p: _Pass) -> None:
        deployment = self._world.deployments.get_by_name(p.order.namespace, p.order.name)
        if deployment is not None and p.state.plan_in_force is not None:
            status = deployment.get("status") or {}
            self._observe(
                p,
                ob.WorkloadSeen(
                    at=p.now,
                    desired=int((deployment.get("spec") or {}).get("replicas", 1)),
                    ready=int(status.get("readyReplicas", 0)),
                    available=int(status.get("availableReplicas", 0)),
                    unallocated_since=self._unallocated_since(p.uid),
                    grace_seconds=self.allocation_grace_seconds,
                ),
            )
        effective = p.state.policy
        if effective is not None and p.state.plan_in_force is not None:
            url = endpoint_url(p.order, effective, self._settings())
            self._observe(p, ob.EndpointSeen(at=p.now, url=url, type=effective.exposure.type))

    def _unallocated_since(self, uid: str) -> datetime | None:
        waiting = []
        for pod in self._world.pods_of(uid):
            for cond in (pod.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                    stamp = (pod.get("metadata") or {}).get("creationTimestamp")
                    if stamp:
                        waiting.append(datetime.fromisoformat(stamp.replace("Z", "+00:00")))
        return min(waiting) if waiting else None

    # -- acting ----------------------------------------------------------------------------

    def _timings(self) -> effects.ProbeTimings:
        interval = float(self._settings().probe.interval_seconds)
        return effects.ProbeTimings(
            pending_seconds=interval, ready_seconds=interval * 3, failing_seconds=interval / 2
        )

    def _act(self, p: _Pass) -> None:
        for _ in range(_MAX_ROUNDS):
            changed = False
            for command in effects.effects(
                p.state, self._timings(), allocation_grace_seconds=self.allocation_grace_seconds
            ):
                changed = self._execute(p, command)
                if changed:
                    break  # the state moved: ask the core again
            if not changed:
                return
        log.warning(
            "order %s/%s still changing after %d rounds",
            p.order.namespace,
            p.order.name,
            _MAX_ROUNDS,
        )
        p.requeue.append(1.0)

    def _execute(self, p: _Pass, command: effects.Command) -> bool:
        if isinstance(command, effects.EnsureAuthSecret):
            name = tokens.ensure_auth_secret(self._core, p.order)
            return self._observe(p, ob.AuthSecretSeen(at=p.now, name=name))
        if isinstance(command, effects.RequestPlan):
            return self._observe(p, ob.PlanJudged(at=p.now, outcome=self._plan(p, command)))
        if isinstance(command, effects.ApplyWorkload):
            if command.reclaims:  # the plan's place needs these lower-priority claims freed
                self._arbiter.reclaim(p.order, p.state, command.reclaims)
            return self._observe(p, self._apply(p, command))
        if isinstance(command, effects.ScheduleProbe):
            return self._probe(p, command.after_seconds)
        if isinstance(command, effects.Recheck):
            p.requeue.append(command.after_seconds)
            return False
        if isinstance(command, effects.PublishStatus):
            self._publish(p, dict(command.status))
        return False

    def _plan(self, p: _Pass, command: effects.RequestPlan) -> Any:
        effective, model = p.state.policy, p.state.model
        assert effective is not None and model is not None  # the core asks only then
        snapshot = self._snapshot(p.uid)
        parsed, problems = recipes.parse_recipes(self._world.recipes.objects())
        for problem in problems:
            log.warning("launch recipe skipped: %s", problem)
        request = planner.PlanRequest.for_order(
            effective,
            ModelOutcome(
                reason=model.reason,
                message=model.message,
                facts=model.facts,
                endpoint_type=model.endpoint_type,
            ),
            order_uid=p.uid,
            held=command.plan_in_force,
            tried_device_classes=command.excluded_device_classes,
        )
        return planner.plan(request, snapshot, parsed)

    def _snapshot(self, uid: str) -> capacity.Snapshot:
        """The capacity as order `uid` sees it: claims, other orders' planned places, and
        each holder's priority (what may be reclaimed for whom)."""
        holders = {
            other: prio
            for other, state in self._states.items()
            if state.policy is not None
            and (prio := self._priority_value(state.policy.constraints.priority_class_name))
            is not None
        }
        claims = self._world.resource_claims.objects()
        return capacity.parse_snapshot(
            self._world.device_classes.objects(),
            self._world.resource_slices.objects(),
            [*claims, *self._reservations(uid, claims)],
            priority_classes=self._world.priority_classes.objects(),
            holder_priorities=holders,
        )

    def _reservations(self, uid: str, claims: Sequence[Obj]) -> list[Obj]:
        """Places other orders were planned onto but hold no allocated claim for yet.

        Two orders planned in the same moment would otherwise both be given the one free
        device; the planner sees a plan's place as taken from the plan on, as a
        claim-shaped record (the shape `capacity.parse_snapshot` reads).
        """
        holding = {
            (c.get("metadata") or {}).get("labels", {}).get(capacity.ORDER_UID_LABEL)
            for c in claims
            if ((c.get("status") or {}).get("allocation") or {}).get("devices")
        }
        records = []
        for other, state in self._states.items():
            plan = state.plan
            if other == uid or other in holding or state.deleted or plan is None:
                continue
            if state.workload is not None and state.workload.desired_replicas == 0:
                continue  # scaled to zero for a higher-priority order: it holds no place
            results = []
            for device in plan.devices:
                driver, pool, name = device.split("/", 2)
                results.append({"request": "gpu", "driver": driver, "pool": pool, "device": name})
            labels = {capacity.ORDER_UID_LABEL: other}
            if plan.share_percent is not None:
                labels[capacity.SHARE_PERCENT_LABEL] = str(plan.share_percent)
            records.append(
                {
                    "metadata": {
                        "namespace": state.namespace,
                        "name": f"{state.name}-planned",
                        "labels": labels,
                    },
                    "status": {"allocation": {"devices": {"results": results}}},
                }
            )
        return records

    def _priority_value(self, name: str | None) -> int | None:
        objs = self._world.priority_classes.objects()
        for obj in objs:
            if name is not None and (obj.get("metadata") or {}).get("name") == name:
                return int(obj.get("value", 0))
        if name is None:
            return next((int(o.get("value", 0)) for o in objs if o.get("globalDefault")), 0)
        return None

    def _apply(
        self, p: _Pass, command: effects.ApplyWorkload
    ) -> ob.ApplySucceeded | ob.ApplyFailed:
        parsed, _ = recipes.parse_recipes(self._world.recipes.objects())
        recipe = next((r for r in parsed if r.name == command.plan.recipe), None)
        if recipe is None:
            return ob.ApplyFailed(
                at=p.now, message=f"launch recipe {command.plan.recipe!r} is gone"
            )
        try:
            docs = render_workload(
                p.order,
                command.plan,
                recipe,
                command.policy,
                command.model_ref,
                settings=self._settings(),
                facts=command.facts,
                auth_secret=command.auth_secret_name,
                hpa_api_version=self._hpa_api_version,
            )
            for doc in docs:
                self._applier.apply(self._rewrite(doc) if self._rewrite else doc)
        except (RenderError, client.ApiException) as exc:
            message = getattr(exc, "body", None) or str(exc)
            return ob.ApplyFailed(at=p.now, message=str(message)[:500])
        return ob.ApplySucceeded(at=p.now, plan=command.plan)

    def _probe(self, p: _Pass, after: float) -> bool:
        last = p.state.last_probe_at
        if last is not None:
            wait = after - (p.now - last).total_seconds()
            if wait > 0:
                p.requeue.append(wait)
                return False
        p.requeue.append(after)
        url = self._targets.resolve(p.order, self._world.pods_of(p.uid))
        if url is None:
            return False  # no Ready pod to probe yet: the workload's change will wake us
        token = None
        if p.state.auth_secret_name:
            secret = self._world.secrets.get_by_name(p.order.namespace, p.state.auth_secret_name)
            token = _secret_value(secret, "token")
        answer = probe(url, token, timeout=float(self._settings().probe.timeout_seconds))
        return self._observe(
            p,
            ob.ProbeResult(
                at=p.now, ok=answer.ok, status_code=answer.status_code, error=answer.error
            ),
        )

    def _publish(self, p: _Pass, status: dict[str, Any]) -> None:
        if self._written.get(p.uid) == status:
            return
        current = self._world.orders.get(p.uid)
        if current is not None and current.get("status") == status:
            self._written[p.uid] = status
            return
        old = (current or {}).get("status") or {}
        self._custom.patch_namespaced_custom_object_status(
            "ai.deckhouse.io",
            "v1alpha1",
            p.order.namespace,
            "inferenceservices",
            p.order.name,
            {"status": merge_patch(old, status)},
        )
        self._written[p.uid] = status
        self._log.record_projection(p.uid, p.state.version, status)
