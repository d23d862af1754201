"""Golden results of real ``kubectl apply`` (recorded by ``record_kubectl_apply.py`` from the
cases of ``kubectl_cases.py`` into ``kubectl_apply/``), replayed by
``tests/agent/test_apply_golden.py``; and what the recorder and the replay share.

``kubernetes_openapi_v3_apps_v1.json`` is a real API server's ``/openapi/v3/apis/apps/v1``
(kubernetes/kubectl's ``testdata/openapi/v3/apis/apps/v1.json``, Apache-2.0), reduced to the
Deployment's definitions without descriptions, defaults and plain scalar properties."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubesim

__all__ = ["REAL_APPS_V1", "RESULTS", "strip_volatile", "write_record"]

RESULTS = Path(__file__).parent / "kubectl_apply"
REAL_APPS_V1 = Path(__file__).parent / "kubernetes_openapi_v3_apps_v1.json"
VOLATILE_METADATA = ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields")


def strip_volatile(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without what differs between two runs of the same steps (and its status)."""
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in VOLATILE_METADATA}
    return out


def write_record(write: kubesim.Write) -> dict[str, Any]:
    """A write request as the golden files keep it (the body decoded when it is JSON)."""
    try:
        body: Any = json.loads(write.body) if write.body else None
    except ValueError:
        body = write.body.decode()
    return {
        "verb": write.verb,
        "path": write.path,
        "query": write.query,
        "content_type": write.content_type,
        "body": body,
    }
