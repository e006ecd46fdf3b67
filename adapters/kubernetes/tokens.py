"""The order's API token: Secret `{order}-auth`, made once, never rotated by accident.

When the class requires a token (SPEC §3 step 6) the controller's EnsureAuthSecret command
lands here (every pass while the Secret is missing from the cache), through the one
Writer. The Secret is created only if absent: a re-apply, a controller restart or a
second leader finds it (409 AlreadyExists) and keeps it, so callers holding the token
keep working. It is also immutable, so no edit can swap the token under the runtime
either; rotation is deliberate: delete the Secret and the controller makes a new one
(the pods roll to it: rendering.AUTH_SECRET_UID_ANNOTATION).

The token is 32 random bytes (256 bits) from `secrets`, url-safe. It is never logged,
never put in an event or an error message. `ensure_auth_secret` returns the Secret only so
that the Actor can wait for its cache to hold that version (uid and resourceVersion).

Its labels are how the controller finds it (it watches its Secrets by label): one whose
labels were removed is found by the create's conflict and made again with the same token;
one relabelled to another order's UID, still in the cache, is sent there by the Actor.
So is one whose owner reference was removed (`kubectl replace` of a trimmed manifest, a
GitOps tool's), which the garbage collector would leave behind its order: the Secret is
the order's own when it carries the order's UID label, nothing controls it, and the
controller's field manager created it (`converging.disowned`; Secrets made before the
controller named its field manager on creates are not recognised so, and stay a
conflict).

When the class stops requiring a token, the Secret is pruned like every owned object the
plan no longer calls for (`Actor._workload`, SPEC §3), not here.

A Secret of that name that the order does not own (a user's, or a previous order's of the
same name that the garbage collector has not removed yet) is never adopted nor deleted:
`AuthSecretConflict` says so, and the Actor makes it the order's reason (WorkloadReady
False, `AuthSecretConflict`): nothing is applied until the name is the order's again.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from adapters.kubernetes import converging, errors, kinds
from adapters.kubernetes.rendering import (
    AUTH_SECRET_KEY,
    UID_LABEL,
    OrderRef,
    auth_secret_name,
    labels,
    owner_reference,
)
from adapters.kubernetes.watching import Obj
from adapters.kubernetes.writing import Writer

__all__ = [
    "TOKEN_BYTES",
    "AuthSecretConflict",
    "TokenError",
    "ensure_auth_secret",
    "in_place",
    "labelled",
    "new_token",
    "owned_by",
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


def owned_by(secret: dict[str, Any] | None, order: OrderRef) -> bool:
    refs = ((secret or {}).get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == order.uid and ref.get("controller") for ref in refs)


def labelled(secret: dict[str, Any], order: OrderRef) -> bool:
    """Whether `secret` carries the order's labels, as it was made with them."""
    have = (secret.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels(order).items())


def in_place(secret: dict[str, Any], order: OrderRef) -> bool:
    """Whether the cached `secret` is the order's as a pass needs it: owned by the order
    and carrying its UID label, by which it is routed and found among the order's
    children. Its other labels, edited, are left: making it again rolls the pods."""
    meta = secret.get("metadata") or {}
    return owned_by(secret, order) and (meta.get("labels") or {}).get(UID_LABEL) == order.uid


def _api_error(action: str, name: str, err: errors.APIError) -> TokenError:
    # Status and kind only: the message stays one line whatever the server answered.
    return TokenError(f"{action} Secret {name}: HTTP {err.status} {type(err).__name__}", err.status)


def _body(order: OrderRef, token: str) -> dict[str, Any]:
    """The order's token Secret holding `token` (base64, as `data` holds it)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": auth_secret_name(order),
            "namespace": order.namespace,
            "labels": labels(order),
            "ownerReferences": [owner_reference(order)],
        },
        "type": "Opaque",
        "immutable": True,
        "data": {AUTH_SECRET_KEY: token},
    }


def ensure_auth_secret(writer: Writer, order: OrderRef) -> Obj:
    """The order's token Secret, created now if it did not exist (as the server answered
    the create or the read: its uid and resourceVersion let the caller wait for its
    cache to hold it)."""
    name = auth_secret_name(order)
    try:
        return writer.create(_body(order, base64.b64encode(new_token().encode()).decode()))
    except errors.APIConflictError:
        pass
    except errors.APIError as err:
        raise _api_error("creating", name, err) from None
    # The existing Secret wins; the token just drawn is dropped unseen.
    try:
        existing = writer.get(kinds.SECRETS, order.namespace, name)
    except errors.APIError as err:
        raise _api_error("reading", name, err) from None
    if existing is None:
        raise TokenError(f"Secret {order.namespace}/{name} vanished while it was ensured", 404)
    if not owned_by(existing, order) and not converging.disowned(
        existing, order.uid, writer.field_manager
    ):
        raise AuthSecretConflict(
            f"Secret {order.namespace}/{name} exists and is not owned by this order "
            f"(uid {order.uid}); it is left alone"
        )
    if AUTH_SECRET_KEY not in (existing.get("data") or {}):
        raise TokenError(f"Secret {order.namespace}/{name} has no key {AUTH_SECRET_KEY!r}")
    return _restored(writer, order, existing)


def _restored(writer: Writer, order: OrderRef, secret: Obj) -> Obj:
    """The order's own Secret with its labels and owner reference back, if someone
    removed or changed them.

    The controller watches its Secrets by the order's UID label: without it the Secret
    is invisible, so every pass would try to make it again (a create answered 409), and
    the probe, which reads the token from the cache, would never run again. Without its
    owner reference it is not the order's to the pass (`AuthSecretConflict`), and the
    garbage collector leaves it behind the order. The controller may not patch Secrets
    (RBAC: create and delete only), so the Secret is made again with the same token —
    callers hold it — and the pods roll to it, as for a rotation (the Secret's uid
    changed)."""
    if owned_by(secret, order) and labelled(secret, order):
        return secret
    meta = secret["metadata"]
    try:
        writer.delete(kinds.SECRETS, order.namespace, meta["name"], meta["uid"])
        return writer.create(_body(order, secret["data"][AUTH_SECRET_KEY]))
    except errors.APIError as err:
        # A namesake made in between (409) is found by the next pass's create.
        raise _api_error("restoring", str(meta["name"]), err) from None
