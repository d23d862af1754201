"""The Kubernetes client against a real HTTPS server on loopback: TLS, auth, HTTP/2, errors."""

from __future__ import annotations

import hashlib
import json
import stat
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from agent import (
    KubeClosedError,
    KubeConnectionError,
    KubeForbiddenError,
    KubeGoneError,
    KubeServerError,
    KubeStatusError,
    KubeTimeoutError,
    KubeTooManyRequestsError,
)
from agent.config._schema import RetriesConfig
from agent.kube._client import KubeClient
from agent.kube._kubeconfig import ClusterAccess, ExecConfig

from ._kube_edge import ApiServer, Pki, Reply, Seen, make_pki, serve_api, status_body

NO_RETRIES = RetriesConfig(enabled=False)
FAST_RETRIES = RetriesConfig(back_off_ms=10)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


def _access(url: str, pki: Pki | None, **changes: object) -> ClusterAccess:
    access = ClusterAccess(server=url, ca_pem=pki.ca_pem if pki else None, token="t0k")
    return replace(access, **changes)  # type: ignore[arg-type]


async def test_http2_carries_every_request_on_one_connection(pki: Pki) -> None:
    servers: list[ApiServer] = []

    async def all_at_once(seen: Seen) -> Reply:
        await servers[0].wait_seen(20)  # every stream is open at the same time
        return 200, {}, b'{"gitVersion": "v1.31.0"}'

    with trio.fail_after(20):
        async with (
            serve_api(all_at_once, pki=pki) as server,
            KubeClient(_access(server.url, pki)) as client,
            trio.open_nursery() as nursery,
        ):
            servers.append(server)
            for _ in range(20):
                nursery.start_soon(client.get_json, "/version")
    assert len(server.seen) == 20
    assert {seen.http_version for seen in server.seen} == {"2"}
    assert len({seen.client_port for seen in server.seen}) == 1
    assert server.seen[0].headers["authorization"] == "Bearer t0k"


async def test_http1_is_the_fallback_when_the_server_has_no_h2(pki: Pki) -> None:
    with trio.fail_after(20):
        async with (
            serve_api(pki=pki, http2=False) as server,
            KubeClient(_access(server.url, pki)) as client,
        ):
            assert (await client.get_json("/version"))["gitVersion"] == "v1.31.0"
            async with client.stream("GET", "/version") as response:
                assert response.http_version == "HTTP/1.1"
    assert server.seen[0].http_version == "1.1"


