"""Publishes the ai-models catalog objects a cluster with that module would show.

The controller reads `Model`/`ClusterModel` (`ai.deckhouse.io/v1alpha1`) status only;
the catalog module that would write it is absent here. The objects come from
`catalog_models.yaml` next to this module (owned by the model-sources work): each is
created with its spec, then its status is written through the status subresource (or,
on a CRD without one, with the object itself). Idempotent: an object whose status is
already as in the file is left alone, so publishing on every start costs no writes.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from adapters.simulator.kube import JSON, Conflict, Kube, KubeError, NotFound, path

__all__ = ["CATALOG", "CatalogPublisher", "load_catalog"]

log = logging.getLogger(__name__)

CATALOG = Path(__file__).with_name("catalog_models.yaml")
_GROUP_VERSION = "ai.deckhouse.io/v1alpha1"
_PLURALS = {"Model": "models", "ClusterModel": "clustermodels"}


def load_catalog(source: Path = CATALOG) -> list[JSON]:
    """The catalog objects of the file; none when it does not exist."""
    if not source.is_file():
        return []
    with source.open(encoding="utf-8") as stream:
        docs = [d for d in yaml.safe_load_all(stream) if d]
    unknown = [d.get("kind") for d in docs if d.get("kind") not in _PLURALS]
    if unknown:
        raise ValueError(f"{source}: not catalog kinds: {unknown}")
    return docs


def _url(obj: Mapping[str, Any], *, named: bool = True, status: bool = False) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") if obj["kind"] == "Model" else None
    return path(
        _GROUP_VERSION,
        _PLURALS[obj["kind"]],
        meta["name"] if named else None,
        namespace=str(namespace or "default") if obj["kind"] == "Model" else None,
        subresource="status" if status else None,
    )


class CatalogPublisher:
    def __init__(self, kube: Kube, source: Path = CATALOG) -> None:
        self.kube = kube
        self.source = source

    def publish(self) -> list[str]:
        """Create or refresh every object; returns the ones written (`Kind/name`)."""
        written: list[str] = []
        for doc in load_catalog(self.source):
            try:
                if self._one(doc):
                    written.append(f"{doc['kind']}/{doc['metadata']['name']}")
            except KubeError as err:  # a missing namespace or CRD: say so, go on
                log.warning("catalog %s/%s: %s", doc["kind"], doc["metadata"].get("name"), err)
        return written

    def _one(self, doc: JSON) -> bool:
        want_status = copy.deepcopy(doc.get("status") or {})
        body = {k: copy.deepcopy(v) for k, v in doc.items() if k != "status"}
        meta = body.setdefault("metadata", {})
        for server_field in ("generation", "resourceVersion", "uid", "creationTimestamp"):
            meta.pop(server_field, None)
        have = self.kube.get(_url(doc))
        created = False
        if have is None:
            try:
                have = self.kube.create(_url(doc, named=False), body)
                created = True
            except Conflict:
                have = self.kube.request("GET", _url(doc))
        if not want_status:
            return created
        want_status["observedGeneration"] = int(have["metadata"].get("generation") or 1)
        if have.get("status") == want_status:
            return created
        patch = {"metadata": {"resourceVersion": have["metadata"]["resourceVersion"]}}
        try:
            self.kube.merge_patch(_url(doc, status=True), {**patch, "status": want_status})
        except NotFound:  # no status subresource: the status travels with the object
            self.kube.merge_patch(_url(doc), {**patch, "status": want_status})
        return True
