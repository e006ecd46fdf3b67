"""The local control plane is real: RBAC, Deployments and the controller-manager run."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters.cluster import local

pytestmark = pytest.mark.cluster


def test_every_identity_authenticates(cluster) -> None:
    for identity, user in (("admin", "admin"), ("alice", "alice")):
        review = cluster.kubectl(identity, "auth", "can-i", "--list", "-n", "support")
        assert review.returncode == 0, user


def test_alice_is_confined_to_support(cluster) -> None:
    core = client.CoreV1Api(cluster.api_client("alice"))
    with pytest.raises(ApiException) as denied:
        core.list_namespaced_secret("analytics")
    assert denied.value.status == 403


def test_deployment_makes_pods(cluster) -> None:
    apps = client.AppsV1Api(cluster.api_client("admin"))
    core = client.CoreV1Api(cluster.api_client("admin"))
    name = "probe-deployment"
    apps.create_namespaced_deployment(
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]},
                },
            },
        },
    )
    deadline = time.monotonic() + 60
    pods = []
    while time.monotonic() < deadline and not pods:
        pods = core.list_namespaced_pod("default", label_selector=f"app={name}").items
        time.sleep(0.5)
    apps.delete_namespaced_deployment(name, "default")
    assert pods, "the controller-manager made no Pod for the Deployment"
    assert pods[0].status.phase == "Pending"  # no scheduler, no kubelet: the simulator's job


def test_down_stops_exactly_its_processes(tmp_path) -> None:
    state = local.up(tmp_path / "other")
    pids = list(state.pids.values())
    assert all(local._alive(p) for p in pids)
    stopped = local.down(tmp_path / "other")
    assert sorted(stopped) == ["etcd", "kube-apiserver", "kube-controller-manager"]
    assert not any(local._alive(p) for p in pids)
    assert not (tmp_path / "other").exists()
    assert local.status(tmp_path / "other") is None
