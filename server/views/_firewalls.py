"""Firewalls (Spinnaker's security groups): NetworkPolicies as Clouddriver's
``KubernetesSecurityGroup`` shows them (clouddriver-views.md 2.6). Pure.

``class`` is what Clouddriver's Jackson mixins (``SecurityGroupMixin``, ``RuleMixin``) add;
a rule per ingress (inbound) or egress (outbound) port, ``portRanges`` from its ``port`` (a
named port as ``startPortName``/``endPortName``; none without a port).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._model import PROVIDER
from ._resource import Resource, mapping

__all__ = ["RULE_CLASS", "SECURITY_GROUP_CLASS", "security_group", "security_group_summary"]

SECURITY_GROUP_CLASS = (
    "com.netflix.spinnaker.clouddriver.kubernetes.caching.view.model.KubernetesSecurityGroup"
)
RULE_CLASS = SECURITY_GROUP_CLASS + "$PortRule"


def security_group_summary(full_name: str) -> dict[str, str]:
    """``{"name", "id"}``, both the full name ``"networkPolicy x"``."""
    return {"name": full_name, "id": full_name}


def _port_rule(port: Mapping[str, Any]) -> dict[str, Any]:
    rule: dict[str, Any] = {"class": RULE_CLASS}
    value = port.get("port")
    if isinstance(value, int) and not isinstance(value, bool):
        rule["portRanges"] = [{"startPort": value, "endPort": value}]
    elif isinstance(value, str) and value:
        if value.isdigit():
            rule["portRanges"] = [{"startPort": int(value), "endPort": int(value)}]
        else:
            rule["portRanges"] = [{"startPortName": value, "endPortName": value}]
    protocol = port.get("protocol")
    if isinstance(protocol, str):
        rule["protocol"] = protocol
    return rule


def _rules(entries: object) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for entry in entries if isinstance(entries, list) else ():
        for port in mapping(entry).get("ports") or ():
            rule = _port_rule(mapping(port))
            if rule not in rules:  # Clouddriver keeps a set
                rules.append(rule)
    return rules


def security_group(policy: Resource) -> dict[str, Any]:
    """The details of one NetworkPolicy."""
    body = policy.common()
    full = body["name"]
    moniker = policy.moniker
    body.update(
        {
            "class": SECURITY_GROUP_CLASS,
            "id": full,
            "accountName": policy.account,
            "summary": security_group_summary(full),
            "inboundRules": _rules(policy.spec.get("ingress")),
            "outboundRules": _rules(policy.spec.get("egress")),
            "cloudProvider": PROVIDER,
            "type": PROVIDER,
        }
    )
    if moniker.app is not None:
        body["application"] = moniker.app
    return body


def by_region(full_names: Iterable[tuple[str, str]]) -> dict[str, list[dict[str, str]]]:
    """{namespace: [summary, ...]} of (namespace, full name) pairs, each list sorted by name
    (Clouddriver's sorted TreeSet)."""
    grouped: dict[str, list[dict[str, str]]] = {}
    for namespace, full in sorted(full_names, key=lambda p: (p[0], p[1].lower(), p[1])):
        grouped.setdefault(namespace, []).append(security_group_summary(full))
    return grouped
