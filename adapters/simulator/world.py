"""One observation of the cluster, shared by the scheduler and kubelet stand-ins in a pass.

Both parts are level-triggered: every pass reads the current objects and acts on them,
never on "what changed". One list per kind per pass keeps the load on the local API
server small; `fingerprint` (the lists' resourceVersions) lets the scheduler skip a pass
when nothing it reads has changed since the last one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.simulator.kube import JSON, Kube, path

__all__ = ["World", "is_ready_node", "key", "observe"]

_RESOURCE = "resource.k8s.io/v1"


def key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def is_ready_node(node: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or ()
    )


@dataclass(frozen=True, slots=True)
class World:
    nodes: tuple[JSON, ...]
    pods: tuple[JSON, ...]
    claims: tuple[JSON, ...]
    slices: tuple[JSON, ...]
    device_classes: tuple[JSON, ...]
    fingerprint: tuple[str, ...]

    def pod_uids(self) -> set[str]:
        return {str(p["metadata"]["uid"]) for p in self.pods}

    def claims_by_key(self) -> dict[tuple[str, str], JSON]:
        return {key(c): c for c in self.claims}


def observe(kube: Kube) -> World:
    nodes, nodes_rv = kube.list(path("v1", "nodes"))
    pods, pods_rv = kube.list(path("v1", "pods"))
    claims, claims_rv = kube.list(path(_RESOURCE, "resourceclaims"))
    slices, slices_rv = kube.list(path(_RESOURCE, "resourceslices"))
    classes, classes_rv = kube.list(path(_RESOURCE, "deviceclasses"))
    return World(
        nodes=tuple(nodes),
        pods=tuple(pods),
        claims=tuple(claims),
        slices=tuple(slices),
        device_classes=tuple(classes),
        fingerprint=(nodes_rv, pods_rv, claims_rv, slices_rv, classes_rv),
    )
