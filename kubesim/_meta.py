"""What the API server stamps on objects: uids and RFC 3339 times (no other kubesim imports)."""

from __future__ import annotations

import time
import uuid

__all__ = ["new_uid", "now_rfc3339"]


def now_rfc3339() -> str:
    """The current time as the API server writes timestamps (seconds, UTC, "Z")."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def new_uid() -> str:
    return str(uuid.uuid4())
