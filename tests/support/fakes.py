"""Fakes of the pass's seams, so most pass logic is tested in milliseconds, no server.

- `world()`: the controller's real `ClusterCache` with informers that are never started;
  tests put objects in with `put`/`drop`, which go through the informers' own cache code
  (as watch events would).
- `FakeWriter`: the one Writer's interface over that cache, as an API server would answer
  (a UID and a resourceVersion on every write, 409 on create of an existing name, a
  failed UID precondition on a recreated object), counting every write by verb and kind.
  Its live reads show which of its field managers applied or created each object
  (managedFields, without field sets), and the data of the Secrets it created: the
  cache, as the real one, never holds the first, nor the second of a Secret that no
  order controls (world.trim_secret).
- `FakeHub`: a model source answering from a table.
"""

from __future__ import annotations

import copy
import itertools
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from adapters.kubernetes import errors
from adapters.kubernetes.rest import Resource
from adapters.kubernetes.watching import Informer, Obj
from adapters.kubernetes.world import ClusterCache
from adapters.kubernetes.writing import FIELD_MANAGER
from adapters.models import ModelFound, ModelUnavailable
from fsm.reasons import Reason
from fsm.values import ModelFacts

__all__ = ["FakeHub", "FakeWriter", "delete", "drop", "put", "world"]

_RV = itertools.count(1000)


def world() -> ClusterCache:
    cache = ClusterCache(None)  # type: ignore[arg-type]  # informers are never started
    cache.secrets.read = lambda _namespace, _name: None  # no server: what was not put is absent
    return cache


def informer_for(cache: ClusterCache, kind: str, labelled: bool) -> Informer:
    by_kind = {
        "InferenceService": cache.orders,
        "InferenceServiceClass": cache.classes,
        "LaunchRecipe": cache.recipes,
        "DeviceClass": cache.device_classes,
        "ResourceSlice": cache.resource_slices,
        "ResourceClaim": cache.resource_claims,
        "PriorityClass": cache.priority_classes,
        "Deployment": cache.deployments,
        "Pod": cache.pods,
        "Service": cache.services,
        "ResourceClaimTemplate": cache.claim_templates,
        "Ingress": cache.ingresses,
        "HorizontalPodAutoscaler": cache.autoscalers,
        "Model": cache.models,
        "ClusterModel": cache.cluster_models,
    }
    if kind == "Secret":
        return cache.token_secrets if labelled else cache.secrets
    return by_kind[kind]


def put(cache: ClusterCache, obj: Mapping[str, Any]) -> Obj:
    """Store `obj` as the API server would (a UID, a new resourceVersion) and return it."""
    stored: Obj = copy.deepcopy(dict(obj))
    meta = stored.setdefault("metadata", {})
    meta.setdefault("uid", str(uuid.uuid4()))
    meta.setdefault("generation", 1)
    meta["resourceVersion"] = str(next(_RV))
    labelled = "ai.deckhouse.io/inference-service-uid" in (meta.get("labels") or {})
    informer_for(cache, str(stored["kind"]), labelled)._apply("MODIFIED", stored)
    if stored["kind"] == "Secret" and labelled:
        cache.secrets._apply("MODIFIED", copy.deepcopy(stored))
    return copy.deepcopy(stored)


def drop(cache: ClusterCache, obj: Mapping[str, Any]) -> None:
    labelled = "ai.deckhouse.io/inference-service-uid" in (obj["metadata"].get("labels") or {})
    informer_for(cache, str(obj["kind"]), labelled)._apply("DELETED", copy.deepcopy(dict(obj)))
    if obj["kind"] == "Secret" and labelled:
        cache.secrets._apply("DELETED", copy.deepcopy(dict(obj)))


def delete(cache: ClusterCache, obj: Mapping[str, Any]) -> None:
    """Delete `obj` as the API server would: its DELETED event carries a new
    resourceVersion, so what is parsed per version of a kind (the capacity) is parsed
    again. (`drop` replays the object's own version.)"""
    gone = copy.deepcopy(dict(obj))
    gone["metadata"]["resourceVersion"] = str(next(_RV))
    drop(cache, gone)


def _merge(live: Any, desired: Any) -> Any:
    """Server-side apply, roughly: our fields win, fields others set stay."""
    if isinstance(live, dict) and isinstance(desired, Mapping):
        out = dict(live)
        for key, value in desired.items():
            out[key] = _merge(live.get(key), value)
        return out
    return copy.deepcopy(desired)


def _merge_patch(live: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386): maps merged, a null removes the key."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(live) if isinstance(live, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


