"""What the outage tests share: the plane, orders, the convergence oracle, controllers.

A control plane of this package's own, with the simulator and the stand-in hub
(conftest.py starts it).

These tests break the control plane on purpose (the API server and etcd are killed and
started again, the network to them goes silent, etcd is compacted) and point the
controller at an event log that goes away, so they never share the session's cluster: a
package-scoped plane serves them all, and every test leaves it running, its Lease free
and its orders deleted. The controller runs in-process (its informers' counters are
read) or as `ai-inference controller` processes (an exit status is what is tested).

The oracle of every test is the same: each order's live status is at its generation and
equals the replay of its stream in the log (`render_status(fold(events))`), a Ready order
is Ready, and a deleted order's stream is marked deleted.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

import store
from adapters.cluster import bootstrap, local
from adapters.kubernetes.controller import LEASE_NAME, LEASE_NAMESPACE, Controller
from adapters.probes.targets import AnnotatedPodTarget
from adapters.simulator import world
from adapters.simulator.hub import StandInHub
from adapters.simulator.simulator import Simulator
from fsm.fold import fold
from fsm.status import render_status
from tests.support.controller_process import ControllerProcess, lease_holder
from tests.support.polling import eventually
from tests.support.relay import Relay

GROUP, VERSION, PLURAL = "ai.deckhouse.io", "v1alpha1", "inferenceservices"
NS = "support"
QWEN_AWQ = "Qwen/Qwen2.5-32B-Instruct-AWQ"  # default-llm's example: fits one A100
QWEN_SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
HPA = "autoscaling/v2beta2"  # the local 1.20 server
UID_LABEL = "ai.deckhouse.io/inference-service-uid"


def order_spec(model: str = QWEN_AWQ) -> dict[str, Any]:
    return {
        "inferenceServiceClassName": "default-llm",
        "model": {"src": "HuggingFace", "ref": {"name": model}},
    }


@dataclass
class Plane:
    state: local.ClusterState
    hub: StandInHub
    simulator: Simulator
    _clients: list[ApiClient] = field(default_factory=list)

    def api(self, identity: str) -> ApiClient:
        api = bootstrap.api_client(self.state.kubeconfig(identity))
        self._clients.append(api)
        return api

    def through(self, relay: Relay, identity: str = "controller") -> ApiClient:
        """A client of `identity` whose every connection goes through `relay`."""
        configuration = copy.deepcopy(self.api(identity).configuration)
        configuration.host = relay.url
        # The loader's token-refresh hook would put the kubeconfig's host back.
        configuration.refresh_api_key_hook = None
        api = ApiClient(configuration)
        self._clients.append(api)
        return api

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api("admin"))

    def controller(
        self, log: store.EventLog, api: ApiClient | None = None, **kw: Any
    ) -> Controller:
        """An in-process controller as the module's ServiceAccount (RBAC from deploy/)."""
        return Controller(
            api or self.api("controller"),
            log,
            hub_endpoint=self.hub.url,
            targets=AnnotatedPodTarget(),
            hpa_api_version=HPA,
            sync_timeout=60,
            **kw,
        )

    # -- orders ------------------------------------------------------------------------

    def create(self, name: str, model: str = QWEN_AWQ) -> str:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": name},
            "spec": order_spec(model),
        }
        made = self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
        return str(made["metadata"]["uid"])

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def change_model(self, name: str, model: str) -> int:
        """A new generation of the order; returns it."""
        patched = self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, name, {"spec": {"model": {"ref": {"name": model}}}}
        )
        return int(patched["metadata"]["generation"])

    def delete(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)

    def pods_of(self, uid: str) -> list[Any]:
        core = client.CoreV1Api(self.api("admin"))
        return list(core.list_namespaced_pod(NS, label_selector=f"{UID_LABEL}={uid}").items)

    def holder(self) -> str | None:
        return lease_holder(self.api("admin"))

    def clear(self) -> None:
        """No order left, nor any pod of one (the next test plans on the same devices),
        and no Lease.

        The orders' children are the garbage collector's to delete, and it is given a
        minute. After an API server restart it can take far longer: an owner its
        informers have not seen again is a "virtual" node, re-checked on a back-off that
        doubles up to 1,000 s. Then the teardown does the collector's part itself, and says
        so on stderr; the simulator must still remove the pods it is asked to, or the
        clear fails with what was left."""
        orders = self.custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"]
        for obj in orders:
            self.delete(obj["metadata"]["name"])
        core = client.CoreV1Api(self.api("admin"))

        def gone() -> bool:
            return (
                not core.list_namespaced_pod(NS, label_selector=UID_LABEL).items
                and not (
                    self.custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"]
                )
            )

        what = "the orders and their pods gone"
        try:
            eventually(gone, timeout=60, interval=0.5, what=what)
        except AssertionError:
            left = self.leftovers()
            sys.stderr.write(f"the garbage collector left, after a minute:\n{left}\n")
            self._collect_orphans()
            try:
                eventually(gone, timeout=60, interval=0.5, what=what)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{self.leftovers()}\nbefore:\n{left}") from None
        leases = client.CoordinationV1Api(self.api("admin"))
        with contextlib.suppress(ApiException):
            leases.delete_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE)

    def _collect_orphans(self) -> None:
        """The garbage collector's part for children whose order is gone: Deployments,
        then ReplicaSets (so neither controller makes more), then their pods, deleted
        as the collector deletes them (gracefully: the simulator's kubelet confirms)."""
        live = {
            obj["metadata"]["uid"]
            for obj in self.custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)[
                "items"
            ]
        }
        apps = client.AppsV1Api(self.api("admin"))
        core = client.CoreV1Api(self.api("admin"))
        kinds = (
            (apps.list_namespaced_deployment, apps.delete_namespaced_deployment),
            (apps.list_namespaced_replica_set, apps.delete_namespaced_replica_set),
            (core.list_namespaced_pod, core.delete_namespaced_pod),
        )
        for listing, deleting in kinds:
            for obj in listing(NS, label_selector=UID_LABEL).items:
                meta = obj.metadata
                if meta.labels.get(UID_LABEL) in live or meta.deletion_timestamp is not None:
                    continue
                with contextlib.suppress(ApiException):
                    deleting(meta.name, NS)

    def leftovers(self) -> str:
        """What a clear left behind, and what the controller manager (whose garbage
        collector removes an order's children) last complained of."""
        core = client.CoreV1Api(self.api("admin"))
        apps = client.AppsV1Api(self.api("admin"))
        lines = []
        for obj in self.custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"]:
            meta = obj["metadata"]
            lines.append(
                f"order {meta['name']}: deleting since {meta.get('deletionTimestamp')}, "
                f"finalizers {meta.get('finalizers')}"
            )
        for deployment in apps.list_namespaced_deployment(NS, label_selector=UID_LABEL).items:
            meta = deployment.metadata
            owners = [(r.kind, r.name, r.uid) for r in meta.owner_references or ()]
            lines.append(
                f"deployment {meta.name}: deleting since {meta.deletion_timestamp}, owners {owners}"
            )
        for pod in core.list_namespaced_pod(NS, label_selector=UID_LABEL).items:
            lines.append(f"pod {_pod_line(self, pod)}")
        sim = self.simulator
        lines.append(f"simulator: {sim.stats}, last error {sim.last_error!r}")
        lines += [f"  its {kind} watch: {stats}" for kind, stats in sim.watch_stats().items()]
        manager = Path(self.state.folder) / "logs" / "kube-controller-manager.log"
        if manager.exists():
            said = manager.read_text(errors="replace").splitlines()
            lines.append("kube-controller-manager, its last errors and garbage collector lines:")
            lines += [line for line in said if line.startswith("E") or "garbage" in line][-40:]
        return "\n".join(lines)

    def close(self) -> None:
        for api in self._clients:
            api.close()