async def test_plain_http_works(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with serve_api() as server, KubeClient(_access(server.url, None)) as client:
            identity = await client.identity()
    assert identity.cert_fingerprint == ""
    assert identity.version["minor"] == "31"


async def test_identity_is_host_fingerprint_and_version(pki: Pki) -> None:
    with trio.fail_after(20):
        async with serve_api(pki=pki) as server, KubeClient(_access(server.url, pki)) as client:
            identity = await client.identity()
    der = x509.load_pem_x509_certificate(pki.server_cert_pem).public_bytes(Encoding.DER)
    assert identity.cert_fingerprint == hashlib.sha256(der).hexdigest()
    assert identity.host == f"127.0.0.1:{server.port}"
    assert identity.version["gitVersion"] == "v1.31.0"


async def test_client_certificates_from_the_kubeconfig(pki: Pki) -> None:
    with trio.fail_after(20):
        async with serve_api(pki=pki, require_client_cert=True) as server:
            certified = _access(
                server.url,
                pki,
                token=None,
                client_cert_pem=pki.client_cert_pem,
                client_key_pem=pki.client_key_pem,
            )
            async with KubeClient(certified) as client:
                assert (await client.get_json("/version"))["major"] == "1"
            async with KubeClient(_access(server.url, pki), retries=NO_RETRIES) as client:
                with pytest.raises(KubeConnectionError):
                    await client.get_json("/version")
    assert "authorization" not in server.seen[0].headers


async def test_an_unknown_ca_fails_and_insecure_skip_verify_connects(
    pki: Pki, tmp_path: Path
) -> None:
    (tmp_path / "other").mkdir()
    other = make_pki(tmp_path / "other")
    with trio.fail_after(20):
        async with serve_api(pki=pki) as server:
            async with KubeClient(_access(server.url, other), retries=NO_RETRIES) as client:
                with pytest.raises(KubeConnectionError, match="CERTIFICATE_VERIFY_FAILED") as info:
                    await client.get_json("/version")
                assert isinstance(info.value.__cause__, Exception)
            insecure = _access(server.url, None, insecure_skip_tls_verify=True)
            async with KubeClient(insecure) as client:
                assert (await client.get_json("/version"))["major"] == "1"


async def test_tls_server_name_is_the_name_checked(pki: Pki) -> None:
    with trio.fail_after(20):
        async with serve_api(pki=pki) as server:
            wrong = _access(server.url, pki, tls_server_name="wrong.example")
            async with KubeClient(wrong, retries=NO_RETRIES) as client:
                with pytest.raises(KubeConnectionError, match=r"wrong\.example"):
                    await client.get_json("/version")
            right = _access(server.url, pki, tls_server_name="localhost")
            async with KubeClient(right) as client:
                assert (await client.get_json("/version"))["major"] == "1"


@pytest.mark.parametrize(
    ("code", "reason", "error"),
    [
        (403, "Forbidden", KubeForbiddenError),
        (410, "Expired", KubeGoneError),
        (429, "TooManyRequests", KubeTooManyRequestsError),
        (500, "InternalError", KubeServerError),
        (422, "Invalid", KubeStatusError),
    ],
)
async def test_a_status_answer_becomes_our_error_with_the_message_kept(
    code: int, reason: str, error: type[KubeStatusError]
) -> None:
    async def refuse(seen: Seen) -> Reply:
        return code, {"Retry-After": "7"}, status_body(code, reason, f"no {seen.path} for you")

    with trio.fail_after(20):
        async with (
            serve_api(refuse) as server,
            KubeClient(_access(server.url, None), retries=NO_RETRIES) as client,
        ):
            response = await client.request("GET", "/api/v1/secrets")
            assert response.status_code == code
            with pytest.raises(error) as info:
                response.raise_for_status()
            async with client.stream("GET", "/api/v1/secrets") as stream:
                with pytest.raises(error):
                    await stream.raise_for_status()
    assert info.value.code == code
    assert info.value.reason == reason
    assert info.value.message == "no /api/v1/secrets for you"
    assert info.value.retry_after == 7.0
    assert info.value.status is not None
    assert str(info.value) == f"GET /api/v1/secrets: {code} {reason}: no /api/v1/secrets for you"


async def test_a_non_status_error_body_is_kept_as_the_message() -> None:
    async def broken(seen: Seen) -> Reply:
        return 502, {}, b"<html>bad gateway</html>"

    with trio.fail_after(20):
        async with (
            serve_api(broken) as server,
            KubeClient(_access(server.url, None), retries=NO_RETRIES) as client,
        ):
            with pytest.raises(KubeServerError, match="bad gateway") as info:
                await client.get_json("/version")
    assert info.value.status is None


async def test_streams_give_chunks_as_they_arrive() -> None:
    lines = [json.dumps({"type": "ADDED", "n": n}).encode() + b"\n" for n in range(3)]

    async def watch(seen: Seen) -> Reply:
        return 200, {}, lines

    with trio.fail_after(20):
        async with serve_api(watch) as server, KubeClient(_access(server.url, None)) as client:
            params = {"watch": "1", "resourceVersion": "5"}
            async with client.stream("GET", "/api/v1/pods", params=params) as response:
                assert response.status_code == 200
                body = b""
                while chunk := await response.receive_some():
                    body += chunk
    assert body == b"".join(lines)
    assert server.seen[0].query == "watch=1&resourceVersion=5"


async def test_a_body_cut_by_the_peer_is_a_connection_error() -> None:
    async def half_answer(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
        await stream.aclose()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_tcp, half_answer, 0, host="127.0.0.1")
            )
            port = listeners[0].socket.getsockname()[1]
            async with (
                KubeClient(_access(f"http://127.0.0.1:{port}", None)) as client,
                client.stream("GET", "/api/v1/pods") as response,
            ):
                assert await response.receive_some() == b"0123456789"
                with pytest.raises(KubeConnectionError, match="RemoteProtocolError"):
                    await response.receive_some()
            nursery.cancel_scope.cancel()


