"""Which ResourceClaims a pod asks for — on a 1.34 server and on the local 1.20 one.

A pod names its claims in `spec.resourceClaims` (`resourceClaimTemplateName` or
`resourceClaimName`) and the scheduler reports the generated claims in
`status.resourceClaimStatuses`. The local 1.20 API server predates both fields: it drops
them from pods and refuses them in server-side apply ("field not declared in schema").
So on such a server the same list travels in an annotation of the pod (template), and
the simulator mirrors the statuses into another one. `pod_claims` reads the field and
falls back to the annotation; `for_old_server` is the pure rewrite a writer applies to a
manifest before sending it to a server without the fields (Deployment, ReplicaSet, Pod);
it lives with the controller (adapters/kubernetes/oldservers.py), which needs it too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.kubernetes.oldservers import CLAIMS_ANNOTATION, for_old_server

__all__ = [
    "CLAIMS_ANNOTATION",
    "CLAIM_STATUSES_ANNOTATION",
    "POD_CLAIM_NAME_ANNOTATION",
    "PodClaim",
    "PodClaimsError",
    "claim_statuses",
    "for_old_server",
    "pod_claims",
]

CLAIM_STATUSES_ANNOTATION = "simulator.ai-inference.deckhouse.io/resource-claim-statuses"
# Set by Kubernetes' resourceclaim controller on every claim it generates for a pod.
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


class PodClaimsError(ValueError):
    """The pod's claims cannot be read (a malformed annotation or entry)."""


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of `spec.resourceClaims`: from a template, or an existing claim."""

    name: str
    template: str | None = None
    claim: str | None = None


def _entries(pod: Mapping[str, Any]) -> list[Any]:
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return list(spec["resourceClaims"])
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(CLAIMS_ANNOTATION)
    if not raw:
        return []
    try:
        entries = json.loads(raw)
    except ValueError as err:
        raise PodClaimsError(f"annotation {CLAIMS_ANNOTATION} is not JSON: {err}") from err
    if not isinstance(entries, list):
        raise PodClaimsError(f"annotation {CLAIMS_ANNOTATION} is not a list")
    return entries


def pod_claims(pod: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The pod's claims, from `spec.resourceClaims` or else the annotation."""
    claims: list[PodClaim] = []
    for entry in _entries(pod):
        if not isinstance(entry, Mapping) or not entry.get("name"):
            raise PodClaimsError(f"resource claim entry {entry!r} has no name")
        template = entry.get("resourceClaimTemplateName")
        claim = entry.get("resourceClaimName")
        if bool(template) == bool(claim):
            raise PodClaimsError(
                f"resource claim {entry['name']!r} needs exactly one of "
                "resourceClaimTemplateName and resourceClaimName"
            )
        claims.append(
            PodClaim(str(entry["name"]), template and str(template), claim and str(claim))
        )
    return tuple(claims)


def claim_statuses(pod: Mapping[str, Any]) -> dict[str, str]:
    """Pod claim name -> generated claim name, from the status or else the annotation."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    if not statuses:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(CLAIM_STATUSES_ANNOTATION)
        try:
            statuses = json.loads(raw) if raw else []
        except ValueError:
            statuses = []
    return {
        str(s["name"]): str(s["resourceClaimName"])
        for s in statuses
        if isinstance(s, Mapping) and s.get("name") and s.get("resourceClaimName")
    }
