"""Proxy selection: proxy variables, NO_PROXY rules, the noProxy options, proxy-url."""

from __future__ import annotations

import pytest

from agent.kube._proxy import no_proxy_matches, select_proxy

ENV = {"HTTPS_PROXY": "http://proxy:3128", "http_proxy": "http://plain-proxy:8080"}


def test_https_and_http_use_their_variable() -> None:
    assert select_proxy("https://api.example.com:6443", ENV) == "http://proxy:3128"
    assert select_proxy("http://api.example.com", ENV) == "http://plain-proxy:8080"
    assert select_proxy("https://api.example.com", {}) is None


def test_upper_case_wins_and_a_bare_host_port_gets_a_scheme() -> None:
    environ = {"HTTPS_PROXY": "proxy:3128", "https_proxy": "http://other:1"}
    assert select_proxy("https://h", environ) == "http://proxy:3128"


def test_the_no_proxy_option_ignores_the_environment_but_not_proxy_url() -> None:
    assert select_proxy("https://h", ENV, ignore_environment=True) is None
    assert (
        select_proxy("https://h", ENV, ignore_environment=True, proxy_url="socks5://s:1080")
        == "socks5://s:1080"
    )


def test_no_proxy_exempts_the_host() -> None:
    environ = {**ENV, "NO_PROXY": "localhost,.svc.cluster.local,10.0.0.0/8"}
    assert select_proxy("https://kubernetes.default.svc.cluster.local", environ) is None
    assert select_proxy("https://10.96.0.1:443", environ) is None
    assert select_proxy("https://api.example.com", environ) == "http://proxy:3128"


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "matches"),
    [
        ("api.example.com", 443, "*", True),
        ("api.example.com", 443, "example.com", True),
        ("example.com", 443, ".example.com", True),
        ("badexample.com", 443, "example.com", False),
        ("api.example.com", 6443, "api.example.com:6443", True),
        ("api.example.com", 443, "api.example.com:6443", False),
        ("10.1.2.3", 443, "10.0.0.0/8", True),
        ("11.1.2.3", 443, "10.0.0.0/8", False),
        ("10.1.2.3", 443, "10.1.2.3", True),
        ("::1", 443, "::1", True),
        ("[::1]", 443, "[::1]:443", True),
        ("API.Example.COM", 443, " other.org , EXAMPLE.com ", True),
        ("h", 443, "", False),
    ],
)
def test_no_proxy_rules(host: str, port: int, no_proxy: str, matches: bool) -> None:
    assert no_proxy_matches(host, port, no_proxy) is matches
