"""What a fresh local cluster needs before anyone uses it.

The project's CRDs, the stand-in CRDs for APIs a 1.20 server lacks (DRA, the ai-models
catalog, ModuleConfig), the module's namespace and RBAC from deploy/, the user
namespaces of the seeds (`support`, `analytics`) and alice's RoleBinding in `support`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kubernetes import client

from adapters.kubernetes import credentials
from adapters.kubernetes.manifests import Applier, load_documents, manifest_files
from adapters.kubernetes.rest import call
from adapters.resources import resource_dir

__all__ = ["USER_NAMESPACES", "api_client", "bootstrap", "bootstrap_documents"]

USER_NAMESPACES = ("support", "analytics")
USER_ROLE = "d8:user-authz:ai-inference:editor"


def api_client(kubeconfig: Path) -> client.ApiClient:
    return credentials.from_kubeconfig(kubeconfig)


def _folder_documents(name: str) -> list[dict[str, Any]]:
    try:
        folder = resource_dir(name)
    except FileNotFoundError:
        return []
    return load_documents(manifest_files(folder))


def bootstrap_documents() -> list[dict[str, Any]]:
    docs = _folder_documents("crds") + _folder_documents("tests/crds")
    try:
        deploy = resource_dir("deploy")
    except FileNotFoundError:
        deploy = None
    if deploy is not None:
        paths = [deploy / "namespace.yaml", *manifest_files(deploy / "rbac")]
        docs += load_documents(p for p in paths if p.is_file())
    docs += [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        for ns in USER_NAMESPACES
    ]
    docs.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "alice-ai-inference-editor", "namespace": "support"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": USER_ROLE,
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}
            ],
        }
    )
    return docs


def bootstrap(admin_kubeconfig: Path, *, openapi_timeout: float = 60.0) -> int:
    """Apply everything above; returns how many objects were applied. Returns once the
    API server's OpenAPI document describes every CRD applied: it is published a while
    after a CRD is Established, and until then `kubectl apply --validate` and `kubectl
    explain` know nothing of the kind (an unknown field is then silently pruned)."""
    documents = bootstrap_documents()
    with api_client(admin_kubeconfig) as api:
        applied = len(Applier(api).apply_all(documents))
        _wait_published(api, _kinds_of_crds(documents), openapi_timeout)
    return applied


def _kinds_of_crds(documents: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (doc["spec"]["group"], version["name"], doc["spec"]["names"]["kind"])
        for doc in documents
        if doc.get("kind") == "CustomResourceDefinition"
        for version in doc["spec"].get("versions") or ()
        if version.get("served", True)
    }


def _published(api: client.ApiClient) -> set[tuple[str, str, str]]:
    definitions = call(api, "GET", "/openapi/v2").get("definitions") or {}
    return {
        (str(gvk.get("group")), str(gvk.get("version")), str(gvk.get("kind")))
        for definition in definitions.values()
        for gvk in definition.get("x-kubernetes-group-version-kind") or ()
    }


def _wait_published(
    api: client.ApiClient, kinds: set[tuple[str, str, str]], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    missing = kinds - _published(api)
    while missing and time.monotonic() < deadline:
        time.sleep(0.5)
        missing = kinds - _published(api)
    if missing:
        raise TimeoutError(f"not in the API server's OpenAPI after {timeout:g}s: {sorted(missing)}")
