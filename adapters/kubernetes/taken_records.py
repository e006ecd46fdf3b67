"""The record of replicas taken, as a victim's Deployment carries it: takers by UID.

The victim's tenant reads its own Deployment. A record naming each taker (`namespace/name`,
as the core keeps it) told that tenant which other tenant's order took its replicas, which
its status and Events say by count only (fsm.identity.shown_to). So the annotation names
each taker by its UID (`uid:<uid>`), and the controller reads it back to `namespace/name`
from its cache of orders. A taker no longer there keeps its UID, which names no order:
it counts as gone, as before. A record written before names its takers: read as it is,
and written by UID the next time it changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from adapters.kubernetes.watching import Informer
from fsm.placement.arbitration import Taker, Taking

__all__ = ["read", "text"]

_UID = "uid:"


def read(deployment: Mapping[str, Any] | None, orders: Informer) -> Taking | None:
    """The record on `deployment`, its takers named as the core names them."""
    taking = Taking.of(deployment)
    if taking is None:
        return None
    return Taking(tuple(replace(t, order=_named(t.order, orders)) for t in taking.takers))


def text(record: Taking, orders: Informer) -> str:
    """The annotation's text for `record`: each taker by its UID, none by its name."""
    merged: dict[str, Taker] = {}
    for taker in record.takers:
        key = _by_uid(taker.order, orders)
        had = merged.get(key)
        replicas = taker.replicas + (had.replicas if had is not None else 0)
        merged[key] = replace(taker, order=key, replicas=replicas)
    return Taking(tuple(merged.values())).dump()


def _named(key: str, orders: Informer) -> str:
    if not key.startswith(_UID):
        return key  # a record written before: a name already
    order = orders.get(key[len(_UID) :], copy_=False)
    if order is None:
        return key  # gone: a key that names no order
    meta = order.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _by_uid(key: str, orders: Informer) -> str:
    if key.startswith(_UID):
        return key
    namespace, _, name = key.partition("/")
    order = orders.get_by_name(namespace, name, copy_=False)
    if order is not None:
        return _UID + str((order.get("metadata") or {}).get("uid", ""))
    # Gone, named by an older record: neither its name nor a UID it never had.
    return _UID + "gone-" + hashlib.sha256(key.encode()).hexdigest()[:16]
