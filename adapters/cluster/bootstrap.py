"""What a fresh local cluster needs before anyone uses it.

The project's CRDs, the stand-in CRDs for APIs a 1.20 server lacks (DRA, the ai-models
catalog, ModuleConfig), the module's namespace and RBAC from deploy/, the user
namespaces of the seeds (`support`, `analytics`) and alice's RoleBinding in `support`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client, config

from adapters.kubernetes.manifests import Applier, load_documents, manifest_files
from adapters.resources import resource_dir

__all__ = ["USER_NAMESPACES", "api_client", "bootstrap", "bootstrap_documents"]

USER_NAMESPACES = ("support", "analytics")
USER_ROLE = "d8:user-authz:ai-inference:editor"


def api_client(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


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


def bootstrap(admin_kubeconfig: Path) -> int:
    """Apply everything above; returns how many objects were applied."""
    with api_client(admin_kubeconfig) as api:
        return len(Applier(api).apply_all(bootstrap_documents()))
