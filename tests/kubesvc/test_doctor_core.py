"""The doctor's sans-I/O core: facts and errors in, findings with verdicts and hints out, and
the table and JSON they are shown as. No network, no event loop."""

from __future__ import annotations

import json
import ssl
from datetime import UTC, datetime, timedelta

import agent
import wire
from kubesvc.doctor import SERVER, Finding, Report, Verdict, render_json, render_table
from kubesvc.doctor._judge import error_chain, expiry, jwt_claims, kubeconfig_facts, refused
from kubesvc.doctor._kinds import Access, kind_findings
from kubesvc.doctor._link_judge import mint_hint, probe_refused, token_findings

from .doctor_env import service_account_token

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def test_the_exit_status_follows_the_worst_verdict() -> None:
    ok = Finding("k1", "kinds", Verdict.OK, "fine")
    warn = Finding("k1", "credential", Verdict.WARN, "soon", "renew it")
    fail = Finding(SERVER, "server-reach", Verdict.FAIL, "down", "start it")
    assert Report.of([ok]).exit_code == 0
    assert Report.of([ok, warn]).exit_code == 0
    assert Report.of([ok, warn]).verdict is Verdict.WARN
    assert Report.of([ok, warn, fail]).exit_code == 1
    assert Report.of([]).verdict is Verdict.OK


def test_the_table_has_one_line_per_check_and_the_json_the_same_findings() -> None:
    report = Report.of(
        [
            Finding("k1", "kinds", Verdict.OK, "2 of 2"),
            Finding("k1", "kind Deployment", Verdict.FAIL, "forbidden\nfor agent", "grant it"),
        ]
    )
    lines = render_table(report).splitlines()
    assert lines[0].split() == ["VERDICT", "ACCOUNT", "CHECK", "DETAIL"]
    assert lines[1].split()[:3] == ["OK", "k1", "kinds"]
    assert lines[2].startswith("FAIL     k1       kind Deployment  forbidden for agent")
    assert lines[2].endswith("-> fix: grant it")
    assert (
        lines[-1] == "doctor: 1 FAIL, 0 WARN, 1 OK: something blocks syncing (see the FAIL lines)"
    )
    document = json.loads(render_json(report))
    assert document["exitCode"] == 1
    assert document["summary"] == {"OK": 1, "WARN": 0, "FAIL": 1}
    assert document["findings"][1] == {
        "account": "k1",
        "check": "kind Deployment",
        "verdict": "FAIL",
        "detail": "forbidden\nfor agent",
        "hint": "grant it",
    }


def test_expiry_fails_past_and_warns_soon_only_for_what_does_not_renew() -> None:
    past = expiry("k", "c", "token", NOW - timedelta(hours=2), NOW, renews=False, fix="renew")
    assert past.verdict is Verdict.FAIL
    assert past.detail == "token expired 2025-06-01T10:00:00Z (2 h ago)"
    assert past.hint == "renew"
    soon = NOW + timedelta(days=2)
    assert expiry("k", "c", "t", soon, NOW, renews=False, fix="x").verdict is Verdict.WARN
    assert expiry("k", "c", "t", soon, NOW, renews=True, fix="x").verdict is Verdict.OK
    assert expiry("k", "c", "t", None, NOW, renews=False, fix="x").verdict is Verdict.OK


def test_jwt_claims_are_read_and_other_tokens_are_not_jwts() -> None:
    claims = jwt_claims(service_account_token("system:serviceaccount:a:b", 1_700_000_000))
    assert claims == {
        "iss": "kubernetes/serviceaccount",
        "sub": "system:serviceaccount:a:b",
        "exp": 1_700_000_000,
    }
    assert jwt_claims("a-plain-random-token") is None
    assert jwt_claims("a.b.c") is None
    assert jwt_claims("a.W10.c") is None  # "[]": not an object


def test_kubeconfig_facts_name_the_context_cluster_user_and_ca_field() -> None:
    document = {
        "current-context": "dev",
        "contexts": [
            {"name": "dev", "context": {"cluster": "c-dev", "user": "u-dev"}},
            {"name": "prod", "context": {"cluster": "c-prod", "user": "u-prod"}},
        ],
        "clusters": [
            {"name": "c-dev", "cluster": {"certificate-authority-data": "eA=="}},
            {"name": "c-prod", "cluster": {"certificate-authority": "/etc/ca.crt"}},
        ],
    }
    dev = kubeconfig_facts(document, "kc.yaml", None)
    assert (dev.context, dev.cluster, dev.user) == ("dev", "c-dev", "u-dev")
    assert dev.ca_place() == "clusters[name=c-dev].cluster.certificate-authority-data in kc.yaml"
    prod = kubeconfig_facts(document, "kc.yaml", "prod")
    assert prod.ca_place() == (
        "clusters[name=c-prod].cluster.certificate-authority (/etc/ca.crt) in kc.yaml"
    )
    assert kubeconfig_facts(None, "kc.yaml", None).cluster == ""


