"""Writes against the real API server: server-side apply, status, Events."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from adapters.kubernetes import converging, errors, writing
from adapters.kubernetes.rest import CONFIG_MAPS, EVENTS, Resource, call
from tests.support import polling

GROUP = "testing.ai-inference.io"
GADGETS = Resource(GROUP, "v1", "gadgets", "Gadget")
OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
GADGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"gadgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {"spec": OPEN, "status": OPEN},
                    }
                },
            }
        ],
    },
}


def eventually(predicate: Callable[[], Any], timeout: float = 20.0) -> Any:
    return polling.eventually(predicate, timeout=timeout, interval=0.1, tolerate=(errors.APIError,))


@pytest.fixture
def admin(cluster) -> client.ApiClient:
    return cluster.api_client("admin")


@pytest.fixture
def writer(admin) -> writing.Writer:
    return writing.Writer(admin, instance="test-instance")


@pytest.fixture
def namespace(admin) -> Iterator[str]:
    name = f"write-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _established(admin: client.ApiClient) -> bool:
    crd = call(
        admin,
        "GET",
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{GADGET_CRD['metadata']['name']}",
    )
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def gadgets(cluster) -> Iterator[Resource]:
    """A CRD with a status subresource, installed by our own server-side apply."""
    admin = cluster.api_client("admin")
    installer = writing.Writer(admin)
    installer.apply(GADGET_CRD)
    eventually(lambda: _established(admin))
    eventually(lambda: installer.resource_for(GADGETS.api_version, "Gadget"))
    yield GADGETS
    call(
        admin,
        "DELETE",
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{GADGET_CRD['metadata']['name']}",
    )


def config_map(namespace: str, name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def gadget(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": GADGETS.api_version,
        "kind": "Gadget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


@pytest.mark.cluster
def test_apply_creates_then_updates_and_returns_the_object(writer, namespace) -> None:
    created = writer.apply(config_map(namespace, "applied", a="1"))
    # A create answers 201; the object still comes back.
    assert created["metadata"]["uid"] and created["data"] == {"a": "1"}
    updated = writer.apply(config_map(namespace, "applied", a="2", b="3"))
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert updated["data"] == {"a": "2", "b": "3"}
    managers = {(m["manager"], m["operation"]) for m in updated["metadata"]["managedFields"]}
    assert managers == {(writing.FIELD_MANAGER, "Apply")}


@pytest.mark.cluster
def test_apply_takes_fields_another_manager_owns(admin, writer, namespace) -> None:
    other = writing.Writer(admin, field_manager="someone-else")
    other.apply(config_map(namespace, "contested", a="theirs"))
    mine = writer.apply(config_map(namespace, "contested", a="ours"))
    assert mine["data"] == {"a": "ours"}  # forced: no 409 over the field


def service(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}], **spec},
    }


@pytest.mark.cluster
def test_refused_tells_a_manifest_the_api_refuses_on_its_own_and_stores_nothing(
    admin, writer, namespace
) -> None:
    """The Actor asks before it makes an object anew (acting.py): a 422 that comes from
    the manifest itself must not delete what runs."""
    core = client.CoreV1Api(admin)
    wanted = service(namespace, "kept", type="ClusterIP")
    writer.apply(wanted)
    writes = writer.writes
    assert writer.refused(wanted) is None  # valid on its own, though its name is taken
    bad = service(namespace, "bad", type="ClusterIP", sessionAffinity="Sometimes")
    refusal = writer.refused(bad)
    assert isinstance(refusal, errors.APIInvalidError) and "sessionAffinity" in str(refusal)
    # The same refusal, word for word, each time, also under a taken name: the core says
    # a refusal once and backs off, and a new message each time (a generated name in it)
    # was a new event and a new pass at once, for ever.
    taken = service(namespace, "kept", type="ClusterIP", sessionAffinity="Sometimes")
    first, again = writer.refused(taken), writer.refused(taken)
    assert isinstance(first, errors.APIInvalidError) and isinstance(again, errors.APIInvalidError)
    assert str(first) == str(again) and '"kept"' in str(first)
    # Dry runs: nothing stored and no write counted.
    assert writer.writes == writes
    names = [s.metadata.name for s in core.list_namespaced_service(namespace).items]
    assert names == ["kept"]


@pytest.mark.cluster
def test_our_writes_in_managed_fields_tell_ours_without_owner_from_a_users_copy(
    admin, writer, namespace
) -> None:
    """What the pass reads of a labelled child no order controls (converging.disowned):
    our owner references removed by someone else's patch leave our apply in the object's
    managedFields, and our apply puts them back; a copy made of it
    by someone else's create (`kubectl replace --force` from a saved manifest, its
    managedFields and all) shows no write of ours to it. Creates are ours by name too."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    owner = writer.apply(config_map(namespace, "owner"))
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    child = config_map(namespace, "child", a="1")
    child["metadata"]["ownerReferences"] = [reference]
    writer.apply(child)
    stripped = call(
        admin,
        "PATCH",
        f"{path}/child",
        body=[{"op": "remove", "path": "/metadata/ownerReferences"}],
        content_type="application/json-patch+json",
    )
    assert not converging.controlled(stripped)
    assert converging.written_by(stripped, writing.FIELD_MANAGER, "Apply")
    assert converging.controlled(writer.apply(child))  # applied again: owned again

    saved = copy.deepcopy(stripped)  # with its managedFields, as an old kubectl saved them
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        saved["metadata"].pop(key)
    call(admin, "DELETE", f"{path}/child")
    time.sleep(1.1)  # our entries' times are to the second
    made = call(admin, "POST", path, body=saved)
    assert not converging.written_by(made, writing.FIELD_MANAGER, "Apply")

    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "created", "namespace": namespace},
        "data": {"token": "eA=="},
    }
    assert converging.written_by(writer.create(secret), writing.FIELD_MANAGER, "Update")


