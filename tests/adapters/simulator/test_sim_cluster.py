"""The simulator against the real local API server: what the controller will see."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sim_bed import MIG, RESOURCE, SHARED, TEST_NODE, WHOLE, Bed, eventually

from adapters.kubernetes.watching import Informer
from adapters.simulator import capacity, kubelet, podclaims, scheduler, world
from adapters.simulator.catalog import CatalogPublisher
from adapters.simulator.kube import Kube, path
from adapters.simulator.world import is_ready_node
from fsm.placement.inventory import parse_snapshot

pytestmark = pytest.mark.cluster

TOKEN_ENV = [
    {
        "name": "VLLM_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "order-auth", "key": "token"}},
    }
]


def results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = claim["status"]["allocation"]["devices"]["results"]
    return found


def allocated_claim(bed: Bed, pod_name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        pod = bed.get_pod(pod_name)
        claim = bed.claim_of(pod) if pod else None
        return claim if claim and (claim.get("status") or {}).get("allocation") else None

    return eventually(probe, what=f"an allocated claim for {pod_name}")


def ready_nodes(kube: Kube) -> int:
    return sum(1 for n in kube.list(path("v1", "nodes"))[0] if is_ready_node(n))


# --- publishing ------------------------------------------------------------------------


def test_slices_and_classes_are_published_as_dra_shapes(
    kube: Kube, capacity_spec: capacity.CapacitySpec
) -> None:
    slices = kube.list(
        path(RESOURCE, "resourceslices"), label_selector=f"{capacity.NODE_LABEL}=gpu-a"
    )[0]
    assert len(slices) == 1
    spec = slices[0]["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == (
        "gpu.nvidia.com",
        "gpu-a",
        "gpu-a",
    )
    assert spec["pool"]["resourceSliceCount"] == 1
    gpu0 = next(d for d in spec["devices"] if d["name"] == "gpu-0")
    assert gpu0["attributes"]["productName"] == {"string": "NVIDIA A100 80GB PCIe"}
    assert gpu0["attributes"]["cudaComputeCapability"] == {"version": "8.0.0"}
    assert gpu0["capacity"]["memory"] == {"value": "80Gi"}
    owner = slices[0]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Node", "gpu-a")

    t4 = kube.request("GET", path(RESOURCE, "deviceclasses", "nvidia-t4-mps-physical"))
    labels = t4["metadata"]["labels"]
    assert labels["ai.deckhouse.io/placement"] == "WholeDevice"
    assert labels["ai.deckhouse.io/sharing"] == "Shared"
    assert labels["ai.deckhouse.io/share-percent"] == "50"
    assert t4["spec"]["selectors"][1] == {
        "cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'Tesla T4'"}
    }

    node = kube.request("GET", path("v1", "nodes", "gpu-t"))
    assert is_ready_node(node)
    assert node["status"]["allocatable"]["memory"] == "128Gi"

    # What the controller's planner reads from the server makes one consistent snapshot.
    snapshot = parse_snapshot(
        kube.list(path(RESOURCE, "deviceclasses"))[0],
        kube.list(path(RESOURCE, "resourceslices"))[0],
    )
    ours = [d for d in snapshot.devices if d.node in {n.name for n in capacity_spec.nodes}]
    assert len(ours) == sum(len(capacity.render_slice_devices(n)) for n in capacity_spec.nodes)
    assert not [p for p in snapshot.problems if any(n.name in p for n in capacity_spec.nodes)]


def test_capacity_can_grow_change_and_shrink_at_run_time(
    bed: Bed, capacity_spec: capacity.CapacitySpec
) -> None:
    data = capacity_spec.model_dump(by_alias=True, mode="json")
    extra: dict[str, Any] = {
        "name": "sim-extra",
        "gpus": [{"product": "Simulated L4", "memory": "24Gi"}],
    }
    data["nodes"].append(extra)
    bed.sim.set_capacity(capacity.load_capacity(data))

    def slice_of_extra() -> list[dict[str, Any]]:
        return bed.kube.list(
            path(RESOURCE, "resourceslices"), label_selector=f"{capacity.NODE_LABEL}=sim-extra"
        )[0]

    first = slice_of_extra()
    assert [d["name"] for d in first[0]["spec"]["devices"]] == ["gpu-0"]
    assert first[0]["spec"]["pool"]["generation"] == 1
    assert bed.kube.get(path("v1", "nodes", "sim-extra")) is not None

    extra["gpus"].append({"product": "Simulated L4", "memory": "24Gi"})
    result = bed.sim.set_capacity(capacity.load_capacity(data))
    assert result.updated == [f"ResourceSlice/{first[0]['metadata']['name']}"]
    changed = slice_of_extra()
    assert [d["name"] for d in changed[0]["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert changed[0]["spec"]["pool"]["generation"] == 2  # readers keep the newest only

    assert bed.sim.set_capacity(capacity.load_capacity(data)).updated == []  # no change, no write

    bed.sim.set_capacity(capacity_spec)
    assert slice_of_extra() == []
    assert bed.kube.get(path("v1", "nodes", "sim-extra")) is None


# --- scheduling and running --------------------------------------------------------------


def test_a_pod_with_a_claim_template_is_allocated_bound_and_served(bed: Bed) -> None:
    bed.secret("order-auth", {"token": "tok-123"})
    bed.template("order", WHOLE)
    bed.pod("order-0", template="order", env=TOKEN_ENV)
    pod = bed.running("order-0")

    assert pod["spec"]["nodeName"] == TEST_NODE
    assert pod["status"]["podIP"] == "127.0.0.1"
    assert pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    claim = allocated_claim(bed, "order-0")
    meta = claim["metadata"]
    assert meta["name"].startswith("order-0-gpu-") and len(meta["name"]) == len("order-0-gpu-") + 5
    owner = meta["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "order-0",
        pod["metadata"]["uid"],
        True,
    )
    assert scheduler.FINALIZER in meta["finalizers"]
    assert results(claim) == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": TEST_NODE, "device": "gpu-0"}
    ]
    term = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
    assert term["matchFields"] == [
        {"key": "metadata.name", "operator": "In", "values": [TEST_NODE]}
    ]
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "order-0", "uid": pod["metadata"]["uid"]}
    ]
    assert podclaims.claim_statuses(pod) == {"gpu": meta["name"]}

    url = pod["metadata"]["annotations"][kubelet.ENDPOINT_ANNOTATION]
    with_token = httpx.get(
        url + "/v1/models", headers={"Authorization": "Bearer tok-123"}, timeout=5
    )
    assert with_token.status_code == 200
    assert [m["id"] for m in with_token.json()["data"]] == ["order-0"]
    assert httpx.get(url + "/v1/models", timeout=5).status_code == 401
    wrong = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer nope"}, timeout=5)
    assert wrong.status_code == 401


def test_a_llama_cpp_pod_is_served_only_with_its_token(bed: Bed) -> None:
    """llama.cpp reads its key from LLAMA_API_KEY: a stub that looked for vLLM's answered
    every caller of a llama.cpp order, so a wrong variable name could fail no test."""
    bed.secret("order-auth", {"token": "tok-llama"})
    env = [{**TOKEN_ENV[0], "name": "LLAMA_API_KEY"}]
    bed.pod("llama-0", env=env)
    pod = bed.running("llama-0")
    url = pod["metadata"]["annotations"][kubelet.ENDPOINT_ANNOTATION]
    assert httpx.get(url + "/v1/models", timeout=5).status_code == 401
    token = {"Authorization": "Bearer tok-llama"}
    assert httpx.get(url + "/v1/models", headers=token, timeout=5).status_code == 200


def test_a_pod_that_cannot_be_allocated_waits_and_nothing_is_preempted(
    bed: Bed, priority_classes: None
) -> None:
    bed.template("whole", WHOLE)
    bed.pod("low", template="whole", priority_class="sim-test-low")
    low = bed.running("low")
    held = results(allocated_claim(bed, "low"))

    bed.pod("high", template="whole", priority_class="sim-test-high")
    condition = bed.unschedulable("high")
    nodes = ready_nodes(bed.kube)
    assert condition["reason"] == "Unschedulable"
    assert condition["message"] == (
        f"0/{nodes} nodes are available: {nodes} cannot allocate all claims. "
        f"preemption: 0/{nodes} nodes are available: "
        f"{nodes} Preemption is not helpful for scheduling."
    )
    high = bed.get_pod("high")
    assert high is not None and high["spec"]["priority"] > low["spec"]["priority"]

    # More passes change nothing: the lower-priority pod keeps its device.
    bed.sim.run_once()
    bed.sim.run_once()
    still = bed.running("low")
    assert still["metadata"]["uid"] == low["metadata"]["uid"]
    assert results(allocated_claim(bed, "low")) == held
    assert not (bed.get_pod("high") or {}).get("spec", {}).get("nodeName")


def test_deleting_the_pod_frees_its_device(bed: Bed) -> None:
    bed.template("whole", WHOLE)
    bed.pod("first", template="whole")
    bed.running("first")
    first_claim = allocated_claim(bed, "first")
    bed.pod("second", template="whole")
    bed.unschedulable("second")

    bed.kube.delete(path("v1", "pods", "first", namespace=bed.ns))
    bed.gone("first")  # the kubelet stand-in confirmed the deletion
    eventually(
        lambda: (
            bed.kube.get(
                path(RESOURCE, "resourceclaims", first_claim["metadata"]["name"], namespace=bed.ns)
            )
            is None
        ),
        what="the first pod's claim deleted",
    )
    bed.running("second")
    assert results(allocated_claim(bed, "second"))[0]["device"] == results(first_claim)[0]["device"]


def test_a_shared_device_holds_two_consumers_then_refuses(bed: Bed) -> None:
    bed.template("half", SHARED, capacity={"requests": {"memory": "8Gi"}})
    for name in ("a", "b"):
        bed.pod(name, template="half")
    shares = [results(allocated_claim(bed, name))[0] for name in ("a", "b")]
    for name in ("a", "b"):
        bed.running(name)
    assert {(s["pool"], s["device"]) for s in shares} == {(TEST_NODE, "gpu-1")}
    assert all(s["consumedCapacity"] == {"memory": "8Gi"} for s in shares)
    assert shares[0]["shareID"] != shares[1]["shareID"]

    bed.pod("c", template="half")
    assert "cannot allocate all claims" in bed.unschedulable("c")["message"]


def test_a_mig_partition_is_allocated_by_profile(bed: Bed) -> None:
    bed.template(
        "small",
        MIG,
        selectors=[
            {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}
        ],
    )
    bed.pod("part", template="small")
    bed.running("part")
    device = results(allocated_claim(bed, "part"))[0]["device"]
    assert device.startswith("gpu-2-mig-1g10gb-")
    published = bed.kube.list(
        path(RESOURCE, "resourceslices"), label_selector=f"{capacity.NODE_LABEL}={TEST_NODE}"
    )[0]
    by_name = {d["name"]: d for d in published[0]["spec"]["devices"]}
    assert by_name[device]["attributes"]["type"] == {"string": "mig"}
    assert by_name[device]["capacity"]["memory"] == {"value": "9856Mi"}


def test_a_pod_without_claims_binds_and_one_too_big_waits(bed: Bed) -> None:
    bed.pod("plain")
    assert bed.running("plain")["spec"]["nodeName"]
    bed.pod("huge", cpu="4000")
    message = bed.unschedulable("huge")["message"]
    nodes = ready_nodes(bed.kube)
    assert message == f"0/{nodes} nodes are available: {nodes} Insufficient cpu."


def test_a_missing_secret_keeps_the_container_waiting_until_it_exists(bed: Bed) -> None:
    bed.pod("needs-token", env=TOKEN_ENV)

    def waiting() -> dict[str, Any] | None:
        pod = bed.get_pod("needs-token") or {}
        for status in (pod.get("status") or {}).get("containerStatuses") or ():
            return (status.get("state") or {}).get("waiting")
        return None

    state = eventually(waiting, what="container waiting")
    assert state == {
        "reason": "CreateContainerConfigError",
        "message": 'secret "order-auth" not found',
    }
    bed.secret("order-auth", {"token": "late"})
    pod = bed.running("needs-token")
    url = pod["metadata"]["annotations"][kubelet.ENDPOINT_ANNOTATION]
    assert (
        httpx.get(
            url + "/v1/models", headers={"Authorization": "Bearer late"}, timeout=5
        ).status_code
        == 200
    )


# --- the failure knob ----------------------------------------------------------------------


def status_of(url: str) -> int:
    return httpx.get(url + "/v1/models", timeout=5).status_code


def test_the_fail_knob_on_the_pod_makes_the_stub_answer_500(bed: Bed) -> None:
    bed.pod("flaky")
    url = bed.running("flaky")["metadata"]["annotations"][kubelet.ENDPOINT_ANNOTATION]
    assert status_of(url) == 200
    pod_url = path("v1", "pods", "flaky", namespace=bed.ns)
    bed.kube.merge_patch(pod_url, {"metadata": {"annotations": {kubelet.FAIL_ANNOTATION: "500"}}})
    eventually(lambda: status_of(url) == 500, what="the stub answering 500")
    bed.kube.merge_patch(pod_url, {"metadata": {"annotations": {kubelet.FAIL_ANNOTATION: None}}})
    eventually(lambda: status_of(url) == 200, what="the stub healthy again")


def _probed_pod(bed: Bed, name: str) -> dict[str, Any]:
    """A running pod whose readiness probe runs every second and fails at the first miss."""
    manifest = bed.pod_manifest(name)
    manifest["spec"]["containers"][0]["readinessProbe"] = {
        "httpGet": {"path": "/v1/models", "port": 8000},
        "periodSeconds": 1,
        "failureThreshold": 1,
    }
    bed.kube.create(path("v1", "pods", namespace=bed.ns), manifest)
    return bed.running(name)


@contextmanager
def _pods_watch_stopped(bed: Bed) -> Iterator[Informer]:
    """The simulator's pods watch stopped, to hold an order of events; started again after,
    so the teardown's deletions are heard."""
    pods = next(i for i in bed.sim._informers if i.resource is world.PODS)
    pods.stop()
    try:
        yield pods
    finally:
        pods.start()


