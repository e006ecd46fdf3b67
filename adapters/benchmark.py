"""`ai-inference bench`: what the controller costs beside the floor, in one run, on this machine.

A platform team's first question is "what does it cost at our size?". This puts the
controller beside the least any controller could do, on the same local control plane and
simulator (separate processes, as in a cluster), and prints one JSON line:

- warm-up: the controller drives one order to Ready; its children (Deployment, Service,
  ResourceClaimTemplate, Secret, ...) are kept as the floor's templates, then it is
  deleted and the controller stopped;
- floor: with no controller running, a bare client creates N orders and the same
  children, waits until every Deployment is available, writes one final status per
  order, then deletes the orders and waits until their claims are gone (capacity free);
- project: a fresh controller drives N fresh orders to Ready — wall time, p50/p95 time
  to Ready, the ratio to the floor; API writes per order by resource and verb (from the
  API server's `apiserver_request_total`), Events and status writes per order; CPU
  seconds of controller, simulator, API server and etcd; the controller's peak RSS;
- idle: writes (Leases apart) and CPU over a window with nothing changing;
- restart: SIGTERM to the controller, a new one started at once: seconds until it leads
  with synced caches (its first pass starts then), and the writes that caused;
- replay: every stream of the run's log decoded, upcast and folded, beside a raw msgpack
  decode of the same payloads; and one order's history read.

Writes are counted by the API server for everyone (the simulator and the controller
manager too): the floor's figures, taken the same way, are the baseline to compare with.
Counts are what tests assert (tests/bench); times are what this prints.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
import yaml
from kubernetes.client import ApiClient

import store
from adapters import replay_rate
from adapters.cluster import bootstrap, local
from adapters.kubernetes import errors
from adapters.kubernetes.controller import DEFAULT_WORKERS
from adapters.kubernetes.watching import Informer, Resource, call
from adapters.platform import DEMO_SETTINGS, install_module
from adapters.probes.targets import SIMULATOR_ENDPOINT_ANNOTATION as ENDPOINT
from adapters.simulator import capacity
from fsm import fold, status
from store import schema

__all__ = ["BenchOptions", "Benchmark", "bench_capacity", "request_counts"]

ORDERS = Resource("ai.deckhouse.io", "v1alpha1", "inferenceservices", "InferenceService")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
PODS = Resource("", "v1", "pods", "Pod")
CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")
EVENTS = Resource("", "v1", "events", "Event")
# What a controller may render for an order; each is looked for by owner at warm-up.
CHILD_KINDS = (
    Resource("", "v1", "secrets", "Secret"),
    Resource("", "v1", "configmaps", "ConfigMap"),
    Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    Resource("", "v1", "services", "Service"),
    Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate"),
    Resource("policy", "v1beta1", "poddisruptionbudgets", "PodDisruptionBudget"),
    Resource("autoscaling", "v2beta2", "horizontalpodautoscalers", "HorizontalPodAutoscaler"),
    Resource("networking.k8s.io", "v1", "ingresses", "Ingress"),
    Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    DEPLOYMENTS,
)
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})
MODEL = "Qwen/Qwen2.5-32B-Instruct-AWQ"
GPUS_PER_NODE = 16
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- measuring ---------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far, from /proc (no psutil)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def busy_cores(before: Mapping[str, float], after: Mapping[str, float], wall: float) -> float:
    """How many cores the bed's processes kept busy on average over `wall` seconds."""
    return round(sum(after[k] - before[k] for k in after) / wall, 2) if wall else 0.0