@pytest.mark.cluster
def test_apply_a_custom_resource(writer, namespace, gadgets) -> None:
    created = writer.apply(gadget(namespace, "g1", size=1))
    assert created["kind"] == "Gadget" and created["spec"] == {"size": 1}
    assert writer.apply(gadget(namespace, "g1", size=2))["spec"] == {"size": 2}


@pytest.mark.cluster
def test_status_is_written_only_when_it_changes(admin, writer, namespace, gadgets) -> None:
    obj = writer.apply(gadget(namespace, "st", size=1))
    writes = writer.writes
    rv = obj["metadata"]["resourceVersion"]
    first = writer.write_status(gadgets, namespace, "st", {"phase": "Pending", "extra": 1}, rv)
    assert first is not None and first["status"] == {"phase": "Pending", "extra": 1}
    assert first["spec"] == {"size": 1}  # the status write left the spec alone
    rv = first["metadata"]["resourceVersion"]

    # The same status again, by memory or against the cached copy: no request at all.
    assert (
        writer.write_status(gadgets, namespace, "st", {"phase": "Pending", "extra": 1}, rv) is None
    )
    assert (
        writer.write_status(
            gadgets,
            namespace,
            "st",
            {"phase": "Pending", "extra": 1, "gone": None},
            rv,
            current=first["status"],
        )
        is None
    )
    assert writer.writes == writes + 1
    stored = call(admin, "GET", gadgets.object_path(namespace, "st"))
    assert stored["metadata"]["resourceVersion"] == rv

    # A new status replaces the old one whole.
    second = writer.write_status(gadgets, namespace, "st", {"phase": "Ready"}, rv)
    assert second is not None and second["status"] == {"phase": "Ready"}
    assert writer.writes == writes + 2


@pytest.mark.cluster
def test_the_version_a_status_write_returned_is_known_as_its_echo_once(
    admin, writer, namespace, gadgets
) -> None:
    obj = writer.apply(gadget(namespace, "echo", size=1))
    assert not writer.is_status_echo(obj)  # an apply is not a status write
    written = writer.write_status(gadgets, namespace, "echo", {"phase": "Pending"}, basis=obj)
    assert written is not None
    stored = call(admin, "GET", gadgets.object_path(namespace, "echo"))
    assert writer.is_status_echo(stored)  # what the watch brings back is that version
    assert not writer.is_status_echo(stored)  # once: a second look is not an echo
    writer.write_status(gadgets, namespace, "echo", {"phase": "Ready"}, basis=stored)
    moved = writer.apply(gadget(namespace, "echo", size=2))  # someone moved it on
    assert not writer.is_status_echo(moved)


@pytest.mark.cluster
def test_a_status_write_that_changed_nothing_takes_no_later_edit_for_its_echo(
    admin, writer, namespace, gadgets
) -> None:
    """A pass whose cache is behind writes a status the server holds already (a writer
    that does not remember writing it: another process's, or one restarted since); the
    server changes nothing and answers with the object as it stands, at the version of
    the user's edit since. That edit's event is news: taken for our echo, the edit was
    never reconciled (the crash matrix's replan order stuck at its first generation)."""
    seen = writer.apply(gadget(namespace, "behind", size=1))  # what the cache holds
    first = writer.write_status(gadgets, namespace, "behind", {"phase": "Ready"}, basis=seen)
    assert first is not None
    edited = call(
        admin,
        "PATCH",
        gadgets.object_path(namespace, "behind"),
        body={"spec": {"size": 2}},
        content_type="application/merge-patch+json",
    )
    # The cache still shows `seen`, without the status: the same status is written again.
    restarted = writing.Writer(admin)
    again = restarted.write_status(
        gadgets, namespace, "behind", {"phase": "Ready"}, current={}, basis=seen
    )
    assert again is not None
    version = edited["metadata"]["resourceVersion"]
    assert again["metadata"]["resourceVersion"] == version  # the server wrote nothing
    assert not restarted.is_status_echo(edited)  # the edit still wakes its order
    assert not writer.is_status_echo(edited)


