"""The controller's cached view of the cluster: one informer per kind, with indexes.

A reconcile pass reads only from here (controller-runtime's "read from the cache, write
through the client"); `affected_orders` maps a change of any kind to the order UIDs whose
decisions it can change, so exactly those are re-evaluated.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes.client import ApiClient

from adapters.kubernetes import kinds
from adapters.kubernetes.certificates import DATA_DIGESTS, SOURCE_ANNOTATION, data_digests
from adapters.kubernetes.global_settings import GLOBAL_NAME
from adapters.kubernetes.rendering import AUTH_SECRET_KEY, UID_LABEL, labels
from adapters.kubernetes.rest import Resource
from adapters.kubernetes.secret_lookup import NamedSecrets, own_secret
from adapters.kubernetes.settings import MODULE_NAME
from adapters.kubernetes.watching import RESYNC, Informer, Obj, Timeouts, by_label
from fsm.identity import OrderRef
from fsm.placement.arbitration import TAKEN_ANNOTATION

__all__ = ["SETTINGS_SOURCES", "ClusterCache"]

BY_CLASS = "class"
BY_SECRET = "secret"
BY_CATALOG = "catalog"
BY_ORDER = "order"
# The ModuleConfigs whose settings the controller reads; any other module's is no news.
SETTINGS_SOURCES = frozenset({MODULE_NAME, GLOBAL_NAME})
BY_UNBOUND = "unbound"  # pods: the order UID of a live pod not yet on a node
BY_TAKEN = "taken"  # Deployments: the order UID of one whose replicas were taken


def _spec(obj: Obj) -> dict[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _order_class(obj: Obj) -> list[str]:
    name = _spec(obj).get("inferenceServiceClassName")
    return [str(name)] if name else []


def _order_secrets(obj: Obj) -> list[str]:
    """`ns/name` of the Secrets an order reads: the user's HF Secret and its own token."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    keys = [f"{namespace}/{name}-auth"]
    ref = (_spec(obj).get("model") or {}).get("authSecretRef") or {}
    if ref.get("name"):
        keys.append(f"{namespace}/{ref['name']}")
    return keys


def _order_catalog(obj: Obj) -> list[str]:
    model = _spec(obj).get("model") or {}
    ref = model.get("ref") or {}
    if model.get("src") != "ai-models":
        return []
    if ref.get("kind") == "ClusterModel":
        return [f"ClusterModel//{ref.get('name')}"]
    namespace = ref.get("namespace") or (obj.get("metadata") or {}).get("namespace")
    return [f"Model/{namespace}/{ref.get('name')}"]


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _owner(obj: Obj) -> list[str]:
    uid = (_meta(obj).get("labels") or {}).get(UID_LABEL)
    return [str(uid)] if uid else []


_ORDER_GROUP = "ai.deckhouse.io/"


def _orders_of(obj: Obj) -> list[str]:
    """The orders a change of one of their children is news to: the order its UID label
    names, and the order that controls it. They differ when someone relabels the child
    (to another order's UID, say): routed by the label alone, the event woke only the
    order named now, and the owner repaired its child at the next resync, minutes later
    (the informers select on the label's presence, so the edited child is still seen)."""
    found = _owner(obj)
    for ref in _meta(obj).get("ownerReferences") or ():
        if (
            isinstance(ref, dict)
            and ref.get("controller")
            and ref.get("kind") == "InferenceService"
            and str(ref.get("apiVersion") or "").startswith(_ORDER_GROUP)
            and ref.get("uid")
            and str(ref["uid"]) not in found
        ):
            found.append(str(ref["uid"]))
    return found


def _unbound_pod(obj: Obj) -> list[str]:
    """A live pod the scheduler has not placed: it may wait for devices (arbiter.py)."""
    if _meta(obj).get("deletionTimestamp") or _spec(obj).get("nodeName"):
        return []
    return _owner(obj)


# A shape says which fields of an object the cache keeps: a key maps to True (the whole
# value) or to the shape of its value (of each item, for a list). What no reader needs is
# dropped before an object is stored: with one cached copy of each child per order (and a
# pod and a claim per replica), the server's defaults and statuses nobody reads were much
# of the controller's memory per order.
Shape = Mapping[str, "Shape | bool"]
_TYPED: Shape = {"apiVersion": True, "kind": True, "metadata": True}

