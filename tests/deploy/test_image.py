"""The image scripts/build-image.sh writes: what it declares, and that it runs.

The metadata is read with `skopeo inspect` as a registry client would; the run unpacks the
image with umoci and starts its entrypoint from its own root file system, read-only, as
its non-root user, against the local API server as the controller's ServiceAccount (bound
by deploy/rbac) — with the simulator and the stand-in hub of the end-to-end tests — and
brings an order to Ready.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from adapters.platform import install_module
from adapters.simulator.hub import StandInHub
from adapters.simulator.simulator import Simulator
from tests.deploy.conftest import REPO, Image, ImageProcess, ImageRoot, free_port, skopeo
from tests.e2e.conftest import Orders, conditions, wait_for

pytestmark = [pytest.mark.image, pytest.mark.timeout(1500)]

UID = 64535  # deploy/controller.yaml's runAsUser
DATA = "/var/lib/ai-inference"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
VERSION = PROJECT["version"]


def test_image_declares_a_non_root_controller(image: Image) -> None:
    info = json.loads(skopeo("inspect", image.ref))
    process = image.process
    assert image.tag == VERSION
    assert process["User"] == f"{UID}:{UID}"
    assert process["Entrypoint"] == ["ai-inference"]
    assert process["Cmd"] == ["controller"]
    assert process["WorkingDir"] == DATA
    assert info["Os"] == "linux" and len(info["Layers"]) == 1
    labels = info["Labels"]
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.title"] == "ai-inference controller"
    revision = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=REPO, check=False).returncode:
        revision += "-dirty"  # built from a work tree with uncommitted changes
    assert labels["org.opencontainers.image.revision"] == revision
    # Every time stamp is the last commit's, so a rebuild of the same inputs is the same.
    epoch = subprocess.run(
        ["git", "log", "-1", "--format=%cI"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert info["Created"] == labels["org.opencontainers.image.created"]
    assert _utc(info["Created"]) == _utc(epoch)


def _utc(stamp: str) -> str:
    return datetime.fromisoformat(stamp).astimezone(UTC).isoformat()


def test_image_is_reproducible_from_the_same_inputs(image: Image, tmp_path: Path) -> None:
    # The root and the layout assembled again from the same Debian root and wheels: every
    # time stamp is SOURCE_DATE_EPOCH and pip's byte code is hash-checked, so the layer,
    # the configuration and the manifest come out byte for byte the same.
    again = tmp_path / "oci"
    subprocess.run(
        ["bash", str(REPO / "scripts" / "build-image.sh"), "--rebuild"],
        cwd=REPO,
        env={**os.environ, "AI_INFERENCE_IMAGE_DIR": str(again)},
        capture_output=True,
        check=True,
        timeout=900,
    )
    first = json.loads(skopeo("inspect", image.ref))
    second = json.loads(skopeo("inspect", f"oci:{again}:{image.tag}"))
    assert (second["Digest"], second["Layers"]) == (first["Digest"], first["Layers"])


def test_image_layout_copies_as_a_registry_client_reads_it(image: Image, tmp_path: Path) -> None:
    # What `skopeo copy oci:build/image:TAG docker://...` does, to an archive instead of a
    # registry (none is reachable here): the same manifest arrives.
    archive = f"oci-archive:{tmp_path / 'controller.tar'}:{image.tag}"
    skopeo("copy", "--quiet", image.ref, archive)
    source = json.loads(skopeo("inspect", image.ref))
    copied = json.loads(skopeo("inspect", archive))
    assert copied["Digest"] == source["Digest"]
    assert copied["Layers"] == source["Layers"]


def test_image_root_is_what_a_read_only_pod_needs(image_root: ImageRoot) -> None:
    rootfs = image_root.rootfs
    process = image_root.runtime["process"]
    assert (process["user"]["uid"], process["user"]["gid"]) == (UID, UID)
    assert process["args"] == ["ai-inference", "controller"]
    data = (rootfs / DATA.lstrip("/")).stat()
    assert (data.st_uid, data.st_gid) == (UID, UID)
    passwd = (rootfs / "etc/passwd").read_text(encoding="utf-8")
    assert f"ai-inference:x:{UID}:{UID}:" in passwd
    entry = rootfs / "usr/local/bin/ai-inference"
    assert os.readlink(entry) == "/opt/ai-inference/bin/ai-inference"
    # The runtime provides /dev; the image carries no device nodes and installs nothing.
    assert list((rootfs / "dev").iterdir()) == []
    assert not list((rootfs / "opt/ai-inference/bin").glob("pip*"))


@pytest.fixture
def standins(cluster: Any) -> Iterator[tuple[StandInHub, Simulator]]:
    """The stand-in hub and the simulator, as the end-to-end platform starts them, but
    no in-process controller: the image's controller takes the Lease."""
    admin = cluster.api_client("admin")
    install_module(admin)
    hub = StandInHub()
    simulator = Simulator(cluster.api_client("simulator"))
    simulator.start()
    yield hub, simulator
    simulator.stop()
    hub.close()


