"""Compatibility with older API servers: the HPA's API version, and DRA pod fields.

A server before 1.23 serves HorizontalPodAutoscalers as `autoscaling/v2beta2` only, one
from 1.26 on as `autoscaling/v2` only: the controller asks the server at start-up which
it serves (`hpa_api_version`), unless `--hpa-api-version` names one.


A pod names its device claims in `spec.resourceClaims` and each container in
`resources.claims`; a server before 1.26 (the local 1.20 test server) drops both and
refuses them in server-side apply ("field not declared in schema"). On such a server the
controller writes the same list into an annotation of the pod template instead, and
whatever allocates the claims reads it from there (the project's simulator does:
adapters/simulator/podclaims.py). The controller decides at start-up, from the server's
version, whether to rewrite (`rewrite_for`); on a modern server nothing changes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from adapters.kubernetes.rendering import HPA_API_VERSIONS, RenderError, hpa_api_version_for

__all__ = ["CLAIMS_ANNOTATION", "for_old_server", "hpa_api_version", "rewrite_for"]

log = logging.getLogger(__name__)

CLAIMS_ANNOTATION = "simulator.ai-inference.deckhouse.io/resource-claims"


def for_old_server(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A Pod or pod-template owner without the DRA pod fields, carrying them in the
    annotation instead. `manifest` is not changed: what the rewrite changes (the pod
    spec, its containers' resources, the template's metadata) is copied, the rest is
    shared with it. A deep copy of every manifest the controller renders was 4 % of its
    CPU in the benchmark, where the local 1.20 server rewrites all of them."""
    spec = manifest.get("spec")
    templated = isinstance(spec, Mapping) and "template" in spec
    holder = spec.get("template") if templated and isinstance(spec, Mapping) else manifest
    pod_spec = holder.get("spec") if isinstance(holder, Mapping) else None
    if not isinstance(holder, Mapping) or not isinstance(pod_spec, Mapping):
        return dict(manifest)
    pod_spec = dict(pod_spec)
    claims = pod_spec.pop("resourceClaims", None)
    for group in ("containers", "initContainers"):
        if group in pod_spec:
            pod_spec[group] = [_without_claims(c) for c in pod_spec[group] or ()]
    new_holder = {**holder, "spec": pod_spec}
    if claims:
        metadata = dict(holder.get("metadata") or {})
        annotations = dict(metadata.get("annotations") or {})
        annotations[CLAIMS_ANNOTATION] = json.dumps(claims, separators=(",", ":"), sort_keys=True)
        new_holder["metadata"] = {**metadata, "annotations": annotations}
    if templated and isinstance(spec, Mapping):
        return {**manifest, "spec": {**spec, "template": new_holder}}
    return new_holder


def _without_claims(container: Any) -> Any:
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping) or "claims" not in resources:
        return container
    return {**container, "resources": {k: v for k, v in resources.items() if k != "claims"}}


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


def hpa_api_version(api: client.ApiClient) -> str:
    """The HPA API version to write: the newest of those the controller renders that the
    server serves (discovery of the `autoscaling` group).

    A server serving none of them does not hold the start, as the HPA informer is an
    optional kind (world.py): the newest is kept, and the orders that need an HPA say
    why on their status (the apply fails), the others are served."""
    try:
        group = client.AutoscalingApi(api).get_api_group()
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        served: set[str] = set()  # the group itself is turned off
    else:
        served = {v.group_version for v in group.versions or ()}
    try:
        chosen = hpa_api_version_for(served)
    except RenderError as exc:
        chosen = HPA_API_VERSIONS[0]
        log.warning("HorizontalPodAutoscalers as %s, though %s", chosen, exc)
        return chosen
    log.info("HorizontalPodAutoscalers as %s (served: %s)", chosen, ", ".join(sorted(served)))
    return chosen
