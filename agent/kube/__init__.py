"""The Kubernetes API client: where a cluster is, how to authenticate, how bytes get there.

``KubeClient`` (``_client``) is one account's client: credentials and 401 refresh
(``_auth``), deadlines, error translation (``_response``) and resends of safe requests, each
once, above one transport seam (``_seam``) with two transports, HTTP/2 over TLS (``_h2`` on
the sans-I/O ``_h2_core`` and ``_hpack``) and HTTP/1.1 (``_http1``, ``_http1_parse``); both
dial through ``_dial``, ``_proxy`` and ``_tls``. ``_kubeconfig`` turns a kubeconfig or a
service account into a ``ClusterAccess``. Imports only the config and the exception tree.
"""

from ._client import ClusterIdentity, KubeClient, KubeStream, access_for_account, open_kube_client
from ._kubeconfig import ClusterAccess, load_kubeconfig, parse_kubeconfig, service_account_access
from ._response import KubeReply
from ._seam import KubeResponse, KubeTransport

__all__ = [
    "ClusterAccess",
    "ClusterIdentity",
    "KubeClient",
    "KubeReply",
    "KubeResponse",
    "KubeStream",
    "KubeTransport",
    "access_for_account",
    "load_kubeconfig",
    "open_kube_client",
    "parse_kubeconfig",
    "service_account_access",
]
