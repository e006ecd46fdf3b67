"""The package's control plane (tests/outages/plane.py says why it is its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapters.cluster import bootstrap, local
from adapters.platform import install_module
from adapters.simulator.hub import StandInHub
from adapters.simulator.simulator import Simulator
from tests.outages.plane import Plane
from tests.support.relay import Relay


@pytest.fixture(scope="package")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    folder = tmp_path_factory.mktemp("outages")
    state = local.up(folder)
    hub: StandInHub | None = None
    simulator: Simulator | None = None
    try:
        bootstrap.bootstrap(state.kubeconfig("admin"))
        with bootstrap.api_client(state.kubeconfig("admin")) as admin:
            install_module(admin)
        hub = StandInHub()
        simulator = Simulator(bootstrap.api_client(state.kubeconfig("simulator")))
        simulator.start()
        handle = Plane(state, hub, simulator)
        yield handle
        handle.close()
    finally:
        if simulator is not None:
            simulator.stop()
        if hub is not None:
            hub.close()
        local.down(folder)


@pytest.fixture
def clean(plane: Plane) -> Iterator[Plane]:
    """The plane with no order, pod or Lease, before and after the test."""
    plane.clear()
    yield plane
    plane.clear()


@pytest.fixture
def relay(plane: Plane) -> Iterator[Relay]:
    handle = Relay(plane.state.server)
    yield handle
    handle.close()