def _write_it_unready(bed: Bed, pod: dict[str, Any]) -> None:
    """What a changed fail knob makes the kubelet do: probe again, now failing, and write
    the pod's readiness."""
    stub = bed.sim.stub(*world.key(pod))
    assert stub is not None
    stub.failure = "500"
    bed.sim.queue.add(kubelet.probe_key(pod["metadata"]["uid"]))


def test_a_deletion_first_seen_in_our_own_writes_result_still_removes_the_pod(bed: Bed) -> None:
    """Deleted between the simulator's read and its write: the deletion's event is older
    than that write and skipped, so the write's result is all it hears (seen: a pod left
    terminating for good after an API server restart). The pods' watch is stopped here to
    hold that order; the write is the prober's own report of the pod turning unready."""
    pod = _probed_pod(bed, "late")
    assert bed.sim.watch_stats()["pods"].events > 0  # heard of it by its watch, so far
    with _pods_watch_stopped(bed):
        bed.kube.request("DELETE", path("v1", "pods", "late", namespace=bed.ns), {})
        _write_it_unready(bed, pod)
        bed.gone("late", timeout=15)


def test_a_fail_knob_first_seen_in_our_own_writes_result_still_reaches_the_stub(
    bed: Bed,
) -> None:
    """Set between the simulator's read and its write: the knob's event is older than that
    write and skipped, so the write's result is all it hears. The pods' watch is stopped
    to hold that order; the write is the prober's report of the pod turning unready."""
    pod = _probed_pod(bed, "knobbed")
    url = pod["metadata"]["annotations"][kubelet.ENDPOINT_ANNOTATION]
    with _pods_watch_stopped(bed):
        pod_url = path("v1", "pods", "knobbed", namespace=bed.ns)
        knob = {"metadata": {"annotations": {kubelet.FAIL_ANNOTATION: "503"}}}
        bed.kube.merge_patch(pod_url, knob)
        _write_it_unready(bed, pod)  # the stub's own failure, not the knob's
        eventually(lambda: status_of(url) == 503, what="the stub answering as its knob says")