class FakeWriter:
    field_manager = FIELD_MANAGER  # as the Writer's

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        # By object UID: the managedFields entries of this writer's own writes, and the
        # data of the Secrets it created.
        self.managed: dict[str, list[dict[str, str]]] = {}
        self.secret_data: dict[str, dict[str, Any]] = {}
        self.calls: Counter[tuple[str, str]] = Counter()  # (verb, kind)
        self.events: list[tuple[str, str]] = []  # (reason, message)
        self.event_types: list[tuple[str, str]] = []  # (reason, Normal or Warning)
        self.writes = 0
        self.reads: Counter[str] = Counter()  # live GETs, by kind: what the cache did not spare
        # What each status write was decided from (`basis`): the order as cached.
        self.status_bases: list[dict[str, Any] | None] = []
        # Kinds whose applies and creates the server refuses (a quota, a webhook, a 5xx).
        self.refusing: dict[str, errors.APIError] = {}

    def _refuse(self, kind: str) -> None:
        if kind in self.refusing:
            raise self.refusing[kind]

    def _count(self, verb: str, kind: str) -> None:
        self.calls[(verb, kind)] += 1
        self.writes += 1

    def _find(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        for labelled in (True, False):
            obj = informer_for(self.cache, kind, labelled).get_by_name(namespace, name)
            if obj is not None:
                return obj
        return None

    def resource_for(self, api_version: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        return Resource(group, version, kind.lower() + "s", kind)

    def apply(
        self,
        obj: Mapping[str, Any],
        *,
        resource: Resource | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        meta = obj["metadata"]
        self._refuse(str(obj["kind"]))
        self._count("apply", str(obj["kind"]))
        live = self._find(str(obj["kind"]), meta.get("namespace"), meta["name"])
        retyped = live is not None and live.get("spec", {}).get("type") == "ExternalName"
        if retyped and (obj.get("spec") or {}).get("type") == "ClusterIP":
            raise errors.APIInvalidError("spec.externalName: must be empty", status=422)
        stored = _merge(live or {}, obj)
        if live is not None:
            stored["metadata"]["uid"] = live["metadata"]["uid"]
        written = put(self.cache, stored)
        self._managed_by(written, field_manager or self.field_manager, "Apply")
        return written

    def _managed_by(self, obj: Obj, manager: str, operation: str) -> None:
        entries = self.managed.setdefault(str(obj["metadata"]["uid"]), [])
        entry = {"manager": manager, "operation": operation}
        if entry not in entries:
            entries.append(entry)

    def refused(self, obj: Mapping[str, Any]) -> errors.APIInvalidError | None:
        refusal = self.refusing.get(str(obj["kind"]))
        return refusal if isinstance(refusal, errors.APIInvalidError) else None

    def create(self, obj: Mapping[str, Any]) -> Obj:
        meta = obj["metadata"]
        self._refuse(str(obj["kind"]))
        if self._find(str(obj["kind"]), meta.get("namespace"), meta["name"]) is not None:
            raise errors.APIConflictError("already exists", status=409)
        self._count("create", str(obj["kind"]))
        created = put(self.cache, obj)
        self._managed_by(created, self.field_manager, "Update")
        if obj["kind"] == "Secret":
            self.secret_data[str(created["metadata"]["uid"])] = copy.deepcopy(obj.get("data"))
        return created

    def get(self, resource: Resource, namespace: str | None, name: str) -> Obj | None:
        self.reads[resource.kind] += 1
        found = self._find(resource.kind, namespace, name)
        if found is not None:
            uid = str(found["metadata"]["uid"])
            if self.managed.get(uid):
                found["metadata"]["managedFields"] = copy.deepcopy(self.managed[uid])
            if uid in self.secret_data and "data" not in found:
                found["data"] = copy.deepcopy(self.secret_data[uid])
        return found

    def patch(
        self, resource: Resource, namespace: str | None, name: str, body: Mapping[str, Any]
    ) -> Obj:
        self._count("patch", resource.kind)
        live = self._find(resource.kind, namespace, name)
        if live is None:
            raise errors.APINotFoundError("not found", status=404)
        return put(self.cache, _merge_patch(live, body))

    def delete(self, resource: Resource, namespace: str | None, name: str, uid: str) -> bool:
        self._count("delete", resource.kind)
        live = self._find(resource.kind, namespace, name)
        if live is None or live["metadata"]["uid"] != uid:
            return False
        drop(self.cache, live)
        return True

    def write_status(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
        *,
        current: Mapping[str, Any] | None = None,
        uid: str | None = None,
        basis: Mapping[str, Any] | None = None,
    ) -> Obj | None:
        if current is not None and dict(current) == dict(status):
            return None
        self.status_bases.append(None if basis is None else copy.deepcopy(dict(basis)))
        live = self._find(resource.kind, namespace, name)
        if live is None:
            raise errors.APINotFoundError("not found", status=404)
        if uid is not None and live["metadata"]["uid"] != uid:
            raise errors.APIInvalidError("the test operation failed", status=422)
        self._count("status", resource.kind)
        live["status"] = copy.deepcopy(dict(status))
        return put(self.cache, live)

    def event(self, involved: Mapping[str, Any], reason: str, message: str, **kw: Any) -> Obj:
        self._count("event", "Event")
        self.events.append((reason, message))
        self.event_types.append((reason, kw.get("event_type", "Normal")))
        return {}


class FakeHub:
    """Answers `resolve(name)` from `facts`; `down` makes every answer unreachable."""

    def __init__(self, *facts: ModelFacts) -> None:
        self.facts = {f.name: f for f in facts}
        self.down = False
        self.asked = 0

    def peek(self, name: str, *, token: str | None = None) -> None:
        return None  # nothing cached: every answer comes through the pass's background

    def resolve(self, name: str, *, token: str | None = None) -> ModelFound | ModelUnavailable:
        self.asked += 1
        if self.down:
            return ModelUnavailable(Reason.MODEL_SOURCE_UNREACHABLE, "connection refused")
        if name not in self.facts:
            return ModelUnavailable(Reason.MODEL_NOT_FOUND, f"{name} is not on the hub")
        return ModelFound(self.facts[name])
