"""Metrics and logs, scraped and read from the real controller while an order is served.

The session's controller runs in-process (tests/e2e/conftest.py); its registry is served
here on a loopback port, exactly as `ai-inference controller --metrics-port` serves it,
and scraped over HTTP while alice's order goes from Pending to Ready. A second,
command-line controller started beside it is a standby: it must serve /metrics saying so,
and write nothing to stderr but JSON lines.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters import metrics
from tests.e2e.conftest import delete_and_wait, wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
NAME = "metrics-llm"


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    answer = httpx.get(url, timeout=5)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    return samples.get((metric, tuple(sorted(labels.items()))), 0.0)


def matching(samples: Samples, metric: str, /, **labels: str) -> list[dict[str, str]]:
    return [
        dict(key)
        for (sample, key), _ in samples.items()
        if sample == metric and labels.items() <= dict(key).items()
    ]


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = metrics.serve(0, "127.0.0.1")
    try:
        yield f"http://127.0.0.1:{server.port}/metrics"
    finally:
        server.stop()


def test_metrics_follow_an_order_from_pending_to_ready(platform, alice, endpoint) -> None:
    before = scrape(endpoint)
    assert value(before, "ai_inference_leader") == 1
    assert value(before, "ai_inference_leader_epoch") == platform.controller.epoch
    alice.create(
        "support",
        NAME,
        {
            "inferenceServiceClassName": "default-llm",
            "model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-32B-Instruct-AWQ"}},
        },
    )
    try:
        seen_waiting: list[dict[str, str]] = []

        def ready() -> Samples | None:
            now = scrape(endpoint)
            seen_waiting.extend(matching(now, "ai_inference_order_not_ready_seconds", name=NAME))
            order = alice.get("support", NAME) or {}
            return now if (order.get("status") or {}).get("phase") == "Ready" else None

        wait_for(ready, timeout=120, what=f"support/{NAME} Ready")

        def counted_ready() -> Samples | None:
            # The gauges are the controller's cache's, which may see the status a moment
            # after the API server shows it: a scrape taken with the order's read waited.
            now = scrape(endpoint)
            waiting = matching(now, "ai_inference_order_not_ready_seconds", name=NAME)
            seen_waiting.extend(waiting)
            return None if waiting else now

        after = wait_for(counted_ready, timeout=30, what=f"support/{NAME} counted as Ready")
        # While it waited it was listed as not Ready: before its first status (NoStatus),
        # and Pending if a scrape caught a status written before the order converged.
        assert seen_waiting, "the order never showed as waiting"
        phases = {w["phase"] for w in seen_waiting}
        assert phases <= {"NoStatus", "Pending"}, phases
        assert all(w["reason"] for w in seen_waiting if w["phase"] == "Pending")
        assert all(w["namespace"] == "support" for w in seen_waiting)
        # Ready now: counted so, and no longer waiting.
        assert value(after, "ai_inference_orders", phase="Ready") >= 1
        assert not matching(after, "ai_inference_order_not_ready_seconds", name=NAME)
        assert (
            value(
                after,
                "ai_inference_orders_by_reason",
                condition="Ready",
                status="True",
                reason="EndpointServing",
            )
            >= 1
        )

        def grew(metric: str, /, **labels: str) -> float:
            return value(after, metric, **labels) - value(before, metric, **labels)

        assert (
            grew("ai_inference_reconcile_total", kind="order", outcome="done")
            + grew("ai_inference_reconcile_total", kind="order", outcome="requeue")
            >= 1
        )
        assert (
            grew("ai_inference_reconcile_duration_seconds_count", kind="order", outcome="requeue")
            + grew("ai_inference_reconcile_duration_seconds_count", kind="order", outcome="done")
            >= 1
        )
        assert grew("ai_inference_log_appends_total", result="ok") >= 1
        assert grew("ai_inference_log_append_duration_seconds_count") >= 1
        assert grew("ai_inference_log_events_total", type="PlanComputed") >= 1
        assert grew("ai_inference_log_events_total", type="ProbeSucceeded") >= 1
        assert grew("ai_inference_planner_verdicts_total", verdict="Planned") >= 1
        assert grew("ai_inference_probes_total", result="ok", code="200") >= 1
        assert grew("ai_inference_probe_duration_seconds_count", result="ok") >= 1
        assert grew("ai_inference_workqueue_adds_total", queue="reconcile") >= 1
        assert grew("ai_inference_workqueue_queue_duration_seconds_count", queue="reconcile") >= 1
        assert ("ai_inference_workqueue_depth", (("queue", "reconcile"),)) in after
        # The same names the alerts and the dashboard use (test_monitoring.py checks those).
        exposed = {name for name, _ in after}
        assert {
            "ai_inference_leader",
            "ai_inference_orders",
            "ai_inference_reconcile_total",
            "ai_inference_log_appends_total",
        } <= exposed
    finally:
        delete_and_wait(platform, alice, "support", NAME)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_command_line_standby_serves_metrics_and_logs_json(platform, tmp_path) -> None:
    metrics_port, health_port = _free_port(), _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "adapters.cli.main",
            "controller",
            "--kubeconfig",
            str(platform.state.kubeconfig("controller")),
            "--store",
            str(tmp_path / "standby.sqlite"),
            "--metrics-port",
            str(metrics_port),
            "--health-port",
            str(health_port),
            "--log-level",
            "debug",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{metrics_port}/metrics"

        def served() -> Samples | None:
            try:
                return scrape(url)
            except httpx.TransportError:
                assert process.poll() is None, process.communicate(timeout=5)
                return None

        samples = wait_for(served, timeout=60, what="the standby's /metrics")
        # The session's controller holds the Lease: this one waits, and says so.
        time.sleep(3)
        samples = scrape(url)
        assert value(samples, "ai_inference_leader") == 0
        assert not matching(samples, "ai_inference_orders") or all(
            value(samples, "ai_inference_orders", phase=p) == 0
            for p in ("Pending", "Ready", "Degraded", "Failed")
        )
        # Readiness is not leadership: a standby is ready (it may take over at once).
        ready = httpx.get(f"http://127.0.0.1:{health_port}/readyz", timeout=5)
        assert (ready.status_code, ready.text) == (200, "standby\n")
    finally:
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    records = [json.loads(line) for line in err.splitlines()]  # each line one JSON record
    assert all({"time", "level", "logger", "msg"} <= set(r) for r in records)
    standing_by = [r for r in records if r["level"] == "DEBUG" and "standing by" in r["msg"]]
    assert standing_by, "the standby logged nothing at debug level"
    assert standing_by[0]["logger"] == "adapters.kubernetes.leader"