def test_a_deletion_a_list_showed_during_our_write_is_read_again(bed: Bed) -> None:
    """A LIST requested while the simulator's write was in flight shows the pod at another
    version: older or newer than that write, the store cannot tell, and skipped as older a
    deletion would have no event after it. The pods' watch is stopped and that LIST's
    change handed to the simulator by hand to hold the order."""
    pod = _probed_pod(bed, "relisted")
    with _pods_watch_stopped(bed) as pods:
        list_requested = time.monotonic()
        _write_it_unready(bed, pod)

        def unready() -> bool:
            held = bed.sim.store.get(world.PODS, pod["metadata"]["uid"]) or {}
            conditions = (held.get("status") or {}).get("conditions") or ()
            return any(c["type"] == "Ready" and c["status"] == "False" for c in conditions)

        eventually(unready, what="the simulator's write of the pod, unready")
        pod_url = path("v1", "pods", "relisted", namespace=bed.ns)
        bed.kube.request("DELETE", pod_url, {})
        deleting = bed.kube.get(pod_url)
        assert deleting is not None and deleting["metadata"].get("deletionTimestamp")
        pods._list_began = list_requested  # as the informer hands out a LIST's changes
        try:
            pods._emit("MODIFIED", deleting)
        finally:
            pods._list_began = None
        bed.gone("relisted", timeout=8)  # within the write's mask: read again, not waited out