def test_error_chains_reach_into_exception_groups() -> None:
    group = ExceptionGroup("all attempts", [ConnectionRefusedError(111, "refused")])
    outer = OSError("all attempts to connect to 127.0.0.1:1 failed")
    outer.__cause__ = group  # what trio.open_tcp_stream raises
    assert refused(outer)
    assert any(isinstance(e, ConnectionRefusedError) for e in error_chain(outer))
    verify = ssl.SSLCertVerificationError("certificate verify failed")
    wrapped = agent.KubeConnectionError("GET /version: cannot connect")
    wrapped.__cause__ = verify
    assert verify in error_chain(wrapped)
    assert not refused(wrapped)


def _target(kind: str, plural: str, group: str = "", namespace: str = "") -> agent.WatchTarget:
    info = agent.KindInfo(group, "v1", kind, plural, namespaced=True)
    return agent.WatchTarget(info, namespace)


def test_a_denied_kind_fails_when_named_and_warns_when_only_discovered() -> None:
    pods, secrets = _target("Pod", "pods"), _target("Secret", "secrets")
    answers = {pods: Access(True, True), secrets: Access(True, False)}
    named = agent.AccountConfig("k1", kinds=("Pod", "Secret"))
    summary, line = kind_findings(named, 2, answers, "system:serviceaccount:spin:agent")
    assert summary.verdict is Verdict.FAIL
    assert summary.detail == "1 of 2 watch targets may be listed and watched"
    assert line.check == "kind Secret"
    assert line.verdict is Verdict.FAIL
    assert "secrets cluster-wide: watch forbidden" in line.detail
    assert "--serviceaccount=spin:agent" in line.hint
    assert "--verb=get,watch --resource=secrets" in line.hint
    assert "kubernetes.accounts[2].omitKinds" in line.hint
    everything = agent.AccountConfig("k1")
    summary, line = kind_findings(everything, 0, answers, "agent")
    assert (summary.verdict, line.verdict) == (Verdict.WARN, Verdict.WARN)


def test_a_denied_kind_in_a_namespace_gets_a_role_and_no_review_api_is_a_warning() -> None:
    pods = _target("Deployment", "deployments", "apps", "team-a")
    summary, line = kind_findings(
        agent.AccountConfig("k1", kinds=("Deployment",), namespaces=("team-a",)),
        0,
        {pods: Access(False, None)},
        "agent",
    )
    assert summary.verdict is Verdict.FAIL
    assert "watch of 1 not checked" in summary.detail
    assert "kubectl -n team-a create role" in line.hint
    assert "rolebinding" in line.hint
    nothing = kind_findings(agent.AccountConfig("k1", kinds=("Nope",)), 0, {}, "agent")
    assert nothing[0].verdict is Verdict.FAIL


def test_the_token_names_the_accounts_it_allows() -> None:
    token = service_account_token("agent-a", (NOW + timedelta(days=30)).timestamp())
    findings = token_findings(token, ["k1"], renews=False, now=NOW)
    assert [f.check for f in findings] == ["server-token", "server-accounts"]
    assert findings[1].detail.startswith("the token has no 'accounts' claim")
    assert token_findings(None, ["k1"], renews=False, now=NOW)[0].verdict is Verdict.OK
    assert token_findings("opaque", ["k1"], renews=False, now=NOW)[0].verdict is Verdict.OK


def test_the_probe_answer_says_whether_the_server_accepts_the_agent() -> None:
    mint = mint_hint("agent-a", ["k1", "k2"])
    assert "--agent-id agent-a --accounts k1,k2" in mint
    accepted = probe_refused(
        "h:1",
        wire.Status.FAILED_PRECONDITION,
        f"protocol version 4294967295 is not supported; this server speaks {wire.PROTOCOL_VERSION}",
        has_token=True,
        tls=True,
        mint=mint,
    )
    assert accepted.verdict is Verdict.OK
    older = probe_refused(
        "h:1",
        wire.Status.FAILED_PRECONDITION,
        "protocol version 4294967295 is not supported; this server speaks 999",
        has_token=True,
        tls=True,
        mint=mint,
    )
    assert older.verdict is Verdict.FAIL
    assert "speaks protocol 999" in older.detail
    expired = probe_refused(
        "h:1",
        wire.Status.UNAUTHENTICATED,
        "bearer token expired",
        has_token=True,
        tls=True,
        mint=mint,
    )
    assert (expired.verdict, expired.hint) == (Verdict.FAIL, mint)
    missing = probe_refused(
        "h:1",
        wire.Status.UNAUTHENTICATED,
        "no bearer token: the authorization metadata is missing",
        has_token=False,
        tls=False,
        mint=mint,
    )
    assert missing.hint.startswith("set clouddriver.auth.token")
    subject = probe_refused(
        "h:1",
        wire.Status.PERMISSION_DENIED,
        "client certificate subject 'CN=x' matches no allowed filter",
        has_token=True,
        tls=True,
        mint=mint,
    )
    assert "subjectFilters" in subject.hint
    draining = probe_refused(
        "h:1", wire.Status.UNAVAILABLE, "draining", has_token=True, tls=True, mint=mint
    )
    assert draining.verdict is Verdict.WARN
