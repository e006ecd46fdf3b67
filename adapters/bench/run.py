"""`ai-inference bench`: what the controller costs beside the floor, in one run, on this machine.

A platform team's first question is "what does it cost at our size?". This puts the
controller beside the least any controller could do, on the same local control plane and
simulator (separate processes, as in a cluster), and prints one JSON line:

- warm-up: the controller drives one order to Ready; its children (Deployment, Service,
  ResourceClaimTemplate, Secret, ...) are kept as the floor's templates, then it is
  deleted and the controller stopped;
- floor: with no controller running, a bare client creates N orders and the same
  children, waits until every Deployment is available, writes one final status per
  order, then deletes the orders and waits until their children, pods and claims are
  gone (capacity free, and no deletion left to carry into the next phase);
- project: a fresh controller drives N fresh orders to Ready — wall time, p50/p95 time
  to Ready, the ratio to the floor; API writes per order by resource and verb (from the
  API server's `apiserver_request_total`), Events and status writes per order; CPU
  seconds of controller, simulator, API server and etcd; the controller's peak RSS;
- rounds (`--rounds R`): the floor and the project again, R times in turn; the ratios
  printed are the medians, and the CPU ratio at one speed (over the same work's) beside;
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
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

import store
from adapters import replay_rate
from adapters.bench import bed_only, large_log
from adapters.bench.bed import (
    CHILD_KINDS,
    CLAIMS,
    DEPLOYMENTS,
    EVENTS,
    ORDERS,
    PODS,
    BenchOptions,
    bench_capacity,
    child_template,
    deployment_available,
    order_manifest,
)
from adapters.bench.measuring import (
    busy_cores,
    compared,
    cpu_seconds,
    gets_between,
    medians,
    per_order,
    percentile,
    request_counts,
    writes_between,
)
from adapters.bench.processes import Process
from adapters.cluster import bootstrap, local
from adapters.kubernetes import errors
from adapters.kubernetes.rest import Resource, call
from adapters.kubernetes.watching import Informer
from adapters.platform import DEMO_SETTINGS, install_module
from fsm import fold, status

__all__ = ["Benchmark", "plane_folder", "run_bench"]


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
        # Not the bed's admission webhook (adapters/cluster/admission.py): it stands in
        # for checks a 1.34 API server makes in-process for next to nothing, and its
        # Python costs the same in both phases (the simulator's claim finalizers).
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

    def cpu(self) -> dict[str, float]:
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

    def informer(self, kind: Resource) -> Informer:
        informer = Informer(
            self.admin, kind, namespace=self.options.namespace, name=f"bench {kind.plural}"
        )
        informer.start()
        if not informer.wait_synced(60):
            raise TimeoutError(f"{kind.plural} not listed")
        return informer

    def create(self, kind: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        return call(
            self.admin, "POST", kind.collection_path(self.options.namespace), body=dict(body)
        )

    def wait(self, done: Callable[[], bool], timeout: float, what: str, every: float = 0.2) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {timeout}s: {what}")
            time.sleep(every)

    def _wait_free(self, claims: Informer, pods: Informer) -> None:
        # The controller manager's garbage collector takes its time with hundreds of
        # Deployments on a loaded machine (over 5 minutes for 500 here).
        timeout = 300 + 2 * self.options.orders
        self.wait(lambda: not claims.uids() and not pods.uids(), timeout, "claims and pods gone")
        # And the rest of the orders' children: the collector deleting them is work of
        # the phase before, which the next phase's CPU and wall must not carry.
        self.wait(lambda: not self._children_left(), timeout, "the orders' children", every=1)

    def _children_left(self) -> bool:
        return any(self._children(lambda ref: ref.get("kind") == ORDERS.kind))

    def _children(self, owned_by: Callable[[Mapping[str, Any]], bool]) -> Iterator[dict[str, Any]]:
        """The namespace's objects of the child kinds with an owner reference `owned_by`
        accepts, typed (a LIST's items carry no apiVersion and kind), kind by kind."""
        for kind in CHILD_KINDS:
            try:
                page = call(self.admin, "GET", kind.collection_path(self.options.namespace))
            except errors.APINotFoundError:  # a kind this server does not serve
                continue
            for item in page.get("items") or ():
                if any(owned_by(ref) for ref in item["metadata"].get("ownerReferences") or ()):
                    item.setdefault("apiVersion", kind.api_version)
                    item.setdefault("kind", kind.kind)
                    yield item

    def _wait_free_watching(self) -> None:
        """`_wait_free` with informers of its own, for a phase that holds none."""
        claims, pods = self.informer(CLAIMS), self.informer(PODS)
        try:
            self._wait_free(claims, pods)
        finally:
            claims.stop()
            pods.stop()

    # --- phases ---------------------------------------------------------------------------

    def warm_up(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """One order to Ready; its final status and children become the floor's templates."""
        name = "bench-warmup"
        orders = self.informer(ORDERS)
        try:
            created = self.create(ORDERS, order_manifest(self.options.namespace, name))
            uid = created["metadata"]["uid"]

            def ready() -> bool:
                obj = orders.get(uid) or {}
                return (obj.get("status") or {}).get("phase") == "Ready"

            self.wait(ready, 300, "the warm-up order Ready")
            final = (orders.get(uid) or {}).get("status") or {}
            children = [
                child_template(item) for item in self._children(lambda ref: ref.get("uid") == uid)
            ]
            call(self.admin, "DELETE", ORDERS.object_path(self.options.namespace, name))
            self.wait(lambda: orders.get(uid) is None, 120, "the warm-up order deleted")
            self._wait_free_watching()
        finally:
            orders.stop()
        self._replace = (name, uid)
        return final, children

    def floor(self, final: Mapping[str, Any], children: list[dict[str, Any]]) -> dict[str, Any]:
        """A bare client: orders and children, Deployments available, one status each."""
        n = self.options.orders
        namespace = self.options.namespace
        old_name, old_uid = self._replace
        # Only what a bare client needs: the pods and claims watches that tell when the
        # capacity is free again start after the measured window (they cost the floor 4 %
        # of its CPU, which the project phase does not carry).
        deployments = self.informer(DEPLOYMENTS)
        available: dict[str, float] = {}
        names: dict[str, str] = {}  # by the owner's UID: an earlier round's order is another

        def on_deployment(_event: str, obj: dict[str, Any]) -> None:
            owner = next(
                (
                    names.get(str(r.get("uid")))
                    for r in obj["metadata"].get("ownerReferences") or ()
                    if r.get("kind") == ORDERS.kind
                ),
                None,
            )
            if owner is not None and owner not in available and deployment_available(obj):
                available[owner] = time.monotonic()

        deployments.add_handler(on_deployment)
        kinds = {
            (c["apiVersion"], c["kind"]): k
            for k in CHILD_KINDS
            for c in children
            if k.api_version == c["apiVersion"] and k.kind == c["kind"]
        }
        before, cpu0 = request_counts(self.admin), self.cpu()
        started = time.monotonic()
        created_at: dict[str, float] = {}
        uids: dict[str, str] = {}
        try:
            for index in range(n):
                name = f"floor-{index:04d}"
                created_at[name] = time.monotonic()
                order = self.create(ORDERS, order_manifest(namespace, name))
                uid = order["metadata"]["uid"]
                uids[name] = uid
                names[uid] = name
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
                    self.create(kinds[(child["apiVersion"], child["kind"])], body)
            self.wait(
                lambda: len(available) >= n,
                self.options.ready_timeout,
                "the floor's Deployments available",
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
            after, cpu1 = request_counts(self.admin), self.cpu()
            to_ready = [available[k] - created_at[k] for k in available]
            deployments.stop()
            for name in uids:
                call(self.admin, "DELETE", ORDERS.object_path(namespace, name))
            self._wait_free_watching()
        finally:
            deployments.stop()
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
        orders = self.informer(ORDERS)
        # By UID: a reused plane (`--dir`) and every round but the first hold earlier
        # orders of the same names, their Events and their streams in the log.
        ready_at: dict[str, float] = {}
        created_at: dict[str, float] = {}

        def on_order(_event: str, obj: dict[str, Any]) -> None:
            uid = obj["metadata"]["uid"]
            if (obj.get("status") or {}).get("phase") == "Ready" and uid not in ready_at:
                ready_at[uid] = time.monotonic()

        orders.add_handler(on_order)
        before, cpu0 = request_counts(self.admin), self.cpu()
        passes0 = self.order_passes()
        started = time.monotonic()
        try:
            for index in range(n):
                created = time.monotonic()
                order = self.create(ORDERS, order_manifest(namespace, f"order-{index:04d}"))
                created_at[order["metadata"]["uid"]] = created
            self.wait(
                lambda: all(k in ready_at for k in created_at),
                self.options.ready_timeout,
                "every order Ready",
            )
            wall = time.monotonic() - started
            after, cpu1 = request_counts(self.admin), self.cpu()
            passes = self.order_passes() - passes0
            ready_rss = controller.rss()
        finally:
            orders.stop()
        writes = writes_between(before, after)
        events = call(self.admin, "GET", EVENTS.collection_path(namespace))
        order_events = [
            e
            for e in events.get("items") or ()
            if (e.get("involvedObject") or {}).get("uid") in created_at
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
            "distinct_statuses_per_order": round(self._distinct_statuses(created_at) / n, 2),
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

    def _distinct_statuses(self, wanted: Collection[str]) -> int:
        """How many times the rendered status of the orders (by UID) changed, replayed
        from their streams: a status write per change is the most there may be."""
        log = store.open_log(self.store_url)
        try:
            total = 0
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
        before, cpu0 = request_counts(self.admin), self.cpu()
        passes = self.order_passes()
        time.sleep(window)
        after, cpu1 = request_counts(self.admin), self.cpu()
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

    def _rounds(self) -> None:
        """The floor and the project, `rounds` times in turn. One pair of phases is at
        the mercy of the machine's speed between them (a shared machine's moved by a
        fifth and more within the hour: docs/performance-journal.md); the medians of several
        pairs, each phase beside the one before it, are not. The first round's phases
        are reported in full, every round's walls, ratios and CPU under `rounds`."""
        options = self.options
        final: Mapping[str, Any] = {}
        children: list[dict[str, Any]] = []
        if options.floor:
            self.start_controller()
            final, children = self.warm_up()
            self._stop_controller()
        rounds: list[dict[str, Any]] = []
        ratios: list[dict[str, float]] = []  # each round's project against its floor
        for index in range(options.rounds):
            if index:  # the last round's orders gone, and the next floor without a controller
                self.clean_up()
                self._stop_controller()
            floor = self.floor(final, children) if options.floor else None
            project = self.project()
            if not index:
                if floor is not None:
                    self.result["floor"] = floor
                self.result["project"] = project
            if floor is not None and floor["wall_s"]:
                ratios.append(compared(floor, project))
                walls = {"floor_wall_s": floor["wall_s"], "project_wall_s": project["wall_s"]}
                cpu = {"floor_cpu_s": floor["cpu_s"], "project_cpu_s": project["cpu_s"]}
                rounds.append({**walls, **ratios[-1], **cpu})
        if ratios:
            self.result.update(medians(ratios))
        if len(rounds) > 1:
            self.result["rounds"] = rounds

    def _stop_controller(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def run(self, *, clean_up: bool = True) -> dict[str, Any]:
        """Every phase the options ask for. `clean_up=False`: the control plane goes down
        after the run, so its orders are not deleted and waited for."""
        options = self.options
        install_module(self.admin)
        self._namespace()
        self.start_simulator()
        try:
            if options.simulator_only:
                self.result["simulator_only"] = bed_only.measure(self)
                return self.result
            self._rounds()
            self.result["idle"] = self.idle()
            if options.restart:
                self.result["restart"] = self.restart(min(30.0, options.idle_seconds))
            if options.replay:
                self.result["replay"] = self.replay()
            if options.large_log:
                self.result["large_log"] = large_log.measure(
                    self.store_url, self.workdir, options.large_log
                )
        finally:
            if self.controller is not None:
                self.controller.stop()
            try:
                if clean_up:
                    self.clean_up()
            finally:
                self.stop()
        return self.result

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
        self._wait_free_watching()


def plane_folder(folder: Path) -> Path:
    """Where in the bench's `folder` its control plane lives (what `cluster down` takes)."""
    return folder / "cluster"


def run_bench(folder: Path, options: BenchOptions, *, keep: bool = False) -> dict[str, Any]:
    """Bring up a control plane in `folder` (or reuse it), run, bring it down unless `keep`."""
    state = local.up(plane_folder(folder))
    bootstrap.bootstrap(state.kubeconfig("admin"))
    try:
        return Benchmark(state, folder, options).run(clean_up=keep)
    finally:
        if not keep:
            local.down(plane_folder(folder))
