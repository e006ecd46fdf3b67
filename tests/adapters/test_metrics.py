"""The metrics move when the instrumented code runs, and the endpoint serves them.

Counters are process-wide, so each test compares a sample before and after what it does.
The whole endpoint is scraped over HTTP on 127.0.0.1; the end-to-end test scrapes it
while an order reaches Ready (tests/e2e/test_observability.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import store
from adapters import metrics
from adapters.kubernetes import queueing
from fsm import events as ev
from fsm.reasons import Reason

REG = metrics.REGISTRY
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def probes(*seconds: float) -> list[ev.Event]:
    return [ev.ProbeSucceeded(observed_at=at(s), status_code=200) for s in seconds]


def sample(metric: str, /, **labels: str) -> float:
    return REG.get_sample_value(metric, labels) or 0.0


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def now(self) -> float:
        return self.t


def test_a_pass_is_counted_and_timed_by_its_outcome() -> None:
    done = sample("ai_inference_reconcile_total", kind="order", outcome="done")
    retry = sample("ai_inference_reconcile_total", kind="class", outcome="retry")
    errors = sample("ai_inference_reconcile_total", kind="order", outcome="error")
    timed = sample("ai_inference_reconcile_duration_seconds_count", kind="order", outcome="done")
    with metrics.reconcile_pass("order") as record:
        record.outcome = queueing.Done()
    with metrics.reconcile_pass("class") as record:
        record.outcome = queueing.Retry(None)
    with pytest.raises(KeyError), metrics.reconcile_pass("order"):
        raise KeyError("a bug in a pass")
    assert sample("ai_inference_reconcile_total", kind="order", outcome="done") == done + 1
    assert sample("ai_inference_reconcile_total", kind="class", outcome="retry") == retry + 1
    assert sample("ai_inference_reconcile_total", kind="order", outcome="error") == errors + 1
    assert (
        sample("ai_inference_reconcile_duration_seconds_count", kind="order", outcome="done")
        == timed + 1
    )


def test_the_work_queue_reports_depth_adds_latency_and_retries() -> None:
    clock = FakeClock()
    queue = queueing.WorkQueue(clock=clock, name="metrics-test")
    adds = sample("ai_inference_workqueue_adds_total", queue="metrics-test")
    queue.add("a")
    queue.add("b")
    queue.add("a")  # collapses: not a second add
    assert sample("ai_inference_workqueue_depth", queue="metrics-test") == 2
    assert sample("ai_inference_workqueue_adds_total", queue="metrics-test") == adds + 2
    clock.t += 3.0
    assert queue.get(block=False) == "a"
    assert sample("ai_inference_workqueue_depth", queue="metrics-test") == 1
    assert sample("ai_inference_workqueue_queue_duration_seconds_count", queue="metrics-test") == 1
    assert sample("ai_inference_workqueue_queue_duration_seconds_sum", queue="metrics-test") == 3.0
    queueing.settle(queue, "a", queueing.Retry(RuntimeError("try later")))
    assert sample("ai_inference_workqueue_retries_total", queue="metrics-test") == 1


def test_appends_are_counted_by_result_with_their_events_and_planner_verdicts(
    tmp_path: Path,
) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    key = store.StreamKey("uid-metrics", "support", "llm")
    ok = sample("ai_inference_log_appends_total", result="ok")
    conflict = sample("ai_inference_log_appends_total", result="conflict")
    stale = sample("ai_inference_log_appends_total", result="stale_epoch")
    timed = sample("ai_inference_log_append_duration_seconds_count")
    typed = sample("ai_inference_log_events_total", type="ProbeSucceeded")
    no_capacity = sample("ai_inference_planner_verdicts_total", verdict="NoCapacity")
    with store.open_log(sqlite_url) as log:
        stop = log.observe_appends(metrics.appended)
        log.append(key, probes(0, 0.5), expected_version=0, epoch=5, recorded_at=at(0))
        failed = ev.PlanFailed(observed_at=at(1), reason=Reason.NO_CAPACITY, message="full")
        log.append(key, [failed], expected_version=2, epoch=5, recorded_at=at(1))
        with pytest.raises(store.StreamConflict):
            log.append(key, probes(2), expected_version=1, epoch=5, recorded_at=at(2))
        with pytest.raises(store.StaleEpoch):
            log.append(key, probes(2), expected_version=3, epoch=4, recorded_at=at(2))
        stop()
        log.append(key, probes(3), expected_version=3, epoch=5, recorded_at=at(3))
    assert sample("ai_inference_log_appends_total", result="ok") == ok + 2
    assert sample("ai_inference_log_appends_total", result="conflict") == conflict + 1
    assert sample("ai_inference_log_appends_total", result="stale_epoch") == stale + 1
    assert sample("ai_inference_log_append_duration_seconds_count") == timed + 4
    assert sample("ai_inference_log_events_total", type="ProbeSucceeded") == typed + 2
    assert sample("ai_inference_planner_verdicts_total", verdict="NoCapacity") == no_capacity + 1


def _order(name: str, phase: str | None, conditions: list[dict[str, str]]) -> dict[str, object]:
    status = {"phase": phase, "conditions": conditions} if phase else {}
    return {
        "metadata": {
            "namespace": "support",
            "name": name,
            "creationTimestamp": "2026-12-01T09:00:00Z",
        },
        "status": status,
    }


def test_orders_are_counted_at_scrape_time_by_phase_and_reason() -> None:
    now = datetime.now(UTC)
    ten_min_ago = (now - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = [
        {"type": "Planned", "status": "True", "reason": "Planned"},
        {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": ten_min_ago},
    ]
    waiting = [
        {"type": "Planned", "status": "False", "reason": "NoCapacity"},
        {
            "type": "Ready",
            "status": "Unknown",
            "reason": "AwaitingPlan",
            "lastTransitionTime": ten_min_ago,
        },
    ]
    six_days_ago = (now - timedelta(days=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
    minute_ago = (now - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    degraded = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "EndpointServing",
            "lastTransitionTime": six_days_ago,
        },
        {
            "type": "ScalingHealthy",
            "status": "False",
            "reason": "ScaleUpBlocked",
            "lastTransitionTime": minute_ago,
        },
    ]
    orders = [
        _order("a", "Ready", ready),
        _order("d", "Degraded", degraded),
        _order("b", "Pending", waiting),
        _order("c", "Pending", waiting),
        _order("fresh", None, []),
    ]
    stop = metrics.register_orders(lambda: orders)
    try:
        assert sample("ai_inference_orders", phase="Ready") == 1
        assert sample("ai_inference_orders", phase="Pending") == 2
        assert sample("ai_inference_orders", phase="NoStatus") == 1
        assert sample("ai_inference_orders", phase="Failed") == 0
        assert (
            sample(
                "ai_inference_orders_by_reason",
                condition="Planned",
                status="False",
                reason="NoCapacity",
            )
            == 2
        )
        pending = sample(
            "ai_inference_order_not_ready_seconds",
            namespace="support",
            name="b",
            phase="Pending",
            reason="NoCapacity",
        )
        assert 595 <= pending <= 700
        assert (
            REG.get_sample_value(
                "ai_inference_order_not_ready_seconds",
                {"namespace": "support", "name": "a", "phase": "Ready", "reason": ""},
            )
            is None
        )
        # Degraded: since growth stopped working a minute ago, not since it became
        # Ready six days ago.
        degraded = sample(
            "ai_inference_order_not_ready_seconds",
            namespace="support",
            name="d",
            phase="Degraded",
            reason="ScaleUpBlocked",
        )
        assert 55 <= degraded <= 150
    finally:
        stop()
    assert sample("ai_inference_orders", phase="Pending") == 0


def test_leadership_and_probes() -> None:
    acquired = sample("ai_inference_leader_transitions_total", change="acquired")
    metrics.leading(True, 7)
    metrics.leading(True, 7)  # a renewal is not a transition
    assert sample("ai_inference_leader") == 1 and sample("ai_inference_leader_epoch") == 7
    assert sample("ai_inference_leader_transitions_total", change="acquired") == acquired + 1
    metrics.leading(False)
    assert sample("ai_inference_leader") == 0
    failed = sample("ai_inference_probes_total", result="failed", code="401")
    metrics.probed(ok=False, status_code=401, seconds=0.02)
    assert sample("ai_inference_probes_total", result="failed", code="401") == failed + 1


def test_the_endpoint_serves_every_family_in_the_text_format() -> None:
    server = metrics.serve(0, "127.0.0.1")
    try:
        answer = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
    finally:
        server.stop()
    assert answer.status_code == 200
    families = list(text_string_to_metric_families(answer.text))
    exposed = {
        f"{f.name}{suffix}"
        for f in families
        for suffix in {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(
            f.type, ("",)
        )
    }
    declared = set(metrics.exposed_labels())
    assert declared <= exposed, declared - exposed
    ours = {n for n in exposed if n.startswith("ai_inference_") and not n.endswith("_created")}
    assert ours == declared
    assert "process_cpu_seconds" in {f.name for f in families}  # the process collector too
