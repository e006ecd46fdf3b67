"""Desired against live: which owned objects drifted, which are no longer rendered.

Every pass renders what the order should have (rendering.py) and compares it with the
cached live objects — the fields we manage, not the whole object: the server adds
defaults (clusterIP, terminationMessagePath), other controllers add their own fields
(the HPA its status, a user an extra env entry), and none of that is drift. A field we
set whose live value differs is drift; so is an object missing altogether. Lists of
named items (containers, env, ports, volumes) are matched by name, so an entry someone
else added is not ours to remove and does not make us write forever; other lists must
match item for item (a live entry without a name, such as a port added by its number, is
someone else's too). Quantities compare by value ("1.5" and "1500m" are one CPU and a
half), because the server stores them canonically; other strings compare as they are.

A map someone else adds keys to is no drift, with one exception: a Service's selector
must be exactly ours. One more key there matches none of the order's pods, and the
endpoint goes dark; server-side apply leaves a key another manager set (1.20 treats the
selector key by key), so the key is removed by a merge patch (`surplus`), unless the
order's pods all carry it (a webhook adding it to both still selects them).

Comparing what we set now cannot see a field we set before and render no more (the
token's env entry once a class drops authentication, the Ingress's TLS once https is
Disabled): server-side apply removes such a field only when an apply leaves it out. So
every rendered object carries a digest of itself (`stamped`), like kubectl's
last-applied annotation: a render that changed in any way, a field dropped included,
no longer covers the live digest and is applied.

Pure functions over the API's JSON, so the rules are table-tested without a server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgpack

from adapters.kubernetes.rendering import UID_LABEL
from fsm.quantity import QuantityError, parse_quantity

__all__ = [
    "RENDERED_ANNOTATION",
    "controlled",
    "covers",
    "disowned",
    "drifted",
    "key_of",
    "owned_by",
    "stamped",
    "strays",
    "surplus",
    "uncontrolled_strays",
    "written_by",
]

Obj = Mapping[str, Any]
Key = tuple[str, str]  # (kind, name): an order's objects all live in its namespace
# On each applied object (not its pod template: that would roll the pods): the digest of
# what was rendered for it.
RENDERED_ANNOTATION = "ai.deckhouse.io/rendered"


def key_of(obj: Obj) -> Key:
    return str(obj.get("kind", "")), str((obj.get("metadata") or {}).get("name", ""))


# The fields that hold quantities in what we render (resources' limits and requests, a
# device request's capacity, an emptyDir's sizeLimit): only there are two different
# strings one value. Elsewhere "1" and "1.0" are two values: an env var edited so is drift.
_QUANTITY_FIELDS = frozenset({"limits", "requests", "capacity", "sizeLimit"})


def _same_scalar(live: Any, desired: Any, quantity: bool = False) -> bool:
    if live == desired:
        return True
    if isinstance(live, str) and isinstance(desired, str) and not quantity:
        return False
    if isinstance(live, str | int) and isinstance(desired, str | int):
        # A number read back as a numeric string, or the other way round (int-or-string
        # fields), and quantities in their canonical form ("1500m" for "1.5").
        try:
            return parse_quantity(str(live)) == parse_quantity(str(desired))
        except QuantityError:
            return False
    return False


def _named(items: Sequence[Any]) -> bool:
    return bool(items) and all(_is_mapping(i) and "name" in i for i in items)


def _by_name(items: Sequence[Any]) -> dict[str, Any]:
    """The named entries of a live list: an entry without a name (a port someone added
    by its number alone) is not one of ours, and does not make the list unmatched."""
    return {i["name"]: i for i in items if _is_mapping(i) and "name" in i}


# JSON's scalars: most of the fields compared. Told apart by their exact type first, as
# JSON's objects are by `dict`: the abstract Mapping check costs more than the comparison
# (a quiet pass, as every order's resync makes, spent a fifth of its time in them).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _is_mapping(value: Any) -> bool:
    return isinstance(value, (dict, Mapping))  # dict first: checked without the ABC


def covers(live: Any, desired: Any, quantity: bool = False) -> bool:
    """Whether `live` has every field `desired` sets, with the same value."""
    if type(desired) in _SCALARS:
        return _same_scalar(live, desired, quantity)
    if _is_mapping(desired):
        if not _is_mapping(live):
            return False
        return all(
            covers(live.get(k), v, quantity or k in _QUANTITY_FIELDS)
            for k, v in desired.items()
            if v is not None
        )
    if isinstance(desired, list | tuple):
        if not isinstance(live, list | tuple):
            return not desired and live is None
        if _named(desired):
            by_name = _by_name(live)
            return all(covers(by_name.get(item["name"]), item) for item in desired)
        return len(live) == len(desired) and all(
            covers(a, b) for a, b in zip(live, desired, strict=True)
        )
    return _same_scalar(live, desired, quantity)


def stamped(doc: Obj) -> dict[str, Any]:
    """`doc` with the digest of its content in RENDERED_ANNOTATION."""
    # msgpack, not sorted JSON: a fifth of the cost (the render is deterministic, its
    # keys always in one order; a release that reorders them re-applies once).
    digest = hashlib.blake2b(msgpack.packb(doc), digest_size=10).hexdigest()
    meta = dict(doc.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), RENDERED_ANNOTATION: digest}
    return {**doc, "metadata": meta}


def drifted(
    desired: Iterable[Obj],
    live: Mapping[Key, Obj],
    pod_labels: Sequence[Mapping[str, Any]] | None = None,
) -> list[Obj]:
    """The desired objects that are missing or whose managed fields differ live (for
    `pod_labels`, see `surplus`)."""
    out = []
    for doc in desired:
        current = live.get(key_of(doc))
        if (
            current is None
            or not covers(current, _managed(doc))
            or surplus(current, doc, pod_labels)
        ):
            out.append(doc)
    return out


# The maps that must be exactly as rendered, by kind: keys someone else added there are
# not harmless. (A Deployment's selector is immutable in apps/v1: the API refuses a key
# added to it. Extra labels on the pod template select nothing and are left.)
_EXACT_MAPS: dict[str, tuple[tuple[str, ...], ...]] = {"Service": (("spec", "selector"),)}


def _at(obj: Obj, path: tuple[str, ...]) -> Any:
    value: Any = obj
    for key in path:
        value = value.get(key) if _is_mapping(value) else None
    return value


def surplus(
    live: Obj, desired: Obj, pod_labels: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any] | None:
    """A JSON merge patch removing the keys `live` has beyond `desired` in the maps that
    must be exactly as rendered (`_EXACT_MAPS`); None when there are none.

    `pod_labels`, the labels of the order's pods: a key they all carry, at the
    selector's value, still selects them (a mutating webhook that adds it to both), and
    with no pod there is none to miss yet. Removed anyway, the webhook put it back, and
    each pass applied and patched the Service again, for ever."""
    patch: dict[str, Any] = {}
    for path in _EXACT_MAPS.get(str(desired.get("kind", "")), ()):
        have, want = _at(live, path), _at(desired, path)
        if not _is_mapping(have) or not _is_mapping(want):
            continue
        extra = sorted(
            k
            for k in have
            if k not in want
            and (pod_labels is None or not all(p.get(k) == have[k] for p in pod_labels))
        )
        if not extra:
            continue
        node = patch
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = dict.fromkeys(extra)
    return patch or None


def _managed(doc: Obj) -> dict[str, Any]:
    # apiVersion may legitimately differ (an HPA read as v2beta2 and rendered as v2).
    managed = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}
    if doc.get("kind") == "ResourceClaimTemplate":
        managed = _without_capacity_requests(managed)
    return managed


def _without_capacity_requests(template: dict[str, Any]) -> dict[str, Any]:
    """A claim template's fields less its requests' `exactly.capacity`: a server without
    the DRAConsumableCapacity gate (alpha, off by default in 1.34) drops that field from
    what it stores, and the apply that puts it back is a no-op there, so every pass
    found the template drifted and applied it again. A template's spec cannot be edited
    in place, so nothing is lost: one made anew by someone else shows elsewhere."""
    spec = (template.get("spec") or {}).get("spec") or {}
    devices = spec.get("devices") or {}
    requests = devices.get("requests")
    if not requests:
        return template
    kept = [
        {**r, "exactly": {k: v for k, v in r["exactly"].items() if k != "capacity"}}
        if _is_mapping(r) and _is_mapping(r.get("exactly"))
        else r
        for r in requests
    ]
    return {
        **template,
        "spec": {**template["spec"], "spec": {**spec, "devices": {**devices, "requests": kept}}},
    }


def owned_by(obj: Obj, uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def written_by(obj: Obj, manager: str, operation: str) -> bool:
    """Whether `manager` wrote this very object with `operation` ("Apply": a server-side
    apply; "Update": a create, an update or a patch): an entry of its in the object's
    managedFields (a live read: the cache drops them), dated no earlier than the object.
    A create given the managedFields of the object it was copied from keeps, on a server
    that takes them, entries dated before the copy was made: not this object's writes."""
    meta = obj.get("metadata") or {}
    made = str(meta.get("creationTimestamp") or "")  # RFC 3339 in UTC: ordered as text
    return any(
        entry.get("manager") == manager
        and entry.get("operation") == operation
        and str(entry.get("time") or "") >= made
        for entry in meta.get("managedFields") or []
    )


