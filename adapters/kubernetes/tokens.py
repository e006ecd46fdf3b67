"""The order's API token: Secret `{order}-auth`, made once, never rotated by accident.

When the class requires a token (SPEC §3 step 6) the controller's EnsureAuthSecret command
lands here. The Secret is created only if absent: a re-apply, a controller restart or a
second leader finds it (409 AlreadyExists) and keeps it, so callers holding the token keep
working. It is also immutable, so no edit can swap the token under the runtime either;
rotation is deliberate: delete the Secret and the controller makes a new one.

The token is 32 random bytes (256 bits) from `secrets`, url-safe. It is never logged,
never returned, never put in an event or an error message: this module returns names.

A Secret of that name that the order does not own (a user's, or a previous order's of the
same name that the garbage collector has not removed yet) is never adopted nor deleted:
`AuthSecretConflict` says so, and the controller retries later.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters.kubernetes.rendering import (
    AUTH_SECRET_KEY,
    OrderRef,
    auth_secret_name,
    labels,
    owner_reference,
)

__all__ = [
    "TOKEN_BYTES",
    "AuthSecretConflict",
    "TokenError",
    "delete_auth_secret_if_unneeded",
    "ensure_auth_secret",
    "new_token",
]

TOKEN_BYTES = 32  # 256 bits


class TokenError(RuntimeError):
    """The token Secret could not be ensured or removed; the message holds no token.

    TokenError                 status: the API's HTTP status, None when the API said yes
      └── AuthSecretConflict   a Secret of that name exists and is not this order's
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AuthSecretConflict(TokenError):
    pass


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def _owned_by(secret: Any, order: OrderRef) -> bool:
    refs = (secret.metadata and secret.metadata.owner_references) or []
    return any(ref.uid == order.uid and ref.controller for ref in refs)


def _api_error(action: str, name: str, err: ApiException) -> TokenError:
    # Status and reason only: the message stays one line whatever the server answered.
    return TokenError(f"{action} Secret {name}: HTTP {err.status} {err.reason}", err.status)


def ensure_auth_secret(core_api: client.CoreV1Api, order: OrderRef) -> str:
    """The name of the order's token Secret, created now if it did not exist."""
    name = auth_secret_name(order)
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": order.namespace,
            "labels": labels(order),
            "ownerReferences": [owner_reference(order)],
        },
        "type": "Opaque",
        "immutable": True,
        "data": {AUTH_SECRET_KEY: base64.b64encode(new_token().encode()).decode()},
    }
    try:
        core_api.create_namespaced_secret(order.namespace, body)
        return name
    except ApiException as err:
        if err.status != 409:
            raise _api_error("creating", name, err) from err
    # The existing Secret wins; the token just drawn is dropped unseen.
    try:
        existing = core_api.read_namespaced_secret(name, order.namespace)
    except ApiException as err:
        raise _api_error("reading", name, err) from err
    if not _owned_by(existing, order):
        raise AuthSecretConflict(
            f"Secret {order.namespace}/{name} exists and is not owned by this order "
            f"(uid {order.uid}); it is left alone"
        )
    if AUTH_SECRET_KEY not in (existing.data or {}):
        raise TokenError(f"Secret {order.namespace}/{name} has no key {AUTH_SECRET_KEY!r}")
    return name


def delete_auth_secret_if_unneeded(
    core_api: client.CoreV1Api, order: OrderRef, *, needed: bool
) -> bool:
    """Delete the order's own token Secret when its class no longer requires a token.

    Returns whether a Secret was deleted. A Secret the order does not own is left alone;
    the uid precondition keeps a Secret re-created in between from being deleted.
    """
    if needed:
        return False
    name = auth_secret_name(order)
    try:
        existing = core_api.read_namespaced_secret(name, order.namespace)
    except ApiException as err:
        if err.status == 404:
            return False
        raise _api_error("reading", name, err) from err
    if not _owned_by(existing, order):
        return False
    try:
        core_api.delete_namespaced_secret(
            name,
            order.namespace,
            body=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(uid=existing.metadata.uid)
            ),
        )
    except ApiException as err:
        if err.status in (404, 409):
            return False  # already gone, or replaced by another Secret since we read it
        raise _api_error("deleting", name, err) from err
    return True
