"""The drift rules (converging.py) as a table: what the server or others add is not
drift, what we set and differs is, lists of named items match by name. And what a
converged verdict rests on (converged.py): it holds while the parts it read are the same."""

from __future__ import annotations

import copy
from types import MappingProxyType
from typing import Any

import pytest

from adapters.kubernetes.converged import Converged
from adapters.kubernetes.converging import (
    RENDERED_ANNOTATION,
    Key,
    covers,
    drifted,
    stamped,
    strays,
    surplus,
    written_by,
)

UID = "uid-1"


def _deployment(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": "ns"},
        "spec": spec,
    }


CONTAINER = {"name": "server", "image": "vllm:1", "resources": {"limits": {"cpu": "1.5"}}}

COVERS = [
    # (case, live, desired, covered)
    ("same scalar", "a", "a", True),
    ("other scalar", "a", "b", False),
    ("a field we do not set", {"a": 1, "b": 2}, {"a": 1}, True),
    ("a field we set, missing", {"b": 2}, {"a": 1}, False),
    ("a field we set, differing", {"a": 2}, {"a": 1}, False),
    ("None desired: not ours", {"b": 2}, {"a": None}, True),
    ("quantity by value", {"requests": {"cpu": "1500m"}}, {"requests": {"cpu": "1.5"}}, True),
    ("quantity differing", {"limits": {"memory": "1Gi"}}, {"limits": {"memory": "1G"}}, False),
    ("number against quantity", {"replicas": 2}, {"replicas": "2"}, True),
    ("not a quantity", {"image": "a"}, {"image": 1}, False),
    ("float", {"ratio": 0.5}, {"ratio": 0.5}, True),
    ("bool", {"on": False}, {"on": True}, False),
    ("object where a scalar was", {"a": "x"}, {"a": {"b": 1}}, False),
    ("scalar where an object was", {"a": {"b": 1}}, {"a": "x"}, False),
    (
        "named list: another's entry kept",
        [{"name": "x", "v": 1}, {"name": "sidecar", "v": 9}],
        [{"name": "x", "v": 1}],
        True,
    ),
    (
        "named list: ours in another order",
        [{"name": "y", "v": 2}, {"name": "x", "v": 1}],
        [{"name": "x", "v": 1}, {"name": "y", "v": 2}],
        True,
    ),
    ("named list: ours differs", [{"name": "x", "v": 2}], [{"name": "x", "v": 1}], False),
    ("named list: ours missing", [{"name": "y", "v": 2}], [{"name": "x", "v": 1}], False),
    (
        "named list: another's unnamed entry kept",
        [{"name": "http", "containerPort": 8000}, {"containerPort": 9090}],
        [{"name": "http", "containerPort": 8000}],
        True,
    ),
    (
        "named list: only unnamed entries live",
        [{"containerPort": 8000}],
        [{"name": "http", "containerPort": 8000}],
        False,
    ),
    (
        "quantity in a device request's capacity",
        {"capacity": {"m": "16Gi"}},
        {"capacity": {"m": "16384Mi"}},
        True,
    ),
    ("a sizeLimit by value", {"sizeLimit": "1024Mi"}, {"sizeLimit": "1Gi"}, True),
    ("strings elsewhere as they are", {"value": "1.0"}, {"value": "1"}, False),
    ("an env value of zeros", [{"name": "N", "value": "00"}], [{"name": "N", "value": "0"}], False),
    ("a size as an env value", {"value": "1k"}, {"value": "1000"}, False),
    ("unnamed list: item for item", ["a", "b"], ["a", "b"], True),
    ("unnamed list: an extra item", ["a", "b", "c"], ["a", "b"], False),
    ("unnamed list: another order", ["b", "a"], ["a", "b"], False),
    ("tuple against list", ["a"], ("a",), True),
    ("empty list against nothing", None, [], True),
    ("a list against nothing", None, ["a"], False),
    (
        "other mapping types",
        {"a": {"b": 1}},
        MappingProxyType({"a": MappingProxyType({"b": 1})}),
        True,
    ),
    ("other mapping types differ", MappingProxyType({"a": 2}), {"a": 1}, False),
]


@pytest.mark.parametrize(
    ("live", "desired", "covered"), [c[1:] for c in COVERS], ids=[c[0] for c in COVERS]
)
def test_covers(live: Any, desired: Any, covered: bool) -> None:
    assert covers(live, desired) is covered