def settled(plane: Plane, log: store.EventLog, name: str, phase: str = "Ready") -> bool:
    """The order's live status is at its generation, in `phase`, and equals the replay of
    its stream in the log."""
    obj = plane.get(name)
    if obj is None:
        return False
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"]["generation"]:
        return False
    if status.get("phase") != phase:
        return False
    uid = obj["metadata"]["uid"]
    if log.stream(uid) is None:
        return False
    return render_status(fold(r.event for r in log.read(uid))) == status


def closed(plane: Plane, log: store.EventLog, uid: str) -> bool:
    """A deleted order: its stream is marked deleted and none of its pods is left."""
    info = log.stream(uid)
    return info is not None and info.deleted_at is not None and not plane.pods_of(uid)


def report(
    plane: Plane, log: store.EventLog, names: Iterable[str], deleted: Iterable[str] = ()
) -> str:
    """Where each order (and each deleted order's UID) stands, for a failure message."""
    lines = []
    for uid in deleted:
        info = log.stream(uid)
        marked = info.deleted_at if info is not None else "no stream"
        pods = [_pod_line(plane, pod) for pod in plane.pods_of(uid)]
        lines.append(f"deleted {uid}: marked deleted at {marked}; pods left {pods}")
        if pods:  # who should have removed them: the garbage collector, or the kubelet
            sim = plane.simulator
            lines.append(f"  simulator: {sim.stats}, last error {sim.last_error!r}")
    for name in names:
        obj = plane.get(name)
        if obj is None:
            lines.append(f"{name}: absent")
            continue
        status = obj.get("status") or {}
        uid = obj["metadata"]["uid"]
        replay = render_status(fold(r.event for r in log.read(uid))) if log.stream(uid) else None
        reasons = [(c.get("type"), c.get("reason")) for c in status.get("conditions") or []]
        lines.append(
            f"{name}: gen {obj['metadata']['generation']} observed "
            f"{status.get('observedGeneration')} phase {status.get('phase')} {reasons}; "
            f"replay {'equals' if replay == status else 'differs: ' + repr(replay)[:400]}"
        )
    return "\n".join(lines)


