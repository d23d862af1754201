"""The account checks' thin trio runner: the agent's own kubeconfig loader, credential sources
and Kubernetes client, asked what the agent will ask, each step under a deadline.

For one account, in order (a step that fails ends the account's checks when the next ones
cannot run without it): the kubeconfig (``agent.access_for_account``, the loader the agent
uses, so the same errors); the credential (``agent.credential_source``: the token file is
read, the exec plugin run) and when it ends; ``GET /version`` through ``agent.KubeClient``
(TLS verified against the configured CA; on a verification failure the certificate the
server presents is fetched without verification, to say whose it is); who the API server
says we are (SelfSubjectReview, where served); discovery and the account's filters
(``agent.discover``, ``agent.select_targets``); and a SelfSubjectAccessReview per watch target
for ``list`` and ``watch``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio
import yaml

import agent

from ._findings import Finding, Verdict
from ._judge import CertFacts, KubeconfigFacts, cert_facts, kubeconfig_facts
from ._kinds import Access, kind_findings, missing_kinds
from ._kube_judge import (
    api_server_failure,
    credential_findings,
    describe_credential,
    kubeconfig_failure,
)
from ._probe import handshake

__all__ = ["check_account"]

#: Access reviews in flight at once per account (an API server has its own fairness limits).
REVIEWS_AT_ONCE = 16
_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
_WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
_JSON = {"content-type": "application/json"}


def _read_facts(account: agent.AccountConfig, environ: Mapping[str, str]) -> KubeconfigFacts:
    """Names in the account's kubeconfig for the details and hints (blocking; best effort:
    the agent's loader already accepted the file)."""
    if account.service_account:
        return KubeconfigFacts("the pod's service account")
    if account.kubeconfig_contents is not None:
        text: str | None = account.kubeconfig_contents
        file = f"account {account.name} kubeconfigContents"
    else:
        file = account.kube_config_file or environ.get("KUBECONFIG") or "~/.kube/config"
        path = account.kube_config_file or (
            None if environ.get("KUBECONFIG") else os.path.expanduser("~/.kube/config")
        )
        try:
            text = Path(path).read_text(encoding="utf-8") if path else None
        except OSError:
            text = None
    if text is None:
        return KubeconfigFacts(file, context=account.context or "")
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        document = None
    return kubeconfig_facts(document, file, account.context)


async def check_account(
    index: int,
    account: agent.AccountConfig,
    kube: agent.KubernetesConfig,
    *,
    now: datetime,
    seconds: float,
    environ: Mapping[str, str] = os.environ,
) -> list[Finding]:
    """Every check of one account, in order; never raises for what it checks."""
    name = account.name
    try:
        access = await trio.to_thread.run_sync(
            functools.partial(agent.access_for_account, account, environ=environ)
        )
    except agent.ConfigError as exc:
        return [kubeconfig_failure(account, index, exc)]
    facts = await trio.to_thread.run_sync(_read_facts, account, environ)
    context = f"context {facts.context}" if facts.context else "its context"
    names = ", ".join(
        f"{label} {value}"
        for label, value in (("cluster", facts.cluster), ("user", facts.user))
        if value
    )
    findings = [
        Finding(
            name,
            "kubeconfig",
            Verdict.OK,
            f"{facts.file}: {context}"
            + (f" ({names})" if names else "")
            + f" -> {access.server}, {describe_credential(access)}",
        )
    ]
    source = agent.credential_source(access, environ=environ)
    try:
        with trio.fail_after(max(seconds, 60.0)):  # an exec plugin may call a cloud API
            credential = await source.get()
    except (agent.KubeCredentialError, trio.TooSlowError) as exc:
        hint = ""
        if access.exec is not None:
            hint = access.exec.install_hint.strip() or (
                f"run `{' '.join([access.exec.command, *access.exec.args])}` by hand and fix "
                f"what it says (users[name={facts.user}].user.exec in {facts.file})"
            )
        elif access.token_file:
            hint = f"see what should write {access.token_file}"
        findings.append(Finding(name, "credential", Verdict.FAIL, str(exc) or "timed out", hint))
        return findings
    credential_lines = credential_findings(name, access, credential, facts, now)
    findings += credential_lines
    expired = any(f.verdict is Verdict.FAIL and "expired" in f.detail for f in credential_lines)
    findings += await _ask_cluster(index, account, kube, access, facts, expired, seconds, environ)
    return findings


async def _peer(access: agent.ClusterAccess, seconds: float) -> CertFacts | None:
    """The certificate the API server presents, unverified (None when it cannot be had)."""
    parts = urlsplit(access.server)
    with trio.move_on_after(seconds):
        try:
            shake = await handshake(
                parts.hostname or "", parts.port or 443, access.tls_server_name or parts.hostname
            )
        except (OSError, trio.BrokenResourceError):
            return None
        found = cert_facts(shake.der or b"")
        return found[0] if found else None
    return None


