"""deploy/monitoring/ speaks of metrics that exist, with labels they have.

An alert on a misspelt metric never fires and a dashboard panel on one stays empty, and
neither says so: every `ai_inference_*` name in the PrometheusRule and the Grafana
dashboard must be one adapters/metrics.py exposes, every label a selector or a
`by (...)` names must be one of that metric's, and the alerts the issue asks for exist.
(The manifests themselves are applied to the API server by test_manifests.py, against
the stand-in monitoring CRDs of tests/crds/.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from adapters import metrics
from adapters.kubernetes.manifests import load_documents
from adapters.resources import resource_dir

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