@pytest.mark.cluster
def test_image_runs_the_controller_and_an_order_reaches_ready(
    cluster: Any,
    image: Image,
    image_root: ImageRoot,
    standins: tuple[StandInHub, Simulator],
    tmp_path: Path,
) -> None:
    hub, _ = standins
    leader = _start(cluster, image, image_root, hub, tmp_path / "leader")
    alice = Orders(cluster.api_client("alice"))
    name = "image-llm"
    standby: ImageProcess | None = None
    try:
        leader.process.wait_for_output("controller leading", timeout=180)
        assert _readyz(leader.health) == (200, "leading\n")
        scrape = httpx.get(f"http://127.0.0.1:{leader.metrics}/metrics", timeout=10)
        assert scrape.status_code == 200
        assert "\nai_inference_leader 1.0\n" in scrape.text
        # A second pod of the image stands by for the Lease, and is ready all the same.
        second = _start(cluster, image, image_root, hub, tmp_path / "standby")
        standby = second.process
        wait_for(
            lambda: _readyz(second.health) == (200, "standby\n"),
            timeout=120,
            what="the standby's /readyz",
        )
        assert "controller leading" not in standby.text()
        assert standby.stop() == 0, standby.text()
        standby = None

        alice.create(
            "support",
            name,
            {
                "inferenceServiceClassName": "default-llm",
                "model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-32B-Instruct-AWQ"}},
            },
        )
        obj = alice.wait_phase("support", name, "Ready", timeout=180)
        assert ("Ready", "True", "EndpointServing") in conditions(obj)
        # The log is the image user's file on the data volume, nowhere else.
        log = leader.data / "events.sqlite"
        assert log.stat().st_uid == UID and log.stat().st_size > 0
        assert sorted(
            p.name for p in leader.data.iterdir() if not p.name.startswith("events.sqlite")
        ) == ["kubeconfig"]
        _delete_and_wait(cluster, alice, name, obj["metadata"]["uid"])
    finally:
        alice.delete("support", name)
        if standby is not None:
            standby.stop()
        code = leader.process.stop()
    assert code == 0, leader.process.text()
    assert "Traceback" not in leader.process.text()


@dataclass
class Pod:
    """One run of the image, as one pod of the Deployment: its data volume, its health port."""

    process: ImageProcess
    data: Path
    health: int
    metrics: int


def _start(cluster: Any, image: Image, root: ImageRoot, hub: StandInHub, folder: Path) -> Pod:
    data = folder / "data"  # the Deployment's data volume
    data.mkdir(parents=True)
    kubeconfig = data / "kubeconfig"
    shutil.copyfile(cluster.kubeconfig("controller"), kubeconfig)
    for path in (data, kubeconfig):
        os.chown(path, UID, UID)
    data.chmod(0o750)
    kubeconfig.chmod(0o600)
    health, metrics = free_port(), free_port()
    args = [
        "controller",
        "--kubeconfig", f"{DATA}/kubeconfig",
        "--store", f"sqlite:///{DATA}/events.sqlite",
        "--hub-endpoint", hub.url,
        "--probe-target", "simulator",
        "--hpa-api-version", "autoscaling/v2beta2",  # the local server is 1.20
        "--health-port", str(health),
        "--metrics-port", str(metrics),  # two pods share this host's network
    ]  # fmt: skip
    process = ImageProcess(image, root, data, args, folder / "controller.log")
    return Pod(process, data, health, metrics)


def _readyz(port: int) -> tuple[int, str] | None:
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
    except httpx.TransportError:
        return None  # not listening yet
    return answer.status_code, answer.text


def _delete_and_wait(cluster: Any, orders: Orders, name: str, uid: str) -> None:
    """The next tests plan against the same capacity: wait until the order's pods and
    device claims are gone (the garbage collector removes what the order owned)."""
    orders.delete("support", name)
    admin = cluster.api_client("admin")
    core = client.CoreV1Api(admin)
    custom = client.CustomObjectsApi(admin)
    selector = f"ai.deckhouse.io/inference-service-uid={uid}"

    def gone() -> bool:
        pods = core.list_namespaced_pod("support", label_selector=selector).items
        claims = custom.list_namespaced_custom_object(
            "resource.k8s.io", "v1", "support", "resourceclaims", label_selector=selector
        )["items"]
        return orders.get("support", name) is None and not pods and not claims

    wait_for(gone, timeout=120, what=f"support/{name} and its pods and claims to go")
