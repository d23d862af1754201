"""The in-memory cluster: one store per resource, one global resourceVersion counter.

Sans-I/O: nothing here awaits. The HTTP layer and the controllers call in; watchers learn of
changes through :meth:`Cluster.subscribe` callbacks (the server turns them into trio events).
Reads return :class:`~kubesim._store.Stored` versions (bytes) so the server can answer without
re-encoding; the dict-returning methods (``get``, ``list``, ``create``...) are the Python API.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from kubesim import _controllers, _deletes, _reconcile, _status, _writes
from kubesim._errors import ApiError
from kubesim._listing import read_page, versions_at
from kubesim._meta import new_uid, now_rfc3339
from kubesim._resources import Registry, ResourceType, crd_types
from kubesim._selectors import Selector
from kubesim._store import ADDED, MODIFIED, ResourceStore, Stored

__all__ = ["Cluster", "ListPage", "SimConfig"]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode

# The kinds the lite controllers reconcile: (group, kind).
_CONTROLLED = frozenset(
    {
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("batch", "Job"),
    }
)
_POD_OWNERS = ("ReplicaSet", "StatefulSet", "DaemonSet", "Job")
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """How the simulated cluster behaves. Times are seconds."""

    watch_history: int = 10_000  # events kept per resource; older resourceVersions get 410
    continue_ttl: float = 300.0  # a continue token older than this gets 410 Expired
    bookmark_interval: float = 60.0  # between BOOKMARK events on watches that asked for them
    controllers: bool = True  # run the lite Deployment/ReplicaSet/StatefulSet controllers
    namespaces: tuple[str, ...] = DEFAULT_NAMESPACES
    # Where the resourceVersion counter starts. A real cluster's versions only grow; a
    # long-lived simulator that restarts should start past every version it handed out
    # before (e.g. the time in microseconds, as ``kubesvc sim`` does), or clients resuming
    # with a stored version get "Too large resource version" (504).
    first_resource_version: int = 0
    # The OpenAPI documents published ("v3": /openapi/v3 and its per group-version documents,
    # "v2": /openapi/v2), as a real API server does; fewer to play an older or stricter one.
    openapi: tuple[str, ...] = ("v2", "v3")
    # The streaming list (a watch with sendInitialEvents, the WatchList feature). Off plays an
    # API server with that feature gate off, as older releases run by default: such a watch
    # is refused with 422 Invalid, and clients fall back to a paged list.
    watch_list: bool = True
    version: dict[str, str] = field(
        default_factory=lambda: {
            "major": "1",
            "minor": "31",
            "gitVersion": "v1.31.0-kubesim",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2024-08-13T00:00:00Z",
            "goVersion": "go1.22.5",
            "compiler": "gc",
            "platform": "linux/amd64",
        }
    )


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a list: object versions, the list's resourceVersion, paging metadata."""

    items: list[Stored]
    resource_version: int
    continue_token: str | None
    remaining: int | None


