"""The Kubernetes API client: where a cluster is, how to authenticate, how bytes get there.

``KubeClient`` (``_client``): credentials and 401 refresh (``_auth``), deadlines, errors
(``_response``) and resends, each once, above one transport seam (``_seam``): HTTP/2 over TLS
(``_h2``, ``_h2_core``, ``_hpack``) or HTTP/1.1 (``_http1``), dialled through ``_dial``,
``_proxy``, ``_tls``. ``_kubeconfig`` makes a ``ClusterAccess``. Imports only ``config``.
"""

from ._auth import Credential, CredentialSource, credential_source
from ._client import ClusterIdentity, KubeClient, KubeStream, access_for_account, open_kube_client
from ._kubeconfig import ClusterAccess, load_kubeconfig, parse_kubeconfig, service_account_access
from ._response import KubeReply
from ._seam import KubeResponse, KubeTransport

__all__ = [
    "ClusterAccess",
    "ClusterIdentity",
    "Credential",
    "CredentialSource",
    "KubeClient",
    "KubeReply",
    "KubeResponse",
    "KubeStream",
    "KubeTransport",
    "access_for_account",
    "credential_source",
    "load_kubeconfig",
    "open_kube_client",
    "parse_kubeconfig",
    "service_account_access",
]
