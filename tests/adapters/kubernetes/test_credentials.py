"""Credentials set up once a second, not before every request, and still renewed.

Against the real API server: which token a request carried shows in what the server
lets it do (the admin may list namespaces, alice may not).
"""

from __future__ import annotations

import copy
import json
import re
import stat
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes import client, config
from kubernetes.config import incluster_config, kube_config

from adapters.cluster import identities
from adapters.kubernetes import credentials, errors
from adapters.kubernetes.rest import call
from tests.conftest import Cluster

NAMESPACES = "/api/v1/namespaces"


def _tokens(cluster: Cluster) -> dict[str, str]:
    return identities.read_tokens(Path(cluster.state.folder) / "tokens.csv")


def _count_calls(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[None]:
    calls: list[None] = []
    original = getattr(owner, name)

    def counted(self: Any, *args: Any) -> Any:
        calls.append(None)
        return original(self, *args)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_kubeconfig_client_is_set_up_at_most_once_a_second(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    setups = _count_calls(monkeypatch, kube_config.KubeConfigLoader, "_set_config")
    api = credentials.from_kubeconfig(cluster.kubeconfig("admin"))
    started = time.monotonic()
    for _ in range(100):
        call(api, "GET", NAMESPACES)
    seconds = time.monotonic() - started
    # The load itself, then one setup a second at most (the client's own hook set the
    # whole configuration up again before each of the 100 requests).
    assert len(setups) <= 2 + int(seconds / credentials.REFRESH_EVERY)
    api.close()


def _exec_kubeconfig(cluster: Cluster, folder: Path, token_file: Path) -> Path:
    """A kubeconfig whose credential comes from an exec plugin that prints the token in
    `token_file`, already expired: the loader asks the plugin again each time its hook runs."""
    plugin = folder / "token-plugin"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "TOKEN", "expirationTimestamp": "2020-01-01T00:00:00Z"},
    }
    plugin.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib\n"
        f"credential = json.loads({json.dumps(json.dumps(credential))})\n"
        f"credential['status']['token'] = pathlib.Path({str(token_file)!r}).read_text()\n"
        "print(json.dumps(credential))\n",
        encoding="utf-8",
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    kubeconfig = yaml.safe_load(cluster.kubeconfig("admin").read_text(encoding="utf-8"))
    kubeconfig["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin)}
    }
    path = folder / "exec.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig), encoding="utf-8")
    return path


def _rotating_client(cluster: Cluster, tmp_path: Path) -> tuple[client.ApiClient, list[float]]:
    """A client whose exec credential starts as the admin's token, its refresh hook made
    seldom on a clock the test moves (`now[0]`); `_rotate_to_alice` changes the token."""
    (tmp_path / "token").write_text(_tokens(cluster)["admin"], encoding="utf-8")
    api = config.new_client_from_config(
        config_file=str(_exec_kubeconfig(cluster, tmp_path, tmp_path / "token"))
    )
    now = [0.0]
    credentials.refresh_seldom(api.configuration, clock=lambda: now[0])
    return api, now


def _rotate_to_alice(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "token").write_text(_tokens(cluster)["alice"], encoding="utf-8")


def test_a_token_that_rotates_is_renewed_within_a_second(cluster: Cluster, tmp_path: Path) -> None:
    api, now = _rotating_client(cluster, tmp_path)
    assert call(api, "GET", NAMESPACES)["items"]

    _rotate_to_alice(cluster, tmp_path)  # the credential rotates
    now[0] += credentials.REFRESH_EVERY / 2
    call(api, "GET", NAMESPACES)  # within the second: the admin's token still
    now[0] += credentials.REFRESH_EVERY / 2
    with pytest.raises(errors.APIForbiddenError):  # renewed: alice may not list namespaces
        call(api, "GET", NAMESPACES)
    api.close()


def test_copies_of_a_configuration_renew_their_tokens_each_on_its_own(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The simulator copies its configuration for its watches' pool, and the copy shares
    the hook: one configuration set up lately must not put off another's renewal."""
    first, now = _rotating_client(cluster, tmp_path)
    second = client.ApiClient(copy.copy(first.configuration))
    call(second, "GET", NAMESPACES)  # the second copy set up at 0
    _rotate_to_alice(cluster, tmp_path)
    now[0] = credentials.REFRESH_EVERY / 2
    with pytest.raises(errors.APIForbiddenError):  # the first copy set up at 0.5
        call(first, "GET", NAMESPACES)
    now[0] = credentials.REFRESH_EVERY
    with pytest.raises(errors.APIForbiddenError):  # the second is due at 1, not at 1.5
        call(second, "GET", NAMESPACES)
    first.close()
    second.close()


def test_an_in_cluster_client_reads_the_service_account_and_is_set_up_seldom(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file, ca_file = tmp_path / "token", tmp_path / "ca.crt"
    token_file.write_text(_tokens(cluster)["admin"], encoding="utf-8")
    ca_file.write_text(
        (Path(cluster.state.folder) / "pki" / "ca.crt").read_text(encoding="utf-8"),
        encoding="utf-8",
    )
    server = urlsplit(cluster.server)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token_file))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca_file))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(server.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
    setups = _count_calls(monkeypatch, incluster_config.InClusterConfigLoader, "_set_config")
    api = credentials.in_cluster()
    started = time.monotonic()
    for _ in range(100):
        assert call(api, "GET", NAMESPACES)["items"]
    seconds = time.monotonic() - started
    assert len(setups) <= 2 + int(seconds / credentials.REFRESH_EVERY)
    api.close()


def test_what_no_client_can_be_made_from_is_said_without_its_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing or broken kubeconfig, or no service account, is a `CredentialsError`
    that names the file and the place, never the lines (they may hold tokens); these
    were the client's own exceptions, a traceback at start-up."""
    absent = tmp_path / "absent"
    with pytest.raises(credentials.CredentialsError, match=re.escape(f"{absent}: no such file")):
        credentials.from_kubeconfig(absent)
    broken = tmp_path / "broken.kubeconfig"
    broken.write_text("users:\n- name: x\n  user:\n    token: s3cr3t-token\n  : [\n")
    with pytest.raises(credentials.CredentialsError) as refused:
        credentials.from_kubeconfig(broken)
    assert str(refused.value).endswith("not YAML (line 5, column 3)")
    assert "s3cr3t" not in str(refused.value) and refused.value.__cause__ is None
    empty = tmp_path / "empty.kubeconfig"
    empty.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(credentials.CredentialsError, match=r"\.kubeconfig: Invalid kube-config"):
        credentials.from_kubeconfig(empty)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(credentials.CredentialsError, match="run in a pod, or give --kubeconfig"):
        credentials.in_cluster()
