"""The simulator: what a 1.34 cluster with GPUs would show, on the local API server.

`Simulator` composes the parts — `publishing` (Nodes, ResourceSlices, DeviceClasses from
the capacity), `catalog` (ai-models objects), `scheduler` (claims, allocation, binding)
and `kubelet` (Running pods with an OpenAI-compatible stub each) — and runs them in one
background thread, a pass every `interval` seconds: observe the cluster, schedule, run
pods. The pass is level-triggered, so a missed change only waits for the next pass.

Used by `ai-inference simulate`, the demo and the integration tests:

    with Simulator(api_client, capacity.load_capacity()) as sim:
        ...                                # pods get scheduled and served
        sim.set_capacity(smaller)          # published before it returns

It talks only to the API server, as the parts of a real cluster would; nothing in the
controller knows it exists, except the endpoint annotation the probe target reads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection
from pathlib import Path
from types import TracebackType

from kubernetes import client

from adapters.simulator import capacity as capacity_file
from adapters.simulator.catalog import CATALOG, CatalogPublisher
from adapters.simulator.kube import Kube, KubeError
from adapters.simulator.kubelet import Kubelet
from adapters.simulator.publishing import Publisher, PublishResult
from adapters.simulator.scheduler import Scheduler
from adapters.simulator.stub import Stub
from adapters.simulator.world import World, observe

__all__ = ["Simulator"]

log = logging.getLogger(__name__)


class Simulator:
    def __init__(
        self,
        api_client: client.ApiClient,
        capacity: capacity_file.CapacitySpec | Path | None = None,
        *,
        catalog: Path | None = CATALOG,
        interval: float = 0.25,
        stub_host: str = "127.0.0.1",
        hang_seconds: float = 30.0,
        namespaces: Collection[str] | None = None,
    ) -> None:
        """`capacity`: a spec, a file (re-read when it changes), or None for the default
        file; `catalog`: the ai-models objects to create (None: none); `namespaces`: run
        only the pods there (None: all; tests use it to stay out of each other's way)."""
        self.kube = Kube(api_client)
        self.interval = interval
        self._path = capacity if isinstance(capacity, Path) else None
        self._mtime = self._path.stat().st_mtime if self._path is not None else 0.0
        self._capacity = (
            capacity
            if isinstance(capacity, capacity_file.CapacitySpec)
            else capacity_file.load_capacity(capacity)
        )
        self._catalog = CatalogPublisher(self.kube, catalog) if catalog is not None else None
        self._publisher = Publisher(self.kube)
        self.scheduler = Scheduler(self.kube, namespaces=namespaces)
        self.kubelet = Kubelet(
            self.kube, host=stub_host, hang_seconds=hang_seconds, namespaces=namespaces
        )
        self._lock = threading.RLock()  # one pass at a time, and no pass mid-publish
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.last_error: str | None = None

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        """Publish capacity and catalog, then run passes in a background thread."""
        if self._thread is not None:
            return
        self.set_capacity(self._capacity)
        if self._catalog is not None:
            self._catalog.publish()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="simulator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the passes and every stub; published objects stay (the cluster's state)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.kubelet.stop_all()

    def __enter__(self) -> Simulator:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- what callers change and read ---------------------------------------------------

    @property
    def capacity(self) -> capacity_file.CapacitySpec:
        return self._capacity

    def set_capacity(self, spec: capacity_file.CapacitySpec) -> PublishResult:
        """Publish `spec` now (it replaces the current capacity) and wake the passes."""
        with self._lock:
            result = self._publisher.publish(spec)
            self._capacity = spec
        self._wake.set()
        log.info("capacity published: %s", result)
        return result

    def stub(self, namespace: str, name: str) -> Stub | None:
        """The stub serving a pod now, if it runs."""
        return self.kubelet.stub(namespace, name)

    def run_once(self) -> World:
        """One pass in the caller's thread (the background loop does the same)."""
        with self._lock:
            self._reload_capacity()
            world = observe(self.kube)
            scheduled = self.scheduler.run_pass(world)
            if scheduled:  # bindings just made: run them in this same pass
                world = observe(self.kube)
            self.kubelet.run_pass(world)
            self.passes += 1
            return world

    # --- the loop -----------------------------------------------------------------------

    def _reload_capacity(self) -> None:
        if self._path is None:
            return
        try:
            mtime = self._path.stat().st_mtime
        except OSError:
            return
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            spec = capacity_file.load_capacity(self._path)
        except capacity_file.CapacityError as err:  # keep what is published; say why
            log.error("capacity file not reloaded: %s", err)
            self.last_error = str(err)
            return
        self.set_capacity(spec)

    def _loop(self) -> None:
        backoff = self.interval
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
                backoff = self.interval
                self.last_error = None
            except (KubeError, OSError, ValueError) as err:
                # The API server restarting or a conflict: retry, slower, never die.
                self.last_error = str(err)
                log.warning("simulator pass failed: %s", err)
                backoff = min(backoff * 2, 5.0)
            except Exception as err:  # a bug or an object shaped unlike any we know
                # The cluster would freeze with the thread: keep running, loudly.
                self.last_error = repr(err)
                log.exception("simulator pass crashed")
                backoff = min(backoff * 2, 5.0)
            elapsed = time.monotonic() - started
            self._wake.wait(max(0.0, backoff - elapsed))
            self._wake.clear()