def _pod_line(plane: Plane, pod: Any) -> str:
    """A pod left behind, and whether its owners are still there: a pod whose owners are
    gone waits for the kubelet (a deletionTimestamp) or for the garbage collector."""
    apps = client.AppsV1Api(plane.api("admin"))
    chain = []
    for ref in pod.metadata.owner_references or ():
        owner = "gone"
        with contextlib.suppress(ApiException):
            meta = apps.read_namespaced_replica_set(ref.name, NS).metadata
            owners = [(r.kind, r.name) for r in meta.owner_references or ()]
            owner = f"there (deleting since {meta.deletion_timestamp}; owners {owners})"
        chain.append(f"{ref.kind} {ref.name} {owner}")
    # What the simulator's kubelet holds of it: behind the live version, it missed an
    # event; at it and deleting, it failed to act on what it knows.
    held = plane.simulator.store.get(world.PODS, pod.metadata.uid)
    seen = (
        "nothing"
        if held is None
        else f"v{held['metadata'].get('resourceVersion')}, deleting since "
        f"{held['metadata'].get('deletionTimestamp')}"
    )
    return (
        f"{pod.metadata.name} v{pod.metadata.resource_version} (node {pod.spec.node_name}, "
        f"phase {pod.status.phase}, deleting since {pod.metadata.deletion_timestamp}, "
        f"owners: {chain}; the simulator holds {seen})"
    )


def converged(
    plane: Plane, log: store.EventLog, ready: Iterable[str], deleted: Iterable[str] = ()
) -> bool:
    """Every order named in `ready` settled Ready, every UID in `deleted` closed."""
    return all(settled(plane, log, name) for name in ready) and all(
        closed(plane, log, uid) for uid in deleted
    )


def controller_process(plane: Plane, store_url: str, *extra: str) -> ControllerProcess:
    """`ai-inference controller` against the plane, its hub and its simulator's stubs."""
    return ControllerProcess(
        plane.state.kubeconfig("controller"),
        store_url,
        f"--hub-endpoint={plane.hub.url}",
        "--probe-target=simulator",
        *extra,
    )


def wait_leading(proc: ControllerProcess, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while proc.leading_at() is None:
        code = proc.proc.poll()
        assert code is None, f"controller exited {code}:\n{proc.stderr[-3000:]}"
        assert time.monotonic() < deadline, f"no leader after {timeout}s:\n{proc.stderr[-3000:]}"
        time.sleep(0.1)
