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
