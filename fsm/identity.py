"""An order's identity and the names derived from it — each computed here, once.

The controller, the renderer, the probes and the core all speak of "the order" and of
the objects named after it; this module is the one home of that vocabulary, so the
`-auth` Secret or the TLS Secret is never spelled twice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "OBJECT_NAME_PATTERN",
    "RECLAIMS_NOTE",
    "OrderRef",
    "auth_secret_name",
    "custom_tls_secret_name",
    "is_object_name",
    "reclaims_note",
    "shown_to",
    "tls_secret_name",
]

# A DNS-1123 subdomain: what Kubernetes takes as the name of a Secret and most objects.
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_OBJECT_NAME = re.compile(OBJECT_NAME_PATTERN)


@dataclass(frozen=True, slots=True)
class OrderRef:
    """The order a pass works on: enough to name, label and own its objects. Keyed by
    UID everywhere: an order deleted and recreated under its name is another order."""

    name: str
    namespace: str
    uid: str
    generation: int = 1

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def auth_secret_name(order_name: str) -> str:
    """The order's own token Secret (SPEC §3 step 6)."""
    return f"{order_name}-auth"


def tls_secret_name(order_name: str) -> str:
    """The TLS Secret cert-manager fills for the order's Ingress."""
    return f"{order_name}-tls"


def custom_tls_secret_name(order_name: str) -> str:
    """The order's copy of a CustomCertificate Secret, which its Ingress names. Not
    `{order}-tls`: that one is cert-manager's, and a class switching modes must not
    leave the two fighting over one name. Nor `{order}-custom-tls`, which was the
    cert-manager Secret of an order named `{order}-custom`: no suffix here ends another
    one, so no two orders' Secrets can share a name (tests/fsm/test_identity.py)."""
    return f"{order_name}-certificate"


def shown_to(namespace: str, keys: Sequence[str]) -> str:
    """`namespace/name` keys as a message an order of `namespace` shows may name them:
    its own namespace's by name, the others counted. The order's status and Events are
    read by its tenant, who may not know other tenants' namespaces, orders or claims;
    the event log keeps every name for the administrator."""
    own = [key for key in keys if key.partition("/")[0] == namespace]
    others = len(keys) - len(own)
    if others:
        own.append(
            f"{others} in another namespace" if others == 1 else f"{others} in other namespaces"
        )
    return ", ".join(own)


RECLAIMS_NOTE = "; needs lower-priority claim(s) freed: "


def reclaims_note(namespace: str, keys: Sequence[str]) -> str:
    """What a plan that frees `keys` adds to its message, for an order of `namespace`."""
    return RECLAIMS_NOTE + shown_to(namespace, keys)


def is_object_name(name: str) -> bool:
    """Whether `name` can be a Secret's (a DNS-1123 subdomain, at most 253 characters).
    A name taken from a spec is checked before it is asked for: `../../ns/secrets/x`
    is a path, not a name."""
    return len(name) <= 253 and _OBJECT_NAME.fullmatch(name) is not None
