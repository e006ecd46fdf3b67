"""Who may talk to the local control plane: static bearer tokens, one kubeconfig each.

The API server authenticates these by `--token-auth-file`; authorization is RBAC, so
`alice` can do only what the RoleBindings in her namespace allow, and `controller` only
what the controller's ClusterRole in deploy/ grants — tests catch a missing permission.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["IDENTITIES", "Identity", "read_tokens", "write_kubeconfig", "write_token_file"]


@dataclass(frozen=True, slots=True)
class Identity:
    name: str  # kubeconfig file stem and the key tests use
    user: str
    groups: tuple[str, ...]
    about: str


CONTROLLER_SA = "system:serviceaccount:d8-ai-inference:ai-inference"

IDENTITIES: tuple[Identity, ...] = (
    Identity("admin", "admin", ("system:masters",), "cluster administrator"),
    Identity(
        "controller",
        CONTROLLER_SA,
        ("system:serviceaccounts", "system:serviceaccounts:d8-ai-inference"),
        "the controller's ServiceAccount (RBAC from deploy/rbac/controller.yaml)",
    ),
    Identity("alice", "alice", (), "a namespace user, bound in namespace support only"),
    Identity(
        "simulator",
        "ai-inference-simulator",
        ("system:masters",),
        "the stand-in for scheduler, kubelets and DRA driver",
    ),
)


def write_token_file(path: Path) -> dict[str, str]:
    """A fresh token per identity; returns {identity name: token}."""
    tokens = {ident.name: secrets.token_urlsafe(32) for ident in IDENTITIES}
    lines = []
    for ident in IDENTITIES:
        groups = ",".join(ident.groups)
        lines.append(f'{tokens[ident.name]},{ident.user},{ident.user},"{groups}"')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o600)
    return tokens


def read_tokens(path: Path) -> dict[str, str]:
    """The tokens `write_token_file` wrote: {identity name: token}."""
    by_user = {ident.user: ident.name for ident in IDENTITIES}
    tokens = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        token, user = line.split(",")[:2]
        if user in by_user:
            tokens[by_user[user]] = token
    return tokens


def write_kubeconfig(path: Path, *, server: str, ca_cert: Path, user: str, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "ai-inference-local",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_cert.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "ai-inference-local",
                "context": {"cluster": "ai-inference-local", "user": user},
            }
        ],
        "current-context": "ai-inference-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    path.chmod(0o600)