async def test_a_refused_connection_is_a_connection_error() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    with trio.fail_after(20):
        async with KubeClient(_access(f"http://127.0.0.1:{port}", None), retries=NO_RETRIES) as c:
            with pytest.raises(KubeConnectionError, match="ConnectError"):
                await c.request("GET", "/version")


async def test_a_closed_client_says_so() -> None:
    with trio.fail_after(20):
        async with serve_api() as server:
            client = KubeClient(_access(server.url, None))
            await client.aclose()
            with pytest.raises(KubeClosedError):
                await client.request("GET", "/version")
            with pytest.raises(KubeClosedError):
                async with client.stream("GET", "/version"):
                    pass


async def test_timeout_seconds_bounds_a_request() -> None:
    async def stall(seen: Seen) -> Reply:
        await trio.sleep(30)
        return 200, {}, b"{}"

    with trio.fail_after(20):
        async with serve_api(stall) as server:
            access = _access(server.url, None)
            async with KubeClient(access, timeout_seconds=0.5, retries=NO_RETRIES) as client:
                with pytest.raises(KubeTimeoutError, match="timeout"):
                    await client.request("GET", "/api/v1/pods")
            # "timeout" is a retryable error by default: retried maxRetries times. (0.5 s, not
            # less: on a loaded machine a shorter timeout can expire before the server sees it.)
            async with KubeClient(access, timeout_seconds=0.5, retries=FAST_RETRIES) as client:
                with pytest.raises(KubeTimeoutError):
                    await client.request("GET", "/api/v1/pods")
    assert len(server.seen) == 1 + 1 + 3


async def test_429_is_retried_after_the_servers_retry_after() -> None:
    answers = [429, 429, 200]

    async def throttle(seen: Seen) -> Reply:
        code = answers.pop(0)
        if code == 429:
            return 429, {"Retry-After": "0"}, status_body(429, "TooManyRequests", "slow down")
        return 200, {}, b'{"ok": true}'

    with trio.fail_after(20):
        async with (
            serve_api(throttle) as server,
            KubeClient(_access(server.url, None), retries=FAST_RETRIES) as client,
        ):
            assert await client.get_json("/api/v1/pods") == {"ok": True}
    assert len(server.seen) == 3


async def test_5xx_is_retried_for_reads_only_and_only_when_configured() -> None:
    async def fail(seen: Seen) -> Reply:
        return 503, {}, status_body(503, "ServiceUnavailable", "etcd is sad")

    any_error = RetriesConfig(back_off_ms=10, retry_any_error=True, max_retries=2)
    with trio.fail_after(20):
        async with serve_api(fail) as server:
            async with KubeClient(_access(server.url, None), retries=FAST_RETRIES) as client:
                assert (await client.request("GET", "/x")).status_code == 503
                assert len(server.seen) == 1  # "etcd is sad" matches no retryable error
            async with KubeClient(_access(server.url, None), retries=any_error) as client:
                assert (await client.request("GET", "/x")).status_code == 503
                assert len(server.seen) == 1 + 3
                assert (await client.request("POST", "/x", content=b"{}")).status_code == 503
                assert len(server.seen) == 1 + 3 + 1  # a POST may have been processed


async def test_an_exec_credential_is_fetched_again_after_a_401(tmp_path: Path) -> None:
    script = tmp_path / "plugin"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        "p = pathlib.Path(sys.argv[1]); n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',"
        " 'kind': 'ExecCredential', 'status': {'token': f'token-{n}'}}))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    exec_config = ExecConfig(
        "client.authentication.k8s.io/v1beta1", str(script), args=(str(tmp_path / "n"),)
    )

    async def only_fresh_tokens(seen: Seen) -> Reply:
        if seen.headers.get("authorization") != "Bearer token-2":
            return 401, {}, status_body(401, "Unauthorized", "Unauthorized")
        return 200, {}, b'{"ok": 1}'

    with trio.fail_after(30):
        async with serve_api(only_fresh_tokens) as server:
            access = _access(server.url, None, token=None, exec=exec_config)
            async with KubeClient(access, environ={}) as client:
                assert await client.get_json("/api") == {"ok": 1}
                assert await client.get_json("/api") == {"ok": 1}
    assert [seen.headers["authorization"] for seen in server.seen] == [
        "Bearer token-1",
        "Bearer token-2",
        "Bearer token-2",
    ]


