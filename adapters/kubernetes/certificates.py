"""The order's copy of a CustomCertificate Secret: what it is, and keeping it equal.

With https mode CustomCertificate the certificate is one `kubernetes.io/tls` Secret in
the controller's own namespace (d8-ai-inference on Deckhouse), named by the module's
`https.customCertificate.secretName` or by the class's exposurePolicy; the one the
platform's global block names is where Deckhouse keeps it, in d8-system. An Ingress can
only name a Secret of its own namespace, so each order whose Ingress needs it gets a copy,
`{order}-certificate`, owned by the order and labelled with its UID like the rest of its
workload: the garbage collector takes it with the order, the pass prunes it when the
order no longer needs it (converging.strays).

The copy is kept equal to the source's certificate — `tls.crt`, `tls.key` and `ca.crt`,
nothing more — without ever updating or patching a Secret: a copy that differs (the
source rotated, the copy edited) is deleted with its UID as a precondition and created
anew. The source is read by name (ClusterCache.secrets, never a list of Secrets); its
absence is the order's `CertificateSecretMissing`, and so is a source that is not a
`kubernetes.io/tls` Secret: whoever may name it (an administrator's class, the settings)
can place a copy in a namespace they read, so only a certificate is ever copied, never
another Secret's data (a database password kept beside it), as Deckhouse's own copy
reads only those keys. The data passes through and is never logged, quoted in an error
or written anywhere but the copy: errors name the Secret and the HTTP status only.

Who calls it: acting.py, in the same pass that applies the workload.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from adapters.kubernetes import converging, errors, kinds
from adapters.kubernetes.rendering import RenderError, labels, owner_reference
from adapters.kubernetes.writing import Writer
from fsm.identity import OrderRef, custom_tls_secret_name

__all__ = [
    "COPIED_KEYS",
    "DATA_DIGESTS",
    "SOURCE_ANNOTATION",
    "TLS_TYPE",
    "CertificateSecretMissing",
    "copy_of",
    "data_digests",
    "keep_equal",
    "same",
    "sources",
]

Obj = Mapping[str, Any]
TLS_TYPE = "kubernetes.io/tls"
# What a copy carries of its source: the certificate, its key, and the CA when given.
COPIED_KEYS = ("tls.crt", "tls.key", "ca.crt")
SOURCE_ANNOTATION = "ai.deckhouse.io/certificate-source"
# The cache keeps a copy's data as the digest of each key (world.trim_secret): a private
# key held in the controller's memory once per order, up to a MiB a Secret, was a way to
# fill it; the digests are all the comparison below needs.
DATA_DIGESTS = "dataDigests"


def data_digests(secret: Obj) -> dict[str, str]:
    """Each data key's SHA-256, from the cache's digests or from the data itself."""
    kept = secret.get(DATA_DIGESTS)
    if isinstance(kept, Mapping):
        return dict(kept)
    data = secret.get("data") or {}
    return {key: hashlib.sha256(str(value).encode()).hexdigest() for key, value in data.items()}


class CertificateSecretMissing(RenderError):
    """The CustomCertificate Secret does not exist where the controller reads it."""


def copy_of(order: OrderRef, source: Obj | None, *, namespace: str, name: str) -> dict[str, Any]:
    """The copy the order's Ingress names, of the source Secret `namespace/name`.

    Raises CertificateSecretMissing when there is no source to copy, or when it is not a
    certificate (type kubernetes.io/tls, with tls.crt and tls.key)."""
    if source is None:
        raise CertificateSecretMissing(
            f"https mode CustomCertificate: Secret {name!r} does not exist in namespace "
            f"{namespace}, so the order's Ingress has no certificate; create it there "
            f"(type kubernetes.io/tls)"
        )
    data = source.get("data") or {}
    if source.get("type") != TLS_TYPE or not {"tls.crt", "tls.key"} <= data.keys():
        raise CertificateSecretMissing(
            f"https mode CustomCertificate: Secret {name!r} in namespace {namespace} is not "
            f"a {TLS_TYPE} Secret with tls.crt and tls.key, so nothing of it is copied and "
            f"the order's Ingress has no certificate; name a certificate's Secret"
        )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": custom_tls_secret_name(order.name),
            "namespace": order.namespace,
            "labels": labels(order),
            "annotations": {SOURCE_ANNOTATION: f"{namespace}/{name}"},
            "ownerReferences": [owner_reference(order)],
        },
        "type": TLS_TYPE,
        "data": {key: data[key] for key in COPIED_KEYS if key in data},
    }


def same(live: Obj, desired: Obj) -> bool:
    """Whether the live copy equals the desired one: type and data exactly (a key the
    source dropped must go too), and the order's labels and owner."""
    meta = desired["metadata"]
    live_meta = live.get("metadata") or {}
    return (
        live.get("type") == desired["type"]
        and data_digests(live) == data_digests(desired)
        and converging.covers(live_meta.get("labels") or {}, meta["labels"])
        and converging.covers(live_meta.get("annotations") or {}, meta["annotations"])
    )


def _failed(action: str, obj: Obj, err: errors.APIError) -> errors.APIError:
    # Status and kind only: the server's message may quote the object, and this one's
    # data is a private key.
    meta = obj.get("metadata") or {}
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    return type(err)(
        f"{action} Secret {where}: HTTP {err.status} {type(err).__name__}", status=err.status
    )


def keep_equal(
    writer: Writer,
    order: OrderRef,
    desired: Obj,
    live: Obj | None,
    *,
    read_back: Callable[[dict[str, Any]], None] = lambda _obj: None,
    disowned: Callable[[Obj], bool] = lambda _obj: False,
) -> bool:
    """Make the order's copy equal `desired`; True when something was written.

    `live` is the cached copy (None: none cached). One the order does not own is never
    touched: creating over it fails with 409, which is reported; unless it is the
    order's own copy whose owner reference someone removed (`disowned`: the Actor's
    live check), made again. Raises APIError."""
    name = str(desired["metadata"]["name"])
    if live is None:
        try:
            live = writer.get(kinds.SECRETS, order.namespace, name)  # made a moment ago?
        except errors.APIError as err:
            raise _failed("reading", desired, err) from None
    owned = live is not None and converging.owned_by(live, order.uid)
    if owned and live is not None and same(live, desired):
        return False
    if live is not None and (owned or disowned(live)):
        try:
            writer.delete(kinds.SECRETS, order.namespace, name, str(live["metadata"]["uid"]))
        except errors.APIError as err:
            raise _failed("deleting", desired, err) from None
    try:
        read_back(writer.create(desired))
    except errors.APIError as err:
        raise _failed("creating", desired, err) from None
    return True


def sources(
    namespace: str,
    settings_secret: str | None,
    class_specs: Iterable[Obj],
    *,
    settings_namespace: str | None = None,
) -> set[str]:
    """`namespace/name` of every CustomCertificate Secret the settings or a class name:
    the Secrets read by name and re-read while named (secret_lookup.NamedSecrets). A
    class's are in the controller's `namespace`, the settings' in `settings_namespace`
    (None: the controller's too).

    The settings' name counts whatever their mode: a class in CustomCertificate mode
    that names no Secret falls back to it."""
    found = {f"{settings_namespace or namespace}/{settings_secret}"} if settings_secret else set()
    for spec in class_specs:
        https = (spec.get("exposurePolicy") or {}).get("https") or {}
        if not isinstance(https, Mapping) or https.get("mode") != "CustomCertificate":
            continue
        name = (https.get("customCertificate") or {}).get("secretName")
        if name:
            found.add(f"{namespace}/{name}")
    return found
