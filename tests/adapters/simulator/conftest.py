"""Fixtures of the simulator's cluster tests; the bed itself is in sim_bed.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from sim_bed import RESOURCE, Bed, bed_capacity_spec, eventually

from adapters.simulator import capacity
from adapters.simulator.kube import Kube, path
from adapters.simulator.publishing import Publisher
from adapters.simulator.simulator import Simulator


@pytest.fixture(scope="module")
def kube(cluster: Any) -> Kube:
    api: client.ApiClient = cluster.api_client("simulator")
    return Kube(api)


@pytest.fixture(scope="module")
def capacity_spec(kube: Kube) -> Iterator[capacity.CapacitySpec]:
    spec = bed_capacity_spec()
    Publisher(kube).publish(spec)
    yield spec
    Publisher(kube).publish(capacity.load_capacity())  # leave the session the default


@pytest.fixture
def bed(cluster: Any, kube: Kube, capacity_spec: capacity.CapacitySpec) -> Iterator[Bed]:
    namespace = f"sim-{uuid.uuid4().hex[:8]}"
    kube.create(path("v1", "namespaces"), {"metadata": {"name": namespace}})
    # The tests create pods themselves, and a 1.20 server refuses a pod until the token
    # controller has given the namespace's default ServiceAccount its token ("No API
    # token found for service account ..."): a loaded machine lost that race.
    admin = Kube(cluster.api_client("admin"))
    eventually(
        lambda: ((admin.get(path("v1", "serviceaccounts", "default", namespace=namespace)) or {})
                 .get("secrets")),
        timeout=60,
        what=f"the default ServiceAccount of {namespace} with its token",
    )  # fmt: skip
    sim = Simulator(
        cluster.api_client("simulator"),
        capacity_spec,
        catalog=None,
        interval=0.1,
        namespaces=[namespace],
        hang_seconds=5,
    )
    sim.start()
    try:
        yield Bed(kube, sim, namespace)
    finally:
        try:
            for pod in kube.list(path("v1", "pods", namespace=namespace))[0]:
                kube.delete(path("v1", "pods", pod["metadata"]["name"], namespace=namespace))
            eventually(
                lambda: (
                    not kube.list(path("v1", "pods", namespace=namespace))[0]
                    and not kube.list(path(RESOURCE, "resourceclaims", namespace=namespace))[0]
                ),
                timeout=30,
                what=f"pods and claims of {namespace} released",
            )
        finally:
            sim.stop()
            kube.delete(path("v1", "namespaces", namespace))