class Cluster:
    """The simulated cluster's state. Not thread-safe: use it from one trio thread."""

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.registry = Registry()
        self._stores: dict[tuple[str, str], ResourceStore] = {}
        if self.config.first_resource_version < 0:
            raise ValueError("first_resource_version must be >= 0")
        self._rv = self.config.first_resource_version
        self._listeners: list[Callable[[tuple[str, str]], None]] = []
        # Objects the lite controllers must look at: (kind, namespace, name), insertion order.
        self._dirty: dict[tuple[str, str, str], None] = {}
        # Pods the kubelet-lite holds back for a missing ConfigMap/Secret, per namespace: a
        # write of either kind there makes them dirty again (kubesim._podconfig).
        self._held: dict[str, set[str]] = {}
        for name in self.config.namespaces:
            self._seed_namespace(name)

    # -- state ---------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out (the one a list made now reports)."""
        return self._rv

    def next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def store(self, rtype: ResourceType) -> ResourceStore:
        """The store of ``rtype`` (created on first use; CRD kinds share it across versions)."""
        found = self._stores.get(rtype.key)
        if found is None:
            found = self._stores[rtype.key] = ResourceStore(rtype, self.config.watch_history)
        return found

    def resolve(self, group: str, version: str, plural: str) -> ResourceType:
        rtype = self.registry.lookup(group, version, plural)
        if rtype is None:
            gv = f"{group}/{version}" if group else version
            raise _status.path_not_found(f"{gv}/{plural}")
        return rtype

    def subscribe(self, callback: Callable[[tuple[str, str]], None]) -> Callable[[], None]:
        """Call ``callback(resource_key)`` after every change; returns the unsubscriber."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def _notify(self, key: tuple[str, str]) -> None:
        for callback in self._listeners:
            callback(key)

    # -- the commit primitives (every change goes through these) -------------------------

    def commit(
        self, rtype: ResourceType, obj: dict[str, Any], *, added: bool, controlled: bool = True
    ) -> Stored:
        """Stamp ``obj`` with the next resourceVersion, serialize it once, store and publish it.

        ``controlled=False`` keeps the lite controllers from looking at it (bulk loads).
        """
        meta = obj["metadata"]
        rv = self.next_rv()
        meta["resourceVersion"] = str(rv)
        if next(iter(obj)) != "kind":  # the API server writes kind and apiVersion first
            obj = {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion"), **obj}
        raw = _encode(obj)
        stored = Stored(
            meta.get("namespace", ""), meta["name"], meta.get("uid", ""), rv,
            meta.get("labels") or {}, raw,
        )  # fmt: skip
        self.store(rtype).put(stored, ADDED if added else MODIFIED)
        if controlled:
            self._mark_dirty(rtype, obj, added)
        if rtype.kind == "CustomResourceDefinition" and rtype.group == "apiextensions.k8s.io":
            self._serve_crd(obj)
        self._notify(rtype.key)
        return stored

    def commit_delete(self, rtype: ResourceType, obj: dict[str, Any]) -> Stored:
        """Remove the object; its DELETED event carries the deletion's resourceVersion."""
        meta = obj["metadata"]
        rv = self.next_rv()
        meta["resourceVersion"] = str(rv)
        final = Stored(
            meta.get("namespace", ""), meta["name"], meta.get("uid", ""), rv,
            meta.get("labels") or {}, _encode(obj),
        )  # fmt: skip
        self.store(rtype).remove(final)
        self._mark_dirty(rtype, obj, False)
        if rtype.kind == "CustomResourceDefinition" and rtype.group == "apiextensions.k8s.io":
            self._unserve_crd(meta["name"])
        self._notify(rtype.key)
        return final

    def _mark_dirty(self, rtype: ResourceType, obj: dict[str, Any], added: bool) -> None:
        if not self.config.controllers:
            return
        meta = obj["metadata"]
        if (rtype.group, rtype.kind) in _CONTROLLED:
            self._dirty[(rtype.kind, meta.get("namespace", ""), meta["name"])] = None
        elif rtype.group == "" and rtype.kind == "Pod":
            if added and (obj.get("status") or {}).get("phase") != "Running":
                self._dirty[("Pod", meta.get("namespace", ""), meta["name"])] = None
            for ref in meta.get("ownerReferences") or ():
                if ref.get("kind") in _POD_OWNERS and ref.get("controller"):
                    self._dirty[(ref["kind"], meta.get("namespace", ""), ref["name"])] = None
        elif rtype.group == "" and rtype.kind in ("ConfigMap", "Secret"):
            namespace = meta.get("namespace", "")
            for pod in sorted(self._held.pop(namespace, ())):
                self._dirty[("Pod", namespace, pod)] = None
        for ref in meta.get("ownerReferences") or ():
            if ref.get("kind") == "Deployment" and rtype.kind == "ReplicaSet":
                self._dirty[("Deployment", meta.get("namespace", ""), ref["name"])] = None

    def hold_pod(self, namespace: str, name: str) -> None:
        """Look at pod ``name`` again when a ConfigMap or Secret of ``namespace`` is written."""
        self._held.setdefault(namespace, set()).add(name)

    def take_dirty(self) -> tuple[str, str, str] | None:
        """The oldest object the controllers still have to look at (and forget it)."""
        if not self._dirty:
            return None
        key = next(iter(self._dirty))
        del self._dirty[key]
        return key

    def reconcile(self) -> None:
        """Run the lite controllers until they have nothing left to do."""
        if self.config.controllers and self._dirty:
            _reconcile.reconcile(self)

    def _serve_crd(self, crd: dict[str, Any]) -> None:
        try:
            types = crd_types(crd)
        except ValueError as exc:
            raise ApiError(422, "Invalid", f"CustomResourceDefinition: {exc}") from exc
        self.registry.add_crd(crd["metadata"]["name"], types)

    def _unserve_crd(self, name: str) -> None:
        # Deleting a CRD deletes its objects (like the API server's CRD finalizer does).
        removed = self.registry.remove_crd(name)
        if removed and not any(t.key == removed[0].key for t in self.registry):
            store = self._stores.get(removed[0].key)
            if store is not None:
                for stored in list(store.objects.values()):
                    self.commit_delete(removed[0], stored.decode())

    def _seed_namespace(self, name: str) -> None:
        rtype = self.resolve("", "v1", "namespaces")
        obj = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "uid": new_uid(),
                "creationTimestamp": now_rfc3339(),
                "labels": {"kubernetes.io/metadata.name": name},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        self.commit(rtype, obj, added=True)

    # -- reads ---------------------------------------------------------------------------

    def get_stored(self, rtype: ResourceType, namespace: str, name: str) -> Stored:
        """The current version; raises ApiError 404 NotFound."""
        found = self.store(rtype).objects.get((namespace if rtype.namespaced else "", name))
        if found is None:
            raise _status.not_found(rtype, name)
        return found

    def list_page(
        self,
        rtype: ResourceType,
        *,
        namespace: str | None = None,
        selector: Selector | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        now: float = 0.0,
    ) -> ListPage:
        """A page of a list with the API server's paging and resourceVersion rules.

        Continued pages and ``Exact`` reads are consistent snapshots at the list's
        resourceVersion (rebuilt from the event ring, see ``_listing``) while the ring reaches
        back that far. Raises ApiError 410 Expired (a continue token older than
        ``continue_ttl``; an Exact version the ring no longer reaches), 504 (a
        resourceVersion from the future), 400/422 (bad parameters).
        """
        store = self.store(rtype)
        selector = selector or Selector()
        list_rv = self._rv
        start: tuple[str, str] | None = None
        issued = now
        overrides: dict[tuple[str, str], Stored | None] = {}
        if continue_token:
            if resource_version not in (None, ""):
                raise _status.bad_request(
                    "specifying resource version is not allowed when using continue"
                )
            list_rv, start, issued = decode_continue(continue_token)
            if now - issued > self.config.continue_ttl:
                raise _status.expired()
            # When the ring no longer reaches the list's version (heavy churn, short
            # history), serve the current objects rather than 410: a real API server keeps
            # every revision for its compaction interval (~5 min, our continue_ttl), so a
            # valid token never meets a lost snapshot there, and a 410 here could keep an
            # agent relisting forever under churn.
            overrides = versions_at(store, list_rv) or {}
        else:
            exact = self._check_list_rv(store, resource_version, resource_version_match)
            if exact is not None:
                list_rv = exact
                snapshot = versions_at(store, exact)
                if snapshot is None:
                    raise _status.gone(exact, store.ring.evicted_rv)
                overrides = snapshot
        page = read_page(
            store, rtype, namespace=namespace, selector=selector, limit=limit, start=start,
            overrides=overrides,
        )  # fmt: skip
        token = None
        if page.last_key is not None:
            token = encode_continue(list_rv, page.last_key, issued)
        return ListPage(page.items, list_rv, token, page.remaining)

    def _check_list_rv(
        self, store: ResourceStore, rv_text: str | None, match: str | None
    ) -> int | None:
        """Check a list's resourceVersion parameters; the version for an Exact read, if any."""
        if match and not rv_text:
            raise ApiError(
                422,
                "Invalid",
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
                "resourceVersion is provided",
            )
        if match not in (None, "", "NotOlderThan", "Exact"):
            raise ApiError(422, "Invalid", f'resourceVersionMatch: Unsupported value: "{match}"')
        if not rv_text or rv_text == "0":
            return None
        rv = parse_rv(rv_text)
        if rv > self._rv:
            raise _status.too_large_rv(rv, self._rv)
        return rv if match == "Exact" else None

    # -- the dict API for Python callers -------------------------------------------------

    def get(
        self, group: str, version: str, plural: str, namespace: str, name: str
    ) -> dict[str, Any]:
        """The object as a dict; raises ApiError 404."""
        return self.get_stored(self.resolve(group, version, plural), namespace, name).decode()

    def list(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every matching object as a dict, in (namespace, name) order."""
        rtype = self.resolve(group, version, plural)
        page = self.list_page(
            rtype, namespace=namespace, selector=Selector.parse(label_selector, field_selector)
        )
        return [stored.decode() for stored in page.items]

    def create(self, obj: dict[str, Any], *, manager: str = "kubesim") -> dict[str, Any]:
        """Create ``obj`` (its apiVersion/kind pick the resource); returns the stored object.

        Raises ApiError like the HTTP API would (404 unknown kind or namespace, 409 exists).
        """
        rtype = self._kind_of(obj)
        namespace = (obj.get("metadata") or {}).get("namespace")
        stored = _writes.create(self, rtype, namespace, obj, _writes.WriteOptions(manager=manager))
        self.reconcile()
        return stored.decode()

    def update(self, obj: dict[str, Any], *, manager: str = "kubesim") -> dict[str, Any]:
        """Replace ``obj`` (PUT semantics: 409 when its resourceVersion is stale)."""
        rtype = self._kind_of(obj)
        meta = obj.get("metadata") or {}
        stored = _writes.replace(
            self, rtype, meta.get("namespace"), meta.get("name", ""), obj,
            options=_writes.WriteOptions(manager=manager),
        )  # fmt: skip
        self.reconcile()
        return stored.decode()

    def patch(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        content_type: str = "application/merge-patch+json",
        manager: str = "kubesim",
        force: bool = False,
    ) -> dict[str, Any]:
        """PATCH in any of the four content types (``body`` is encoded as JSON)."""
        rtype = self.resolve(group, version, plural)
        data = body if isinstance(body, bytes) else _encode(body)
        options = _writes.WriteOptions(manager=manager, force=force)
        stored, _ = _writes.patch(self, rtype, namespace, name, content_type, data, None, options)
        self.reconcile()
        return stored.decode()

    def pin_status(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str | None,
        name: str,
        status: dict[str, Any],
    ) -> dict[str, Any]:
        """Give the object ``status`` and keep the lite controllers from writing its status
        again (the ``kubesim.io/pin-status`` annotation, ``_controllers.PIN``), so that a test
        reaches any state: a pod Pending or Failed in a ReplicaSet whose other pods run, a
        ReplicaSet with any counts, a Job failed without running a pod. Two writes, as a
        client would make them (the annotation, then the status subresource); watchers see
        both. Returns the object as stored."""
        rtype = self.resolve(group, version, plural)
        options = _writes.WriteOptions(manager="kubesim-test")
        note = _encode({"metadata": {"annotations": {_controllers.PIN: "true"}}})
        stored, _ = _writes.patch(
            self, rtype, namespace, name, "application/merge-patch+json", note, None, options
        )
        obj = stored.decode()
        obj["status"] = status
        stored = _writes.replace(self, rtype, namespace, name, obj, "status", options)
        self.reconcile()
        return stored.decode()

    def delete(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str | None,
        name: str,
        *,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> dict[str, Any]:
        """Delete (cascading like the API server); returns the object's last version."""
        rtype = self.resolve(group, version, plural)
        final = _deletes.delete(
            self, rtype, namespace, name,
            propagation=propagation_policy, grace_period=grace_period_seconds,
        )  # fmt: skip
        self.reconcile()
        return final.decode()

    def _kind_of(self, obj: dict[str, Any]) -> ResourceType:
        rtype = self.registry.by_kind(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if rtype is None:
            raise _status.bad_request(
                f"no kind {obj.get('kind')!r} is registered for version {obj.get('apiVersion')!r}"
            )
        return rtype

    def count(self, group: str, plural: str) -> int:
        store = self._stores.get((group, plural))
        return len(store.objects) if store else 0


def parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _status.bad_request(f"invalid resource version: {text!r}") from None
    if value < 0:
        raise _status.bad_request(f"invalid resource version: {text!r}")
    return value


def encode_continue(rv: int, key: tuple[str, str], issued: float) -> str:
    body = _encode({"v": "meta.k8s.io/v1", "rv": rv, "start": list(key), "t": issued})
    return base64.urlsafe_b64encode(body).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, tuple[str, str], float]:
    """(list resourceVersion, last key served, issue time); raises ApiError 400 when mangled."""
    try:
        padded = token + "=" * (-len(token) % 4)
        body = _decode(base64.urlsafe_b64decode(padded))
        namespace, name = body["start"]
        return int(body["rv"]), (str(namespace), str(name)), float(body["t"])
    except (binascii.Error, msgspec.DecodeError, KeyError, TypeError, ValueError):
        raise _status.bad_request(f"continue key is not valid: {token[:40]!r}") from None
