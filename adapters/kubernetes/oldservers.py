"""Compatibility with API servers older than 1.26, which have no DRA pod fields.

A pod names its device claims in `spec.resourceClaims` and each container in
`resources.claims`; a server before 1.26 (the local 1.20 test server) drops both and
refuses them in server-side apply ("field not declared in schema"). On such a server the
controller writes the same list into an annotation of the pod template instead, and
whatever allocates the claims reads it from there (the project's simulator does:
adapters/simulator/podclaims.py). The controller decides at start-up, from the server's
version, whether to rewrite (`rewrite_for`); on a modern server nothing changes.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

__all__ = ["CLAIMS_ANNOTATION", "for_old_server", "rewrite_for"]

log = logging.getLogger(__name__)

CLAIMS_ANNOTATION = "simulator.ai-inference.deckhouse.io/resource-claims"


def for_old_server(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a Pod or pod-template owner without the DRA pod fields, carrying them in
    the annotation instead. Nothing changes for a manifest without claims."""
    result = copy.deepcopy(dict(manifest))
    spec = result.get("spec") or {}
    holder = spec.get("template") if "template" in spec else result
    if not isinstance(holder, dict):
        return result
    pod_spec = holder.get("spec") or {}
    claims = pod_spec.pop("resourceClaims", None)
    for group in ("containers", "initContainers"):
        for container in pod_spec.get(group) or ():
            resources = container.get("resources")
            if isinstance(resources, dict):
                resources.pop("claims", None)
    if claims:
        metadata = holder.setdefault("metadata", {})
        annotations = metadata.setdefault("annotations", {})
        annotations[CLAIMS_ANNOTATION] = json.dumps(claims, separators=(",", ":"), sort_keys=True)
    return result


def rewrite_for(api: client.ApiClient) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """`for_old_server` when the server predates DRA pod fields, else None."""
    version = client.VersionApi(api).get_code()
    minor = int("".join(ch for ch in str(version.minor) if ch.isdigit()) or 0)
    if int(version.major) > 1 or minor >= 26:
        return None
    log.warning(
        "server %s.%s predates DRA pod fields: claims travel in an annotation",
        version.major,
        version.minor,
    )
    return for_old_server
