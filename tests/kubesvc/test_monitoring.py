"""manifests/overlays/monitoring: the Grafana dashboard and the PrometheusRule are well formed,
cover what issue 18 asks for, every query parses as PromQL, every label value they match is
one the code can export, and docs/monitoring.md has a runbook entry for every alert. (That
every metric they read is exported is checked against the running processes:
tests/e2e/test_monitoring_metrics.py.)"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import server.ops
from agent.watch._retry import RetryReason
from manifests import ROOT
from server.store import AccountState

from .._monitoring import (
    DASHBOARD,
    MONITORING,
    Query,
    alert_rules,
    all_queries,
    dashboard,
    dashboard_queries,
    panels,
    references,
    rule_queries,
)
from ._kustomize import render

DOCS = ROOT.parent / "docs" / "monitoring.md"
SEVERITIES = {"critical", "warning", "info"}

# What the issue lists, and the metric each must be built on.
REQUIRED_ALERTS = {
    "KubesvcAgentDisconnected": "kubesvc_connection_count",
    "KubesvcAccountOrphaned": "kubesvc_server_account_state",
    "KubesvcKindForbidden": "kubesvc_watch_unavailable",
    "KubesvcBudgetSaturated": "kubesvc_budget_in_use_bytes",
    "KubesvcRelistStorm": "kubesvc_watch_relists_total",
    "KubesvcOperationsNotDelivered": "kubesvc_server_operations_total",
    "KubesvcOperationsFailing": "kubesvc_server_operations_total",
}
REQUIRED_PANEL_METRICS = {
    "agents": {"kubesvc_server_agent_sessions", "kubesvc_connection_count"},
    "accounts by state": {"kubesvc_server_account_state"},
    "events/s": {"kubesvc_events_sent_total"},
    "ack latency": {"kubesvc_ack_latency_seconds_bucket"},
    "budget in use and waits": {
        "kubesvc_budget_in_use_bytes",
        "kubesvc_budget_waits_total",
        "kubesvc_budget_wait_seconds_total",
    },
    "watch restarts and 410s": {"kubesvc_kubernetes_requests_total", "kubesvc_watch_retries_total"},
    "relists": {"kubesvc_watch_relists_total"},
    "operations by outcome and duration": {
        "kubesvc_server_operations_total",
        "kubesvc_server_operation_duration_seconds_bucket",
    },
}
# The label values the code can export, for the labels the queries match on literally.
KNOWN_VALUES: dict[tuple[str, str], set[str]] = {
    ("kubesvc_server_account_state", "state"): {str(s) for s in AccountState},
    ("kubesvc_watches", "state"): {"syncing", "synced", "unavailable"},
    ("kubesvc_watch_retries_total", "reason"): {str(r) for r in RetryReason},
    ("kubesvc_server_operations_total", "outcome"): set(server.ops.OUTCOMES),
    ("kubesvc_kubernetes_requests_total", "verb"): {"list", "watch"},
    # agent/watch/_reflector.py: 401/403/404 (_UNAVAILABLE) and 406 make a kind unavailable
    ("kubesvc_watch_unavailable", "code"): {"401", "403", "404", "406"},
    ("up", "job"): {"kubesvc-agent", "kubesvc-server"},  # the PodMonitors' jobLabel values
}


def _alerts() -> list[dict[str, Any]]:
    return [rule for rule in alert_rules() if "alert" in rule]


def test_every_query_parses_as_promql() -> None:
    queries = all_queries()
    assert len(dashboard_queries()) >= 30
    assert len(rule_queries()) == len(alert_rules())
    references(queries)  # raises, naming the query, when one does not parse


def test_metric_names_come_from_selectors_only() -> None:
    # Functions, keywords, label names, durations and Grafana's variables are not metrics.
    query = Query(
        "example",
        'histogram_quantile(0.9, sum by (le, type) (rate(a_seconds_bucket{account=~"$account"}'
        "[$__rate_interval]))) > 1 and on (job, instance) b_total offset 5m "
        'or absent(c{state="ORPHANED"}) unless max_over_time(d[${__range}:1m])',
    )
    found = references([query])
    assert sorted(found.metrics) == ["a_seconds_bucket", "b_total", "c", "d"]
    assert found.matched == {("c", "state"): {"ORPHANED"}}  # a variable's value is not kept
    assert sorted(found.matcher_labels) == [("a_seconds_bucket", "account"), ("c", "state")]
    assert [(set(labels), set(metrics)) for _, labels, metrics in found.grouped] == [
        ({"job", "instance"}, {"a_seconds_bucket", "b_total"}),
        ({"le", "type"}, {"a_seconds_bucket"}),
    ]
    with pytest.raises(AssertionError, match="is not PromQL"):
        references([Query("broken", "sum by (le (x)")])


def test_the_label_values_matched_are_ones_the_code_exports() -> None:
    found = references(all_queries())
    checked = 0
    for (metric, label), values in found.matched.items():
        known = KNOWN_VALUES.get((metric, label))
        if known is None:
            continue  # an account name or a dashboard variable: any value may come
        checked += 1
        assert values <= known, f"{metric}{{{label}=...}}: {sorted(values - known)} unknown"
    assert checked >= 6


def test_every_alert_has_a_duration_a_severity_a_summary_and_a_description() -> None:
    alerts = _alerts()
    names = [a["alert"] for a in alerts]
    assert len(names) == len(set(names))
    for alert in alerts:
        name = alert["alert"]
        assert re.fullmatch(r"Kubesvc[A-Z][A-Za-z]+", name), name
        assert alert.get("for"), f"{name}: no `for` (one bad scrape must not page anyone)"
        assert alert["labels"]["severity"] in SEVERITIES, name
        annotations = alert["annotations"]
        assert annotations["summary"].strip(), name
        assert f"docs/monitoring.md, {name}." in annotations["description"], name


def test_the_alerts_the_issue_asks_for_read_the_right_metric() -> None:
    queries = {q.where: q for q in rule_queries()}
    for name, metric in REQUIRED_ALERTS.items():
        assert metric in references([queries[f"rule {name}"]]).metrics, name


def test_docs_have_a_runbook_entry_for_every_alert_and_no_other() -> None:
    text = DOCS.read_text()
    sections = dict(re.findall(r"^### (Kubesvc\w+)\n(.*?)(?=^#{2,3} |\Z)", text, re.M | re.S))
    assert sorted(sections) == sorted(a["alert"] for a in _alerts())
    for name, body in sections.items():
        # What it means, and the first thing to check (what someone paged at 3 a.m. needs).
        assert "**First check:**" in body, name
        assert len(body.split()) >= 40, name


def test_the_dashboard_shows_what_the_issue_lists() -> None:
    read = references(dashboard_queries()).metrics
    for what, metrics in REQUIRED_PANEL_METRICS.items():
        assert metrics <= set(read), (what, sorted(metrics - set(read)))


def test_the_dashboard_is_well_formed_for_grafana() -> None:
    board = dashboard()
    assert board["uid"] == "kubesvc-overview"
    assert board["title"] == "kubesvc"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    all_panels = list(panels(board))
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in all_panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))
        if panel["type"] == "row":
            continue
        assert panel["title"], panel["id"]
        assert panel.get("description"), panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            # The datasource variable: the same file works imported by hand and from the
            # sidecar, whatever the Prometheus data source is called.
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_the_overlay_ships_the_dashboard_to_grafanas_sidecar() -> None:
    documents = {(d["kind"], d["metadata"]["name"]): d for d in render(MONITORING)}
    configmap = documents[("ConfigMap", "kubesvc-dashboard")]
    assert configmap["metadata"]["labels"] == {"grafana_dashboard": "1"}
    assert configmap["data"] == {"kubesvc-dashboard.json": DASHBOARD.read_text()}
    json.loads(configmap["data"]["kubesvc-dashboard.json"])
    assert ("PrometheusRule", "kubesvc") in documents
    monitors = {
        d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]: d
        for (kind, _), d in documents.items()
        if kind == "PodMonitor"
    }
    # The ports the agent's and the server's Deployments name (manifests/base).
    assert monitors["kubesvc-agent"]["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert monitors["kubesvc-server"]["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    for monitor in monitors.values():
        assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"  # job="kubesvc-agent"


@pytest.mark.parametrize(("deployment", "port"), [("agent", 8008), ("server", 7002)])
def test_the_monitored_ports_are_the_ones_that_serve_metrics(deployment: str, port: int) -> None:
    [pod] = [
        d["spec"]["template"]
        for d in render(ROOT / "overlays" / ("agent-mode" if deployment == "agent" else "server"))
        if d["kind"] == "Deployment"
    ]
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    name = "metrics" if deployment == "agent" else "http"
    assert ports[name] == port
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == f"kubesvc-{deployment}"
