"""A log that answers but cannot be used ends leadership and fails liveness.

Orders wait at the log gate while the log is down (test_log_gate.py). When the prober
finds it broken instead (here a table gone), waiting cannot help: before, the prober died
and the gate stayed closed for ever while /healthz said the controller was alive, so
Kubernetes never restarted it. Against the session's API server; the log on SQLite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import store
from adapters.kubernetes import queueing
from adapters.kubernetes.controller import Controller
from tests.support.polling import eventually

pytestmark = pytest.mark.cluster


def test_a_broken_log_behind_the_gate_fails_liveness(cluster: Any, tmp_path: Path) -> None:
    with store.open_log(f"sqlite:///{tmp_path / 'log.sqlite'}") as log:
        controller = Controller(cluster.api_client("controller"), log, leader_election=False)
        try:
            assert controller.alive()
            with log.engine.begin() as conn:
                conn.exec_driver_sql("DROP TABLE leader_fence")
            # A pass met the log down: the gate closes and its prober reads the log.
            controller.log_gate.failed("uid-1", store.StoreUnavailable("connection refused"))
            eventually(lambda: not controller.alive(), timeout=10, what="liveness failed")
            assert controller.log_gate.closed  # no pass runs against that log meanwhile
            assert "StoreUnusable" in (controller.failure or "")
            assert "no such table: leader_fence" in (controller.failure or "")
        finally:
            controller.stop()


def test_a_pass_that_meets_a_log_no_append_can_reach_ends_leadership(
    cluster: Any, tmp_path: Path
) -> None:
    """The first to meet the broken log may be a pass, not the gate's probe: its
    StoreUnusable escaped to the worker, which retried the order for ever, and every other
    order the same, behind a leader that kept its Lease and looked alive. The fence is
    still readable here, so a probe that only read it found nothing wrong."""
    with store.open_log(f"sqlite:///{tmp_path / 'log.sqlite'}") as log:
        controller = Controller(cluster.api_client("controller"), log, leader_election=False)
        try:
            with log.engine.begin() as conn:
                conn.exec_driver_sql("DROP TABLE events")
            assert log.epoch() == 0  # the fence answers
            outcome = controller._pass_once("uid-1")
            assert isinstance(outcome, queueing.Terminal)
            assert not controller.alive()
            assert "no such table: events" in (controller.failure or "")
        finally:
            controller.stop()


def test_a_pass_refused_for_its_own_orders_data_is_retried_and_leadership_stays(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One order's append refused for what it holds (PostgreSQL's data errors are not
    worth retrying at once either) says nothing of the log: an append rehearsed without it
    passes, so that order is retried on its own backoff and the leader stays. One order
    must not end every order's leader."""
    with store.open_log(f"sqlite:///{tmp_path / 'log.sqlite'}") as log:
        controller = Controller(cluster.api_client("controller"), log, leader_election=False)
        refused = store.StoreUnusable("value too long for type character varying(63)")

        def refuse(uid: str) -> None:
            raise refused

        monkeypatch.setattr(controller.reconciler, "reconcile", refuse)
        try:
            outcome = controller._pass_once("uid-1")
            assert isinstance(outcome, queueing.Retry) and outcome.error is refused
            assert controller.alive()
            assert controller.failure is None
            assert not controller.log_gate.closed
        finally:
            controller.stop()
