"""The bed's API server refuses what 1.34 refuses of the DRA kinds (admission.py): an
update of a claim template's or a claim's spec is a 422, as the controller meets it on a
real cluster; what may change (labels, a claim's status) still does."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapters.cluster import admission
from adapters.kubernetes import errors, kinds
from adapters.kubernetes.rest import call

pytestmark = pytest.mark.cluster

NAMESPACE = "default"


def _template(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": 1}}
                    ]
                }
            }
        },
    }


def _claim(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": _template(name, device_class)["spec"]["spec"],
    }


@pytest.mark.parametrize(
    ("resource", "make"),
    [(kinds.RESOURCE_CLAIM_TEMPLATES, _template), (kinds.RESOURCE_CLAIMS, _claim)],
    ids=["template", "claim"],
)
def test_a_spec_cannot_change_in_place_but_labels_can(cluster, resource, make) -> None:
    api = cluster.api_client("admin")
    name = f"immutable-{resource.plural}"
    created = call(api, "POST", resource.collection_path(NAMESPACE), body=make(name, "gpu.a100"))
    try:
        edited = make(name, "gpu.t4")
        edited["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
        with pytest.raises(errors.APIInvalidError) as refused:
            call(api, "PUT", resource.object_path(NAMESPACE, name), body=edited)
        assert "field is immutable" in str(refused.value)
        assert admission.WEBHOOK_NAME in str(refused.value)

        # Server-side apply, as the controller writes: refused the same way.
        applied = make(name, "gpu.t4")
        with pytest.raises(errors.APIInvalidError):
            call(
                api,
                "PATCH",
                resource.object_path(NAMESPACE, name),
                body=applied,
                query=[("fieldManager", "test"), ("force", "true")],
                content_type="application/apply-patch+yaml",
            )

        labelled = copy.deepcopy(created)
        labelled["metadata"]["labels"] = {"touched": "yes"}
        kept = call(api, "PUT", resource.object_path(NAMESPACE, name), body=labelled)
        assert kept["metadata"]["labels"] == {"touched": "yes"}
        assert kept["spec"] == created["spec"]
    finally:
        call(api, "DELETE", resource.object_path(NAMESPACE, name))


@pytest.mark.parametrize(
    ("review", "allowed"),
    [
        ({"operation": "UPDATE", "resource": {"resource": "resourceclaimtemplates"}}, True),
        (
            {
                "operation": "UPDATE",
                "resource": {"resource": "resourceclaims"},
                "subResource": "status",
                "object": {"spec": {"a": 1}},
                "oldObject": {"spec": {"a": 2}},
            },
            True,
        ),
        (
            {
                "operation": "UPDATE",
                "resource": {"resource": "resourceslices"},
                "object": {"spec": {"a": 1}},
                "oldObject": {"spec": {"a": 2}},
            },
            True,
        ),
        (
            {
                "operation": "UPDATE",
                "resource": {"resource": "resourceclaims"},
                "object": {"spec": {"a": 1}},
                "oldObject": {"spec": {"a": 2}},
            },
            False,
        ),
    ],
    ids=["same spec", "claim status", "another kind", "claim spec changed"],
)
def test_only_a_changed_spec_of_the_two_kinds_is_refused(review, allowed) -> None:
    answer = admission.judge({"request": {"uid": "u-1", **review}})["response"]
    assert answer["uid"] == "u-1"
    assert answer["allowed"] is allowed
    if not allowed:
        assert answer["status"]["code"] == 422
