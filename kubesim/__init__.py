"""kubesim: a simulated Kubernetes API server on loopback, for tests and demos.

::

    sim = kubesim.Cluster(kubesim.SimConfig(watch_history=10_000))
    async with kubesim.open_server(sim, tls=True) as server:
        server.kubeconfig("kubeconfig.yaml")          # token auth for user "admin"
        server.faults.fail_next(2, status=429)        # inject faults
        server.requests.count("list", "pods")         # request counters

It imports nothing else of ours.
"""

from kubesim._auth import ALL_VERBS, READ_VERBS, User, Users
from kubesim._churn import Churn, ChurnStatistics
from kubesim._cluster import Cluster, SimConfig
from kubesim._errors import ApiError, ApplyConflict, InvalidObject, KubesimError, PatchError
from kubesim._faults import Faults, RequestCounters
from kubesim._loader import load_pods, realistic_pod
from kubesim._resources import ResourceType
from kubesim._server import Server, open_server

__all__ = [
    "ALL_VERBS",
    "READ_VERBS",
    "ApiError",
    "ApplyConflict",
    "Churn",
    "ChurnStatistics",
    "Cluster",
    "Faults",
    "InvalidObject",
    "KubesimError",
    "PatchError",
    "RequestCounters",
    "ResourceType",
    "Server",
    "SimConfig",
    "User",
    "Users",
    "load_pods",
    "open_server",
    "realistic_pod",
]
