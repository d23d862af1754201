"""What the API server stamps on objects: uids, RFC 3339 times and a controller's owner reference
(no other kubesim imports)."""

from __future__ import annotations

import time
import uuid
from typing import Any

__all__ = ["controller_ref", "new_uid", "now_rfc3339"]


def now_rfc3339() -> str:
    """The current time as the API server writes timestamps (seconds, UTC, "Z")."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def new_uid() -> str:
    return str(uuid.uuid4())


def controller_ref(owner: dict[str, Any]) -> dict[str, Any]:
    """The ownerReference a controller puts on what it creates from ``owner`` (controller
    and blockOwnerDeletion set, as kube-controller-manager's)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
