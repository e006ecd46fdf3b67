"""The CustomCertificate copy, pass by pass over the fake world: writes counted.

The copy is made once, a quiet pass writes nothing, a changed source or an edited copy
costs one delete and one create (never an apply or a patch of a Secret), and a missing
source is one `CertificateSecretMissing` however many passes look at it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_pass
from test_pass import Bed, external_token_class

from adapters.kubernetes.certificates import DATA_DIGESTS, data_digests
from adapters.kubernetes.settings import Settings
from fsm import events as ev
from fsm import policy
from fsm.policy import ClassValidity
from fsm.reasons import Reason
from tests.support import fakes

SOURCE_NS = "d8-ai-inference"  # the Reconciler's default: the module's namespace
COPY = "llm-certificate"


def source(data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "wild", "namespace": SOURCE_NS},
        "type": "kubernetes.io/tls",
        "data": data,
    }


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[Bed]:
    handle = Bed(tmp_path)
    klass = external_token_class()
    klass["spec"]["exposurePolicy"]["https"] = {
        "mode": "CustomCertificate",
        "customCertificate": {"secretName": "wild"},
    }
    fakes.put(handle.world, klass)
    yield handle
    handle.log.close()


def secret_writes(bed: Bed) -> dict[str, int]:
    return {verb: bed.writer.calls[(verb, "Secret")] for verb in ("apply", "patch")}


def _holds(cached: dict[str, Any], data: dict[str, str]) -> bool:
    """Does the cached copy hold `data`? The cache keeps its keys' digests, not the key."""
    assert "tls.key" not in (cached.get("data") or {})
    return data_digests(cached) == data_digests({"data": data})


def test_a_missing_source_is_one_named_failure_and_nothing_is_applied(bed: Bed) -> None:
    uid = bed.order("llm")
    bed.settle(uid, passes=5)
    (failed,) = bed.events(uid, ev.WorkloadApplyFailed)
    assert failed.reason is Reason.CERTIFICATE_SECRET_MISSING
    assert "'wild' does not exist in namespace d8-ai-inference" in failed.message
    assert bed.child("Deployment", "llm") is None and bed.child("Ingress", "llm") is None
    # The source appears (the refresh that sees it wakes the order): all is applied.
    fakes.put(bed.world, source({"tls.crt": "Yw==", "tls.key": "aw=="}))
    bed.settle(uid)
    made = bed.child("Secret", COPY)
    assert made is not None and _holds(made, {"tls.crt": "Yw==", "tls.key": "aw=="})
    ingress = bed.child("Ingress", "llm")
    assert ingress is not None and ingress["spec"]["tls"][0]["secretName"] == COPY
    assert len(bed.events(uid, ev.WorkloadApplied)) == 1


def test_the_copy_is_made_once_and_kept_equal_by_delete_and_create(bed: Bed) -> None:
    fakes.put(bed.world, source({"tls.crt": "Yw==", "tls.key": "aw=="}))
    uid = bed.order("llm")
    bed.settle(uid)
    assert bed.writer.calls[("create", "Secret")] == 2  # the token, and the copy
    quiet = bed.writer.writes
    bed.settle(uid, passes=5)
    assert bed.writer.writes == quiet

    # The source rotated: the copy follows, made anew.
    first = bed.child("Secret", COPY)
    fakes.put(bed.world, source({"tls.crt": "YzI=", "tls.key": "azI="}))
    bed.settle(uid)
    second = bed.child("Secret", COPY)
    assert first is not None and second is not None
    assert _holds(second, {"tls.crt": "YzI=", "tls.key": "azI="})
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert (bed.writer.calls[("delete", "Secret")], bed.writer.calls[("create", "Secret")]) == (
        1,
        3,
    )

    # Someone edits the copy: put back the same way, counted as a repair.
    edited = copy.deepcopy(second)
    del edited[DATA_DIGESTS]  # as a watch event brings it: the data, which the cache digests
    edited["data"] = {"tls.crt": "YzI=", "tls.key": "ZXZpbA=="}
    fakes.put(bed.world, edited)
    repairs = bed.reconciler.actor.repairs
    bed.settle(uid)
    third = bed.child("Secret", COPY)
    assert third is not None and _holds(third, {"tls.crt": "YzI=", "tls.key": "azI="})
    assert bed.reconciler.actor.repairs == repairs + 1
    assert (bed.writer.calls[("delete", "Secret")], bed.writer.calls[("create", "Secret")]) == (
        2,
        4,
    )
    assert secret_writes(bed) == {"apply": 0, "patch": 0}  # never an update of a Secret
    assert len(bed.events(uid, ev.WorkloadApplied)) == 1  # repairs are not new plans


def test_a_copy_gone_with_its_order_is_not_made_again(bed: Bed) -> None:
    """The order deleted on the server while the cache still holds it, and its copy
    collected by the garbage collector: the copy's deletion wakes the order, and a copy
    made again would be collected and wake it again. The order is read live first."""
    fakes.put(bed.world, source({"tls.crt": "Yw==", "tls.key": "aw=="}))
    uid = bed.order("llm")
    bed.settle(uid)
    made = bed.child("Secret", COPY)
    assert made is not None
    creates = bed.writer.calls[("create", "Secret")]
    with bed.order_gone_on_the_server() as asked:
        fakes.drop(bed.world, made)
        bed.settle(uid, passes=5)
    assert bed.writer.calls[("create", "Secret")] == creates
    assert asked == ["llm"] * 5
    bed.settle(uid)
    assert bed.writer.calls[("create", "Secret")] == creates + 1
    assert bed.child("Secret", COPY) is not None


