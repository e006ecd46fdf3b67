"""Session fixtures shared by every layer's tests.

`cluster` starts one real control plane (etcd, kube-apiserver, kube-controller-manager)
for the whole session on free loopback ports, bootstrapped with the CRDs and RBAC, and
stops it afterwards. Tests talk to it as an identity: admin, controller, alice, simulator.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from kubernetes import client

from adapters.cluster import bootstrap, local

KUBECTL = os.environ.get("KUBECTL", "kubectl")
# celpy sets the recursion limit to 2,500 whenever a CEL environment is built, and
# hypothesis warns (an error under -W error) when the limit changes inside one of its
# tests: the first CEL selector judged in a property test would fail it. Set it once,
# before any test, to the value celpy sets.
CEL_RECURSION_LIMIT = 2500
sys.setrecursionlimit(max(sys.getrecursionlimit(), CEL_RECURSION_LIMIT))

# No time limit on an example: times belong in benchmarks, and the machine is shared. With
# hypothesis's default of 200 ms a property test that renders and judges a CEL selector
# failed once beside another suite's control plane, and passed alone.
settings.register_profile("ai-inference", deadline=None)
settings.load_profile("ai-inference")


class Cluster:
    def __init__(self, state: local.ClusterState) -> None:
        self.state = state
        self.server = state.server
        self._clients: dict[str, client.ApiClient] = {}

    def kubeconfig(self, identity: str) -> Path:
        return self.state.kubeconfig(identity)

    def api_client(self, identity: str) -> client.ApiClient:
        if identity not in self._clients:
            self._clients[identity] = bootstrap.api_client(self.kubeconfig(identity))
        return self._clients[identity]

    def kubectl(
        self, identity: str, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [KUBECTL, f"--kubeconfig={self.kubeconfig(identity)}", *args],
            input=input,
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} as {identity} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    def close(self) -> None:
        for api in self._clients.values():
            api.close()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("cluster")
    state = local.up(folder)
    try:
        bootstrap.bootstrap(state.kubeconfig("admin"))
        handle = Cluster(state)
        yield handle
        handle.close()
    finally:
        local.down(folder, keep_data=os.environ.get("AI_INFERENCE_KEEP_CLUSTER") == "1")