def test_nothing_changing_costs_no_work_and_one_change_costs_one_item(bed: Bed) -> None:
    names = [f"idle-{i}" for i in range(5)]
    for name in names:
        bed.pod(name)
    urls = [
        bed.running(name)["metadata"]["annotations"][kubelet.ENDPOINT_ANNOTATION] for name in names
    ]

    def settled() -> int | None:  # the last writes' events have come back
        before = bed.sim.stats.items
        time.sleep(1.0)
        return before if bed.sim.stats.items == before and not len(bed.sim.queue) else None

    items = eventually(settled, what="the simulator idle")
    time.sleep(2.0)
    assert bed.sim.stats.items == items  # no timers, no passes, no re-lists
    assert bed.sim.kubelet.running == len(names)

    pod_url = path("v1", "pods", "idle-0", namespace=bed.ns)
    bed.kube.merge_patch(pod_url, {"metadata": {"annotations": {kubelet.FAIL_ANNOTATION: "500"}}})
    eventually(lambda: status_of(urls[0]) == 500, what="the stub answering 500")
    assert bed.sim.stats.items - items == 1  # that pod's item, not a look at every pod
    assert [status_of(url) for url in urls[1:]] == [200] * 4


def test_the_fail_knob_on_the_deployment_reaches_its_pods(bed: Bed) -> None:
    template = bed.pod_manifest("runtime")
    template["metadata"] = {"labels": {"app": "runtime"}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "runtime", "namespace": bed.ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "runtime"}},
            "template": template,
        },
    }
    bed.kube.create(path("apps/v1", "deployments", namespace=bed.ns), deployment)

    def endpoint() -> str | None:
        for pod in bed.kube.list(path("v1", "pods", namespace=bed.ns))[0]:
            if (pod.get("status") or {}).get("phase") == "Running":
                return (pod["metadata"].get("annotations") or {}).get(kubelet.ENDPOINT_ANNOTATION)
        return None

    url = eventually(endpoint, timeout=30, what="the Deployment's pod serving")
    assert status_of(url) == 200
    deployment_url = path("apps/v1", "deployments", "runtime", namespace=bed.ns)
    bed.kube.merge_patch(
        deployment_url, {"metadata": {"annotations": {kubelet.FAIL_ANNOTATION: "timeout"}}}
    )

    def hangs() -> bool:
        try:
            httpx.get(url + "/v1/models", timeout=0.5)
        except httpx.ReadTimeout:
            return True
        return False

    eventually(hangs, what="the stub hanging past the probe timeout")
    bed.kube.merge_patch(
        deployment_url, {"metadata": {"annotations": {kubelet.FAIL_ANNOTATION: "500"}}}
    )
    eventually(lambda: status_of(url) == 500, what="the stub answering 500")
    bed.kube.delete(deployment_url)


