"""The whole product on one machine: control plane, simulator, stand-in hub, controller.

`ai-inference demo` and the end-to-end tests compose the same pieces in the same order:
install deploy/ (RBAC, the shipped class and recipes) and the seed's PriorityClasses,
start the stand-in hub and the simulator (as the `simulator` identity), and run the
controller in-process as its ServiceAccount identity — so a permission missing from
deploy/rbac/controller.yaml fails, as it would in a real cluster. The controller's
settings name a domain (`DEMO_SETTINGS`, as a `--settings` file would): without one,
External orders get no Ingress. A ModuleConfig ai-inference, when a test makes one,
replaces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kubernetes.client import ApiClient

import store
from adapters.cluster import bootstrap
from adapters.cluster.local import ClusterState
from adapters.kubernetes.controller import Controller
from adapters.kubernetes.manifests import Applier, load_documents, manifest_files
from adapters.kubernetes.settings import Source
from adapters.probes.targets import AnnotatedPodTarget
from adapters.resources import resource_dir
from adapters.simulator.hub import StandInHub
from adapters.simulator.simulator import Simulator

__all__ = ["DEMO_SETTINGS", "LocalPlatform", "install_module"]

# What a plain cluster's `--settings` file would hold: the hosts of External orders.
DEMO_SETTINGS = {"publicDomainTemplate": "%s.example.com"}


def install_module(admin: ApiClient) -> int:
    """deploy/ (namespace, RBAC, default-llm, recipes) and the seed's PriorityClasses."""
    deploy = resource_dir("deploy")
    paths = [
        deploy / "namespace.yaml",
        *manifest_files(deploy / "rbac"),
        *manifest_files(deploy / "classes"),
        *manifest_files(deploy / "recipes"),
        resource_dir("examples") / "priority-classes.yaml",
    ]
    return len(Applier(admin).apply_all(load_documents(paths)))


@dataclass
class LocalPlatform:
    state: ClusterState
    store_url: str
    capacity: Path | None = None
    secret_refresh: float = 30.0  # the controller's: how often a named Secret is read again
    hub: StandInHub = field(init=False)
    simulator: Simulator = field(init=False)
    controller: Controller = field(init=False)
    log: store.EventLog = field(init=False)

    def api(self, identity: str) -> ApiClient:
        return bootstrap.api_client(self.state.kubeconfig(identity))

    def start(self) -> None:
        install_module(self.api("admin"))
        self.hub = StandInHub()
        self.simulator = Simulator(self.api("simulator"), self.capacity)
        self.simulator.start()
        self.log = store.open_log(self.store_url)
        self.controller = Controller(
            self.api("controller"),
            self.log,
            hub_endpoint=self.hub.url,
            settings=Source(DEMO_SETTINGS),
            targets=AnnotatedPodTarget(),
            secret_refresh=self.secret_refresh,
        )
        self.controller.start()

    def stop(self) -> None:
        """Stop what `start` started, also when it failed (or was interrupted) half-way."""
        for name, stop in (
            ("controller", "stop"),
            ("simulator", "stop"),
            ("hub", "close"),
            ("log", "close"),
        ):
            if hasattr(self, name):
                getattr(getattr(self, name), stop)()
