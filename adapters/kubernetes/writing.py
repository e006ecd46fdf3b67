"""Every write the controller makes to the API server: children, status, Events.

The controller's loop reads from informers (watching.py) and writes only through a
`Writer`, so how a write is made is decided once (ENGINEERING items 10-12):

- `apply(obj)`: server-side apply with one stable field manager and `force=true`, for
  built-in kinds and custom resources alike (the path comes from discovery). The answer
  is the object as stored, also when the apply created it (HTTP 201), where the
  generated client's patch methods return None.
- `write_status(...)`: through the `/status` subresource only, as a JSON patch that
  tests `metadata.uid` (an object deleted and recreated under the same name never gets
  the old one's status: 422, APIInvalidError) and, when the caller gives one, sets
  `metadata.resourceVersion` to the one its decision read, so the server answers 409
  (APIConflictError) if the object moved since: re-read and re-decide, never resend the
  stale body. The status replaces the old one whole (a merge patch could not
  drop a field). Nothing is sent when the status equals what is there (`current`) or,
  failing that, what this writer last wrote: a level-triggered loop otherwise rewrites
  the same status on every pass. Nor when the cache is still at the version this
  writer's last write was decided from and the status is the one written: the write's
  echo is on its way, and sending it again costs the API server a full write that
  changes nothing.
- `create`, `get`, `patch` (merge, with the resourceVersion the caller read) and
  `delete` (with a UID precondition, so a namesake made in between is never deleted):
  the token Secret, priority scale-downs and pruning go through these.
- `event(...)`: a core v1 Event about an object (reason, message, Normal/Warning,
  reportingComponent ai-inference) so `kubectl describe` tells the story; a repeat of
  the same reason and message bumps `count` and `lastTimestamp` of the first instead of
  making a new Event, as client-go's recorder does.
"""

from __future__ import annotations

import copy
import hashlib
import json
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from kubernetes.client import ApiClient

from adapters.kubernetes import errors
from adapters.kubernetes.rest import EVENTS, Resource, call
from adapters.kubernetes.watching import Obj

__all__ = ["COMPONENT", "FIELD_MANAGER", "EventType", "Writer", "status_differs"]

FIELD_MANAGER = "ai-inference"
COMPONENT = "ai-inference"
EventType = Literal["Normal", "Warning"]
_MEMORY = 1024  # remembered statuses and events, least recently used dropped first