def test_drifted_names_what_is_missing_or_differs_and_ignores_server_defaults() -> None:
    desired = _deployment(replicas=1, template={"spec": {"containers": [CONTAINER]}})
    live_ok = _deployment(
        replicas=1,
        progressDeadlineSeconds=600,  # a server default
        template={"spec": {"containers": [{**CONTAINER, "terminationMessagePath": "/dev/x"}]}},
    )
    live_ok["apiVersion"] = "apps/v1beta1"  # read back under another version: not drift
    live_ok["status"] = {"replicas": 1}
    key = ("Deployment", "llm")
    assert drifted([desired], {key: live_ok}) == []
    live_scaled = _deployment(replicas=3, template={"spec": {"containers": [CONTAINER]}})
    assert drifted([desired], {key: live_scaled}) == [desired]
    assert drifted([desired], {}) == [desired]


def test_a_field_no_longer_rendered_is_drift_through_the_digest() -> None:
    """`covers` alone finds nothing when a render drops a field (the token's env entry):
    every field still set is live. The digest of what was rendered tells them apart, so
    the object is applied again and server-side apply removes the field."""
    token = {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "llm-auth"}}}
    before = _deployment(
        replicas=1, template={"spec": {"containers": [{**CONTAINER, "env": [token]}]}}
    )
    after = _deployment(replicas=1, template={"spec": {"containers": [CONTAINER]}})
    live = copy.deepcopy(stamped(before))
    live["status"] = {"replicas": 1}  # the server's own fields do not count
    key = ("Deployment", "llm")
    assert covers(live, after)  # what the digest is for
    assert drifted([stamped(before)], {key: live}) == []
    assert drifted([stamped(after)], {key: live}) == [stamped(after)]
    # The digest is of the content, not of the object's identity.
    again = stamped(copy.deepcopy(before))
    assert again["metadata"]["annotations"] == live["metadata"]["annotations"]
    assert RENDERED_ANNOTATION not in before["metadata"].get("annotations", {})  # a copy


