"""The order's copy of a CustomCertificate Secret: its shape, equality, and what is read."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapters.kubernetes import certificates, converging
from adapters.kubernetes.certificates import CertificateSecretMissing
from adapters.kubernetes.rendering import UID_LABEL, owner_reference
from adapters.kubernetes.world import trim_secret
from fsm.identity import OrderRef

ORDER = OrderRef(name="support-llm", namespace="support", uid="u-1", generation=3)
SOURCE = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {
        "name": "wild",
        "namespace": "d8-ai-inference",
        "uid": "s-1",
        "labels": {"x": "y"},
    },
    "type": "kubernetes.io/tls",
    "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"},
}


def copy_of(source: dict[str, Any] | None = SOURCE) -> dict[str, Any]:
    return certificates.copy_of(ORDER, source, namespace="d8-ai-inference", name="wild")


def test_the_copy_is_the_orders_child_in_its_namespace_with_the_source_data() -> None:
    made = copy_of()
    meta = made["metadata"]
    assert (meta["name"], meta["namespace"]) == ("support-llm-certificate", "support")
    assert meta["labels"][UID_LABEL] == "u-1"
    assert converging.owned_by(made, "u-1")
    assert meta["annotations"] == {"ai.deckhouse.io/certificate-source": "d8-ai-inference/wild"}
    assert (made["type"], made["data"]) == (SOURCE["type"], SOURCE["data"])
    assert "x" not in meta["labels"]  # the source's own metadata is not carried over
    assert made["data"] is not SOURCE["data"]


def test_a_missing_source_is_named_without_a_crash() -> None:
    with pytest.raises(CertificateSecretMissing, match="'wild' does not exist in namespace d8-"):
        copy_of(None)


@pytest.mark.parametrize(
    "source",
    [
        {**SOURCE, "type": "Opaque", "data": {"password": "aHVudGVyMg=="}},
        {**SOURCE, "type": "Opaque"},  # a certificate's keys, not a certificate's type
        {**SOURCE, "data": {"tls.crt": "Y2VydA=="}},  # no key
    ],
    ids=["opaque", "opaque-with-tls-keys", "no-key"],
)
def test_only_a_certificate_is_ever_copied(source: dict[str, Any]) -> None:
    """Whoever names the source (a class, the settings) may read the namespace the copy
    lands in: naming the store's password Secret must not put it there."""
    with pytest.raises(CertificateSecretMissing, match=r"is not a kubernetes\.io/tls Secret"):
        copy_of(source)


def test_a_copy_carries_the_certificate_and_nothing_else() -> None:
    extra = {**SOURCE["data"], "ca.crt": "Y2E=", "password": "aHVudGVyMg=="}
    made = copy_of({**SOURCE, "data": extra})
    assert made["data"] == {"tls.crt": "Y2VydA==", "tls.key": "a2V5", "ca.crt": "Y2E="}


def _live(desired: dict[str, Any], **changes: Any) -> dict[str, Any]:
    live = copy.deepcopy(desired)
    live["metadata"].update(
        uid="c-1", resourceVersion="7", creationTimestamp="2026-01-01T00:00:00Z"
    )
    live.update(changes)
    return live


@pytest.mark.parametrize(
    ("changes", "equal"),
    [
        ({}, True),
        ({"data": {"tls.crt": "Y2VydA==", "tls.key": "b3RoZXI="}}, False),  # the source rotated
        ({"data": {"tls.crt": "Y2VydA=="}}, False),  # a key missing
        # A key the source does not have must go too: the copy equals the source.
        ({"data": {**SOURCE["data"], "ca.crt": "Y2E="}}, False),
        ({"type": "Opaque"}, False),
    ],
    ids=["same", "rotated", "key-missing", "extra-key", "other-type"],
)
def test_the_copy_is_equal_only_with_the_same_type_and_exactly_the_same_data(
    changes: dict[str, Any], equal: bool
) -> None:
    desired = copy_of()
    assert certificates.same(_live(desired, **changes), desired) is equal


def test_a_copy_whose_labels_were_edited_is_not_equal() -> None:
    desired = copy_of()
    live = _live(desired)
    live["metadata"]["labels"] = {UID_LABEL: "someone-else"}
    assert not certificates.same(live, desired)


def test_sources_are_the_settings_secret_and_each_custom_class_secret() -> None:
    specs = [
        {"exposurePolicy": {"https": {"mode": "CustomCertificate",
                                      "customCertificate": {"secretName": "class-one"}}}},
        {"exposurePolicy": {"https": {"mode": "CustomCertificate"}}},  # falls back: settings'
        {"exposurePolicy": {"https": {"mode": "CertManager",
                                      "customCertificate": {"secretName": "unused"}}}},
        {"exposurePolicy": {"type": "ClusterLocal"}},
        {},
    ]  # fmt: skip
    assert certificates.sources("d8-ai-inference", "wild", specs) == {
        "d8-ai-inference/wild",
        "d8-ai-inference/class-one",
    }
    assert certificates.sources("ns", None, []) == set()
    # The platform's global block names a Secret of its own namespace; the classes' stay.
    assert certificates.sources(
        "d8-ai-inference", "wild", specs, settings_namespace="d8-system"
    ) == {"d8-system/wild", "d8-ai-inference/class-one"}


def _cached(secret: dict[str, Any]) -> dict[str, Any]:
    """`secret` as the controller's cache keeps it (world.trim_secret)."""
    kept = copy.deepcopy(secret)
    kept["metadata"]["uid"] = "s-1"
    trim_secret(kept)
    return kept


def test_the_cache_holds_a_copy_by_its_digests_and_still_sees_every_change() -> None:
    """No private key in the controller's memory; a key changed, dropped or added to the
    copy is still a difference (an added one was trimmed out of sight)."""
    desired = copy_of()
    cached = _cached(desired)
    assert "tls.key" not in (cached.get("data") or {})
    assert certificates.same(cached, desired)
    for edit in ({"tls.key": "ZXZpbA=="}, {"extra": "eA=="}):
        edited = copy.deepcopy(desired)
        edited["data"] |= edit
        assert not certificates.same(_cached(edited), desired), edit
    dropped = copy.deepcopy(desired)
    del dropped["data"]["tls.crt"]
    assert not certificates.same(_cached(dropped), desired)


def test_a_forged_token_secret_of_a_megabyte_is_not_held() -> None:
    """A Secret named and owned as the order's token may be the tenant's own making: a
    token of a token's size is kept, a megabyte is not."""
    token = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "support-llm-auth",
            "namespace": "support",
            "labels": {UID_LABEL: "u-1", **{f"k{i}": "v" for i in range(100)}},
            "ownerReferences": [owner_reference(ORDER)],
        },
        "data": {"token": "dA==" * 300_000},
    }
    assert "data" not in _cached(token)
    token["data"] = {"token": "dG9rZW4="}
    kept = _cached(token)
    assert kept["data"] == {"token": "dG9rZW4="}
    assert kept["metadata"]["labels"] == {UID_LABEL: "u-1"}