# What the controller reads of a pod (observing.py, arbiter.py, probes/targets.py): its
# metadata, where it runs and at what priority, and what its conditions say. The rest
# (containers, volumes, container statuses) was most of a pod's size in the cache, one pod
# per replica; and without their times, the conditions of every Ready pod are one list
# the cache holds once (compacting.py).
POD_SHAPE: Shape = {
    **_TYPED,
    "spec": {"nodeName": True, "priority": True},
    "status": {
        "conditions": dict.fromkeys(("type", "status", "reason", "message"), True),
        "phase": True,
        # Why a container does not start (observing.py): a crash loop, an image not pulled.
        "containerStatuses": {
            "name": True,
            "image": True,
            "state": {"waiting": {"reason": True, "message": True}},
            "lastState": {"terminated": {"reason": True}},
        },
    },
}
# A Deployment: every field rendering.py sets, which drift detection compares with what it
# renders (converging.covers), the replicas and the record of replicas taken (arbiter.py),
# and the rollout's counters (observing.py, acting.py `_rolled_out`). Not the pod
# template's server defaults (dnsPolicy, terminationMessagePath, ...) nor the status's
# conditions. tests/adapters/kubernetes/test_cache_memory.py renders every variant and
# fails if a field it sets is not kept here.
_CONTAINER: Shape = dict.fromkeys(
    ("name", "image", "args", "env", "ports", "resources", "readinessProbe", "volumeMounts"),
    True,
)
DEPLOYMENT_SHAPE: Shape = {
    **_TYPED,
    "spec": {
        "replicas": True,
        "selector": True,
        "strategy": True,
        "revisionHistoryLimit": True,
        "template": {
            "metadata": True,
            "spec": {
                "containers": _CONTAINER,
                "resourceClaims": True,
                "volumes": True,
                "enableServiceLinks": True,
                "automountServiceAccountToken": True,
                "priorityClassName": True,
            },
        },
    },
    "status": dict.fromkeys(
        ("observedGeneration", "replicas", "updatedReplicas", "readyReplicas", "availableReplicas"),
        True,
    ),
}
# A ResourceClaim (any workload's: they are capacity): who holds it (metadata), the devices
# it was allocated and its sharing (fsm/placement/inventory.py `_allocation`). Not its
# requests, node selector or reservations.
CLAIM_SHAPE: Shape = {
    **_TYPED,
    "spec": {"devices": {"config": True}},
    "status": {"allocation": {"devices": {"results": True}}},
}
# The other children: everything but the status, which nothing reads (the Service's and
# Ingress's load balancer, the HPA's metrics), and drift detection compares only the spec.
SPEC_SHAPE: Shape = {**_TYPED, "spec": True}


# A labelled Secret, as the cache keeps it. A tenant may label any Secret it creates,
# with a megabyte of data or ten thousand labels: kept whole, 200 labelled Secrets of
# 930 KiB took the controller from 148 to 335 MiB, and 40 of 10,000 labels to 267 MiB,
# on the way past its memory limit, for every tenant at once. Kept: who it is and whose
# (its name, the labels and annotation the controller sets, its one controller), and of
# the controller's own Secrets (secret_lookup.own_secret) a token of a token's size and
# the digest of each data key (certificates.same compares copies by them).
_SECRET_METADATA = (
    "name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
)  # fmt: skip
_SECRET_LABELS = frozenset(labels(OrderRef(name="", namespace="", uid="")))
_SECRET_ANNOTATIONS = frozenset({SOURCE_ANNOTATION})
_OWNER_FIELDS = ("apiVersion", "kind", "name", "uid", "controller")
_LONGEST_TOKEN = 1024  # base64: the controller's own are 44 characters


