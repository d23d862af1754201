"""Which proxy, if any, the client uses for an API server URL (pure).

Precedence: a kubeconfig cluster's ``proxy-url`` always applies; otherwise, unless the
``noProxy`` option is set, ``HTTPS_PROXY``/``HTTP_PROXY`` (upper case first, then lower case,
as Go's net/http reads them) unless ``NO_PROXY`` matches the host. ``NO_PROXY`` entries follow
Go's rules: ``*`` matches all; ``example.com`` and ``.example.com`` match the domain and its
subdomains; an IP or a CIDR matches addresses; ``host:port`` matches that port only.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

__all__ = ["no_proxy_matches", "select_proxy"]


def _env(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name.upper()) or environ.get(name.lower()) or ""


def select_proxy(
    url: str,
    environ: Mapping[str, str],
    *,
    ignore_environment: bool = False,
    proxy_url: str | None = None,
) -> str | None:
    """The proxy URL to use for ``url``, or None for a direct connection."""
    if proxy_url:
        return proxy_url
    if ignore_environment:
        return None
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    proxy = _env(environ, "https_proxy") if scheme == "https" else _env(environ, "http_proxy")
    if not proxy:
        return None
    host = parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    if no_proxy_matches(host, port, _env(environ, "no_proxy")):
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy  # Go accepts a bare host:port
    return proxy


def no_proxy_matches(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` (comma-separated) exempts ``host:port`` from the proxy."""
    host = host.lower().strip("[]")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:
            try:
                if address is not None and address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        entry_host, entry_port = entry, None
        if entry.count(":") == 1 or (entry.startswith("[") and "]:" in entry):
            entry_host, _, port_text = entry.rpartition(":")
            entry_port = int(port_text) if port_text.isdigit() else None
        entry_host = entry_host.strip("[]")
        if entry_port is not None and entry_port != port:
            continue
        if address is not None:
            try:
                if ipaddress.ip_address(entry_host) == address:
                    return True
            except ValueError:
                pass
            continue
        domain = entry_host.lstrip(".")
        if host == domain or host.endswith("." + domain):
            return True
    return False
