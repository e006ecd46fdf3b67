"""The drift rules (converging.py) as a table: what the server or others add is not
drift, what we set and differs is, lists of named items match by name."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from adapters.kubernetes.converging import covers, drifted, strays

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
    ("quantity by value", {"cpu": "1500m"}, {"cpu": "1.5"}, True),
    ("quantity differing", {"memory": "1Gi"}, {"memory": "1G"}, False),
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
