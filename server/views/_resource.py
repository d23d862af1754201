"""A cached object as the views read it: decoded once, with the facts every shape uses. Pure."""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from typing import Any

from .._kinds import resolve_kind, spinnaker_kind_name
from .._moniker import Moniker, moniker_of

__all__ = ["Resource", "created_ms", "full_name", "mapping"]


def mapping(value: object) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one (bodies are untrusted JSON).
    A decoded body's objects are dicts: tested first, as the ABC's check costs ~10x."""
    if type(value) is dict:
        return value
    return value if isinstance(value, Mapping) else {}


def full_name(kind: str, name: str) -> str:
    """Clouddriver's full resource name, ``"<lowerCamel kind> <name>"``, e.g.
    ``"replicaSet h4-api-v001"``."""
    return f"{spinnaker_kind_name(kind)} {name}"


def normalized_name(raw: str) -> str | None:
    """A ``"kind name"`` as Clouddriver writes it back (``"Service x"`` -> ``"service x"``);
    None when it is not two tokens."""
    tokens = raw.split()
    if len(tokens) != 2:
        return None
    return f"{resolve_kind(tokens[0]).token} {tokens[1]}"


def created_ms(stamp: object) -> int | None:
    """An RFC 3339 creationTimestamp in epoch milliseconds (None when absent or unreadable)."""
    if not isinstance(stamp, str) or len(stamp) < 19:
        return None
    try:
        parsed = time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    millis = 0
    if len(stamp) > 20 and stamp[19] == ".":
        digits = "".join(c for c in stamp[20:23] if c.isdigit())
        millis = int(digits.ljust(3, "0")) if digits else 0
    return calendar.timegm(parsed) * 1000 + millis


class Resource:
    """One decoded object of ``account`` (kind, name, namespace, ... read once)."""

    __slots__ = (
        "_moniker",
        "account",
        "annotations",
        "api_version",
        "body",
        "kind",
        "labels",
        "metadata",
        "name",
        "namespace",
        "uid",
    )

    def __init__(self, account: str, body: Mapping[str, Any]) -> None:
        self.account = account
        self.body = body
        meta = mapping(body.get("metadata"))
        self.metadata = meta
        kind = body.get("kind")
        self.kind = kind if isinstance(kind, str) else ""
        api_version = body.get("apiVersion")
        self.api_version = api_version if isinstance(api_version, str) else ""
        self.name = str(meta.get("name") or "")
        self.namespace = str(meta.get("namespace") or "")
        self.uid = str(meta.get("uid") or "")
        labels = meta.get("labels")
        self.labels: dict[str, Any] = dict(labels) if isinstance(labels, Mapping) else {}
        self.annotations = mapping(meta.get("annotations"))
        self._moniker: Moniker | None = None

    @property
    def token(self) -> str:
        """Clouddriver's lowerCamel kind, e.g. ``replicaSet``."""
        return spinnaker_kind_name(self.kind)

    @property
    def full_name(self) -> str:
        return f"{self.token} {self.name}"

    @property
    def moniker(self) -> Moniker:
        if self._moniker is None:
            self._moniker = moniker_of(self.kind, self.name, self.annotations)
        return self._moniker

    @property
    def spec(self) -> Mapping[str, Any]:
        return mapping(self.body.get("spec"))

    @property
    def created_ms(self) -> int | None:
        return created_ms(self.metadata.get("creationTimestamp"))

    def common(self) -> dict[str, Any]:
        """The fields of every KubernetesResource view: account, name, displayName,
        namespace, region, kind, apiVersion, labels, moniker, createdTime (null omitted)."""
        body: dict[str, Any] = {
            "account": self.account,
            "name": self.full_name,
            "displayName": self.name,
            "namespace": self.namespace,
            "region": self.namespace,
            "kind": self.token,
            "apiVersion": self.api_version,
            "labels": self.labels,
            "moniker": self.moniker.to_json(),
        }
        created = self.created_ms
        if created is not None:
            body["createdTime"] = created
        return body