def status_bytes(pid: int, field: str) -> int:
    """A memory figure of the process's /proc status (VmHWM: the peak resident set,
    VmRSS: the current one), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


Requests = Counter[tuple[str, str, str, bool]]


def request_counts(api: ApiClient) -> Requests:
    """`apiserver_request_total` by (resource, subresource, verb, answered 2xx), from
    /metrics."""
    request = api.param_serialize(
        "GET", "/metrics", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(*request, _request_timeout=(10, 60))
    text = response.read().decode()
    counts: Requests = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line.rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        resource = labels.get("resource", "")
        accepted = labels.get("code", "").startswith("2")
        counts[(resource, labels.get("subresource", ""), labels.get("verb", ""), accepted)] += int(
            float(value)
        )
    return counts


def writes_between(before: Requests, after: Requests, *, accepted: bool = True) -> dict[str, int]:
    """Write requests made in between, as {"resource[/sub] VERB": count}: those the
    server accepted (2xx), or with `accepted=False` those it refused (a 409 AlreadyExists
    or Conflict is a request made for nothing)."""
    return requests_between(before, after, verbs=WRITE_VERBS, accepted=accepted)


def gets_between(before: Requests, after: Requests) -> dict[str, int]:
    """Reads of one object by name made in between (LISTs and WATCHes apart), found or
    not, as {"resource[/sub] GET": count}."""
    return requests_between(before, after, verbs=frozenset({"GET"}), accepted=None)


def requests_between(
    before: Requests, after: Requests, *, verbs: frozenset[str], accepted: bool | None
) -> dict[str, int]:
    """Requests of `verbs` made in between, by "resource[/sub] VERB": answered 2xx, or not
    (`accepted=False`), or either (None)."""
    out: dict[str, int] = {}
    for (resource, sub, verb, ok), count in after.items():
        delta = count - before.get((resource, sub, verb, ok), 0)
        if (accepted is None or ok == accepted) and verb in verbs and delta > 0:
            name = f"{resource}/{sub} {verb}" if sub else f"{resource} {verb}"
            out[name] = out.get(name, 0) + delta
    return dict(sorted(out.items()))


def per_order(counts: Mapping[str, int], orders: int) -> dict[str, float]:
    return {k: round(v / orders, 2) for k, v in counts.items()}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class Process:
    """A child process of the bench (simulator, controller): its lines and its CPU."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[str] = field(init=False)
    lines: list[tuple[float, str]] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _reader: threading.Thread = field(init=False)

    def start(self) -> Process:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("a", encoding="utf-8") as log_file:  # the child keeps its own
            self.popen = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=log_file, text=True, env=environment
            )
        self._reader = threading.Thread(target=self._read, name=f"{self.name}-out", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.popen.stdout is not None
        with self.popen.stdout as stream:
            for line in stream:
                with self._cond:
                    self.lines.append((time.monotonic(), line.rstrip("\n")))
                    self._cond.notify_all()

    def wait_line(self, prefix: str, timeout: float) -> tuple[float, str]:
        """When the process printed a line starting with `prefix`, and the line."""

        def found() -> tuple[float, str] | None:
            return next(((t, s) for t, s in self.lines if s.startswith(prefix)), None)

        with self._cond:
            if not self._cond.wait_for(lambda: found() is not None or not self.alive, timeout):
                raise TimeoutError(f"{self.name}: no line {prefix!r} within {timeout}s")
            hit = found()
        if hit is None:
            raise RuntimeError(f"{self.name} exited; see {self.log_path}")
        return hit

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def peak_rss(self) -> int:
        return status_bytes(self.pid, "VmHWM")

    def rss(self) -> int:
        return status_bytes(self.pid, "VmRSS")

    def stop(self, timeout: float = 30) -> None:
        if self.alive:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self._reader.join(10)  # the output is read to its end, and its pipe closed


# --- the bed -----------------------------------------------------------------------------


def bench_capacity(orders: int) -> dict[str, Any]:
    """Nodes of whole A100s enough for the orders (and a tenth more), the default classes."""
    base = capacity.load_capacity().model_dump(by_alias=True, mode="json")
    gpu = {
        "product": "NVIDIA A100 80GB PCIe",
        "memory": "80Gi",
        "architecture": "Ampere",
        "cudaComputeCapability": "8.0.0",
    }
    nodes = math.ceil((orders + 1) * 1.1 / GPUS_PER_NODE)
    base["nodes"] = [
        {
            "name": f"bench-{index:03d}",
            "cpu": "1000",
            "memory": "16Ti",
            "pods": "250",
            "gpus": [dict(gpu) for _ in range(GPUS_PER_NODE)],
        }
        for index in range(nodes)
    ]
    return base


@dataclass
class BenchOptions:
    orders: int = 20
    namespace: str = "bench"
    idle_seconds: float = 300.0
    restart: bool = True
    floor: bool = True
    replay: bool = True
    ready_timeout: float = 900.0
    workers: int = DEFAULT_WORKERS
    simulator_only: bool = False
    large_log: int = 0  # events of the large log to read one history among (0: skip)


def _order(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": ORDERS.api_version,
        "kind": ORDERS.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "inferenceServiceClassName": "default-llm",
            "model": {"src": "HuggingFace", "ref": {"name": MODEL}},
        },
    }


