"""Many clusters behind one server: each under its own path prefix, ``/clusters/{name}``.

The way Rancher-style proxies expose the clusters they manage: ``https://host:port/clusters/17``
is an API server root, and every path a client would send to a cluster goes under it
(``/clusters/17/api/v1/pods``, ``/clusters/17/openapi/v3``, ``/clusters/17/version``). A
:class:`Member` is one such cluster: its own :class:`~kubesim.Cluster` (resourceVersion
counter, objects, CRDs), its own users and tokens (a token of cluster 17 is refused by
cluster 18, as it would be by two real clusters), its own faults, counters and write log. The
connections, TLS certificate and CA are the server's and shared (one proxy, one certificate).

Routing is one dict lookup per request (:func:`split_member_path`); nothing runs per member
while its cluster is quiet: the app of a member only wakes the watches of its own cluster.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from kubesim._app import ApiApp
from kubesim._auth import User, Users
from kubesim._cluster import Cluster
from kubesim._faults import Faults, RequestCounters, WriteLog

__all__ = ["PREFIX", "Member", "split_member_path", "write_kubeconfig"]

#: The path under which member clusters are served.
PREFIX = "/clusters/"


def split_member_path(path: str) -> tuple[str, str] | None:
    """(member name, the path below it) for ``/clusters/{name}[/...]``, else None."""
    if not path.startswith(PREFIX):
        return None
    name, slash, rest = path[len(PREFIX) :].partition("/")
    if not name:
        return None
    return name, slash + rest if slash else "/"


class Member:
    """One cluster served under ``/clusters/{name}`` of a :class:`~kubesim.Server`
    (from ``Server.add_cluster``). Its per-cluster surface mirrors the server's own:
    ``cluster``, ``users``, ``faults``, ``requests``, ``writes``, ``url``, ``kubeconfig()``."""

    def __init__(
        self,
        name: str,
        cluster: Cluster,
        users: Users,
        *,
        base_url: Callable[[], str],
        ca_pem: bytes | None,
        peer_names: dict[tuple[str, int], str],
        cut_connection: Callable[[tuple[str, int]], None],
        flush_connection: Callable[[tuple[str, int]], Awaitable[None]],
    ) -> None:
        self.name = name
        self.cluster = cluster
        self.users = users
        self.faults = Faults()
        self.requests = RequestCounters()
        self.writes = WriteLog()
        self.ca_pem = ca_pem
        self._base_url = base_url
        self.app = ApiApp(
            cluster,
            users,
            self.faults,
            self.requests,
            peer_names,
            cut_connection,
            flush_connection,
            self.writes,
        )

    @property
    def url(self) -> str:
        """The cluster's API server root, ``https://host:port/clusters/{name}``."""
        return f"{self._base_url()}{PREFIX}{self.name}"

    def add_user(self, name: str, grants: dict[str, Any] | None = None) -> User:
        """Register a user of this cluster (every verb on everything unless ``grants``)."""
        user = User(name) if grants is None else User(name, grants=grants)
        return self.users.add(user)

    def set_grants(self, name: str, grants: dict[str, Any]) -> User:
        """Change what ``name`` may do in this cluster, keeping its token."""
        return self.users.set_grants(name, grants)

    def kubeconfig(self, path: str | Path, user: str = "admin") -> Path:
        """Write a kubeconfig for ``user`` of this cluster (token auth, the server's CA);
        returns its path. Raises KeyError for an unknown user."""
        return write_kubeconfig(
            path, self.url, self.ca_pem, {"token": self.users[user].token}, user
        )

    def unsubscribe(self) -> None:
        self.app.unsubscribe()


def write_kubeconfig(
    path: str | Path,
    url: str,
    ca_pem: bytes | None,
    credentials: dict[str, Any],
    user: str,
) -> Path:
    """Write a one-context kubeconfig (cluster ``kubesim``) for ``user``; returns its path."""
    path = Path(path)
    cluster: dict[str, Any] = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubesim", "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "kubesim", "context": {"cluster": "kubesim", "user": user}}],
        "current-context": "kubesim",
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path