async def _ask_cluster(
    index: int,
    account: agent.AccountConfig,
    kube: agent.KubernetesConfig,
    access: agent.ClusterAccess,
    facts: KubeconfigFacts,
    expired: bool,
    seconds: float,
    environ: Mapping[str, str],
) -> list[Finding]:
    name = account.name
    # No retries: the doctor reports the first failure, with its cause, at once.
    retries = dataclasses.replace(kube.retries, enabled=False)
    findings: list[Finding] = []
    try:
        client = agent.KubeClient(
            access,
            retries=retries,
            timeout_seconds=seconds,
            no_proxy=account.no_proxy or kube.no_proxy,
            environ=environ,
            account=name,
        )
    except agent.KubeError as exc:  # a CA or client certificate that does not load
        return [
            Finding(
                name,
                "api-server",
                Verdict.FAIL,
                str(exc),
                f"fix the CA in {facts.ca_place()}, or the user's client-certificate-data / "
                "client-key-data, or the cluster's proxy-url",
            )
        ]
    async with client:
        try:
            identity = await client.identity()
        except agent.KubeError as exc:
            peer = await _peer(access, seconds) if access.server.startswith("https") else None
            findings.append(api_server_failure(name, exc, access, facts, peer, expired, seconds))
            return findings
        version = identity.version.get("gitVersion") or "unknown version"
        if access.server.startswith("https"):
            trust = (
                "not verified (insecure-skip-tls-verify)"
                if access.insecure_skip_tls_verify
                else ("verified by " + (facts.ca_place() if access.ca_pem else "the system's CAs"))
            )
            tls = f"; certificate sha256 {identity.cert_fingerprint[:16]}..., {trust}"
        else:
            tls = "; plain http (no TLS)"
        verdict = Verdict.WARN if access.insecure_skip_tls_verify else Verdict.OK
        hint = (
            f"set the cluster's CA in {facts.ca_place()} and drop insecure-skip-tls-verify / "
            f"kubernetes.accounts[{index}].insecure"
            if verdict is Verdict.WARN
            else ""
        )
        findings.append(
            Finding(name, "api-server", verdict, f"{access.server} answers: {version}{tls}", hint)
        )
        user = await _whoami(client)
        if user:
            findings.append(Finding(name, "identity", Verdict.OK, f"authenticated as {user}"))
        try:
            discovered = await agent.discover(client)
        except (agent.KubeError, agent.WatchDecodeError) as exc:
            findings.append(
                Finding(
                    name,
                    "discovery",
                    Verdict.FAIL,
                    f"cannot read /api and /apis: {exc}",
                    "allow get on the non-resource URLs /api and /apis (system:discovery)",
                )
            )
            return findings
        targets = agent.select_targets(discovered.kinds, agent.KindFilter.from_account(account))
        findings.append(
            Finding(
                name,
                "discovery",
                Verdict.WARN if discovered.failed else Verdict.OK,
                f"{len(discovered.kinds)} kinds served with list and watch; the account's "
                f"filters select {len(targets)} watch targets"
                + "".join(f"; {path} unreadable: {why}" for path, why in discovered.failed),
                "an aggregated API (e.g. metrics-server) that does not answer: fix or remove "
                "its APIService"
                if discovered.failed
                else "",
            )
        )
        findings += missing_kinds(account, index, discovered.kinds)
        try:
            answers = await _reviews(client, targets)
        except (agent.KubeError, ValueError) as exc:
            findings.append(
                Finding(
                    name, "kinds", Verdict.FAIL, f"could not ask which kinds may be read: {exc}"
                )
            )
            return findings
        findings += kind_findings(account, index, answers, user)
    return findings


async def _post(client: agent.KubeClient, path: str, body: dict[str, Any]) -> agent.KubeReply:
    return await client.request("POST", path, headers=_JSON, content=json.dumps(body).encode())


async def _whoami(client: agent.KubeClient) -> str:
    """The user name the API server sees (SelfSubjectReview), or "" where not served."""
    try:
        reply = await _post(
            client, _WHOAMI, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
        if reply.status_code != 201:
            return ""
        info = reply.json().get("status", {}).get("userInfo", {})
        return str(info.get("username") or "")
    except (agent.KubeError, ValueError, AttributeError):
        return ""


async def _reviews(
    client: agent.KubeClient, targets: list[agent.WatchTarget]
) -> dict[agent.WatchTarget, Access]:
    """``list`` and ``watch`` per target: SelfSubjectAccessReviews, or, where the API server
    offers none, a list of one object (watch then stays unchecked)."""
    answers: dict[agent.WatchTarget, Access] = {}
    limiter = trio.CapacityLimiter(REVIEWS_AT_ONCE)
    served = True

    async def may(target: agent.WatchTarget, verb: str) -> bool | None:
        nonlocal served
        info = target.kind
        attributes = {"verb": verb, "group": info.group, "resource": info.plural}
        if target.namespace:
            attributes["namespace"] = target.namespace
        if served:
            reply = await _post(
                client,
                _ACCESS_REVIEWS,
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": attributes},
                },
            )
            if reply.status_code == 201:
                review = reply.json()
                status = review.get("status") if isinstance(review, dict) else None
                if not isinstance(status, dict):
                    raise ValueError(f"not a SelfSubjectAccessReview: {reply.content[:200]!r}")
                return status.get("allowed") is True
            served = False  # 404 (or refused): ask by trying instead
        if verb == "watch":
            return None
        reply = await client.request("GET", target.path, params={"limit": "1"})
        return reply.status_code != 403

    async def review(target: agent.WatchTarget) -> None:
        async with limiter:
            listed = await may(target, "list")
            watched = await may(target, "watch")
        answers[target] = Access(bool(listed), watched)

    async with trio.open_nursery() as nursery:
        for target in targets:
            nursery.start_soon(review, target)
    return {target: answers[target] for target in targets}  # discovery's order