_VOLATILE_META = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def _template(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A child as the floor writes it again: no server-set fields, no status."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _VOLATILE_META}
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith("deployment.kubernetes.io/")
    }
    meta["annotations"] = annotations
    spec = dict(obj.get("spec") or {})
    for server_set in ("clusterIP", "clusterIPs"):
        spec.pop(server_set, None)
    out = {k: v for k, v in obj.items() if k not in ("status", "metadata", "spec")}
    out["metadata"] = meta
    if obj.get("spec") is not None:
        out["spec"] = spec
    return out


def _available(deployment: Mapping[str, Any]) -> bool:
    want = int((deployment.get("spec") or {}).get("replicas", 1))
    status = deployment.get("status") or {}
    return int(status.get("availableReplicas") or 0) >= want > 0


class Benchmark:
    """One run against a running control plane (`state`); results in `self.result`."""

    def __init__(self, state: local.ClusterState, workdir: Path, options: BenchOptions) -> None:
        self.state = state
        self.workdir = workdir
        self.options = options
        self.admin = bootstrap.api_client(state.kubeconfig("admin"))
        self.store_url = f"sqlite:///{workdir / 'log.sqlite'}"
        self.result: dict[str, Any] = {"orders": options.orders}
        self.simulator: Process | None = None
        self.controller: Process | None = None
        self.hub = ""
        self.metrics_port = local.free_port()

    # --- processes ------------------------------------------------------------------------

    def _cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "adapters.cli.main", *args]

    def start_simulator(self) -> None:
        capacity_file = self.workdir / "capacity.yaml"
        capacity_file.write_text(yaml.safe_dump(bench_capacity(self.options.orders)))
        self.simulator = Process(
            "simulator",
            self._cli(
                "simulate",
                f"--kubeconfig={self.state.kubeconfig('simulator')}",
                f"--capacity={capacity_file}",
                "--no-catalog",
            ),
            self.workdir / "simulator.log",
        ).start()
        _, line = self.simulator.wait_line("stand-in hub: ", 120)
        self.hub = line.split(": ", 1)[1].strip()
        self.simulator.wait_line("simulating ", 120)

    def start_controller(self) -> Process:
        process = Process(
            "controller",
            self._cli(
                "controller",
                f"--kubeconfig={self.state.kubeconfig('controller')}",
                f"--store={self.store_url}",
                f"--hub-endpoint={self.hub}",
                # A host template, as the demo's: the floor's children include an Ingress.
                f"--public-domain-template={DEMO_SETTINGS['publicDomainTemplate']}",
                "--probe-target=simulator",
                "--health-port=0",
                # Its own /metrics: passes per order are the controller's count, not the server's.
                f"--metrics-port={self.metrics_port}",
                f"--workers={self.options.workers}",
                "--hpa-api-version=autoscaling/v2beta2",
            ),
            self.workdir / "controller.log",
        ).start()
        # Held before it leads: a controller that never does is stopped with the rest, not
        # left running after the bench (it once waited behind another's Lease).
        self.controller = process
        process.wait_line("controller leading", 120)
        return process

    def stop(self) -> None:
        for process in (self.controller, self.simulator):
            if process is not None:
                process.stop()

    def _server_cpu(self) -> float:
        return sum(
            cpu_seconds(pid)
            for name, pid in self.state.pids.items()
            if name in ("kube-apiserver", "etcd")
        )

    def order_passes(self) -> int:
        """Order passes the running controller made (its `ai_inference_reconcile_total`)."""
        try:
            text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        except httpx.HTTPError:
            return 0
        return int(
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith('ai_inference_reconcile_total{kind="order"')
            )
        )

    def _cpu(self) -> dict[str, float]:
        """CPU seconds so far of every process of the bed. With all of them counted, their
        sum over a phase's wall says how many of the machine's cores the bed kept busy:
        near all of them, a phase is bound by CPU, and only less work shortens it."""
        manager = self.state.pids.get("kube-controller-manager")
        return {
            "controller": self.controller.cpu()
            if self.controller and self.controller.alive
            else 0.0,
            "simulator": self.simulator.cpu() if self.simulator else 0.0,
            "apiserver_etcd": self._server_cpu(),
            # Deployments, ReplicaSets and the garbage collector: work both phases cause.
            "controller_manager": cpu_seconds(manager) if manager else 0.0,
            # The floor's bare client is this process; in the project it only creates.
            "bench": time.process_time(),
        }

    # --- helpers --------------------------------------------------------------------------

    def _namespace(self) -> None:
        namespaces = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
        with contextlib.suppress(errors.APIConflictError):  # there from an earlier run
            call(
                self.admin,
                "POST",
                namespaces.collection_path(),
                body={"metadata": {"name": self.options.namespace}},
            )

    def _informer(self, kind: Resource) -> Informer:
        informer = Informer(
            self.admin, kind, namespace=self.options.namespace, name=f"bench {kind.plural}"
        )
        informer.start()
        if not informer.wait_synced(60):
            raise TimeoutError(f"{kind.plural} not listed")
        return informer

    def _create(self, kind: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        return call(
            self.admin, "POST", kind.collection_path(self.options.namespace), body=dict(body)
        )

    def _wait(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {timeout}s: {what}")
            time.sleep(0.2)

    def _wait_free(self, claims: Informer, pods: Informer) -> None:
        # The controller manager's garbage collector takes its time with hundreds of
        # Deployments on a loaded machine (over 5 minutes for 500 here).
        timeout = 300 + 2 * self.options.orders
        self._wait(lambda: not claims.uids() and not pods.uids(), timeout, "claims and pods gone")

    # --- phases ---------------------------------------------------------------------------

    def warm_up(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """One order to Ready; its final status and children become the floor's templates."""
        name = "bench-warmup"
        orders = self._informer(ORDERS)
        try:
            created = self._create(ORDERS, _order(self.options.namespace, name))
            uid = created["metadata"]["uid"]

            def ready() -> bool:
                obj = orders.get(uid) or {}
                return (obj.get("status") or {}).get("phase") == "Ready"

            self._wait(ready, 300, "the warm-up order Ready")
            final = (orders.get(uid) or {}).get("status") or {}
            children = []
            for kind in CHILD_KINDS:
                try:
                    page = call(self.admin, "GET", kind.collection_path(self.options.namespace))
                except errors.APINotFoundError:  # a kind this server does not serve
                    page = {}
                for item in page.get("items") or ():
                    owners = item["metadata"].get("ownerReferences") or ()
                    if any(ref.get("uid") == uid for ref in owners):
                        item.setdefault("apiVersion", kind.api_version)
                        item.setdefault("kind", kind.kind)
                        children.append(_template(item))
            call(self.admin, "DELETE", ORDERS.object_path(self.options.namespace, name))
            self._wait(lambda: orders.get(uid) is None, 120, "the warm-up order deleted")
            claims, pods = self._informer(CLAIMS), self._informer(PODS)
            try:
                self._wait_free(claims, pods)
            finally:
                claims.stop()
                pods.stop()
        finally:
            orders.stop()
        self._replace = (name, uid)
        return final, children

    def floor(self, final: Mapping[str, Any], children: list[dict[str, Any]]) -> dict[str, Any]:
        """A bare client: orders and children, Deployments available, one status each."""
        n = self.options.orders
        namespace = self.options.namespace
        old_name, old_uid = self._replace
        deployments = self._informer(DEPLOYMENTS)
        claims, pods = self._informer(CLAIMS), self._informer(PODS)
        kinds = {
            (c["apiVersion"], c["kind"]): k
            for k in CHILD_KINDS
            for c in children
            if k.api_version == c["apiVersion"] and k.kind == c["kind"]
        }
        before, cpu0 = request_counts(self.admin), self._cpu()
        started = time.monotonic()
        created_at: dict[str, float] = {}
        uids: dict[str, str] = {}
        try:
            for index in range(n):
                name = f"floor-{index:04d}"
                created_at[name] = time.monotonic()
                order = self._create(ORDERS, _order(namespace, name))
                uid = order["metadata"]["uid"]
                uids[name] = uid
                owner = {
                    "apiVersion": ORDERS.api_version,
                    "kind": ORDERS.kind,
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
                for child in children:
                    text = json.dumps(child).replace(old_uid, uid).replace(old_name, name)
                    body = json.loads(text)
                    body["metadata"]["ownerReferences"] = [owner]
                    self._create(kinds[(child["apiVersion"], child["kind"])], body)
            available: dict[str, float] = {}

            def all_available() -> bool:
                for obj in deployments.objects():
                    owner_name = next(
                        (
                            r["name"]
                            for r in obj["metadata"].get("ownerReferences") or ()
                            if r.get("kind") == ORDERS.kind
                        ),
                        None,
                    )
                    if owner_name in created_at and owner_name not in available and _available(obj):
                        available[owner_name] = time.monotonic()
                return len(available) >= n

            self._wait(
                all_available, self.options.ready_timeout, "the floor's Deployments available"
            )
            status = json.loads(
                json.dumps(dict(final)).replace(old_uid, "UID").replace(old_name, "NAME")
            )
            for name, uid in uids.items():
                body = json.loads(json.dumps(status).replace("UID", uid).replace("NAME", name))
                call(
                    self.admin,
                    "PATCH",
                    ORDERS.object_path(namespace, name, "status"),
                    body={"status": body},
                    content_type="application/merge-patch+json",
                )
            wall = time.monotonic() - started
            after, cpu1 = request_counts(self.admin), self._cpu()
            to_ready = [available[k] - created_at[k] for k in available]
            for name in uids:
                call(self.admin, "DELETE", ORDERS.object_path(namespace, name))
            self._wait_free(claims, pods)
        finally:
            for informer in (deployments, claims, pods):
                informer.stop()
        return {
            "wall_s": round(wall, 2),
            "p50_s": round(percentile(to_ready, 0.5), 2),
            "p95_s": round(percentile(to_ready, 0.95), 2),
            "writes_per_order": per_order(writes_between(before, after), n),
            "refused_writes_per_order": per_order(writes_between(before, after, accepted=False), n),
            "gets_per_order": per_order(gets_between(before, after), n),
            "cpu_s": {k: round(cpu1[k] - cpu0[k], 2) for k in cpu1},
            "busy_cores": busy_cores(cpu0, cpu1, wall),
            "children": sorted(c["kind"] for c in children),
        }

    def project(self) -> dict[str, Any]:
        """A fresh controller drives N fresh orders to Ready."""
        n = self.options.orders
        namespace = self.options.namespace
        controller = self.start_controller()
        base_rss = controller.peak_rss()
        orders = self._informer(ORDERS)
        ready_at: dict[str, float] = {}
        created_at: dict[str, float] = {}

        def on_order(_event: str, obj: dict[str, Any]) -> None:
            name = obj["metadata"]["name"]
            if (obj.get("status") or {}).get("phase") == "Ready" and name not in ready_at:
                ready_at[name] = time.monotonic()

        orders.add_handler(on_order)
        before, cpu0 = request_counts(self.admin), self._cpu()
        passes0 = self.order_passes()
        started = time.monotonic()
        try:
            for index in range(n):
                name = f"order-{index:04d}"
                created_at[name] = time.monotonic()
                self._create(ORDERS, _order(namespace, name))
            self._wait(
                lambda: all(k in ready_at for k in created_at),
                self.options.ready_timeout,
                "every order Ready",
            )
            wall = time.monotonic() - started
            after, cpu1 = request_counts(self.admin), self._cpu()
            passes = self.order_passes() - passes0
            ready_rss = controller.rss()
        finally:
            orders.stop()
        writes = writes_between(before, after)
        events = call(self.admin, "GET", EVENTS.collection_path(namespace))
        order_events = [
            e
            for e in events.get("items") or ()
            if (e.get("involvedObject") or {}).get("kind") == ORDERS.kind
            and str((e.get("involvedObject") or {}).get("name", "")).startswith("order-")
        ]
        to_ready = [ready_at[k] - created_at[k] for k in created_at]
        status_writes = sum(
            v for k, v in writes.items() if k.startswith("inferenceservices/status ")
        )
        return {
            "wall_s": round(wall, 2),
            "p50_s": round(percentile(to_ready, 0.5), 2),
            "p95_s": round(percentile(to_ready, 0.95), 2),
            "writes_per_order": per_order(writes, n),
            "refused_writes_per_order": per_order(writes_between(before, after, accepted=False), n),
            # What the controller's cache did not spare it (the simulator's reads are in
            # the floor's too).
            "gets_per_order": per_order(gets_between(before, after), n),
            "status_writes_per_order": round(status_writes / n, 2),
            # Each capacity event wakes only the orders it can affect: O(1) passes an order.
            "passes_per_order": round(passes / n, 2),
            "distinct_statuses_per_order": round(self._distinct_statuses("order-") / n, 2),
            "events_per_order": round(sum(int(e.get("count") or 1) for e in order_events) / n, 2),
            "cpu_s": {k: round(cpu1[k] - cpu0[k], 2) for k in cpu1},
            "busy_cores": busy_cores(cpu0, cpu1, wall),
            "controller_peak_rss_mb": round(controller.peak_rss() / 2**20, 1),
            "controller_base_rss_mb": round(base_rss / 2**20, 1),
            "controller_rss_kb_per_order": round((controller.peak_rss() - base_rss) / 1024 / n, 1),
            # The same from the resident set once every order is Ready: what the orders
            # keep, without the rollout's transient peaks.
            "controller_ready_rss_kb_per_order": round((ready_rss - base_rss) / 1024 / n, 1),
        }

    def _distinct_statuses(self, prefix: str) -> int:
        """How many times the rendered status of the run's orders changed, replayed from
        their streams: a status write per change is the most there may be."""
        log = store.open_log(self.store_url)
        try:
            total = 0
            wanted = {
                info.uid
                for info in log.streams()
                if info.namespace == self.options.namespace and info.name.startswith(prefix)
            }
            for uid, records in log.read_all():
                if uid not in wanted:
                    continue
                events = [r.event for r in records]
                last: dict[str, Any] | None = None
                for upto in range(1, len(events) + 1):
                    rendered = status.render_status(fold.fold(events[:upto]))
                    if rendered != last:
                        total += 1
                        last = rendered
            return total
        finally:
            log.close()

    def idle(self) -> dict[str, Any]:
        """Nothing changing for the window: what is written, what is spent."""
        window = self.options.idle_seconds
        before, cpu0 = request_counts(self.admin), self._cpu()
        passes = self.order_passes()
        time.sleep(window)
        after, cpu1 = request_counts(self.admin), self._cpu()
        passes = self.order_passes() - passes
        writes = writes_between(before, after)
        return {
            "window_s": window,
            # The orders' resync (every 300 s) and what the probes' news woke.
            "order_passes": passes,
            "writes": {k: v for k, v in writes.items() if not k.startswith("leases")},
            "lease_writes": sum(v for k, v in writes.items() if k.startswith("leases")),
            "core_fraction": {k: round((cpu1[k] - cpu0[k]) / window, 4) for k in cpu1},
        }

    def restart(self, settle: float) -> dict[str, Any]:
        """SIGTERM, a new controller at once; until it leads, and what it writes."""
        assert self.controller is not None
        before = request_counts(self.admin)
        sigterm = time.monotonic()
        self.controller.stop()
        process = self.start_controller()
        leading, _ = process.wait_line("controller leading", 120)
        time.sleep(settle)
        writes = writes_between(before, request_counts(self.admin))
        return {
            "to_leading_s": round(leading - sigterm, 2),
            "settle_s": settle,
            "writes": {k: v for k, v in writes.items() if not k.startswith("leases")},
            "lease_writes": sum(v for k, v in writes.items() if k.startswith("leases")),
        }

    def replay(self) -> dict[str, Any]:
        """Decode + upcast + fold every stream, beside a raw msgpack decode of the payloads."""
        return replay_rate.measure(self.store_url)

    def large_log(self, events: int) -> dict[str, Any]:
        """The run's streams copied under new UIDs until the log holds `events` events, in
        SQLite and in PostgreSQL (127.0.0.1:5432, a database made and dropped here); then
        one order's history read among them, and a sample replayed beside raw decoding."""
        source = sa.create_engine(self.store_url)
        with source.connect() as conn:
            stream_rows = [dict(r._mapping) for r in conn.execute(sa.select(schema.streams))]
            event_rows = [dict(r._mapping) for r in conn.execute(sa.select(schema.events))]
        source.dispose()
        if not event_rows:
            return {}
        by_stream: dict[str, list[dict[str, Any]]] = {}
        for row in event_rows:
            row.pop("position", None)
            by_stream.setdefault(row["stream_uid"], []).append(row)
        out: dict[str, Any] = {"events": events}
        for backend, url, drop in self._large_backends():
            try:
                out[backend] = self._fill_and_read(url, stream_rows, by_stream, events)
            finally:
                drop()
        return out

    def _large_backends(self) -> list[tuple[str, str, Callable[[], None]]]:
        path = self.workdir / "large.sqlite"
        path.unlink(missing_ok=True)
        backends = [("sqlite", f"sqlite:///{path}", lambda: path.unlink(missing_ok=True))]
        try:
            import psycopg  # noqa: PLC0415 - the dev extra; only this figure needs it
        except ImportError:
            return backends
        name = f"ai_inference_bench_{uuid.uuid4().hex[:8]}"

        def admin(statement: str) -> None:
            with psycopg.connect(
                host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True
            ) as conn:
                conn.execute(statement)

        try:
            admin(f'CREATE DATABASE "{name}"')
        except psycopg.OperationalError:
            return backends  # no server here: SQLite only
        backends.append(
            (
                "postgresql",
                f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}",
                lambda: admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'),
            )
        )
        return backends

    def _fill_and_read(
        self,
        url: str,
        stream_rows: list[dict[str, Any]],
        by_stream: dict[str, list[dict[str, Any]]],
        events: int,
    ) -> dict[str, Any]:
        store.open_log(url).close()  # migrated
        engine = sa.create_engine(url)
        per_copy = sum(len(v) for v in by_stream.values())
        copies = max(1, math.ceil(events / per_copy))
        started = time.perf_counter()
        middle = ""
        with engine.begin() as conn:
            for copy_index in range(copies):
                streams, rows = [], []
                for stream in stream_rows:
                    uid = f"{copy_index:07d}-{stream['uid']}"[:64]
                    streams.append({**stream, "uid": uid})
                    rows += [
                        {**r, "stream_uid": uid, "event_id": uuid.uuid4()}
                        for r in by_stream.get(stream["uid"], ())
                    ]
                    if copy_index == copies // 2 and not middle and by_stream.get(stream["uid"]):
                        middle = uid
                conn.execute(sa.insert(schema.streams), streams)
                conn.execute(sa.insert(schema.events), rows)
        filled = time.perf_counter() - started
        engine.dispose()
        log = store.open_log(url)
        try:
            log.read(f"{0:07d}-{stream_rows[0]['uid']}"[:64])  # connections and caches warm
            timings = []
            for _ in range(5):
                began = time.perf_counter()
                history = log.read(middle)
                timings.append(time.perf_counter() - began)
        finally:
            log.close()
        return {
            "filled_events": copies * per_copy,
            "fill_s": round(filled, 1),
            "one_history_events": len(history),
            "one_history_ms": round(statistics.median(timings) * 1000, 2),
        }

    def run(self, *, clean_up: bool = True) -> dict[str, Any]:
        """Every phase the options ask for. `clean_up=False`: the control plane goes down
        after the run, so its orders are not deleted and waited for."""
        options = self.options
        install_module(self.admin)
        self._namespace()
        self.start_simulator()
        try:
            if options.simulator_only:
                self.result["simulator_only"] = self.simulator_only()
                return self.result
            if options.floor:
                self.start_controller()
                final, children = self.warm_up()
                assert self.controller is not None
                self.controller.stop()
                self.controller = None
                self.result["floor"] = self.floor(final, children)
            self.result["project"] = project = self.project()
            if "floor" in self.result and self.result["floor"]["wall_s"]:
                floor = self.result["floor"]
                self.result["ratio_to_floor"] = round(project["wall_s"] / floor["wall_s"], 2)
                # With both phases keeping the cores busy, the wall follows the work: the
                # CPU of the whole bed, phase against phase, is the ratio the noise of
                # a shared machine moves least.
                self.result["cpu_ratio_to_floor"] = round(
                    sum(project["cpu_s"].values()) / sum(floor["cpu_s"].values()), 2
                )
                # The controller manager and the simulator do the same work in both
                # phases (the same Deployments, ReplicaSets, pods and claims): their CPU,
                # phase against phase, is how much the machine's own speed moved between
                # them. Away from 1, the two ratios above moved with it.
                same = ("controller_manager", "simulator")
                self.result["same_work_cpu_ratio_to_floor"] = round(
                    sum(project["cpu_s"][k] for k in same) / sum(floor["cpu_s"][k] for k in same),
                    2,
                )
            self.result["idle"] = self.idle()
            if options.restart:
                self.result["restart"] = self.restart(min(30.0, options.idle_seconds))
            if options.replay:
                self.result["replay"] = self.replay()
            if options.large_log:
                self.result["large_log"] = self.large_log(options.large_log)
        finally:
            if self.controller is not None:
                self.controller.stop()
            try:
                if clean_up:
                    self.clean_up()
            finally:
                self.stop()
        return self.result

    def simulator_only(self) -> dict[str, Any]:
        """The bed alone: N bare pods with a device claim each, driven to Ready by the
        simulator; its CPU beside the API server's, idle, and how fast the stubs answer."""
        n = self.options.orders
        namespace = self.options.namespace
        template = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "bench-gpu", "namespace": namespace},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {"deviceClassName": "nvidia-a100-80gb-physical"},
                            }
                        ]
                    }
                }
            },
        }
        with contextlib.suppress(errors.APIConflictError):
            self._create(CHILD_KINDS[4], template)
        claims = json.dumps([{"name": "gpu", "resourceClaimTemplateName": "bench-gpu"}])
        pods = self._informer(PODS)
        ready_at: dict[str, float] = {}

        def on_pod(_event: str, obj: dict[str, Any]) -> None:
            conditions = (obj.get("status") or {}).get("conditions") or ()
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                ready_at.setdefault(obj["metadata"]["name"], time.monotonic())

        pods.add_handler(on_pod)
        before, cpu0 = request_counts(self.admin), self._cpu()
        started = time.monotonic()
        try:
            for index in range(n):
                self._create(
                    PODS,
                    {
                        "metadata": {
                            "name": f"pod-{index:04d}",
                            "annotations": {
                                "simulator.ai-inference.deckhouse.io/resource-claims": claims
                            },
                        },
                        "spec": {
                            "containers": [
                                {
                                    "name": "vllm",
                                    "image": "vllm/vllm-openai:v0.10.1",
                                    "args": ["--model", MODEL, "--served-model-name", f"m{index}"],
                                    "readinessProbe": {
                                        "httpGet": {"path": "/health", "port": 8000}
                                    },
                                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                                }
                            ]
                        },
                    },
                )
            self._wait(lambda: len(ready_at) >= n, self.options.ready_timeout, "every pod Ready")
            wall = time.monotonic() - started
            after, cpu1 = request_counts(self.admin), self._cpu()
            window = min(60.0, self.options.idle_seconds)
            cpu2 = self._cpu()
            time.sleep(window)
            cpu3 = self._cpu()
            urls = [
                str((p["metadata"].get("annotations") or {}).get(ENDPOINT, ""))
                for p in pods.objects()
            ]
        finally:
            pods.stop()
        latencies = []
        with httpx.Client(timeout=5) as web:
            for url in urls:
                began = time.perf_counter()
                web.get(url + "/v1/models").raise_for_status()
                latencies.append(time.perf_counter() - began)
        return {
            "pods": n,
            "wall_s": round(wall, 2),
            "cpu_s": {k: round(cpu1[k] - cpu0[k], 2) for k in cpu1},
            "writes_per_pod": per_order(writes_between(before, after), n),
            "idle_window_s": window,
            "idle_core_fraction": {k: round((cpu3[k] - cpu2[k]) / window, 4) for k in cpu3},
            "stub_ms": {
                "p50": round(percentile(latencies, 0.5) * 1000, 2),
                "p95": round(percentile(latencies, 0.95) * 1000, 2),
                "max": round(max(latencies, default=0.0) * 1000, 2),
            },
        }

    def clean_up(self) -> None:
        """Delete the run's orders and wait until their pods and claims are gone (the
        simulator, still running, confirms the pods' deletion as a kubelet does)."""
        namespace = self.options.namespace
        for kind in (ORDERS, PODS):  # the bed-only run's pods are nobody's children
            page = call(self.admin, "GET", kind.collection_path(namespace))
            for item in page.get("items") or ():
                with contextlib.suppress(errors.APINotFoundError):
                    call(
                        self.admin, "DELETE", kind.object_path(namespace, item["metadata"]["name"])
                    )
        claims, pods = self._informer(CLAIMS), self._informer(PODS)
        try:
            self._wait_free(claims, pods)
        finally:
            claims.stop()
            pods.stop()


def run_bench(folder: Path, options: BenchOptions, *, keep: bool = False) -> dict[str, Any]:
    """Bring up a control plane in `folder` (or reuse it), run, bring it down unless `keep`."""
    state = local.up(folder / "cluster")
    bootstrap.bootstrap(state.kubeconfig("admin"))
    try:
        return Benchmark(state, folder, options).run(clean_up=keep)
    finally:
        if not keep:
            local.down(folder / "cluster")