def _normal(value: Any) -> Any:
    """A value as the server would store it: nulls in maps dropped (they mean absent)."""
    if isinstance(value, Mapping):
        return {k: _normal(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return value


def status_differs(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """Whether writing `desired` would change a stored status of `current`."""
    return bool(_normal(current or {}) != _normal(desired))


def _known_but_status(basis: Mapping[str, Any], written: Mapping[str, Any]) -> bool:
    """Whether `written` holds nothing `basis` did not, its status and the server's
    bookkeeping of the write (resourceVersion, managedFields) apart. (The informer's
    `_same_but_version` compares two cached versions, both trimmed alike; here one side
    is the server's raw answer, with the managedFields the cache drops.)"""
    if set(basis) - {"status"} != set(written) - {"status"}:
        return False
    if any(basis[k] != written[k] for k in basis if k not in ("status", "metadata")):
        return False
    return _identity(basis) == _identity(written)


def _identity(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}


def _digest(status: Any) -> bytes:
    """A fingerprint of a normalised status: what the writer remembers of the last one it
    wrote (the status itself, a few KB an order, was kept twice: here and in the cache)."""
    text = json.dumps(status, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class _Written:
    """What the writer remembers of its last status write of an object."""

    digest: bytes  # of the status the server answered with
    basis: str | None  # the resourceVersion of the cached object it was decided from


def _version(obj: Mapping[str, Any] | None) -> str | None:
    rv = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    return None if rv is None else str(rv)


@dataclass
class _Recorded:
    namespace: str
    name: str
    count: int


_K = TypeVar("_K")
_V = TypeVar("_V")


def _remember(memory: OrderedDict[_K, _V], key: _K, value: _V) -> None:
    """Keep `value` as the newest entry; the least recently kept go past `_MEMORY`."""
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > _MEMORY:
        memory.popitem(last=False)


class Writer:
    """Writes through one ApiClient under one field manager and reporting component."""

    def __init__(
        self,
        api: ApiClient,
        *,
        field_manager: str = FIELD_MANAGER,
        component: str = COMPONENT,
        instance: str | None = None,
    ) -> None:
        self._api = api
        self.field_manager = field_manager
        self.component = component
        self.instance = instance or socket.gethostname()
        self._lock = threading.Lock()
        self._kinds: dict[str, dict[str, Resource]] = {}
        self._statuses: OrderedDict[tuple[str, str, str], _Written] = OrderedDict()
        self._events: OrderedDict[tuple[str, str, str, str], _Recorded] = OrderedDict()
        # The resourceVersion each status write of ours returned, by object UID: the
        # watch event that brings exactly that version back is our own echo.
        self._echoes: OrderedDict[str, str] = OrderedDict()
        self.writes = 0  # requests that changed (or tried to change) something
        # Told of each write that returned, by boundary ("apply-Deployment", "status", ...):
        # the crash tests' hook (adapters/faults.py); None in production.
        self.after_write: Callable[[str], None] | None = None

    def _count_write(self) -> None:
        with self._lock:
            self.writes += 1

    def _wrote(self, boundary: str) -> None:
        if self.after_write is not None:
            self.after_write(boundary)

    # -- discovery -----------------------------------------------------------------------

    def resource_for(self, api_version: str, kind: str) -> Resource:
        """The Resource serving `kind`, from discovery (refreshed once on a miss)."""
        for refresh in (False, True):
            kinds = self._kinds.get(api_version)
            if kinds is None or refresh:
                kinds = self._discover(api_version)
            if kind in kinds:
                return kinds[kind]
        raise errors.APINotFoundError(f"the server serves no {kind} in {api_version}", status=404)

    def _discover(self, api_version: str) -> dict[str, Resource]:
        group, _, version = api_version.rpartition("/")
        root = f"/apis/{api_version}" if group else f"/api/{version}"
        listing = call(self._api, "GET", root)
        kinds = {
            entry["kind"]: Resource(
                group, version, entry["name"], entry["kind"], entry["namespaced"]
            )
            for entry in listing.get("resources") or []
            if "/" not in entry["name"]  # subresources such as deployments/status
        }
        with self._lock:
            self._kinds[api_version] = kinds
        return kinds

    # -- writes --------------------------------------------------------------------------

    def apply(
        self,
        obj: Mapping[str, Any],
        *,
        resource: Resource | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        """Server-side apply `obj` (forced, our field manager unless told another); the
        stored object back."""
        meta = obj["metadata"]
        resource = resource or self.resource_for(obj["apiVersion"], obj["kind"])
        namespace = meta.get("namespace") if resource.namespaced else None
        self._count_write()
        applied = call(
            self._api,
            "PATCH",
            resource.object_path(namespace, meta["name"]),
            query=[("fieldManager", field_manager or self.field_manager), ("force", True)],
            body=dict(obj),
            # JSON is YAML: the body goes as JSON under the apply content type.
            content_type="application/apply-patch+yaml",
        )
        self._wrote(f"apply-{resource.kind}")
        return applied

    def create(self, obj: Mapping[str, Any]) -> Obj:
        """Create `obj`; APIConflictError (409) when one of that name exists."""
        resource = self.resource_for(obj["apiVersion"], obj["kind"])
        namespace = obj["metadata"].get("namespace") if resource.namespaced else None
        self._count_write()
        # Under our field manager, as applies are: a Secret of ours whose owner reference
        # was removed is told by it from a user's copy (converging.disowned).
        created = call(
            self._api,
            "POST",
            resource.collection_path(namespace),
            query=[("fieldManager", self.field_manager)],
            body=dict(obj),
        )
        self._wrote(f"create-{resource.kind}")
        return created

    def refused(self, obj: Mapping[str, Any]) -> errors.APIInvalidError | None:
        """Why the API refuses `obj` on its own, None when it accepts it: a dry-run
        create (nothing is stored, so this is not a write), which validates the manifest
        apart from the live object of its name. Under its own name: the server validates
        a create before it looks for the name, so a valid manifest is a 409, and a
        refusal names the object. Under a generated name each refusal named another
        object, so no two were the same and each pass recorded a new one."""
        resource = self.resource_for(obj["apiVersion"], obj["kind"])
        namespace = obj["metadata"].get("namespace") if resource.namespaced else None
        try:
            call(
                self._api,
                "POST",
                resource.collection_path(namespace),
                query=[("dryRun", "All"), ("fieldManager", self.field_manager)],
                body=obj,
            )
        except errors.APIInvalidError as exc:
            return exc
        except errors.APIConflictError:
            return None  # valid; its name is taken, as it is by the live object
        return None

    def get(self, resource: Resource, namespace: str | None, name: str) -> Obj | None:
        """A live read (not the cache), for the few decisions that must not act on a
        stale copy; None when absent."""
        try:
            return call(self._api, "GET", resource.object_path(namespace, name))
        except errors.APINotFoundError:
            return None

    def patch(
        self, resource: Resource, namespace: str | None, name: str, body: Mapping[str, Any]
    ) -> Obj:
        """A JSON merge patch (put `metadata.resourceVersion` in it to make it conditional)."""
        self._count_write()
        patched = call(
            self._api,
            "PATCH",
            resource.object_path(namespace, name),
            query=[("fieldManager", self.field_manager)],
            body=dict(body),
            content_type="application/merge-patch+json",
        )
        self._wrote(f"patch-{resource.kind}")
        return patched

    def delete(self, resource: Resource, namespace: str | None, name: str, uid: str) -> bool:
        """Delete the object if it is still the one with `uid`; whether one was deleted."""
        self._count_write()
        try:
            call(
                self._api,
                "DELETE",
                resource.object_path(namespace, name),
                body={
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "preconditions": {"uid": uid},
                    "propagationPolicy": "Background",
                },
            )
        except (errors.APINotFoundError, errors.APIConflictError):
            return False  # gone already, or a namesake took its place
        self._wrote(f"delete-{resource.kind}")
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
        """Write `status` if it changes anything; the updated object, or None if skipped.

        `current` is the status the caller's cached copy has; pass it whenever known (it
        also catches an object recreated under the same name). Raises APIConflictError
        when the object is no longer at `resource_version`.

        `basis`: the object the caller decided from (its cached copy). The version the
        write returns is noted as our echo (`is_status_echo`) only when it holds nothing
        but the status that `basis` did not. A write that changes nothing on the server
        returns the object as it stands, at its own version: with a cache behind it, that
        version may be someone else's later change (a spec edit), whose event must wake
        the order, not pass for our echo. A `basis` still at the version the last write
        was decided from is a cache behind that write: `desired` equal to what it wrote
        is not sent again (any later change by someone else comes as a newer version,
        compared with `current` then).
        """
        key = (resource.api_version + "/" + resource.plural, namespace or "", name)
        desired = _normal(status)
        with self._lock:
            last = self._statuses.get(key)
        if current is None:
            unchanged = last is not None and last.digest == _digest(desired)
        elif not status_differs(current, desired):
            unchanged = True
        else:  # the cache behind our own last write of this very status
            unchanged = (
                last is not None
                and last.basis is not None
                and last.basis == _version(basis)
                and last.digest == _digest(desired)
            )
        if unchanged:
            return None
        patch: list[dict[str, Any]] = []
        if uid is not None:
            patch.append({"op": "test", "path": "/metadata/uid", "value": uid})
        if resource_version is not None:
            patch.append(
                {"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version}
            )
        patch.append({"op": "add", "path": "/status", "value": copy.deepcopy(desired)})
        self._count_write()
        written = call(
            self._api,
            "PATCH",
            resource.object_path(namespace, name, "status"),
            body=patch,
            content_type="application/json-patch+json",
        )
        self._wrote("status")
        meta = written.get("metadata") or {}
        with self._lock:
            digest = _digest(_normal(written.get("status") or {}))
            _remember(self._statuses, key, _Written(digest, _version(basis)))
            if basis is not None and _known_but_status(basis, written):
                _remember(self._echoes, str(meta.get("uid")), str(meta.get("resourceVersion")))
        return written

    def is_status_echo(self, obj: Mapping[str, Any]) -> bool:
        """Is `obj` (a watch event's object) the very version our last status write of it
        returned, noted as holding nothing new but that status? Nothing in it is news to
        whoever wrote it; any other change to the object since is a newer version, so it
        is never taken for one."""
        meta = obj.get("metadata") or {}
        uid, rv = str(meta.get("uid")), meta.get("resourceVersion")
        with self._lock:
            if rv is None or self._echoes.get(uid) != str(rv):
                return False
            del self._echoes[uid]
            return True

    def event(
        self,
        involved: Mapping[str, Any],
        reason: str,
        message: str,
        *,
        event_type: EventType = "Normal",
    ) -> Obj:
        """Record an Event about `involved` (a stored object); repeats bump its count."""
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        key = (str(meta.get("uid", "")), str(reason), message, event_type)
        now = _time(datetime.now(UTC))
        with self._lock:
            recorded = self._events.get(key)
            if recorded is not None:
                self._events.move_to_end(key)
        if recorded is not None:
            try:
                self._count_write()
                bumped = call(
                    self._api,
                    "PATCH",
                    EVENTS.object_path(recorded.namespace, recorded.name),
                    body={"count": recorded.count + 1, "lastTimestamp": now},
                    content_type="application/merge-patch+json",
                )
                recorded.count = int(bumped.get("count") or recorded.count + 1)
                self._wrote("event")
                return bumped
            except errors.APINotFoundError:
                pass  # the Event expired (the server keeps them an hour): start anew
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", ""),
                "kind": involved.get("kind", ""),
                "name": meta["name"],
                "namespace": meta.get("namespace") or "",
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": str(reason),
            "message": message,
            "type": event_type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._count_write()
        created = call(self._api, "POST", EVENTS.collection_path(namespace), body=body)
        self._wrote("event")
        with self._lock:
            _remember(self._events, key, _Recorded(namespace, created["metadata"]["name"], 1))
        return created
