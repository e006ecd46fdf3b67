"""Writes the simulated hardware to the API server: Nodes, ResourceSlices, DeviceClasses.

This is what kubelets (Node objects and their status) and the NVIDIA DRA driver (one
ResourceSlice per node, DeviceClasses at install) do in a real cluster. A publish makes
the server match a CapacitySpec: missing objects are created, changed ones updated, and
objects the simulator published earlier but the spec no longer names are deleted. A
slice whose devices change is updated in place with the pool's generation bumped, as a
driver does, so readers that keep only the newest generation see one consistent pool.
Unchanged objects cost no writes.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from adapters.simulator import capacity
from adapters.simulator.kube import JSON, Conflict, Kube, NotFound, path

__all__ = ["PublishResult", "Publisher"]

log = logging.getLogger(__name__)

_RESOURCE = "resource.k8s.io/v1"
_SELECTOR = f"{capacity.MANAGED_LABEL}=true"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PublishResult:
    """What one publish changed, by kind: names created, updated and deleted."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.updated: list[str] = []
        self.deleted: list[str] = []

    def __repr__(self) -> str:
        return (
            f"PublishResult(created={self.created}, updated={self.updated}, deleted={self.deleted})"
        )


class Publisher:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def publish(self, spec: capacity.CapacitySpec) -> PublishResult:
        result = PublishResult()
        # Classes first: a reader that sees a slice can already judge it.
        self._device_classes(spec, result)
        self._nodes(spec, result)
        self._slices(spec, result)
        return result

    # --- Nodes ------------------------------------------------------------------------

    def _nodes(self, spec: capacity.CapacitySpec, result: PublishResult) -> None:
        existing, _ = self.kube.list(path("v1", "nodes"), label_selector=_SELECTOR)
        by_name = {n["metadata"]["name"]: n for n in existing}
        for node in spec.nodes:
            want = capacity.render_node(node)
            have = by_name.pop(node.name, None)
            url = path("v1", "nodes", node.name)
            if have is None:
                try:
                    have = self.kube.create(path("v1", "nodes"), want)
                except Conflict:  # a node of that name exists but was not ours: adopt it
                    have = self.kube.request("GET", url)
                result.created.append(f"Node/{node.name}")
            elif _node_differs(have, want):
                self.kube.strategic_patch(
                    url,
                    {
                        "metadata": {"labels": want["metadata"]["labels"]},
                        "spec": {"unschedulable": node.unschedulable or None},
                    },
                )
                result.updated.append(f"Node/{node.name}")
            if _status_differs(have, want):
                status = dict(want["status"], conditions=capacity.node_conditions(_now()))
                self.kube.strategic_patch(url + "/status", {"status": status})
        for name in sorted(by_name):
            if self.kube.delete(path("v1", "nodes", name)):
                result.deleted.append(f"Node/{name}")

    # --- ResourceSlices ---------------------------------------------------------------

    def _slices(self, spec: capacity.CapacitySpec, result: PublishResult) -> None:
        existing, _ = self.kube.list(path(_RESOURCE, "resourceslices"), label_selector=_SELECTOR)
        mine: dict[str, JSON] = {}
        for obj in existing:
            node_name = (obj["metadata"].get("labels") or {}).get(capacity.NODE_LABEL, "")
            if obj.get("spec", {}).get("driver") == spec.driver and node_name not in mine:
                mine[node_name] = obj
            else:  # another driver's leftovers or a duplicate: not part of this spec
                self._delete_slice(obj, result)
        for node in spec.nodes:
            have = mine.pop(node.name, None)
            if not node.gpus:
                if have is not None:
                    self._delete_slice(have, result)
                continue
            uid = self._node_uid(node.name)
            if have is None:
                want = capacity.render_slice(node, spec.driver, name="", generation=1)
                del want["metadata"]["name"]
                want["metadata"]["generateName"] = f"{node.name}-{spec.driver}-"
                want["metadata"]["ownerReferences"] = _node_owner(node.name, uid)
                created = self.kube.create(path(_RESOURCE, "resourceslices"), want)
                result.created.append(f"ResourceSlice/{created['metadata']['name']}")
                continue
            name = have["metadata"]["name"]
            generation = int(have["spec"].get("pool", {}).get("generation", 1))
            want = capacity.render_slice(node, spec.driver, name=name, generation=generation)
            if have["spec"].get("devices") == want["spec"]["devices"]:
                continue
            want = capacity.render_slice(node, spec.driver, name=name, generation=generation + 1)
            want["metadata"]["resourceVersion"] = have["metadata"]["resourceVersion"]
            want["metadata"]["ownerReferences"] = _node_owner(node.name, uid)
            self.kube.replace(path(_RESOURCE, "resourceslices", name), want)
            result.updated.append(f"ResourceSlice/{name}")
        for obj in mine.values():
            self._delete_slice(obj, result)

    def _delete_slice(self, obj: JSON, result: PublishResult) -> None:
        name = obj["metadata"]["name"]
        if self.kube.delete(path(_RESOURCE, "resourceslices", name)):
            result.deleted.append(f"ResourceSlice/{name}")

    def _node_uid(self, name: str) -> str:
        node = self.kube.get(path("v1", "nodes", name))
        if node is None:
            raise NotFound(404, "NotFound", f"node {name} vanished while publishing")
        return str(node["metadata"]["uid"])

    # --- DeviceClasses ----------------------------------------------------------------

    def _device_classes(self, spec: capacity.CapacitySpec, result: PublishResult) -> None:
        existing, _ = self.kube.list(path(_RESOURCE, "deviceclasses"), label_selector=_SELECTOR)
        by_name = {c["metadata"]["name"]: c for c in existing}
        for item in spec.device_classes:
            want = capacity.render_device_class(item)
            have = by_name.pop(item.name, None)
            if have is None:
                try:
                    self.kube.create(path(_RESOURCE, "deviceclasses"), want)
                    result.created.append(f"DeviceClass/{item.name}")
                    continue
                except Conflict:  # installed by someone else: leave it as it is
                    log.info("DeviceClass %s exists and is not the simulator's", item.name)
                    continue
            if have.get("spec") == want["spec"] and _labels(have) == _labels(want):
                continue
            want["metadata"]["resourceVersion"] = have["metadata"]["resourceVersion"]
            self.kube.replace(path(_RESOURCE, "deviceclasses", item.name), want)
            result.updated.append(f"DeviceClass/{item.name}")
        for name in sorted(by_name):
            if self.kube.delete(path(_RESOURCE, "deviceclasses", name)):
                result.deleted.append(f"DeviceClass/{name}")


def _labels(obj: JSON) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("labels") or {})


def _node_differs(have: JSON, want: JSON) -> bool:
    labels = _labels(have)
    wanted_labels = _labels(want)
    if any(labels.get(k) != v for k, v in wanted_labels.items()):
        return True
    return bool(have.get("spec", {}).get("unschedulable")) != bool(
        want["spec"].get("unschedulable")
    )


def _status_differs(have: JSON, want: JSON) -> bool:
    status: dict[str, Any] = have.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    return (
        not ready
        or status.get("capacity") != want["status"]["capacity"]
        or status.get("allocatable") != want["status"]["allocatable"]
    )


def _node_owner(name: str, uid: str) -> list[JSON]:
    # As a kubelet plugin's slices: owned by the Node, so they go when it goes.
    return [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid, "controller": True}]
