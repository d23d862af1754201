"""Credential sources: exec plugins (run, cache, expiry, errors) and rotated token files."""

from __future__ import annotations

import json
import stat
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing

from agent import KubeCredentialError
from agent.kube._auth import Credential, ExecPlugin, TokenFile, credential_source
from agent.kube._kubeconfig import ClusterAccess, ExecConfig

V1 = "client.authentication.k8s.io/v1"
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)

PLUGIN = """#!{python}
import json, os, sys
from pathlib import Path
runs = Path(sys.argv[1])
count = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(count))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
seen = {{"info": info, "env": os.environ.get("MY_ENV")}}
Path(sys.argv[1] + ".info").write_text(json.dumps(seen))
mode = os.environ.get("MODE", "token")
if mode == "fail":
    print("no credentials for you", file=sys.stderr)
    sys.exit(3)
if mode == "garbage":
    print("hello")
    sys.exit(0)
status = {{"token": f"token-{{count}}"}}
if os.environ.get("EXPIRES"):
    status["expirationTimestamp"] = os.environ["EXPIRES"]
if mode == "cert":
    status = {{"clientCertificateData": "CERT", "clientKeyData": "KEY"}}
api = os.environ.get("API", info["apiVersion"])
print(json.dumps({{"apiVersion": api, "kind": "ExecCredential", "status": status}}))
"""


def _plugin(tmp_path: Path, **env: str) -> tuple[ExecConfig, Path]:
    script = tmp_path / "plugin"
    script.write_text(PLUGIN.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    runs = tmp_path / "runs"
    config = ExecConfig(
        api_version=V1,
        command=str(script),
        args=(str(runs),),
        env=(("MY_ENV", "from-kubeconfig"), *env.items()),
        provide_cluster_info=True,
    )
    return config, runs


async def test_the_plugin_runs_with_env_and_exec_info_and_is_cached(tmp_path: Path) -> None:
    config, runs = _plugin(tmp_path)
    plugin = ExecPlugin(config, cluster={"server": "https://h:1"}, environ={}, now=lambda: NOW)
    with trio.fail_after(30):
        first = await plugin.get()
        second = await plugin.get()
    assert first.token == "token-1"
    assert second is first
    assert plugin.runs == 1
    seen = json.loads((tmp_path / "runs.info").read_text())
    assert seen["env"] == "from-kubeconfig"
    assert seen["info"]["kind"] == "ExecCredential"
    assert seen["info"]["spec"]["interactive"] is False
    assert seen["info"]["spec"]["cluster"]["server"] == "https://h:1"
    assert runs.read_text() == "1"


async def test_concurrent_callers_share_one_run(tmp_path: Path) -> None:
    config, _ = _plugin(tmp_path)
    plugin = ExecPlugin(config, environ={}, now=lambda: NOW)
    tokens: list[str | None] = []

    async def get() -> None:
        tokens.append((await plugin.get()).token)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(get)
    assert tokens == ["token-1"] * 5
    assert plugin.runs == 1


async def test_an_expired_credential_is_fetched_again(tmp_path: Path) -> None:
    expires = NOW + timedelta(minutes=10)
    config, _ = _plugin(tmp_path, EXPIRES=expires.isoformat().replace("+00:00", "Z"))
    clock = [NOW]
    plugin = ExecPlugin(config, environ={}, now=lambda: clock[0])
    with trio.fail_after(30):
        first = await plugin.get()
        assert first.expires_at == expires
        clock[0] = NOW + timedelta(minutes=5)
        assert (await plugin.get()).token == "token-1"
        clock[0] = expires - timedelta(seconds=10)  # within the early-refresh margin
        assert (await plugin.get()).token == "token-2"
    assert plugin.runs == 2


async def test_a_refused_credential_is_fetched_again(tmp_path: Path) -> None:
    config, _ = _plugin(tmp_path)
    plugin = ExecPlugin(config, environ={}, now=lambda: NOW)
    with trio.fail_after(30):
        first = await plugin.get()
        plugin.refused(Credential(token="someone else's"))
        assert await plugin.get() is first
        plugin.refused(first)
        assert (await plugin.get()).token == "token-2"


async def test_a_certificate_credential(tmp_path: Path) -> None:
    config, _ = _plugin(tmp_path, MODE="cert")
    with trio.fail_after(30):
        credential = await ExecPlugin(config, environ={}).get()
    assert credential.client_cert_pem == b"CERT"
    assert credential.client_key_pem == b"KEY"
    assert credential.token is None


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"MODE": "fail"}, "exited with 3: no credentials for you"),
        ({"MODE": "garbage"}, "printed no ExecCredential JSON"),
        ({"API": "client.authentication.k8s.io/v1beta1"}, "expected 'client.authentication"),
        ({"EXPIRES": "next tuesday"}, "bad expirationTimestamp"),
    ],
)
async def test_plugin_failures_are_credential_errors(
    tmp_path: Path, env: dict[str, str], expected: str
) -> None:
    config, _ = _plugin(tmp_path, **env)
    with trio.fail_after(30), pytest.raises(KubeCredentialError, match=expected):
        await ExecPlugin(config, environ={}).get()


async def test_a_missing_plugin_shows_the_install_hint(tmp_path: Path) -> None:
    config = ExecConfig(V1, str(tmp_path / "nope"), install_hint="install it with brew")
    with trio.fail_after(30), pytest.raises(KubeCredentialError, match="install it with brew"):
        await ExecPlugin(config, environ={}).get()


async def test_a_token_file_is_re_read_when_rotated(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    source = TokenFile(str(path))
    with trio.fail_after(600):
        assert (await source.get()).token == "first"
        path.write_text("second")
        assert (await source.get()).token == "first"  # cached within the minute
        await trio.sleep(61)
        assert (await source.get()).token == "second"
        path.write_text("third")
        source.refused(Credential(token="second"))  # a 401: read now
        assert (await source.get()).token == "third"


async def test_an_empty_or_missing_token_file_is_a_credential_error(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("")
    with trio.fail_after(5):
        with pytest.raises(KubeCredentialError, match="is empty"):
            await TokenFile(str(tmp_path / "empty")).get()
        with pytest.raises(KubeCredentialError, match="cannot read the token file"):
            await TokenFile(str(tmp_path / "absent")).get()


async def test_a_plugin_that_needs_a_terminal_is_refused(tmp_path: Path) -> None:
    config = ExecConfig(V1, "/bin/true", interactive_mode="Always")
    with trio.fail_after(5), pytest.raises(KubeCredentialError, match="interactive terminal"):
        await ExecPlugin(config, environ={}).get()


async def test_a_token_file_wins_over_a_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file")
    access = ClusterAccess(server="https://h:1", token="inline", token_file=str(tmp_path / "token"))
    with trio.fail_after(5):
        assert (await credential_source(access).get()).token == "from-file"