@pytest.mark.cluster
def test_a_cache_behind_our_own_status_write_sends_it_no_second_time(
    admin, writer, namespace, gadgets
) -> None:
    """The next pass can run before the write's echo reaches the cache: it decides from
    the same version as the write did and renders the same status, which the server
    holds already. Sent again, it cost a full status write that changed nothing
    (0.38 an order in a 100-order rollout)."""
    seen = writer.apply(gadget(namespace, "echoing", size=1))  # what the cache holds
    first = writer.write_status(gadgets, namespace, "echoing", {"phase": "Ready"}, basis=seen)
    assert first is not None
    writes = writer.writes
    again = writer.write_status(
        gadgets, namespace, "echoing", {"phase": "Ready"}, current={}, basis=seen
    )
    assert again is None and writer.writes == writes
    # Something new to say is said, cache behind or not.
    newer = writer.write_status(
        gadgets, namespace, "echoing", {"phase": "Degraded"}, current={}, basis=seen
    )
    assert newer is not None and newer["status"] == {"phase": "Degraded"}
    # Someone else's status since: the cache moves past the version the write was
    # decided from, and the status is compared with what is there (repaired).
    theirs = call(
        admin,
        "PATCH",
        gadgets.object_path(namespace, "echoing", "status"),
        body={"status": {"phase": "Tampered"}},
        content_type="application/merge-patch+json",
    )
    repaired = writer.write_status(
        gadgets,
        namespace,
        "echoing",
        {"phase": "Degraded"},
        current=theirs["status"],
        basis=theirs,
    )
    assert repaired is not None and repaired["status"] == {"phase": "Degraded"}


@pytest.mark.cluster
def test_a_status_from_a_stale_read_conflicts(admin, writer, namespace, gadgets) -> None:
    stale = writer.apply(gadget(namespace, "racy", size=1))["metadata"]["resourceVersion"]
    writer.apply(gadget(namespace, "racy", size=2))  # the object moved on
    with pytest.raises(errors.APIConflictError):
        writer.write_status(gadgets, namespace, "racy", {"phase": "Ready"}, stale)
    stored = call(admin, "GET", gadgets.object_path(namespace, "racy"))
    assert "status" not in stored


@pytest.mark.cluster
def test_repeated_events_bump_one_count(cluster, admin, writer, namespace) -> None:
    involved = writer.apply(config_map(namespace, "storied"))
    first = writer.event(involved, "ModelResolved", "found the model")
    again = writer.event(involved, "ModelResolved", "found the model")
    other = writer.event(involved, "PlacementFailed", "no node fits", event_type="Warning")
    assert again["metadata"]["name"] == first["metadata"]["name"] and again["count"] == 2
    listed = call(admin, "GET", EVENTS.collection_path(namespace))["items"]
    by_reason = {e["reason"]: e for e in listed}
    assert set(by_reason) == {"ModelResolved", "PlacementFailed"}
    assert by_reason["ModelResolved"]["count"] == 2
    warning = by_reason["PlacementFailed"]
    assert warning["type"] == "Warning" and warning["metadata"]["name"] == other["metadata"]["name"]
    assert warning["involvedObject"]["uid"] == involved["metadata"]["uid"]
    assert warning["reportingComponent"] == writing.COMPONENT
    described = cluster.kubectl("admin", "describe", "configmap", "storied", "-n", namespace).stdout
    assert "PlacementFailed" in described and "no node fits" in described


@pytest.mark.cluster
def test_an_expired_event_is_recorded_anew(admin, writer, namespace) -> None:
    involved = writer.apply(config_map(namespace, "forgetful"))
    first = writer.event(involved, "Planned", "placed")
    call(admin, "DELETE", EVENTS.object_path(namespace, first["metadata"]["name"]))
    again = writer.event(involved, "Planned", "placed")
    assert again["metadata"]["name"] != first["metadata"]["name"] and again["count"] == 1


@pytest.mark.cluster
def test_an_unknown_kind_is_not_found(writer) -> None:
    with pytest.raises(errors.APINotFoundError):
        writer.resource_for("v1", "NoSuchKind")
    assert writer.resource_for("v1", "ConfigMap") == CONFIG_MAPS


@pytest.mark.parametrize(
    ("current", "desired", "differs"),
    [
        pytest.param(None, {}, False, id="nothing-vs-empty"),
        pytest.param({"phase": "A"}, {"phase": "A"}, False, id="equal"),
        pytest.param({"phase": "A"}, {"phase": "A", "x": None}, False, id="null-is-absent"),
        pytest.param({"phase": "A"}, {"phase": "B"}, True, id="changed"),
        pytest.param({"c": [{"t": 1}]}, {"c": [{"t": 1, "m": None}]}, False, id="nested-null"),
        pytest.param({"c": [1, 2]}, {"c": [2, 1]}, True, id="list-order-matters"),
        pytest.param({"phase": "A", "x": 1}, {"phase": "A"}, True, id="field-dropped"),
    ],
)
def test_status_differs(current, desired, differs) -> None:
    assert writing.status_differs(current, desired) is differs
