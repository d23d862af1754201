"""kubesim: a simulated Kubernetes API server on loopback, for tests and demos.

::

    sim = kubesim.Cluster(kubesim.SimConfig(watch_history=10_000))
    kubesim.load_pods(sim, 1_000, namespaces=4)           # realistic ~4.6 KB pods
    async with kubesim.open_server(sim, tls=True) as server:
        server.kubeconfig("kubeconfig.yaml")              # token auth for user "admin"
        server.faults.fail_next(2, status=429)            # inject faults
        server.requests.count("list", "pods")             # request counters
        server.writes.recent("patch", "deployments.apps") # what clients wrote, bodies included
        await nursery.start(kubesim.Churn(sim, rate=50).run)
        member = server.add_cluster("17", kubesim.Cluster())  # another cluster, same port:
        member.kubeconfig("17.yaml")                      # https://.../clusters/17, own token

What it serves, like a real API server: discovery (legacy and aggregated v2/v2beta1),
OpenAPI (``/openapi/v3`` per group-version and ``/openapi/v2``, with the patch strategies
kubectl's client-side apply reads), ``/version``, ``/healthz``; get/list/watch with
resourceVersion rules, paging with expiring continue tokens (pages are snapshots at the
list's resourceVersion), label and field selectors, bookmarks, the streaming list,
PartialObjectMetadata; create/replace/patch (merge, JSON, strategic, server-side
apply)/delete with propagation, the status, scale and pods/log subresources; CRDs; lite
controllers (Deployment -> ReplicaSet -> Pod, StatefulSet, DaemonSet, Job, a kubelet that
makes pods Running); bearer tokens and client certificates with per-kind verb grants;
HTTP/1.1 and HTTP/2. One server can serve many clusters, each under ``/clusters/{name}``
with its own resourceVersions, objects, CRDs and tokens (``kubesim._member``), the way
Rancher-style proxies expose clusters.

Where it is simpler than a real cluster: one synchronous process (garbage collection,
namespace deletion and controllers finish within the write that caused them); pods are
Running at once and deleted right after being marked; no admission, no conversion between
CRD versions, no RBAC objects enforced (grants are configured on the server's users).

It imports nothing else of ours.
"""

from kubesim._auth import ALL_VERBS, READ_VERBS, User, Users
from kubesim._churn import Churn, ChurnStatistics
from kubesim._cluster import Cluster, SimConfig
from kubesim._errors import ApiError, ApplyConflict, InvalidObject, KubesimError, PatchError
from kubesim._faults import Faults, RequestCounters, Write, WriteLog
from kubesim._loader import load_pods, realistic_pod
from kubesim._member import Member
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
    "Member",
    "PatchError",
    "RequestCounters",
    "ResourceType",
    "Server",
    "SimConfig",
    "User",
    "Users",
    "Write",
    "WriteLog",
    "load_pods",
    "open_server",
    "realistic_pod",
]