def controlled(obj: Obj) -> bool:
    """Whether anything is the object's controller (an owner reference with `controller`)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("controller") for r in refs)


def disowned(obj: Obj, uid: str, manager: str) -> bool:
    """Whether `obj` (a live read: the cache drops managedFields) is order `uid`'s own
    child whose owner references someone removed (a trimmed `kubectl replace`, a GitOps
    tool): it carries the order's UID label, nothing controls it, and `manager` wrote
    this very object as the controller writes its kind (a Secret is created, the rest
    applied). A user's copy, of a saved manifest of ours too, was written by their
    client; a previous order's namesake carries that order's UID."""
    meta = obj.get("metadata") or {}
    operation = "Update" if obj.get("kind") == "Secret" else "Apply"
    return (
        (meta.get("labels") or {}).get(UID_LABEL) == uid
        and not controlled(obj)
        and written_by(obj, manager, operation)
    )


def uncontrolled_strays(desired: Iterable[Obj], children: Iterable[Obj]) -> list[Obj]:
    """Objects carrying the order's label that nothing renders any more and nothing
    controls: perhaps its own, their owner references removed (`disowned`, on a live
    read), perhaps a user's copy, never touched."""
    wanted = {key_of(doc) for doc in desired}
    return [
        obj
        for obj in children
        if key_of(obj) not in wanted
        and not controlled(obj)
        and not (obj.get("metadata") or {}).get("deletionTimestamp")
    ]


def strays(desired: Iterable[Obj], children: Iterable[Obj], uid: str) -> list[Obj]:
    """Objects the order owns that nothing renders any more (to prune). Objects merely
    carrying its label but owned by something else are never touched."""
    wanted = {key_of(doc) for doc in desired}
    return [
        obj
        for obj in children
        if key_of(obj) not in wanted
        and owned_by(obj, uid)
        and not (obj.get("metadata") or {}).get("deletionTimestamp")
    ]