def test_a_claim_capacity_the_server_dropped_is_not_drift() -> None:
    """A server without the DRAConsumableCapacity gate (alpha, off by default in 1.34)
    stores a Shared claim's template without its requests' `capacity`; the apply putting
    it back is a no-op there, so every pass found the template drifted and applied it
    again. Any other field of the template still counts."""
    exactly = {
        "deviceClassName": "gpu.nvidia.com",
        "count": 1,
        "capacity": {"requests": {"memory": "12032Mi"}},
    }
    desired = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "llm"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }
    live = copy.deepcopy(desired)
    del live["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]
    key = ("ResourceClaimTemplate", "llm")
    assert drifted([desired], {key: live}) == []
    live["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    assert drifted([desired], {key: live}) == [desired]


def test_a_key_added_to_a_services_selector_is_drift_and_removed_by_a_merge_patch() -> None:
    """A Service's selector must be exactly ours: one key more selects none of the
    order's pods. Keys added to other maps (labels, the pod template's labels) are not
    drift."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "llm", "labels": {"app": "llm"}},
        "spec": {"selector": {"uid": UID}, "ports": [{"name": "http", "port": 80}]},
    }
    live = copy.deepcopy(service)
    live["metadata"]["labels"]["team"] = "support"
    live["spec"]["clusterIP"] = "10.0.0.1"
    key = ("Service", "llm")
    assert drifted([service], {key: live}) == [] and surplus(live, service) is None
    live["spec"]["selector"].update(tier="nothing", zone="a")
    assert drifted([service], {key: live}) == [service]
    assert surplus(live, service) == {"spec": {"selector": {"tier": None, "zone": None}}}
    template = {"metadata": {"labels": {"uid": UID}}}
    desired = _deployment(selector={"matchLabels": {"uid": UID}}, template=template)
    labelled = copy.deepcopy(desired)
    labelled["spec"]["template"]["metadata"]["labels"]["team"] = "support"
    assert drifted([desired], {("Deployment", "llm"): labelled}) == []


MADE = "2026-12-03T10:00:00Z"
WRITTEN_BY = [
    # (case, managedFields entries, by "ours" with "Apply")
    ("our apply", [("ours", "Apply", "2026-12-03T10:05:00Z")], True),
    ("our apply that made it", [("ours", "Apply", MADE)], True),
    ("our update only", [("ours", "Update", "2026-12-03T10:05:00Z")], False),
    ("someone else's apply", [("kubectl", "Apply", "2026-12-03T10:05:00Z")], False),
    ("copied from an older object", [("ours", "Apply", "2026-12-03T09:00:00Z")], False),
    ("no entries", [], False),
]


@pytest.mark.parametrize(
    ("entries", "ours"), [c[1:] for c in WRITTEN_BY], ids=[c[0] for c in WRITTEN_BY]
)
def test_written_by(entries: list[tuple[str, str, str]], ours: bool) -> None:
    managed = [{"manager": m, "operation": op, "time": t} for m, op, t in entries]
    obj = {"metadata": {"creationTimestamp": MADE, "managedFields": managed}}
    assert written_by(obj, "ours", "Apply") is ours


def test_strays_are_ours_unrendered_and_not_being_deleted() -> None:
    def child(name: str, *, owner: str = UID, deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": name,
            "ownerReferences": [{"uid": owner, "controller": True}],
        }
        if deleting:
            meta["deletionTimestamp"] = "2026-12-03T00:00:00Z"
        return {"kind": "Service", "metadata": meta}

    rendered = [child("kept")]
    children = [
        child("kept"),
        child("old"),
        child("others", owner="uid-2"),
        child("going", deleting=True),
    ]
    assert [s["metadata"]["name"] for s in strays(rendered, children, UID)] == ["old"]


# --- Converged: what a converged verdict rests on ---------------------------------------

RENDERED = [
    {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "llm", "labels": {"app": "llm"}},
        "spec": {"ports": [{"name": "http", "port": 80}]},
    }
]


def _found_live() -> tuple[Converged, dict[Key, dict[str, Any]]]:
    service = {
        "kind": "Service",
        "metadata": {"name": "llm", "labels": {"app": "llm"}, "resourceVersion": "1"},
        "spec": {"ports": [{"name": "http", "port": 80}], "clusterIP": "10.0.0.1"},
    }
    token = {"kind": "Secret", "metadata": {"name": "llm-auth", "ownerReferences": [{"uid": "u"}]}}
    live: dict[Key, dict[str, Any]] = {("Service", "llm"): service, ("Secret", "llm-auth"): token}
    converged = Converged()
    converged.found("u", ("inputs",), RENDERED, live)
    return converged, live


def _with(live: dict[Key, dict[str, Any]], key: Key, **fields: Any) -> dict[Key, dict[str, Any]]:
    return {**live, key: {**live[key], **fields}}


SERVICE: Key = ("Service", "llm")
TOKEN: Key = ("Secret", "llm-auth")


def test_a_converged_verdict_holds_while_what_it_read_is_the_same() -> None:
    converged, live = _found_live()
    assert converged.holds("u", ("inputs",), live)
    # A new version whose managed parts are the very objects (the cache shares them), or
    # equal ones: the verdict holds.
    moved = _with(live, SERVICE, status={"loadBalancer": {}})
    moved[SERVICE]["metadata"] = {**live[SERVICE]["metadata"], "resourceVersion": "2"}
    assert converged.holds("u", ("inputs",), moved)
    assert converged.holds(
        "u", ("inputs",), _with(live, SERVICE, spec=copy.deepcopy(live[SERVICE]["spec"]))
    )
    assert converged.hits == 3


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda live: _with(live, SERVICE, spec={"ports": []}), id="a-managed-part"),
        pytest.param(
            lambda live: _with(live, SERVICE, metadata={"name": "llm", "labels": {}}),
            id="a-label",
        ),
        pytest.param(
            lambda live: _with(live, TOKEN, metadata={"name": "llm-auth", "ownerReferences": []}),
            id="an-owner-reference",
        ),
        pytest.param(lambda live: {SERVICE: live[SERVICE]}, id="a-child-gone"),
        pytest.param(lambda live: {**live, ("Service", "other"): live[SERVICE]}, id="a-child-more"),
        pytest.param(
            lambda live: {("Service", "llm2"): live[SERVICE], TOKEN: live[TOKEN]},
            id="another-child-of-the-same-count",
        ),
    ],
)
def test_a_converged_verdict_fails_when_what_it_read_changed(change: Any) -> None:
    converged, live = _found_live()
    assert not converged.holds("u", ("inputs",), change(live))
    assert converged.hits == 0


def test_a_converged_verdict_is_per_order_and_per_inputs() -> None:
    converged, live = _found_live()
    assert not converged.holds("u", ("other inputs",), live)
    assert not converged.holds("v", ("inputs",), live)
    converged.forget("u")
    assert not converged.holds("u", ("inputs",), live)


def test_a_rendered_object_not_live_is_not_converged() -> None:
    converged = Converged()
    converged.found("u", ("inputs",), RENDERED, {})
    assert not converged.holds("u", ("inputs",), {})
