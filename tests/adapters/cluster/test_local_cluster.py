"""The local control plane is real: RBAC, Deployments and the controller-manager run."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters.cli.main import main
from adapters.cluster import bootstrap, local
from tests.support.polling import eventually

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
    assert sorted(stopped) == ["admission", "etcd", "kube-apiserver", "kube-controller-manager"]
    assert not any(local._alive(p) for p in pids)
    assert not (tmp_path / "other").exists()
    assert local.status(tmp_path / "other") is None


def test_an_api_server_started_again_waits_out_a_port_briefly_taken(tmp_path) -> None:
    """`kill` and `start_again` keep the address; a port held for a moment when it starts
    again (a client connected to itself on it, seen under load) costs a retry, not a
    failure."""
    state = local.up(tmp_path / "restart")
    try:
        local.kill(state, "kube-apiserver")
        port = int(state.server.rsplit(":", 1)[1])
        holder = eventually(lambda: _bound(port), timeout=30, what="the port held")
        threading.Timer(3.0, holder.close).start()
        local.start_again(state, "kube-apiserver")
        log = (tmp_path / "restart" / "logs" / "kube-apiserver.log").read_text(errors="replace")
        assert "address already in use" in log  # the first try met the held port
        with bootstrap.api_client(state.kubeconfig("admin")) as admin:
            assert client.CoreV1Api(admin).list_namespace().items  # the same address serves
    finally:
        local.down(tmp_path / "restart")


def _bound(port: int) -> socket.socket | None:
    # Sockets of the killed server may hold the port for a moment (what the retry covers).
    try:
        return socket.create_server(("127.0.0.1", port))
    except OSError:
        return None


def test_down_leaves_a_folder_that_holds_no_control_plane(tmp_path, capsys) -> None:
    """`--dir` is whatever the user typed: a folder without the plane's state file is
    neither stopped nor removed (it used to be removed whole), and the error says which
    folder inside it is the plane's, as the bench's `--dir` holds one."""
    bench = tmp_path / "bench"
    (bench / "cluster").mkdir(parents=True)
    (bench / "cluster" / local.STATE_FILE).write_text("{}")
    (bench / "controller.log").write_text("kept")
    with pytest.raises(local.ClusterError, match="holds no control plane") as refused:
        local.down(bench)
    assert f"the control plane's folder is {bench / 'cluster'}" in str(refused.value)
    assert (bench / "controller.log").read_text() == "kept"

    assert main(["cluster", "down", "--dir", str(bench)]) == 1
    assert "cluster down refused" in capsys.readouterr().err
    assert (bench / "controller.log").read_text() == "kept"
    assert local.down(tmp_path / "never-made") == []


def test_up_takes_only_a_new_or_empty_folder(tmp_path) -> None:
    """What `up` makes, `down` removes: a folder holding files of its own is refused before
    anything starts or is written into it."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    with pytest.raises(local.ClusterError, match="choose a new or empty folder"):
        local.up(notes)
    assert [p.name for p in notes.iterdir()] == ["todo.txt"]


def test_a_state_file_cut_short_is_an_error_that_says_what_to_do(tmp_path, capsys) -> None:
    """A crash while the state was written used to leave a folder whose every `up`,
    `down` and `status` ended in a traceback; the state is now written whole or not at
    all, and one cut short some other way is a clear error that leaves the folder."""
    folder = tmp_path / "plane"
    folder.mkdir()
    local._write_state(folder, local.ClusterState(str(folder), "https://127.0.0.1:1", ""))
    assert [p.name for p in folder.iterdir()] == [local.STATE_FILE]  # no partial file left
    assert local._load(folder) == local.ClusterState(str(folder), "https://127.0.0.1:1", "")
    (folder / local.STATE_FILE).write_text('{"folder": "/x", "ser')
    for verb in ("status", "down", "up"):
        assert main(["cluster", verb, "--dir", str(folder)]) == 1, verb
        assert "cannot be read" in capsys.readouterr().err, verb
    assert (folder / local.STATE_FILE).exists()