def trim_secret(obj: Obj) -> None:
    meta = _meta(obj)
    kept_meta = {key: meta[key] for key in _SECRET_METADATA if key in meta}
    kept_meta["labels"] = {
        key: value for key, value in (meta.get("labels") or {}).items() if key in _SECRET_LABELS
    }
    annotations = meta.get("annotations") or {}
    kept_meta["annotations"] = {k: v for k, v in annotations.items() if k in _SECRET_ANNOTATIONS}
    controllers = [ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")]
    kept_meta["ownerReferences"] = [
        {key: ref[key] for key in _OWNER_FIELDS if key in ref} for ref in controllers[:1]
    ]
    kept: Obj = {key: obj[key] for key in ("apiVersion", "kind", "type", "immutable") if key in obj}
    kept["metadata"] = kept_meta
    if own_secret(obj):
        token = (obj.get("data") or {}).get(AUTH_SECRET_KEY)
        if isinstance(token, str) and len(token) <= _LONGEST_TOKEN:
            kept["data"] = {AUTH_SECRET_KEY: token}
        kept[DATA_DIGESTS] = data_digests(obj)
    obj.clear()
    obj.update(kept)


def shaped(value: Any, shape: Shape | bool) -> Any:
    """`value` with only what `shape` keeps."""
    if shape is True or not isinstance(shape, Mapping):
        return value
    if isinstance(value, list):
        return [shaped(item, shape) for item in value]
    if not isinstance(value, dict):
        return value
    return {key: shaped(item, shape[key]) for key, item in value.items() if key in shape}


def trimming(shape: Shape) -> Callable[[Obj], None]:
    """An informer's `trim`: keeps, in place, what `shape` keeps."""

    def trim(obj: Obj) -> None:
        kept = shaped(obj, shape)
        obj.clear()
        obj.update(kept)

    return trim


# Kept of a Deployment's conditions: its ReplicaFailure's message (a pod its ReplicaSet
# cannot create: a LimitRange, a ResourceQuota, an admission webhook), the pod's name
# (new at every try) taken out. The others change at every step of a rollout, and are
# not kept (each change woke the order for nothing).
REPLICA_FAILURE = "replicaFailure"
_POD_REFUSED = re.compile(r'^pods "[^"]*" is ')


def trim_deployment(obj: Obj) -> None:
    """`DEPLOYMENT_SHAPE`, and the ReplicaFailure's message without the pod's name."""
    failure = next(
        (
            str(c.get("message") or c.get("reason") or "FailedCreate")
            for c in (obj.get("status") or {}).get("conditions") or ()
            if isinstance(c, dict)
            and c.get("type") == "ReplicaFailure"
            and c.get("status") == "True"
        ),
        None,
    )
    _trim_deployment_shape(obj)
    if failure is not None:
        obj.setdefault("status", {})[REPLICA_FAILURE] = _POD_REFUSED.sub("a pod is ", failure)[:500]


_trim_deployment_shape = trimming(DEPLOYMENT_SHAPE)  # made once: this runs on every event


def _taken_from(obj: Obj) -> list[str]:
    """A Deployment that gave replicas to a higher priority: they come back on capacity."""
    return _owner(obj) if (_meta(obj).get("annotations") or {}).get(TAKEN_ANNOTATION) else []


class ClusterCache:
    """Informers for every kind the controller reads, started and stopped together."""

    def __init__(
        self,
        api: ApiClient,
        *,
        timeouts: Timeouts | None = None,
        hpa_api_version: str = "autoscaling/v2",
        discovery_period: float = 30.0,
        secret_refresh: float = 30.0,
    ) -> None:
        # `namespace/name` of the CustomCertificate Secrets in use (certificates.sources);
        # the controller sets it. Read by name like the Secrets orders name, and a change
        # of one reaches every order (any External one may copy it).
        self.certificate_sources: Callable[[], Iterable[str]] = lambda: ()

        def informer(
            resource: Resource, optional: bool = False, resync: float | None = None, **kwargs: Any
        ) -> Informer:
            # Kinds of other modules and of DRA may be absent: empty until they appear.
            return Informer(
                api,
                resource,
                timeouts=timeouts,
                resync_period=resync,
                optional=optional or resource in kinds.OPTIONAL,
                absent_poll=discovery_period,
                **kwargs,
            )

        # Only the orders resync: each order's pass compares everything it depends on,
        # so one pass per order per period is the whole safety net. Every kind resyncing
        # woke each order once per kind (with 500 orders, thousands of passes a period).
        self.orders = informer(
            kinds.INFERENCE_SERVICES,
            resync=300.0,
            indexers={
                BY_CLASS: _order_class,
                BY_SECRET: _order_secrets,
                BY_CATALOG: _order_catalog,
            },
        )
        self.classes = informer(kinds.INFERENCE_SERVICE_CLASSES)
        self.recipes = informer(kinds.LAUNCH_RECIPES)
        self.models = informer(kinds.MODELS)
        self.cluster_models = informer(kinds.CLUSTER_MODELS)
        self.module_configs = informer(kinds.MODULE_CONFIGS)
        self.device_classes = informer(kinds.DEVICE_CLASSES)
        self.resource_slices = informer(kinds.RESOURCE_SLICES)
        self.resource_claims = informer(kinds.RESOURCE_CLAIMS, trim=trimming(CLAIM_SHAPE))
        self.priority_classes = informer(kinds.PRIORITY_CLASSES)
        # Children carry the order's UID label; the selector keeps the cache to ours.
        self.deployments = informer(
            kinds.DEPLOYMENTS,
            label_selector=UID_LABEL,
            indexers={BY_ORDER: by_label(UID_LABEL), BY_TAKEN: _taken_from},
            trim=trim_deployment,
        )
        self.pods = informer(
            kinds.PODS,
            label_selector=UID_LABEL,
            indexers={BY_ORDER: by_label(UID_LABEL), BY_UNBOUND: _unbound_pod},
            trim=trimming(POD_SHAPE),
        )
        # The rest of what an order owns: compared with what it should have on every pass
        # (drift is repaired, what is no longer rendered is pruned).
        self.services = informer(
            kinds.SERVICES,
            label_selector=UID_LABEL,
            indexers={BY_ORDER: by_label(UID_LABEL)},
            trim=trimming(SPEC_SHAPE),
        )
        self.claim_templates = informer(
            kinds.RESOURCE_CLAIM_TEMPLATES,
            label_selector=UID_LABEL,
            indexers={BY_ORDER: by_label(UID_LABEL)},
            trim=trimming(SPEC_SHAPE),
        )
        self.ingresses = informer(
            kinds.INGRESSES,
            label_selector=UID_LABEL,
            indexers={BY_ORDER: by_label(UID_LABEL)},
            trim=trimming(SPEC_SHAPE),
        )
        # A server without this HPA version must not hold the start: the orders that need
        # one say why on their status (the apply fails), the others are served.
        self.autoscalers = informer(
            kinds.autoscalers(hpa_api_version),
            optional=True,
            label_selector=UID_LABEL,
            indexers={BY_ORDER: by_label(UID_LABEL)},
            trim=trimming(SPEC_SHAPE),
        )
        self.token_secrets = informer(
            kinds.SECRETS,
            label_selector=UID_LABEL,
            indexers={BY_ORDER: by_label(UID_LABEL)},
            trim=trim_secret,
        )
        # Never every Secret of the cluster: our token Secrets and certificate copies by
        # label (above), and the Secrets orders and the https settings name, by name
        # (secret_lookup.py).
        self.secrets = NamedSecrets(
            api,
            own=self.token_secrets,
            named=lambda: [*self.orders.index_values(BY_SECRET), *self.certificate_sources()],
            refresh=secret_refresh,
        )

    @property
    def informers(self) -> list[Informer]:
        return [value for value in vars(self).values() if isinstance(value, Informer)]

    def start(self) -> None:
        for inf in self.informers:
            inf.start()
        self.secrets.start()

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(inf.wait_synced(max(0.0, deadline - time.monotonic())) for inf in self.informers)

    def unsynced(self) -> list[str]:
        """The informers still waiting for their first LIST (for the error message)."""
        return [inf.name for inf in self.informers if not inf.has_synced()]

    def stop(self) -> None:
        self.secrets.stop()
        for inf in self.informers:
            inf.stop()

    # -- reading -------------------------------------------------------------------------

    def module_settings(self) -> dict[str, Any] | None:
        return self.module_configs.get_by_name(None, MODULE_NAME)

    def global_settings(self) -> dict[str, Any] | None:
        """The platform's `ModuleConfig global` (fallbacks of the exposure settings)."""
        return self.module_configs.get_by_name(None, GLOBAL_NAME)

    def catalog_installed(self, kind: str) -> bool:
        """Whether the cluster serves this ai-models kind (its CRD is installed)."""
        informer = self.cluster_models if kind == "ClusterModel" else self.models
        return informer.present is not False

    def catalog_object(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        if kind == "ClusterModel":
            return self.cluster_models.get_by_name(None, name)
        return self.models.get_by_name(namespace, name)

    def pods_of(self, uid: str, namespace: str) -> list[Obj]:
        """The order's pods: the cached objects themselves, to read only. Only its own
        namespace's: a pod elsewhere carrying its label (a copy) is not its pod."""
        return _in(namespace, self.pods.by_index(BY_ORDER, uid, copy_=False))

    @property
    def owned_kinds(self) -> list[Informer]:
        """The informers of every kind an order's workload is made of."""
        return [
            self.claim_templates,
            self.services,
            self.deployments,
            self.autoscalers,
            self.ingresses,
            self.token_secrets,
        ]

    def children_of(self, uid: str, namespace: str, *, copy_: bool = True) -> list[Obj]:
        """Every object the order owns (by its UID label, in its namespace), of every kind
        it renders; `copy_=False`: the cached objects themselves, to read only. A copy of
        a child in another namespace keeps the label: counted, a same-named one there
        hid the order's own, and a serving order went Pending, its own Service said to be
        someone else's."""
        return [
            obj
            for inf in self.owned_kinds
            for obj in _in(namespace, inf.by_index(BY_ORDER, uid, copy_=copy_))
        ]

    # -- what a change affects -----------------------------------------------------------

    def capacity_watchers(self, waiting: Callable[[Iterable[str]], Iterable[str]]) -> set[str]:
        """The orders a capacity change can affect: those `waiting` names, told which
        orders have a pod the scheduler has not placed (their states say whether a
        capacity change is news to them), and those whose replicas a higher priority
        took."""
        found = set(waiting(self.pods.index_values(BY_UNBOUND)))
        found.update(self.deployments.index_values(BY_TAKEN))
        return found

    def watch_changes(
        self,
        enqueue: Callable[[Iterable[str]], None],
        waiting_for_capacity: Callable[[Iterable[str]], Iterable[str]] | None = None,
        *,
        status_echo: Callable[[Obj], bool] | None = None,
    ) -> None:
        """Route every change of every kind to the orders it can affect.

        `status_echo`: is this order event only our own status write coming back? Such
        an event wakes nothing: the pass that wrote it knew all it says, so the pass it
        woke found nothing to do. (controller-runtime's GenerationChangedPredicate
        spares those too, but also label, annotation and someone else's status
        changes; those come as other versions, and still wake the order.)

        `waiting_for_capacity`: the UIDs of the orders whose decisions a capacity change
        can alter (the reconciler knows them from their states). A ResourceSlice or
        ResourceClaim event then wakes those and the claim's own order, not every order:
        with N orders each making a claim, waking all was O(N²) passes. Without it, every
        order is woken.
        """

        def orders_where(index: str, value: str) -> list[str]:
            return [str(_meta(o).get("uid")) for o in self.orders.by_index(index, value)]

        def every_order() -> list[str]:
            return self.orders.uids()

        def capacity(obj: Obj) -> Iterable[str]:
            if waiting_for_capacity is None:
                return every_order()
            return self.capacity_watchers(waiting_for_capacity) | set(_owner(obj))

        def route(fn: Callable[[Obj], Iterable[str]]) -> Callable[[str, Obj], None]:
            def handler(_event: str, obj: Obj) -> None:
                enqueue(fn(obj))

            return handler

        def order_changed(event: str, obj: Obj) -> None:
            # A resync is the safety net, never an echo: the same version handed back
            # again would match an echo noted too late for its own event, and be dropped.
            if event in ("DELETED", RESYNC) or status_echo is None or not status_echo(obj):
                enqueue([str(_meta(obj).get("uid"))])

        self.orders.add_handler(order_changed)
        self.classes.add_handler(route(lambda o: orders_where(BY_CLASS, str(_meta(o).get("name")))))

        def secret_readers(obj: Obj) -> list[str]:
            key = f"{_meta(obj).get('namespace')}/{_meta(obj).get('name')}"
            if key in set(self.certificate_sources()):
                return every_order()
            return orders_where(BY_SECRET, key)

        self.secrets.add_handler(route(secret_readers))
        self.models.add_handler(
            route(
                lambda o: orders_where(
                    BY_CATALOG, f"Model/{_meta(o).get('namespace')}/{_meta(o).get('name')}"
                )
            )
        )
        self.cluster_models.add_handler(
            route(lambda o: orders_where(BY_CATALOG, f"ClusterModel//{_meta(o).get('name')}"))
        )
        for child in (self.pods, *self.owned_kinds):
            child.add_handler(route(_orders_of))
        # The module's settings and the platform's global ones can change any order's
        # decisions; another module's ModuleConfig is no news.
        self.module_configs.add_handler(
            route(lambda o: every_order() if _meta(o).get("name") in SETTINGS_SOURCES else [])
        )
        self.resource_slices.add_handler(route(capacity))
        self.resource_claims.add_handler(route(capacity))
        # Device classes (a class's policy names them), recipes and priorities can change
        # any order's decisions; they change rarely.
        for informer in (
            self.device_classes,
            self.recipes,
            self.priority_classes,
        ):
            informer.add_handler(route(lambda _o: every_order()))


def _in(namespace: str, objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if (o.get("metadata") or {}).get("namespace") == namespace]
