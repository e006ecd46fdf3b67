"""Apply YAML manifests to an API server by server-side apply, CRDs first.

Used by `ai-inference cluster up` and `demo` to install CRDs, RBAC, the shipped class
and recipes, and by tests to apply examples. Server-side apply makes every install
idempotent; one field manager owns what we apply.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from adapters.kubernetes.writing import FIELD_MANAGER  # one field manager for every apply

__all__ = ["FIELD_MANAGER", "Applier", "load_documents", "manifest_files"]

Manifest = dict[str, Any]


def manifest_files(folder: Path) -> list[Path]:
    """The YAML files of a folder, recursively, in a stable order."""
    return sorted(p for p in folder.rglob("*") if p.suffix in {".yaml", ".yml"} and p.is_file())


def load_documents(paths: Iterable[Path]) -> list[Manifest]:
    docs: list[Manifest] = []
    for path in paths:
        with path.open(encoding="utf-8") as stream:
            for doc in yaml.safe_load_all(stream):
                docs.extend(_flatten(doc))
    return docs


def _flatten(doc: Any) -> Iterator[Manifest]:
    if not doc:
        return
    if not isinstance(doc, dict) or "kind" not in doc:
        raise ValueError(f"not a Kubernetes object: {str(doc)[:80]!r}")
    if doc["kind"].endswith("List") and "items" in doc:
        for item in doc["items"]:
            yield from _flatten(item)
    else:
        yield doc


def _is_crd(doc: Manifest) -> bool:
    return bool(doc["kind"] == "CustomResourceDefinition")


class Applier:
    """Server-side apply with discovery refreshed after CRDs become Established."""

    def __init__(self, api: client.ApiClient, field_manager: str = FIELD_MANAGER) -> None:
        self._api = api
        self._dynamic = DynamicClient(api)
        self._field_manager = field_manager

    def apply_all(
        self, docs: Sequence[Manifest], *, default_namespace: str = "default", timeout: float = 60
    ) -> list[Manifest]:
        crds = [d for d in docs if _is_crd(d)]
        applied = [self.apply(d, default_namespace=default_namespace) for d in crds]
        if crds:
            self.wait_established([d["metadata"]["name"] for d in crds], timeout=timeout)
            self._dynamic.resources.invalidate_cache()
        rest = [d for d in docs if not _is_crd(d)]
        # Namespaces before what lives in them.
        rest.sort(key=lambda d: d["kind"] != "Namespace")
        applied += [
            self.apply(d, default_namespace=default_namespace, timeout=timeout) for d in rest
        ]
        return applied

    def apply(
        self, doc: Manifest, *, default_namespace: str = "default", timeout: float = 30
    ) -> Manifest:
        resource = self._resource(doc["apiVersion"], doc["kind"], timeout=timeout)
        namespace = None
        if resource.namespaced:
            namespace = doc["metadata"].get("namespace", default_namespace)
        result = self._dynamic.server_side_apply(
            resource,
            body=doc,
            name=doc["metadata"]["name"],
            namespace=namespace,
            field_manager=self._field_manager,
            force_conflicts=True,
        )
        return dict(result.to_dict())

    def wait_established(self, names: Sequence[str], *, timeout: float = 60) -> None:
        api = client.ApiextensionsV1Api(self._api)
        deadline = time.monotonic() + timeout
        pending = set(names)
        while pending:
            for name in sorted(pending):
                crd = api.read_custom_resource_definition(name)
                conditions = (crd.status and crd.status.conditions) or []
                if any(c.type == "Established" and c.status == "True" for c in conditions):
                    pending.discard(name)
            if pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRDs not Established after {timeout}s: {sorted(pending)}")
                time.sleep(0.2)

    def _resource(self, api_version: str, kind: str, *, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._dynamic.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                # A CRD applied a moment ago may not be in discovery yet.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
                self._dynamic.resources.invalidate_cache()
