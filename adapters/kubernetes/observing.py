"""The cached world, read as the core's observations: one function per thing observed.

A pass reads only from the informers' cache (controller-runtime's "read from the cache")
plus the model source, whose answers are cached by the resolver. Nothing here writes;
every reading becomes a frozen `fsm.observations` value that `fsm.decide` judges.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from adapters.kubernetes.background import Background
from adapters.kubernetes.planning import Planning
from adapters.kubernetes.rendering import RenderError, endpoint_url
from adapters.kubernetes.settings import CatalogMode, Settings
from adapters.kubernetes.watching import Obj
from adapters.kubernetes.world import REPLICA_FAILURE, ClusterCache
from adapters.models import (
    HubResolver,
    ModelFound,
    ModelLookup,
    ModelUnavailable,
    catalog_target,
    facts_from_catalog,
    foreign_model_refusal,
    token_problem,
)
from fsm import observations as ob
from fsm import policy
from fsm.decide import STALE_FACTS_NOTE, resolved_now
from fsm.identity import OrderRef
from fsm.reasons import Reason
from fsm.state import OrderState, serving_basis
from fsm.values import ClassOutcome, ClassSpec, ModelOutcome, ModelRef, ModelSource

__all__ = [
    "Observer",
    "WorkloadPods",
    "model_ref_of",
    "old_pods_gone",
    "order_of",
    "rollout_complete",
    "rollout_of",
    "secret_value",
    "workload_pods",
]

# The scheduler says so of a pod whose device claims it cannot satisfy; any other
# reason (CPU, memory, taints) is not the device class's fault.
_CLAIM_WORDS = ("claim",)


def order_of(obj: Obj) -> OrderRef:
    meta = obj["metadata"]
    return OrderRef(meta["name"], meta["namespace"], meta["uid"], int(meta.get("generation", 1)))


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


def secret_value(secret: Obj | None, key: str) -> str | None:
    data = (secret or {}).get("data") or {}
    if key not in data:
        return None
    return base64.b64decode(data[key]).decode("utf-8", "replace")


def _stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class WorkloadPods:
    """What the order's pods say: since when some wait for their device claims, the
    scheduler's message for those pending for anything else, and why a runtime container
    does not start."""

    def __init__(
        self,
        unallocated_since: datetime | None,
        unschedulable: str | None,
        not_starting: str | None = None,
    ) -> None:
        self.unallocated_since = unallocated_since
        self.unschedulable = unschedulable
        self.not_starting = not_starting


# A container waiting for one of these does not start without someone acting; the others
# (ContainerCreating, PodInitializing) are a start under way.
_NOT_STARTING = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
# Their messages are kept where they stay the same from one try to the next; a crash
# loop's ("back-off 40s restarting ...") and a pull's (the registry's answer) change with
# each, and each change would be a new event and a status write.
_STABLE_MESSAGE = frozenset(
    {"InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
)


def _not_starting(pod: Obj) -> str | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        waiting = (status.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason not in _NOT_STARTING:
            continue
        said = f'container "{status.get("name", "")}": '
        if reason in ("ImagePullBackOff", "ErrImagePull"):  # the two take turns
            return f'{said}ImagePullBackOff (image "{status.get("image", "")}")'
        if reason == "CrashLoopBackOff":
            last = ((status.get("lastState") or {}).get("terminated") or {}).get("reason")
            return f"{said}CrashLoopBackOff" + (f" (last exit: {last})" if last else "")
        message = str(waiting.get("message") or "") if reason in _STABLE_MESSAGE else ""
        return f"{said}{reason}" + (f": {message}" if message else "")
    return None


def workload_pods(pods: Sequence[Obj]) -> WorkloadPods:
    waiting: list[datetime] = []
    other: list[str] = []
    failing: list[str] = []
    for pod in pods:
        if (said := _not_starting(pod)) is not None:
            failing.append(said)
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") != "PodScheduled" or cond.get("status") != "False":
                continue
            message = str(cond.get("message") or cond.get("reason") or "unschedulable")
            stamp = (pod.get("metadata") or {}).get("creationTimestamp")
            if any(word in message.lower() for word in _CLAIM_WORDS):
                if stamp:
                    waiting.append(_stamp(stamp))
            else:
                other.append(message)
    return WorkloadPods(
        min(waiting) if waiting else None,
        sorted(other)[0][:500] if other else None,
        sorted(failing)[0][:500] if failing else None,
    )


def old_pods_gone(deployment: Obj) -> bool:
    """The Deployment controller saw the template the Deployment holds, and no pod of an
    older template is left."""
    status = deployment.get("status") or {}
    generation = int((deployment.get("metadata") or {}).get("generation", 0))
    return int(status.get("observedGeneration", 0)) >= generation and int(
        status.get("updatedReplicas", 0)
    ) >= int(status.get("replicas", 0))


def _pods_refused(status: Obj) -> str | None:
    """Why the ReplicaSet cannot create the runtime's pods (the Deployment's ReplicaFailure,
    world.trim_deployment): no pod comes to say anything, and without this the order said
    "0/1 replicas available" — a rollout under way, to wait for — for ever."""
    failure = status.get(REPLICA_FAILURE)
    return f"the runtime's pods cannot be created: {failure}" if failure else None


def rollout_of(deployment: Obj) -> str:
    """Which Deployment at which generation: "uid/generation". The UID's first 8
    characters tell a Deployment made anew (its generation starts again at 1)."""
    meta = deployment.get("metadata") or {}
    return f"{str(meta.get('uid', ''))[:8]}/{int(meta.get('generation', 0))}"


def rollout_complete(deployment: Obj) -> bool:
    """The rollout of the template the Deployment holds is done, as `kubectl rollout
    status` judges it: no older pod left, and every replica updated and available."""
    status = deployment.get("status") or {}
    desired = int((deployment.get("spec") or {}).get("replicas", 1))
    updated = int(status.get("updatedReplicas", 0))
    return (
        old_pods_gone(deployment)
        and updated >= desired >= 1
        and int(status.get("availableReplicas", 0)) >= updated
    )


class Observer:
    """Turns the cache (and the model source) into observations of one order."""

    def __init__(
        self,
        world: ClusterCache,
        hub: HubResolver,
        settings: Callable[[], Settings],
        background: Background,
    ) -> None:
        self._world = world
        self._hub = hub
        self._settings = settings
        self._background = background

    def spec(self, obj: Obj, at: datetime) -> ob.SpecSeen:
        order = order_of(obj)
        spec = obj.get("spec") or {}
        return ob.SpecSeen(
            at=at,
            generation=order.generation,
            model_ref=model_ref_of(spec),
            class_name=spec.get("inferenceServiceClassName"),
            name=order.name,
            namespace=order.namespace,
        )

    def klass(self, order: OrderRef, state: OrderState, at: datetime) -> ob.ClassJudged:
        name = state.class_name
        priority = self._world.priority_classes.names()
        devices = self._world.device_classes.names()
        obj = self._world.classes.get_by_name(None, name, copy_=False) if name else None
        spec: ClassSpec | None = None
        if obj is not None:
            try:
                spec = ClassSpec.model_validate(obj.get("spec") or {})
            except ValueError as exc:
                return ob.ClassJudged(
                    at=at,
                    outcome=ClassOutcome(
                        reason=Reason.CLASS_NOT_READY,
                        message=f"InferenceServiceClass {name!r} cannot be read: {exc}",
                    ),
                )
        outcome = policy.resolve_class(
            name, order.namespace, spec, priority_classes=priority, device_classes=devices
        )
        return ob.ClassJudged(at=at, outcome=outcome)

    def model(self, order: OrderRef, state: OrderState, at: datetime) -> ob.ModelJudged | None:
        """The model's verdict, or None while the hub is being asked (off this worker)."""
        effective, ref = state.policy, state.model_ref
        if effective is None or ref is None:
            return None
        lookup = self._lookup(order, ref)
        if lookup is None:
            return None
        if isinstance(lookup, ModelFound):
            return ob.ModelJudged(at=at, outcome=policy.resolve_model(effective, lookup.facts))
        basis = state.applied_basis
        if (
            lookup.transient
            and basis is not None
            and basis.facts is not None
            and basis.model_ref == ref
            and not resolved_now(state)
        ):
            # An edit that left the model as it was (another class), the source away: the
            # facts its workload in force was resolved from, judged under the policy now.
            # The core keeps resolved facts through an outage only within a generation,
            # so a class edit at that moment demoted a Ready order to Pending.
            judged = policy.resolve_model(effective, basis.facts)
            if judged.ok:
                note = f"{STALE_FACTS_NOTE}: {lookup.message}" if lookup.message else ""
                judged = judged.model_copy(update={"message": note or STALE_FACTS_NOTE})
            return ob.ModelJudged(at=at, outcome=judged)
        return ob.ModelJudged(
            at=at,
            outcome=ModelOutcome(reason=lookup.reason, message=lookup.message),
        )

    def _lookup(self, order: OrderRef, ref: ModelRef) -> ModelLookup | None:
        if ref.src is ModelSource.AI_MODELS:
            if self._settings().catalog.mode is CatalogMode.NONE:
                return ModelUnavailable(
                    Reason.CATALOG_DISABLED,
                    "the ai-models catalog is turned off in the module settings "
                    "(settings.catalog.mode: None); name a HuggingFace model instead",
                )
            refused = foreign_model_refusal(ref, order.namespace)
            if refused is not None:
                return refused
            kind, namespace, name = catalog_target(ref, order.namespace)
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
            secret = self._world.secrets.get_by_name(order.namespace, ref.auth_secret_name)
            if secret is None:
                return ModelUnavailable(
                    Reason.AUTH_SECRET_NOT_FOUND,
                    f"Secret {ref.auth_secret_name!r} named by spec.model.authSecretRef does not "
                    f"exist in namespace {order.namespace}",
                )
            token = secret_value(secret, ref.auth_secret_key)
            if token is None:
                return ModelUnavailable(
                    Reason.AUTH_SECRET_KEY_MISSING,
                    f"Secret {ref.auth_secret_name!r} has no key {ref.auth_secret_key!r}",
                )
            problem = token_problem(token.strip())
            if problem:
                return ModelUnavailable(
                    Reason.AUTH_SECRET_INVALID,
                    f"key {ref.auth_secret_key!r} of Secret {ref.auth_secret_name!r} holds "
                    f"{problem}, so it cannot be sent to the hub as a token (nothing was "
                    "sent): put the token alone under the key; a trailing newline is fine",
                )
        key = ("hub", order.uid)
        asked = (ref.name, token)
        # An answer kept from an earlier lookup is taken either way: once the hub's cache
        # holds it, no pass would take it, and it must never answer a later question (a
        # model edited since: the old model's facts planned for the new spec).
        done, answer = self._background.take(key)
        known = self._hub.peek(ref.name, token=token)
        if known is not None:
            return known
        if done and answer[0] == asked:
            return answer[1]  # type: ignore[no-any-return]
        name = ref.name
        self._background.start(
            key, lambda: (asked, self._hub.resolve(name, token=token)), tenant=order.namespace
        )
        done, answer = self._background.take(key)  # at once when run inline (tests)
        return answer[1] if done and answer[0] == asked else None

    def workload(
        self,
        order: OrderRef,
        state: OrderState,
        at: datetime,
        *,
        grace_seconds: float,
        free_units: Callable[[str], int],
    ) -> ob.WorkloadSeen | None:
        deployment = self._world.deployments.get_by_name(order.namespace, order.name, copy_=False)
        if deployment is None or state.plan_in_force is None:
            return None
        status = deployment.get("status") or {}
        pods = workload_pods(self._world.pods_of(order.uid, order.namespace))
        # Only when the grace may end: reading capacity costs a snapshot.
        free = (
            free_units(state.plan_in_force.device_class)
            if pods.unallocated_since is not None
            else None
        )
        return ob.WorkloadSeen(
            at=at,
            desired=int((deployment.get("spec") or {}).get("replicas", 1)),
            ready=int(status.get("readyReplicas", 0)),
            available=int(status.get("availableReplicas", 0)),
            unallocated_since=pods.unallocated_since,
            grace_seconds=grace_seconds,
            unschedulable=pods.unschedulable,
            not_starting=pods.not_starting or _pods_refused(status),
            free_units=free,
            rollout=rollout_of(deployment),
            rolled_out=rollout_complete(deployment),
        )

    def endpoint(self, order: OrderRef, state: OrderState, at: datetime) -> ob.EndpointSeen | None:
        # Where the workload in force is published: a failed replan leaves its exposure.
        effective = serving_basis(state).policy
        if effective is None or state.plan_in_force is None:
            return None
        try:
            url = endpoint_url(order, effective, self._settings())
        except RenderError:
            return None  # not renderable: the apply tells why (WorkloadApplyFailed)
        return ob.EndpointSeen(at=at, url=url, type=effective.exposure.type)

    @staticmethod
    def capacity(
        state: OrderState, at: datetime, free_units: Callable[[str], int]
    ) -> ob.CapacitySeen | None:
        """What each tried device class offers now (only asked while some are tried)."""
        if not state.tried_device_classes:
            return None
        return ob.CapacitySeen(
            at=at, free_units=tuple((dc, free_units(dc)) for dc in state.tried_device_classes)
        )

    @staticmethod
    def recipe(
        state: OrderState, at: datetime, planning: Planning
    ) -> ob.RecipeUnusable | ob.RecipeEdited | None:
        """The plan's launch recipe, when it is no longer usable and another recipe can
        take over on the same place (none: the apply says why, and the next change of a
        recipe asks again); or when it is, and an edit turned its tool calling on or off
        (the apply renders the recipe as it is now, the plan said it as it was)."""
        plan = state.plan
        if plan is None:
            return None
        why = planning.unusable_recipe(plan.recipe) or planning.keyless_recipe(plan.recipe, state)
        if why is None:
            recipe = planning.recipe(plan.recipe)
            if recipe is None or recipe.tool_calling.enabled == plan.tool_calling_supported:
                return None
            return ob.RecipeEdited(
                at=at, recipe=recipe.name, tool_calling_supported=recipe.tool_calling.enabled
            )
        replacement = planning.replacement_recipe(plan, state)
        if replacement is None:
            return None
        return ob.RecipeUnusable(
            at=at,
            recipe=plan.recipe,
            message=why,
            replacement=replacement.name,
            tool_calling_supported=replacement.tool_calling.enabled,
        )
