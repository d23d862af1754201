"""Structural checks of the custom resources manifests/ ships, which kubernetes_validate cannot
check (it knows the built-in kinds only): the Prometheus operator's PrometheusRule and
PodMonitor, checked field by field against the parts of the operator's CRDs
(monitoring.coreos.com/v1) they use. Strict like the built-in check: an unknown field is an
error, so a typo (``annotation:``, ``for: 5 min``) fails here rather than being pruned, or
refused, by the cluster.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["CUSTOM_KINDS", "check_custom_resource"]

# The operator's duration type (monitoring.coreos.com/v1 Duration), as in its CRDs.
_DURATION = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_GROUP = "monitoring.coreos.com/v1"


def _fields(obj: Any, where: str, required: set[str], optional: set[str]) -> dict[str, Any]:
    assert isinstance(obj, dict), f"{where}: expected a mapping, got {obj!r}"
    missing = required - set(obj)
    unknown = set(obj) - required - optional
    assert not missing, f"{where}: missing {sorted(missing)}"
    assert not unknown, f"{where}: unknown fields {sorted(unknown)}"
    return obj


def _strings(obj: Any, where: str, *, names: re.Pattern[str] | None = None) -> None:
    assert isinstance(obj, dict), f"{where}: expected a mapping of strings"
    for key, value in obj.items():
        assert isinstance(key, str), f"{where}: {key!r} is not a string"
        assert isinstance(value, str), f"{where}.{key}: not a string"
        if names is not None:
            assert names.match(key), f"{where}: {key!r} is not a valid label name"


def _duration(value: Any, where: str) -> None:
    assert isinstance(value, str), f"{where}: {value!r} is not a string"
    assert value, f"{where}: empty"
    assert _DURATION.match(value), f"{where}: {value!r} is not a duration (30s, 5m, 1h30m)"


def _metadata(document: dict[str, Any], where: str) -> None:
    meta = _fields(document["metadata"], f"{where}.metadata", {"name"}, {"namespace", "labels"})
    assert re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", meta["name"]), f"{where}: name"
    _strings(meta.get("labels", {}), f"{where}.metadata.labels")


def _prometheus_rule(document: dict[str, Any], where: str) -> None:
    spec = _fields(document["spec"], f"{where}.spec", {"groups"}, set())
    names: set[str] = set()
    for i, group in enumerate(spec["groups"]):
        at = f"{where}.spec.groups[{i}]"
        _fields(group, at, {"name", "rules"}, {"interval", "limit", "labels"})
        assert group["name"] not in names, f"{at}: group name {group['name']!r} twice"
        names.add(group["name"])
        if "interval" in group:
            _duration(group["interval"], f"{at}.interval")
        assert group["rules"], f"{at}: no rules"
        for j, rule in enumerate(group["rules"]):
            here = f"{at}.rules[{j}]"
            _fields(rule, here, {"expr"}, {"alert", "record", "for", "labels", "annotations"})
            assert ("alert" in rule) != ("record" in rule), f"{here}: one of alert or record"
            assert isinstance(rule["expr"], str), f"{here}.expr: not a string"
            assert rule["expr"].strip(), f"{here}.expr: empty"
            if "record" in rule:
                assert _METRIC_NAME.match(rule["record"]), f"{here}.record"
                assert "for" not in rule, f"{here}: a recording rule has no for"
                assert "annotations" not in rule, f"{here}: a recording rule has no annotations"
            if "for" in rule:
                _duration(rule["for"], f"{here}.for")
            _strings(rule.get("labels", {}), f"{here}.labels", names=_LABEL_NAME)
            _strings(rule.get("annotations", {}), f"{here}.annotations", names=_LABEL_NAME)


def _pod_monitor(document: dict[str, Any], where: str) -> None:
    spec = _fields(
        document["spec"],
        f"{where}.spec",
        {"selector", "podMetricsEndpoints"},
        {"jobLabel", "namespaceSelector"},
    )
    selector = _fields(spec["selector"], f"{where}.spec.selector", set(), {"matchLabels"})
    _strings(selector.get("matchLabels", {}), f"{where}.spec.selector.matchLabels")
    if "namespaceSelector" in spec:
        namespaces = _fields(
            spec["namespaceSelector"], f"{where}.spec.namespaceSelector", set(), {"any"}
        )
        assert isinstance(namespaces.get("any", False), bool), f"{where}: namespaceSelector.any"
    assert spec["podMetricsEndpoints"], f"{where}: no podMetricsEndpoints"
    for i, endpoint in enumerate(spec["podMetricsEndpoints"]):
        at = f"{where}.spec.podMetricsEndpoints[{i}]"
        _fields(endpoint, at, {"port"}, {"path", "interval", "scrapeTimeout"})
        assert isinstance(endpoint["port"], str), f"{at}.port: the container port's name"
        assert str(endpoint.get("path", "/metrics")).startswith("/"), f"{at}.path"
        for key in ("interval", "scrapeTimeout"):
            if key in endpoint:
                _duration(endpoint[key], f"{at}.{key}")


CUSTOM_KINDS = {
    (_GROUP, "PrometheusRule"): _prometheus_rule,
    (_GROUP, "PodMonitor"): _pod_monitor,
}


def check_custom_resource(document: dict[str, Any], where: str) -> None:
    """Check a custom resource this project ships; AssertionError says what is wrong, and
    a kind not in CUSTOM_KINDS is an error too (nothing goes unchecked)."""
    key = (document.get("apiVersion"), document.get("kind"))
    check = CUSTOM_KINDS.get(key)  # type: ignore[arg-type]
    assert check is not None, f"{where}: no check for {key}: add one to tests/kubesvc/_crds.py"
    _fields(document, where, {"apiVersion", "kind", "metadata", "spec"}, set())
    _metadata(document, where)
    check(document, where)
