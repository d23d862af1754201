"""Issue 18, ``kubesvc doctor``: each planted problem is found with a hint that fixes it, and a
healthy setup is all OK. kubesim serves over TLS on loopback; the server is a real ``kubesvc
server`` process with mTLS and JWT; the doctor runs as ``kubesvc doctor`` where its exit status
is the point, and in this process where the findings are."""

from __future__ import annotations

import base64
import json
import socket
import sys
import time
from pathlib import Path

import trio

from kubesim._certs import CertificateAuthority
from kubesvc.doctor import SERVER, Verdict

from .doctor_env import (
    account,
    agent_token,
    clouddriver,
    doctor,
    doctor_process,
    expired_at,
    only,
    open_kubesim,
    open_kubesvc_server,
    service_account_token,
    verdicts,
    write_config,
)


async def test_a_healthy_setup_is_all_ok_and_exits_0(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with open_kubesim() as kube, trio.open_nursery() as nursery:
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig.yaml", user="agent")
            async with open_kubesvc_server(nursery, tmp_path) as (certs, port):
                config = write_config(
                    tmp_path,
                    [account("k1", kubeconfig, kinds=["ConfigMap", "Deployment"])],
                    grpc=f"127.0.0.1:{port}",
                    clouddriver=clouddriver(certs, agent_token(["k1"])),
                )
                code, out, err = await doctor_process(tmp_path, config, "--json")
            nursery.cancel_scope.cancel()
    document = json.loads(out)
    assert code == 0, out + err
    assert document["verdict"] == "OK"
    assert document["exitCode"] == 0
    checks = {(f["account"], f["check"]): f for f in document["findings"]}
    assert {f["verdict"] for f in document["findings"]} == {"OK"}, out
    for check in ("kubeconfig", "credential", "api-server", "identity", "discovery", "kinds"):
        assert ("k1", check) in checks, check
    assert "2 of 2 watch targets" in checks[("k1", "kinds")]["detail"]
    for check in ("server-reach", "server-tls", "server-token", "server-accounts", "server-auth"):
        assert (SERVER, check) in checks, check
    assert "accepts the agent" in checks[(SERVER, "server-auth")]["detail"]
    assert "allows the accounts k1" in checks[(SERVER, "server-accounts")]["detail"]


async def test_a_bad_agent_token_is_refused_by_the_real_server(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with open_kubesim() as kube, trio.open_nursery() as nursery:
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig.yaml", user="agent")
            async with open_kubesvc_server(nursery, tmp_path) as (certs, port):
                forged = agent_token(["k1"], secret="not-the-servers-secret-" + "x" * 32)
                config = write_config(
                    tmp_path,
                    [account("k1", kubeconfig, kinds=["ConfigMap"])],
                    grpc=f"127.0.0.1:{port}",
                    clouddriver=clouddriver(certs, forged),
                )
                code, out, _ = await doctor_process(tmp_path, config)
                # A valid token that leaves an account out: the server would refuse the
                # agent's accounts; the doctor says so before the agent tries.
                narrow = write_config(
                    tmp_path,
                    [account("k1", kubeconfig, kinds=["ConfigMap"])],
                    grpc=f"127.0.0.1:{port}",
                    clouddriver=clouddriver(certs, agent_token(["other"])),
                    name="narrow.yaml",
                )
                narrow_code, narrow_out, _ = await doctor_process(tmp_path, narrow, "--json")
            nursery.cancel_scope.cancel()
    assert code == 1, out
    line = next(row for row in out.splitlines() if "server-auth" in row)
    assert line.startswith("FAIL"), out
    assert "UNAUTHENTICATED" in line
    assert "signature does not verify" in line
    assert "fix: mint a token with the server's JWT secret" in line
    assert "kubesvc token" in line
    assert out.rstrip().splitlines()[-1].startswith("doctor: 1 FAIL")
    assert narrow_code == 1
    findings = {(f["account"], f["check"]): f for f in json.loads(narrow_out)["findings"]}
    refused = findings[("k1", "server-token")]
    assert refused["verdict"] == "FAIL"
    assert "does not allow account k1" in refused["detail"]
    assert "--accounts other,k1" in refused["hint"]
    assert findings[(SERVER, "server-auth")]["verdict"] == "OK"  # the token itself is valid


async def test_a_kind_whose_grants_are_revoked_is_found_with_the_rbac_to_grant(
    tmp_path: Path,
) -> None:
    with trio.fail_after(30):
        async with open_kubesim() as kube:
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig.yaml", user="agent")
            named = write_config(
                tmp_path, [account("k1", kubeconfig, kinds=["ConfigMap", "Deployment"])]
            )
            before = await doctor(named, server=False)
            kube.set_grants("agent", {"*": ["get", "list", "watch"], "deployments.apps": ["get"]})
            after = await doctor(named, server=False)
            everything = write_config(tmp_path, [account("k1", kubeconfig)], name="all.yaml")
            implicit = await doctor(everything, server=False)
    assert before.exit_code == 0
    assert only(before, "k1", "kinds").verdict is Verdict.OK
    assert after.exit_code == 1
    assert only(after, "k1", "kinds").verdict is Verdict.FAIL
    denied = only(after, "k1", "kind Deployment")
    assert denied.verdict is Verdict.FAIL
    assert "deployments.apps cluster-wide: list and watch forbidden for agent" in denied.detail
    assert "kubectl create clusterrole" in denied.hint
    assert "--verb=get,list,watch --resource=deployments.apps" in denied.hint
    assert "--user=agent" in denied.hint
    assert "kubernetes.accounts[0].omitKinds" in denied.hint
    assert not [f for f in after.findings if f.check == "kind ConfigMap"]
    # Watching everything it may see, the agent syncs the rest: a WARN, and exit 0.
    assert only(implicit, "k1", "kind Deployment").verdict is Verdict.WARN
    assert implicit.exit_code == 0


async def test_a_wrong_ca_is_named_with_the_field_to_fix(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_kubesim() as kube:
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig.yaml", user="agent")
            other = CertificateAuthority("some-other-ca")
            text = kubeconfig.read_text()
            assert kube.ca_pem is not None
            text = text.replace(
                base64.b64encode(kube.ca_pem).decode(), base64.b64encode(other.cert_pem).decode()
            )
            kubeconfig.write_text(text)
            report = await doctor(write_config(tmp_path, [account("k1", kubeconfig)]), server=False)
    line = only(report, "k1", "api-server")
    assert line.verdict is Verdict.FAIL
    assert report.exit_code == 1
    assert "wrong CA" in line.detail
    assert "issued by CN=kubesim-ca" in line.detail
    assert "CN=some-other-ca" in line.detail
    assert "clusters[name=kubesim].cluster.certificate-authority-data" in line.hint
    assert str(kubeconfig) in line.hint
    assert "(CN=kubesim-ca)" in line.hint


async def test_an_expired_token_is_read_and_refused(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_kubesim() as kube:
            token = service_account_token("system:serviceaccount:kubesvc:agent", expired_at())
            kube.add_user(
                "expired", {"*": ["get", "list", "watch"]}, token=token, expires_at=expired_at()
            )
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig.yaml", user="expired")
            report = await doctor(write_config(tmp_path, [account("k1", kubeconfig)]), server=False)
    credential = only(report, "k1", "credential")
    assert credential.verdict is Verdict.FAIL
    assert (
        "bearer token (JWT, sub system:serviceaccount:kubesvc:agent) expired" in credential.detail
    )
    assert "ago)" in credential.detail
    assert "users[name=expired].user.token" in credential.hint
    assert "kubectl create token" in credential.hint
    refused = only(report, "k1", "api-server")
    assert refused.verdict is Verdict.FAIL
    assert "401 Unauthorized" in refused.detail  # kubesim refused it for real
    assert "expired" in refused.hint
    assert report.exit_code == 1


async def test_a_token_that_expires_soon_is_a_warning(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_kubesim() as kube:
            soon = time.time() + 3 * 3600
            token = service_account_token("agent", soon)
            kube.add_user("soon", {"*": ["get", "list", "watch"]}, token=token, expires_at=soon)
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig.yaml", user="soon")
            report = await doctor(write_config(tmp_path, [account("k1", kubeconfig)]), server=False)
    credential = only(report, "k1", "credential")
    assert credential.verdict is Verdict.WARN
    assert "is not renewed by itself" in credential.detail
    assert report.exit_code == 0


async def test_exec_plugin_and_client_certificate_credentials_and_their_expiry(
    tmp_path: Path,
) -> None:
    with trio.fail_after(30):
        async with open_kubesim() as kube:
            token = kube.users["agent"].token
            plugin = tmp_path / "plugin.py"
            plugin.write_text(
                "import json, sys\n"
                "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
                "'kind': 'ExecCredential', 'status': {'token': sys.argv[1], "
                "'expirationTimestamp': '2999-01-01T00:00:00Z'}}))\n"
            )
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig.yaml", user="agent")
            text = kubeconfig.read_text().replace(
                f"token: {token}",
                "exec: {apiVersion: client.authentication.k8s.io/v1, command: "
                f"{sys.executable}, args: [{plugin}, {token}]}}",
            )
            kubeconfig.write_text(text)
            broken = tmp_path / "broken.yaml"
            broken.write_text(text.replace(str(plugin), str(tmp_path / "missing.py")))
            certified = kube.kubeconfig(tmp_path / "cert.yaml", user="agent", auth="cert")
            report = await doctor(
                write_config(
                    tmp_path,
                    [account("k1", kubeconfig), account("k2", broken), account("k3", certified)],
                ),
                server=False,
            )
    good = only(report, "k1", "credential")
    assert good.verdict is Verdict.OK, good
    assert "valid until 2999-01-01T00:00:00Z" in good.detail
    assert only(report, "k1", "api-server").verdict is Verdict.OK
    failed = only(report, "k2", "credential")
    assert failed.verdict is Verdict.FAIL
    assert "exited with 2" in failed.detail
    assert "by hand" in failed.hint
    assert "users[name=agent].user.exec" in failed.hint
    certificate = only(report, "k3", "credential")
    assert certificate.verdict is Verdict.OK
    assert "client certificate CN=agent (issued by CN=kubesim-ca) valid until" in certificate.detail
    assert only(report, "k3", "identity").detail == "authenticated as agent"


async def test_an_unreadable_kubeconfig_is_a_failure_with_the_path_to_fix(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder.yaml"
    folder.mkdir()  # the tests run as root here: a folder is what even root cannot read
    config = write_config(
        tmp_path,
        [
            account("k1", folder),
            account("k2", tmp_path / "missing.yaml"),
            account("k3", tmp_path / "bad.yaml", context="prod"),
        ],
    )
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: [{name: dev, context: "
        "{cluster: c}}]\nusers: []\n"
    )
    with trio.fail_after(60):
        code, out, err = await doctor_process(tmp_path, config, "--no-server")
    assert code == 1, out + err
    lines = {row.split()[1]: row for row in out.splitlines() if " kubeconfig " in row}
    assert lines["k1"].startswith("FAIL")
    assert "cannot read the kubeconfig" in lines["k1"]
    assert "fix: make" in lines["k1"]
    assert "a file the agent's user can read" in lines["k1"]
    assert "does not exist" in lines["k2"]
    assert "fix: fix kubernetes.accounts[1].kubeConfigFile" in lines["k2"]
    assert "no context 'prod' (contexts: dev)" in lines["k3"]
    assert "fix: set kubernetes.accounts[2].context" in lines["k3"]


async def test_an_unreachable_server_is_a_failure(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port the OS gave and nobody listens on now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with trio.fail_after(30):
        async with open_kubesim() as kube:
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig.yaml", user="agent")
            report = await doctor(
                write_config(
                    tmp_path,
                    [account("k1", kubeconfig, kinds=["ConfigMap"])],
                    grpc=f"127.0.0.1:{port}",
                )
            )
    line = only(report, SERVER, "server-reach")
    assert line.verdict is Verdict.FAIL
    assert f"127.0.0.1:{port}: nothing listens there" in line.detail
    assert f"check clouddriver.grpc (127.0.0.1:{port})" in line.hint
    assert report.exit_code == 1
    assert verdicts(report, "k1")["kinds"] is Verdict.OK


async def test_a_config_the_agent_refuses_is_one_failure(tmp_path: Path) -> None:
    config = tmp_path / "kubesvc.yaml"
    config.write_text("kubernetes:\n  accounts:\n    - kinds: [Pod]\n")
    with trio.fail_after(30):
        report = await doctor(config)
    assert report.exit_code == 1
    [line] = report.findings
    assert line.check == "config"
    assert "kubernetes.accounts[0]" in line.detail


async def test_a_ca_that_is_not_a_certificate_is_a_failure(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9', "
        "certificate-authority-data: bm90IGEgY2VydGlmaWNhdGU=}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    with trio.fail_after(30):
        report = await doctor(write_config(tmp_path, [account("k1", kubeconfig)]), server=False)
    line = only(report, "k1", "api-server")
    assert line.verdict is Verdict.FAIL
    assert "not valid PEM" in line.detail
    assert "clusters[name=c].cluster.certificate-authority-data" in line.hint
