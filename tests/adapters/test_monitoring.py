"""deploy/monitoring/ speaks of metrics that exist, with labels they have.

An alert on a misspelt metric never fires and a dashboard panel on one stays empty, and
neither says so: every `ai_inference_*` name in the PrometheusRule and the Grafana
dashboard must be one adapters/metrics.py exposes, every label a selector or a
`by (...)` names must be one of that metric's, and the alerts the issue asks for exist.
The kustomization renders them with the dashboard's ConfigMap, and applies (server dry
run) to the local API server, where tests/crds/ stands in for the operator's CRDs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from adapters import metrics
from adapters.kubernetes.manifests import load_documents
from adapters.resources import resource_dir
from tests.support.kustomize import kustomize

MONITORING = resource_dir("deploy") / "monitoring"
EXPOSED = metrics.exposed_labels()
# Labels Prometheus adds at scrape time (the PodMonitor's relabeling, the target's job).
TARGET_LABELS = {"pod", "job", "instance", "namespace"}

_METRIC = re.compile(r"\b(ai_inference_[a-zA-Z0-9_]+)\b(\s*\{([^}]*)\})?")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)")
_BY = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def _rules() -> list[dict[str, str]]:
    (rule_doc,) = [
        d
        for d in load_documents([MONITORING / "prometheusrule.yaml"])
        if d["kind"] == "PrometheusRule"
    ]
    return [rule for group in rule_doc["spec"]["groups"] for rule in group["rules"]]


def _dashboard_exprs() -> Iterator[tuple[str, str]]:
    dashboard = json.loads((MONITORING / "grafana-dashboards" / "ai-inference.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield f"panel {panel['title']!r}", target["expr"]


EXPRESSIONS = [(f"alert {r['alert']}", str(r["expr"])) for r in _rules()] + list(_dashboard_exprs())


@pytest.mark.parametrize(("where", "expr"), EXPRESSIONS, ids=[w for w, _ in EXPRESSIONS])
def test_expressions_name_exposed_metrics_and_their_labels(where: str, expr: str) -> None:
    used = _METRIC.findall(expr)
    assert used, f"{where} uses no ai_inference metric: {expr}"
    names = set()
    for name, _, selector in used:
        assert name in EXPOSED, f"{where}: {name} is not a metric of adapters/metrics.py"
        names.add(name)
        for label, _ in _MATCHER.findall(selector):
            assert label in EXPOSED[name], f"{where}: {name} has no label {label!r}"
    known = set().union(*(EXPOSED[n] for n in names)) | TARGET_LABELS
    for grouping in _BY.findall(expr):
        for label in filter(None, (x.strip() for x in grouping.split(","))):
            assert label in known, f"{where}: no metric in it has a label {label!r}"


def test_the_alerts_the_platform_team_asked_for_exist() -> None:
    alerts = {r["alert"]: r for r in _rules()}
    assert {
        "AIInferenceOrderStuckPending",
        "AIInferenceOrderFailed",
        "AIInferenceNoLeader",
        "AIInferenceEventLogAppendErrors",
    } <= set(alerts)
    for rule in alerts.values():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]


def test_deckhouses_prometheus_selects_the_rules_and_the_monitor() -> None:
    """Deckhouse's main Prometheus loads PrometheusRules labelled `prometheus: main` and
    `component: rules`, and PodMonitors labelled `prometheus: main`, from namespaces that
    say so (modules/300-prometheus, its ruleSelector and podMonitorSelector). A rule
    without `component: rules` is never loaded, and its alerts never fire."""
    rule_selector = {"prometheus": "main", "component": "rules"}
    monitor_selector = {"prometheus": "main"}
    (rule,) = load_documents([MONITORING / "prometheusrule.yaml"])
    (monitor,) = load_documents([MONITORING / "podmonitor.yaml"])
    assert rule_selector.items() <= rule["metadata"]["labels"].items()
    assert monitor_selector.items() <= monitor["metadata"]["labels"].items()
    # The module's namespace (a Helm template: read as text) is one that says so.
    template = (resource_dir("deploy") / "templates" / "namespace.yaml").read_text("utf-8")
    assert 'prometheus.deckhouse.io/rules-watcher-enabled: "true"' in template
    assert 'prometheus.deckhouse.io/monitor-watcher-enabled: "true"' in template


def test_the_checker_catches_a_misspelt_metric_and_label() -> None:
    with pytest.raises(AssertionError, match="not a metric"):
        test_expressions_name_exposed_metrics_and_their_labels("x", "ai_inference_order > 1")
    with pytest.raises(AssertionError, match="no label 'stage'"):
        test_expressions_name_exposed_metrics_and_their_labels(
            "x", 'ai_inference_orders{stage="Ready"}'
        )
    with pytest.raises(AssertionError, match="no metric in it has a label 'verdict'"):
        test_expressions_name_exposed_metrics_and_their_labels(
            "x", "sum by (verdict) (ai_inference_orders)"
        )


def test_a_label_the_metrics_share_with_the_target_keeps_the_metrics_value() -> None:
    # An order's `namespace` is its own, not the controller pod's: the scrape must honour
    # it, or alerts and panels grouped by namespace all name d8-ai-inference.
    shared = set().union(*EXPOSED.values()) & TARGET_LABELS
    assert "namespace" in shared
    (monitor,) = load_documents([MONITORING / "podmonitor.yaml"])
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        assert endpoint.get("honorLabels") is True


# -- the monitoring kustomization, rendered and applied ---------------------------------------


def test_the_kustomization_renders_the_monitors_and_the_dashboard_configmap() -> None:
    docs = kustomize(MONITORING)
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "PodMonitor", "PrometheusRule"]
    assert {d["metadata"]["namespace"] for d in docs} == {"d8-ai-inference"}
    (dashboard,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"]["ai-inference.json"] == (
        MONITORING / "grafana-dashboards" / "ai-inference.json"
    ).read_text(encoding="utf-8")


@pytest.mark.cluster
def test_the_kustomization_applies_where_the_operator_kinds_exist(cluster: Any) -> None:
    # tests/crds/monitoring.coreos.com.yaml stands in for the operator's CRDs here.
    result = cluster.kubectl(
        "admin", "apply", "--server-side", "--dry-run=server", "-k", str(MONITORING)
    )
    assert result.stdout.count("(server dry run)") == 3, result.stdout