def test_a_plan_applied_before_a_class_had_to_name_its_secret_renders_as_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A class in CustomCertificate mode naming no Secret once fell back to the module's;
    such a class is not Ready now (`CertificateSecretUnnamed`). The workload applied
    under it renders as it was applied, and when nothing names a Secret any more the
    order is told (`WorkloadApplyFailed`): no pass raises."""
    wild = Settings(
        publicDomainTemplate="%s.example.com",
        https={"mode": "CustomCertificate", "customCertificate": {"secretName": "wild"}},
    )
    monkeypatch.setattr(test_pass, "SETTINGS", wild)
    bed = Bed(tmp_path)
    klass = external_token_class()
    klass["spec"]["exposurePolicy"]["https"] = {"mode": "CustomCertificate"}
    fakes.put(bed.world, klass)
    fakes.put(bed.world, source({"tls.crt": "Yw==", "tls.key": "aw=="}))
    try:
        with monkeypatch.context() as before_the_rule:
            before_the_rule.setattr(policy, "validate_class", lambda *_a, **_k: ClassValidity())
            uid = bed.order("llm")
            bed.settle(uid)
        applied = bed.events(uid, ev.WorkloadApplied)
        ingress = bed.child("Ingress", "llm")
        assert len(applied) == 1 and ingress is not None
        assert ingress["spec"]["tls"][0]["secretName"] == COPY

        writes = bed.writer.writes
        bed.settle(uid)  # the class is refused now; what runs stays as applied
        assert bed.conditions(uid)["ClassResolved"]["reason"] == "ClassNotReady"
        assert "CertificateSecretUnnamed" in bed.conditions(uid)["ClassResolved"]["message"]
        assert bed.child("Ingress", "llm") == ingress
        assert len(bed.events(uid, ev.WorkloadApplied)) == 1
        assert bed.writer.writes - writes <= 2  # the status, and its Event

        nameless = Settings(publicDomainTemplate="%s.example.com")  # names no Secret now
        monkeypatch.setattr(test_pass, "SETTINGS", nameless)
        bed.settle(uid)
        (failed,) = bed.events(uid, ev.WorkloadApplyFailed)
        assert "names no Secret" in failed.message
    finally:
        bed.log.close()


def test_a_copy_under_the_older_name_is_replaced_and_pruned(bed: Bed) -> None:
    """Releases before this one named the copy `{order}-custom-tls`, which is also the
    cert-manager Secret of an order named `{order}-custom`. An order served so moves to
    the new name: the copy made first, then the Ingress naming it, then the old copy
    pruned (it is the order's own: owned and labelled)."""
    fakes.put(bed.world, source({"tls.crt": "Yw==", "tls.key": "aw=="}))
    uid = bed.order("llm")
    bed.settle(uid)
    made = bed.child("Secret", COPY)
    assert made is not None
    older = copy.deepcopy(made)
    older["metadata"]["name"] = "llm-custom-tls"
    older["metadata"].pop("uid")
    fakes.put(bed.world, older)  # as an older release left it
    deletes = bed.writer.calls[("delete", "Secret")]
    bed.settle(uid)
    assert bed.child("Secret", "llm-custom-tls") is None
    assert bed.child("Secret", COPY) is not None
    assert bed.writer.calls[("delete", "Secret")] == deletes + 1
    ingress = bed.child("Ingress", "llm")
    assert ingress is not None and ingress["spec"]["tls"][0]["secretName"] == COPY
    quiet = bed.writer.writes
    bed.settle(uid, passes=3)
    assert bed.writer.writes == quiet


def test_a_disowned_copy_no_longer_rendered_is_pruned(bed: Bed) -> None:
    """The copy (the certificate's private key) and its Ingress lose their owner
    references (a trimmed `kubectl replace`), then the class goes ClusterLocal. The copy
    is created, never applied: taken for someone else's, it outlived the switch and the
    order, the key with it."""
    fakes.put(bed.world, source({"tls.crt": "Yw==", "tls.key": "aw=="}))
    uid = bed.order("llm")
    bed.settle(uid)
    for kind, name in (("Ingress", "llm"), ("Secret", COPY)):
        child = bed.child(kind, name)
        assert child is not None
        child["metadata"].pop("ownerReferences")
        fakes.put(bed.world, child)
    klass = bed.world.classes.get_by_name(None, "conv")
    assert klass is not None
    klass["spec"]["exposurePolicy"] = {"type": "ClusterLocal", "authentication": "None"}
    klass["metadata"]["generation"] = 2
    fakes.put(bed.world, klass)
    bed.settle(uid)
    assert bed.child("Ingress", "llm") is None
    assert bed.child("Secret", COPY) is None


def test_a_disowned_copy_still_rendered_is_made_again(bed: Bed) -> None:
    """The copy's owner reference removed while its Ingress still names it: taken for
    someone else's, each pass's create was refused (409), WorkloadApplyFailed for good."""
    fakes.put(bed.world, source({"tls.crt": "Yw==", "tls.key": "aw=="}))
    uid = bed.order("llm")
    bed.settle(uid)
    copied = bed.child("Secret", COPY)
    assert copied is not None
    copied["metadata"].pop("ownerReferences")
    fakes.put(bed.world, copied)
    bed.settle(uid)
    again = bed.child("Secret", COPY)
    assert again is not None and again["metadata"].get("ownerReferences")
    assert bed.conditions(uid)["WorkloadReady"]["reason"] != "WorkloadApplyFailed"
    writes = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == writes
