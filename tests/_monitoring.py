"""The monitoring overlay's queries (the Grafana dashboard's and the PrometheusRule's), read
with a real PromQL parser, and what they reference: metric names, and the labels they match
on or group by. tests/kubesvc/test_monitoring.py checks the files' shape; the e2e test
tests/e2e/test_monitoring_metrics.py checks every name against what the running agent and
server export.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import promql_parser
import yaml

from manifests import ROOT

__all__ = [
    "DASHBOARD",
    "MONITORING",
    "PROMETHEUS_SERIES",
    "RULES",
    "TARGET_LABELS",
    "Query",
    "References",
    "alert_rules",
    "all_queries",
    "dashboard",
    "dashboard_queries",
    "panels",
    "references",
    "rule_queries",
]

MONITORING = ROOT / "overlays" / "monitoring"
DASHBOARD = MONITORING / "kubesvc-dashboard.json"
RULES = MONITORING / "prometheusrule.yaml"

#: Series Prometheus writes itself for every scrape target (so no process of ours exports
#: them): ``up`` is 0 when a scrape failed, the one way to see a pod that crashes.
PROMETHEUS_SERIES = frozenset({"up"})
#: Labels Prometheus puts on every series from the target it scraped (a PodMonitor's
#: targets have these), besides the ones the process exports.
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod"})

# Grafana's built-in range variables, replaced by a duration before a query is parsed; a
# dashboard variable ($account, ${account}) stands in a label matcher's value and becomes
# ".*". Anything else that is not PromQL fails the parse.
_GRAFANA_RANGES = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$")


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL expression and where it is (for the failure messages)."""

    where: str
    expr: str

    def promql(self) -> str:
        """The expression with Grafana's variables replaced: plain PromQL."""
        text = re.sub(r"\$\{(__\w+)\}", r"$\1", self.expr)  # ${__range} is $__range
        for variable, value in _GRAFANA_RANGES.items():
            text = text.replace(variable, value)
        return _VARIABLE.sub(".*", text)

    def parse(self) -> promql_parser.Expr:
        try:
            return promql_parser.parse(self.promql())
        except ValueError as exc:
            raise AssertionError(f"{self.where}: {self.expr!r} is not PromQL: {exc}") from exc


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside (collapsed) rows too."""
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries() -> list[Query]:
    """Every panel target's expression, and the PromQL inside the template variables'
    ``label_values(selector, label)`` queries."""
    board = dashboard()
    queries = [
        Query(f"dashboard panel {panel['title']!r} target {target['refId']}", target["expr"])
        for panel in panels(board)
        for target in panel.get("targets", [])
    ]
    for variable in board.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        found = _LABEL_VALUES.match(text)
        assert found, f"variable {variable['name']}: {text!r} is not label_values(...)"
        assert found["selector"], f"variable {variable['name']}: {text!r} names no metric"
        queries.append(Query(f"dashboard variable {variable['name']}", found["selector"]))
    return queries


def alert_rules() -> list[dict[str, Any]]:
    """Every rule of the PrometheusRule (alerts and recording rules), in file order."""
    rule = yaml.safe_load(RULES.read_text())
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def rule_queries() -> list[Query]:
    return [Query(f"rule {r.get('alert') or r.get('record')}", r["expr"]) for r in alert_rules()]


def all_queries() -> list[Query]:
    return dashboard_queries() + rule_queries()


@dataclass(slots=True)
class References:
    """What the queries read: metric name -> where; (metric, label) matched -> the values
    matched (literal alternatives only); label names grouped or joined on -> where, with
    the metrics the grouping ranges over."""

    metrics: dict[str, list[str]] = field(default_factory=dict)
    matched: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    matcher_labels: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    grouped: list[tuple[str, frozenset[str], frozenset[str]]] = field(default_factory=list)


def references(queries: list[Query]) -> References:
    found = References()
    for query in queries:
        _collect(query.parse(), query.where, found)
    return found


def _selectors(expr: promql_parser.Expr) -> set[str]:
    names: set[str] = set()

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(expr, visit)
    return names


def _collect(expr: promql_parser.Expr, where: str, found: References) -> None:
    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            # A selector by {__name__=...} alone would hide its metric from this check.
            assert node.name, f"{where}: a selector without a metric name"
            found.metrics.setdefault(node.name, []).append(where)
            for matcher in node.matchers.matchers:
                found.matcher_labels.setdefault((node.name, matcher.name), []).append(where)
                if "$" in matcher.value or "." in matcher.value or "*" in matcher.value:
                    continue  # a dashboard variable or a real pattern: no literal values
                values = found.matched.setdefault((node.name, matcher.name), set())
                values.update(v for v in matcher.value.split("|") if v)
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            if node.modifier.type == promql_parser.AggModifierType.By:
                found.grouped.append(
                    (where, frozenset(node.modifier.labels), frozenset(_selectors(node.expr)))
                )
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
            labels = set(node.modifier.group_labels or [])
            if node.modifier.matching is not None:
                labels.update(node.modifier.matching.labels)
            if labels:
                metrics = _selectors(node.lhs) | _selectors(node.rhs)
                found.grouped.append((where, frozenset(labels), frozenset(metrics)))

    promql_parser.walk(expr, visit)