async def test_a_rotated_service_account_token_is_used_after_a_401(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")

    async def only_new(seen: Seen) -> Reply:
        if seen.headers.get("authorization") != "Bearer new":
            return 401, {}, status_body(401, "Unauthorized", "token expired")
        return 200, {}, b"{}"

    with trio.fail_after(20):
        async with serve_api(only_new) as server:
            access = _access(server.url, None, token=None, token_file=str(token))
            async with KubeClient(access, retries=NO_RETRIES) as client:
                response = await client.request("GET", "/api")
                assert response.status_code == 401  # still the old token, refused twice
                token.write_text("new")  # kubelet rotated it
                assert (await client.request("GET", "/api")).status_code == 200


async def test_basic_auth() -> None:
    with trio.fail_after(20):
        async with serve_api() as server:
            access = _access(server.url, None, token=None, username="u", password="p")
            async with KubeClient(access) as client:
                await client.request("GET", "/version")
    assert server.seen[0].headers["authorization"] == "Basic dTpw"


async def test_the_proxy_from_the_environment_is_used_unless_no_proxy() -> None:
    with trio.fail_after(20):
        async with serve_api() as proxy:
            environ = {"HTTP_PROXY": proxy.url}
            target = _access("http://kubernetes.invalid:6443", None)
            async with KubeClient(target, environ=environ, retries=NO_RETRIES) as client:
                assert client.proxy == proxy.url
                await client.request("GET", "/version")
            assert proxy.seen[0].headers["host"] == "kubernetes.invalid:6443"
            async with KubeClient(target, environ=environ, no_proxy=True) as client:
                assert client.proxy is None


@pytest.mark.parametrize("http2", [True, False])
async def test_leaving_a_stream_early_keeps_the_client_usable(pki: Pki, http2: bool) -> None:
    async def endless(seen: Seen) -> Reply:
        if seen.path == "/version":
            return 200, {}, b'{"major": "1"}'
        return 200, {}, [b"x" * 65536] * 64

    with trio.fail_after(20):
        async with (
            serve_api(endless, pki=pki, http2=http2) as server,
            KubeClient(_access(server.url, pki)) as client,
        ):
            for _ in range(3):
                async with client.stream("GET", "/api/v1/pods") as response:
                    assert await response.receive_some()
            assert (await client.get_json("/version"))["major"] == "1"
            with trio.move_on_after(0.05):  # cancelled while waiting for the body
                async with client.stream("GET", "/api/v1/pods") as response:
                    await trio.sleep_forever()
            assert (await client.get_json("/version"))["major"] == "1"


async def test_a_request_is_not_stuck_behind_idle_watches(pki: Pki) -> None:
    release = trio.Event()

    async def hold(seen: Seen) -> Reply:
        if seen.path == "/version":
            return 200, {}, b'{"major": "1"}'
        await release.wait()  # a quiet watch
        return 200, {}, b"{}"

    async def watch(client: KubeClient, n: int) -> None:
        async with client.stream("GET", f"/api/v1/pods/{n}", params={"watch": "1"}) as r:
            await r.read()

    with trio.fail_after(30):
        async with (
            serve_api(hold, pki=pki) as server,
            KubeClient(_access(server.url, pki)) as c,
            trio.open_nursery() as nursery,
        ):
            for n in range(10):
                nursery.start_soon(watch, c, n)
            await server.wait_seen(10)
            with trio.fail_after(5):
                assert (await c.get_json("/version"))["major"] == "1"
            release.set()
    by_path = {seen.path: seen for seen in server.seen}
    assert by_path["/version"].http_version == "2"
    # Watches share the HTTP/2 connection too (HTTP/1.1 watches were the httpx lane's way).
    assert {by_path[f"/api/v1/pods/{n}"].http_version for n in range(10)} == {"2"}
