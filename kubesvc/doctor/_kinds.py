"""Which kinds an account may list and watch, judged (sans-I/O) from the access reviews.

The runner asks the API server one SelfSubjectAccessReview per watch target and verb (what
``kubectl auth can-i list deployments.apps`` asks); this module turns the answers into one
summary line per account and one line per kind that may not be read, with the RBAC that
would allow it.

Verdicts where the issue is silent: a denied kind the account names (``kinds``, or
``customResourceDefinitions``) is a FAIL, as that kind will never sync; a denied kind the
agent only picked up because it watches everything it may see is a WARN (the agent reports it
unavailable and syncs the rest, by design). Every kind denied is a FAIL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import agent

from ._findings import Finding, Verdict

__all__ = ["Access", "kind_findings", "missing_kinds", "rbac_hint"]


@dataclass(frozen=True, slots=True)
class Access:
    """What the API server said about one target: ``None`` where it was not asked (no
    access review API: the list was tried instead and watch could not be checked)."""

    list: bool
    watch: bool | None


def _resource(info: agent.KindInfo) -> str:
    return f"{info.plural}.{info.group}" if info.group else info.plural


def _subject(user: str) -> str:
    prefix = "system:serviceaccount:"
    if user.startswith(prefix) and user.count(":") == 3:
        namespace, name = user[len(prefix) :].split(":")
        return f"--serviceaccount={namespace}:{name}"
    return f"--user={user}" if user else "--user=<the account's user>"


def rbac_hint(
    target: agent.WatchTarget, verbs: Sequence[str], user: str, index: int, kind: str
) -> str:
    """The kubectl commands that grant ``verbs`` on the target to ``user``, or the config
    change that stops asking for it."""
    info = target.kind
    name = f"kubesvc-read-{info.plural}" + (f"-{info.group}" if info.group else "")
    verb_list = ",".join(["get", *verbs]) if "get" not in verbs else ",".join(verbs)
    if target.namespace:
        grant = (
            f"kubectl -n {target.namespace} create role {name} --verb={verb_list} "
            f"--resource={_resource(info)} && kubectl -n {target.namespace} create rolebinding "
            f"{name} --role={name} {_subject(user)}"
        )
    else:
        grant = (
            f"kubectl create clusterrole {name} --verb={verb_list} --resource={_resource(info)}"
            f" && kubectl create clusterrolebinding {name} --clusterrole={name} {_subject(user)}"
        )
    return f"{grant}; or add {kind} to kubernetes.accounts[{index}].omitKinds"


def kind_findings(
    account: agent.AccountConfig,
    index: int,
    answers: Mapping[agent.WatchTarget, Access],
    user: str,
) -> list[Finding]:
    """The summary line and one line per target the account may not list or watch."""
    named = {k.lower() for k in account.kinds} | {
        crd.kind.partition(".")[0].lower() for crd in account.custom_resource_definitions
    }
    lines: list[Finding] = []
    readable = 0
    unchecked_watch = 0
    for target, access in answers.items():
        info = target.kind
        denied = [
            verb for verb, ok in (("list", access.list), ("watch", access.watch)) if ok is False
        ]
        if access.watch is None:
            unchecked_watch += 1
        if not denied:
            readable += 1
            continue
        where = f" in namespace {target.namespace}" if target.namespace else " cluster-wide"
        explicit = info.kind.lower() in named
        cluster_scoped_in_namespaced_install = (
            not info.namespaced and bool(account.namespaces) and not explicit
        )
        hint = rbac_hint(target, denied, user, index, info.kind)
        if cluster_scoped_in_namespaced_install:
            hint = (
                f"set kubernetes.accounts[{index}].onlyNamespacedResources: true (a namespaced "
                f"install), or {hint}"
            )
        why = "named in the account's kinds" if explicit else "watched because it is discovered"
        lines.append(
            Finding(
                account.name,
                f"kind {info.kind}",
                Verdict.FAIL if explicit else Verdict.WARN,
                f"{_resource(info)}{where}: {' and '.join(denied)} forbidden for "
                f"{user or 'the account user'} ({why}; it will not sync)",
                hint,
            )
        )
    total = len(answers)
    detail = f"{readable} of {total} watch targets may be listed and watched"
    if unchecked_watch:
        detail += (
            f" (the API server offers no SelfSubjectAccessReview: list was tried, watch of "
            f"{unchecked_watch} not checked)"
        )
    if total and not readable:
        verdict = Verdict.FAIL
        hint = f"grant list and watch to {user or 'the account user'} (see the kind lines)"
    elif lines and any(line.verdict is Verdict.FAIL for line in lines):
        verdict, hint = Verdict.FAIL, "see the kind lines below"
    elif lines or unchecked_watch:
        verdict, hint = Verdict.WARN, "see the kind lines below" if lines else ""
    else:
        verdict, hint = Verdict.OK, ""
    if not total:
        verdict = Verdict.FAIL
        detail = "the account's filters select no kind the API server serves"
        hint = f"check kubernetes.accounts[{index}].kinds / omitKinds / namespaces"
    return [Finding(account.name, "kinds", verdict, detail, hint), *lines]


def missing_kinds(
    account: agent.AccountConfig, index: int, served: Sequence[agent.KindInfo]
) -> list[Finding]:
    """A WARN for each kind the account names that the API server does not serve."""
    known = {info.kind.lower() for info in served}
    known_crds = {(info.kind.lower(), info.group.lower()) for info in served}
    lines = []
    for kind in account.kinds:
        if kind.lower() not in known:
            lines.append(
                Finding(
                    account.name,
                    f"kind {kind}",
                    Verdict.WARN,
                    f"{kind} is in the account's kinds but the API server serves no such kind "
                    "with list and watch",
                    f"check the spelling in kubernetes.accounts[{index}].kinds (singular kind "
                    "names, e.g. Deployment), or install its CRD",
                )
            )
    for crd in account.custom_resource_definitions:
        kind, _, group = crd.kind.partition(".")
        if (kind.lower(), group.lower()) not in known_crds:
            lines.append(
                Finding(
                    account.name,
                    f"kind {crd.kind}",
                    Verdict.WARN,
                    f"customResourceDefinitions names {crd.kind}, which the API server does not "
                    "serve (yet): it is watched once its CRD is installed",
                    f"install the CRD, or fix kubernetes.accounts[{index}]."
                    "customResourceDefinitions (Kind.group)",
                )
            )
    return lines
