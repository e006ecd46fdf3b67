"""The order's token Secret against the real API server: made once, kept, never adopted."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters.kubernetes import tokens, writing
from adapters.kubernetes.rendering import OrderRef, labels, owner_reference

pytestmark = pytest.mark.cluster

GROUP, VERSION, PLURAL = "ai.deckhouse.io", "v1alpha1", "inferenceservices"


@pytest.fixture(scope="module")
def api(cluster: Any) -> client.ApiClient:
    return cluster.api_client("admin")


@pytest.fixture(scope="module")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def writer(api: client.ApiClient) -> writing.Writer:
    return writing.Writer(api)


@pytest.fixture(scope="module")
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"tokens-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def order(api: client.ApiClient, namespace: str) -> OrderRef:
    # A real owner: with a made-up uid the garbage collector would delete the Secret.
    obj = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": f"llm-{uuid.uuid4().hex[:6]}"},
            "spec": {"model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B"}}},
        },
    )
    return OrderRef(obj["metadata"]["name"], namespace, obj["metadata"]["uid"])


def token_of(core: client.CoreV1Api, order: OrderRef) -> str:
    secret = core.read_namespaced_secret(f"{order.name}-auth", order.namespace)
    return base64.b64decode(secret.data["token"]).decode()


def test_the_secret_is_made_with_a_strong_token_owned_by_the_order(
    writer: writing.Writer, core: client.CoreV1Api, order: OrderRef
) -> None:
    assert tokens.ensure_auth_secret(writer, order)["metadata"]["name"] == f"{order.name}-auth"
    secret = core.read_namespaced_secret(f"{order.name}-auth", order.namespace)
    assert secret.type == "Opaque"
    assert secret.immutable is True
    assert set(secret.data) == {"token"}
    token = token_of(core, order)
    assert len(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))) >= 32  # 256 bits
    assert secret.metadata.labels == labels(order)
    (ref,) = secret.metadata.owner_references
    assert (
        ref.api_version,
        ref.kind,
        ref.name,
        ref.uid,
        ref.controller,
        ref.block_owner_deletion,
    ) == (tuple(owner_reference(order).values()))


def test_ensuring_again_keeps_the_token(
    writer: writing.Writer, core: client.CoreV1Api, order: OrderRef
) -> None:
    tokens.ensure_auth_secret(writer, order)
    first = core.read_namespaced_secret(f"{order.name}-auth", order.namespace)
    for _ in range(3):  # a re-apply, a restart, a second leader
        assert tokens.ensure_auth_secret(writer, order)["metadata"]["name"] == f"{order.name}-auth"
    again = core.read_namespaced_secret(f"{order.name}-auth", order.namespace)
    assert again.data == first.data
    assert again.metadata.resource_version == first.metadata.resource_version


def test_the_token_cannot_be_edited_in_place(
    writer: writing.Writer, core: client.CoreV1Api, order: OrderRef
) -> None:
    tokens.ensure_auth_secret(writer, order)
    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_secret(
            f"{order.name}-auth", order.namespace, {"data": {"token": "b3RoZXI="}}
        )
    assert refused.value.status == 422


def test_orders_get_different_tokens(
    writer: writing.Writer,
    core: client.CoreV1Api,
    api: client.ApiClient,
    namespace: str,
    order: OrderRef,
) -> None:
    tokens.ensure_auth_secret(writer, order)
    second = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": f"{order.name}-b"},
            "spec": {"model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B"}}},
        },
    )
    other = OrderRef(second["metadata"]["name"], namespace, second["metadata"]["uid"])
    tokens.ensure_auth_secret(writer, other)
    assert token_of(core, order) != token_of(core, other)


def foreign_secret(core: client.CoreV1Api, order: OrderRef) -> Any:
    return core.create_namespaced_secret(
        order.namespace,
        {
            "metadata": {"name": f"{order.name}-auth"},
            "type": "Opaque",
            "data": {"token": base64.b64encode(b"users-own-value").decode()},
        },
    )


def test_a_secret_the_order_does_not_own_is_neither_adopted_nor_changed(
    writer: writing.Writer, core: client.CoreV1Api, order: OrderRef
) -> None:
    before = foreign_secret(core, order)
    with pytest.raises(tokens.AuthSecretConflict) as conflict:
        tokens.ensure_auth_secret(writer, order)
    assert "users-own-value" not in str(conflict.value)
    after = core.read_namespaced_secret(f"{order.name}-auth", order.namespace)
    assert after.metadata.resource_version == before.metadata.resource_version


def test_the_orders_secret_stripped_of_its_owner_is_made_again_and_a_copy_is_not(
    writer: writing.Writer, core: client.CoreV1Api, order: OrderRef
) -> None:
    """Its owner reference removed (`kubectl replace` of a trimmed manifest), the order's
    own Secret is told by our create in its managedFields, and made again with the same
    token and its owner reference: the garbage collector would have left it behind the
    order. A user's Secret made from a saved copy of it (labels, token and all) was
    created by their client: a conflict, left as it is."""
    name = f"{order.name}-auth"
    made = tokens.ensure_auth_secret(writer, order)
    token = token_of(core, order)
    core.patch_namespaced_secret(
        name, order.namespace, [{"op": "remove", "path": "/metadata/ownerReferences"}]
    )
    again = tokens.ensure_auth_secret(writer, order)
    assert again["metadata"]["uid"] != made["metadata"]["uid"]
    assert tokens.owned_by(again, order) and token_of(core, order) == token

    core.delete_namespaced_secret(name, order.namespace)
    copied = core.create_namespaced_secret(
        order.namespace,
        {
            "metadata": {"name": name, "labels": labels(order)},
            "type": "Opaque",
            "data": {"token": base64.b64encode(token.encode()).decode()},
        },
    )
    with pytest.raises(tokens.AuthSecretConflict):
        tokens.ensure_auth_secret(writer, order)
    after = core.read_namespaced_secret(name, order.namespace)
    assert after.metadata.resource_version == copied.metadata.resource_version


def test_rotation_is_deliberate_deleting_makes_a_new_token(
    writer: writing.Writer, core: client.CoreV1Api, order: OrderRef
) -> None:
    tokens.ensure_auth_secret(writer, order)
    old = token_of(core, order)
    core.delete_namespaced_secret(f"{order.name}-auth", order.namespace)
    tokens.ensure_auth_secret(writer, order)
    assert token_of(core, order) != old


def test_api_errors_are_translated_without_the_token(
    writer: writing.Writer, core: client.CoreV1Api
) -> None:
    missing = OrderRef("llm", f"no-such-namespace-{uuid.uuid4().hex[:4]}", str(uuid.uuid4()))
    with pytest.raises(tokens.TokenError) as failed:
        tokens.ensure_auth_secret(writer, missing)
    assert failed.value.status == 404
    assert "\n" not in str(failed.value)


def test_deleting_the_order_deletes_the_secret(
    writer: writing.Writer, core: client.CoreV1Api, api: client.ApiClient, order: OrderRef
) -> None:
    tokens.ensure_auth_secret(writer, order)
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        GROUP, VERSION, order.namespace, PLURAL, order.name
    )
    # The garbage collector learns of a new kind (the order's CRD, installed with the
    # tests' control plane) at its next discovery sync, every 30 s: with this file run
    # alone on a fresh control plane, the Secret went 41 s after the order.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_secret(f"{order.name}-auth", order.namespace)
        except ApiException as err:
            assert err.status == 404
            return
        time.sleep(0.3)
    pytest.fail("the garbage collector left the token Secret of a deleted order")
