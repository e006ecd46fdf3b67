"""The benchmark's smoke run (N=20): write counts that must not regress, and the bench itself.

`ai-inference bench` is run here small, against the session's control plane, with the
simulator and the controller as processes. It asserts counts, never times: per order one
apply (or create) of each child, a bounded number of status writes and Events, nothing
written while idle but the Leases, nothing written by a restart. The times it prints
belong in docs/performance.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.bench import Benchmark, BenchOptions
from adapters.simulator import capacity
from adapters.simulator.kube import Kube
from adapters.simulator.publishing import Publisher

pytestmark = pytest.mark.cluster

ORDERS = 20
# Children the controller renders (server-side apply) and the one it creates (the token).
APPLIED = (
    "deployments",
    "services",
    "resourceclaimtemplates",
    "horizontalpodautoscalers",
    "ingresses",
)
# The API server writes these on its own (its endpoint reconciler, leader election of the
# controller manager): not ours to count while idle.
SERVER_OWN = ("leases", "endpoints")


@pytest.fixture(scope="module")
def result(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder: Path = tmp_path_factory.mktemp("bench")
    options = BenchOptions(
        orders=ORDERS,
        namespace="bench-smoke",
        idle_seconds=5,
        floor=False,
        replay=True,
        ready_timeout=120,
    )
    yield from _run(cluster, folder, options)


def _run(cluster: Any, folder: Path, options: BenchOptions) -> Iterator[dict[str, Any]]:
    try:
        yield Benchmark(cluster.state, folder, options).run()
    finally:
        # The bench published its own nodes; the next tests plan against the default ones.
        Publisher(Kube(cluster.api_client("simulator"))).publish(capacity.load_capacity())


def test_every_order_reached_ready_with_one_write_of_each_child(result: dict[str, Any]) -> None:
    writes = result["project"]["writes_per_order"]
    assert writes["inferenceservices POST"] == 1.0  # all N were created, and counted
    for resource in APPLIED:
        assert writes[f"{resource} APPLY"] == 1.0, resource
    assert writes["secrets POST"] == 1.0  # the token, created once
    assert writes["pods/binding POST"] == 1.0  # one replica each, bound once


def test_status_writes_and_events_per_order_stay_bounded(result: dict[str, Any]) -> None:
    project = result["project"]
    # At most one write per distinct status the order passed (replayed from its stream):
    # a flapping status, or a write of an unchanged one, would write more.
    assert 1.0 <= project["status_writes_per_order"] <= project["distinct_statuses_per_order"]
    # Six verdicts on the way to Ready; the rollout's own steps are not told (8 were).
    assert 1.0 <= project["events_per_order"] <= 7.0


def test_nothing_is_written_while_idle_or_by_a_restart(result: dict[str, Any]) -> None:
    idle = {k: v for k, v in result["idle"]["writes"].items() if not k.startswith(SERVER_OWN)}
    assert idle == {}
    assert result["idle"]["lease_writes"] >= 1  # the window was measured: the Lease renews
    restart = result["restart"]
    assert {k: v for k, v in restart["writes"].items() if not k.startswith(SERVER_OWN)} == {}
    assert restart["lease_writes"] >= 1  # the window was measured: the new leader took it


def test_the_replay_read_every_event_of_the_run(result: dict[str, Any]) -> None:
    replay = result["replay"]
    # Each order's stream holds several events (spec, plan, workload, probe, ...).
    assert replay["events"] >= 3 * ORDERS
    assert replay["one_history_events"] >= 3


def test_the_bed_counts_every_process_it_runs(result: dict[str, Any]) -> None:
    cpu = result["project"]["cpu_s"]
    # The controller manager makes every ReplicaSet and pod: a bed without it is not all.
    assert set(cpu) == {"controller", "simulator", "apiserver_etcd", "controller_manager", "bench"}
    assert cpu["controller_manager"] > 0 and cpu["controller"] > 0
    assert result["project"]["busy_cores"] == pytest.approx(
        sum(cpu.values()) / result["project"]["wall_s"], abs=0.02
    )


def test_an_order_makes_its_token_without_reading_it(result: dict[str, Any]) -> None:
    # The simulator's kubelet reads each pod's token (its env) once: 1 an order. The
    # controller read it 1.1 times more: a 404 before creating it, and again at once when
    # the render found the cache not holding it yet. Now it waits for its cache instead.
    assert result["project"]["gets_per_order"].get("secrets GET", 0.0) < 1.5


@pytest.fixture(scope="module")
def rounds(
    cluster: Any, tmp_path_factory: pytest.TempPathFactory, result: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """Floor and project twice in turn, in the namespace the smoke run used: its orders
    of the same names left their Events there, and their streams in a log of their own."""
    folder: Path = tmp_path_factory.mktemp("bench-rounds")
    options = BenchOptions(
        orders=3,
        namespace="bench-smoke",
        idle_seconds=1,
        restart=False,
        replay=False,
        ready_timeout=120,
        rounds=2,
    )
    yield from _run(cluster, folder, options)


def test_rounds_report_each_pair_and_the_medians(rounds: dict[str, Any]) -> None:
    assert len(rounds["rounds"]) == 2
    for pair in rounds["rounds"]:
        assert pair["floor_wall_s"] > 0 and pair["project_wall_s"] > 0
        assert pair["ratio_to_floor"] == pytest.approx(
            pair["project_wall_s"] / pair["floor_wall_s"], abs=0.01
        )
        # Each phase's CPU by process: what moved between the rounds, and whose it was.
        assert pair["project_cpu_s"]["controller"] > 0 == pair["floor_cpu_s"]["controller"]
        assert pair["cpu_ratio_to_floor_at_one_speed"] == pytest.approx(
            pair["cpu_ratio_to_floor"] / pair["same_work_cpu_ratio_to_floor"], abs=0.02
        )
    figures = ("ratio_to_floor", "cpu_ratio_to_floor", "same_work_cpu_ratio_to_floor")
    for key in (*figures, "cpu_ratio_to_floor_at_one_speed"):
        both = [pair[key] for pair in rounds["rounds"]]
        assert rounds[key] == pytest.approx(sum(both) / 2, abs=0.01), key


def test_a_round_counts_its_own_orders_only(rounds: dict[str, Any]) -> None:
    project = rounds["project"]
    # Counted by name, the smoke run's Events (the same names, in this namespace) would be in.
    assert 1.0 <= project["events_per_order"] <= 7.0
    assert project["writes_per_order"]["inferenceservices POST"] == 1.0
    assert 1.0 <= project["status_writes_per_order"] <= project["distinct_statuses_per_order"]
    assert rounds["floor"]["writes_per_order"]["inferenceservices POST"] == 1.0