# --- catalog and the command ---------------------------------------------------------------


def test_catalog_objects_are_created_with_their_status(kube: Kube) -> None:
    CatalogPublisher(kube).publish()
    model = kube.request(
        "GET", path("ai.deckhouse.io/v1alpha1", "clustermodels", "qwen2-5-8b-instruct-awq")
    )
    assert model["status"]["phase"] == "Ready"
    assert model["status"]["resolved"]["quantization"] == "AWQ"
    assert model["status"]["observedGeneration"] == model["metadata"]["generation"]
    assert CatalogPublisher(kube).publish() == []  # already as in the file: no writes


def test_simulate_command_prints_the_hub_and_stops_on_interrupt(
    cluster: Any, tmp_path: Path, capacity_spec: capacity.CapacitySpec
) -> None:
    capacity_file = tmp_path / "capacity.yaml"
    capacity_file.write_text(
        yaml.safe_dump(capacity_spec.model_dump(by_alias=True, mode="json")), encoding="utf-8"
    )
    command = [
        sys.executable,
        "-m",
        "adapters.cli.main",
        "simulate",
        f"--kubeconfig={cluster.kubeconfig('simulator')}",
        f"--capacity={capacity_file}",
        "--no-catalog",
    ]
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=environment) as process:
        try:
            assert process.stdout is not None
            hub_line = process.stdout.readline()
            assert hub_line.startswith("stand-in hub: http://127.0.0.1:")
            assert "simulating 4 node(s)" in process.stdout.readline()
            hub_url = hub_line.split(": ", 1)[1].strip()
            info = httpx.get(hub_url + "/api/models/Qwen/Qwen2.5-32B-Instruct-AWQ", timeout=5)
            assert info.json()["id"] == "Qwen/Qwen2.5-32B-Instruct-AWQ"
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 0


@pytest.fixture
def priority_classes(kube: Kube) -> Iterator[None]:
    url = path("scheduling.k8s.io/v1", "priorityclasses")
    for name, value in (("sim-test-low", 100), ("sim-test-high", 1000)):
        kube.delete(path("scheduling.k8s.io/v1", "priorityclasses", name))
        kube.create(url, {"metadata": {"name": name}, "value": value, "globalDefault": False})
    yield
    for name in ("sim-test-low", "sim-test-high"):
        kube.delete(path("scheduling.k8s.io/v1", "priorityclasses", name))
