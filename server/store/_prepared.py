"""A batch of events checked and turned into row parts before the store writes any of it.

Everything about a batch that needs no database (validating each record, parsing the object
JSON for its labels, scrubbing Secrets, the API group) is done here, so a bad record is
refused before the transaction begins. (Preparing the next batch in the session's thread
while SQLite commits the previous one was tried: it measured slower on a quiet machine, the
GIL handoffs costing more than the overlap saved.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from wire import EventRecord, EventType

from .._errors import InvalidRecord
from ..views import role_of
from ._okey import CONTROL, with_control
from ._records import group_of
from ._secrets import scrub_secret_body
from ._sqlite_records import encode
from ._views import pod_view_row, view_row

_ADDED, _MODIFIED, _DELETED = int(EventType.ADDED), int(EventType.MODIFIED), int(EventType.DELETED)
_KNOWN = frozenset(int(t) for t in EventType)
# API groups repeat in every batch; a bounded memo saves the parse (~1 us an event).
_GROUPS: dict[str, str] = {}
_MAX_GROUPS = 4096


class _Meta(msgspec.Struct):
    labels: dict[str, str] | None = None


class _Head(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


# Decoding the whole body also proves it is JSON (a full parse costs what skipping to the
# labels does: ~4-5 us for 4.4 KB, measured against a byte scan for the labels).
_decode_head = msgspec.json.Decoder(_Head).decode


class _OwnerRef(msgspec.Struct):
    kind: object = None
    name: object = None
    controller: object = None


class _ViewMeta(msgspec.Struct):
    labels: dict[str, str] | None = None
    annotations: dict[str, object] | None = None
    ownerReferences: list[_OwnerRef] | None = None


class _ViewHead(msgspec.Struct):
    metadata: _ViewMeta = msgspec.field(default_factory=_ViewMeta)


class _PodMeta(msgspec.Struct):
    labels: dict[str, str] | None = None
    ownerReferences: list[_OwnerRef] | None = None


class _PodHead(msgspec.Struct):
    metadata: _PodMeta = msgspec.field(default_factory=_PodMeta)


# Objects Deck's views show (server.views) also give their view_index row (``_views``):
# their annotations and owners are read in the same parse.
_decode_view_head = msgspec.json.Decoder(_ViewHead).decode
# A pod's row needs no annotations (it has no moniker in the index): not decoded at all.
_decode_pod_head = msgspec.json.Decoder(_PodHead).decode


# The parameters of the store's object upsert, in its column order. A prepared row carries
# every one of them; the epoch and write time are filled in inside the transaction (a
# SYNC_BEGIN earlier in the same batch moves the epoch).
UPSERT_COLUMNS = (
    "account",
    "grp",
    "kind",
    "namespace",
    "name",
    "api_version",
    "uid",
    "resource_version",
    "epoch",
    "updated_at_ms",
    "labels",
    "body",
)
EPOCH_SLOT = UPSERT_COLUMNS.index("epoch")
TIME_SLOT = UPSERT_COLUMNS.index("updated_at_ms")


@dataclass(frozen=True, slots=True)
class PreparedEvents:
    """A validated batch: per record its API group and, for objects written, the upsert's
    parameters (a list, so the epoch and time slots can be set at write time) and, for an
    object Deck's views show, its ``view_index`` row (``_views``)."""

    records: Sequence[EventRecord]
    groups: list[str]
    rows: list[list[Any] | None]
    views: list[tuple[str, ...] | None]


def prepare_events(records: Sequence[EventRecord], account: str | None) -> PreparedEvents:
    """Check every record and build its row; raises InvalidRecord naming the record (by
    index) and what is wrong with it, before anything is written.

    ``account``, when given, is the one account every record must belong to.
    """
    groups: list[str] = []
    rows: list[list[Any] | None] = []
    views: list[tuple[str, ...] | None] = []
    for index, r in enumerate(records):
        if account is not None and r.account != account:
            raise InvalidRecord(f"record {index} is for account {r.account!r}, not {account!r}")
        t = r.type
        if t not in _KNOWN:
            raise InvalidRecord(f"record {index}: unknown event type {t}")
        group = _GROUPS.get(r.api_version)
        if group is None:
            group = _group(r.api_version)
        groups.append(group)
        if t in (_ADDED, _MODIFIED):
            if not (r.account and r.kind and r.name):
                raise InvalidRecord(f"record {index}: account, kind and name are required")
            row, view = upsert_row_and_view(index, r, group)
            rows.append(row)
            views.append(view)
        else:
            if t == _DELETED and not (r.account and r.kind and r.name):
                raise InvalidRecord(f"record {index}: account, kind and name are required")
            check_coordinates(index, r)
            rows.append(None)
            views.append(None)
    return PreparedEvents(records, groups, rows, views)


def check_coordinates(index: int, r: EventRecord) -> None:
    """Raise InvalidRecord if a coordinate of record ``index`` (account, apiVersion, kind,
    namespace, name) holds a control character."""
    if CONTROL.search(f"{r.account}{r.api_version}{r.kind}{r.namespace}{r.name}") is None:
        return  # the common case, in one search
    found = with_control(
        (("account", r.account), ("apiVersion", r.api_version), ("kind", r.kind),
         ("namespace", r.namespace), ("name", r.name))
    )  # fmt: skip
    if found is not None:
        raise InvalidRecord(
            f"record {index}: its {found[0]} {found[1]!r} holds a control character (no"
            " Kubernetes name does)"
        )


def _group(api_version: str) -> str:
    group = group_of(api_version)
    if len(_GROUPS) < _MAX_GROUPS:
        _GROUPS[api_version] = group
    return group


def upsert_row(
    index: int, r: EventRecord, group: str, epoch: int | None = None, now: int | None = None
) -> list[Any]:
    """The upsert parameters of record ``index`` (an ADDED/MODIFIED object): its labels
    pulled out, a Secret scrubbed. Raises InvalidRecord if its object is not JSON. Epoch and
    time left None must be filled in before the write (their columns refuse NULL)."""
    return upsert_row_and_view(index, r, group, epoch, now)[0]


def _controller(refs: list[_OwnerRef] | None) -> tuple[str, str]:
    """(kind, name) of the controller ownerReference, else the first one (``server.views``)."""
    if not refs:
        return "", ""
    chosen = next((o for o in refs if o.controller is True), refs[0])
    kind, name = chosen.kind, chosen.name
    return (kind, name) if isinstance(kind, str) and isinstance(name, str) else ("", "")


def _view_of(r: EventRecord, group: str, meta: _ViewMeta) -> tuple[str, ...] | None:
    owner_kind, owner_name = _controller(meta.ownerReferences)
    return view_row(r.account, group, r.kind, r.namespace, r.name, meta.annotations,
                    owner_kind, owner_name)  # fmt: skip


def view_of_body(
    account: str, group: str, kind: str, namespace: str, name: str, body: bytes
) -> tuple[str, ...] | None:
    """The view_index row of a stored object's body (raises msgspec.DecodeError when its
    metadata is not readable)."""
    meta = _decode_view_head(body).metadata
    owner_kind, owner_name = _controller(meta.ownerReferences)
    return view_row(account, group, kind, namespace, name, meta.annotations, owner_kind,
                    owner_name)  # fmt: skip


def upsert_row_and_view(
    index: int, r: EventRecord, group: str, epoch: int | None = None, now: int | None = None
) -> tuple[list[Any], tuple[str, ...] | None]:
    """``upsert_row``'s row and, for an object Deck's views show, its view_index row."""
    check_coordinates(index, r)
    body = r.object
    if r.kind == "Secret" and group == "":
        # Defence in depth: the ingest paths scrub Secrets already (server/_grpc.py,
        # server/ops); the store never keeps data, stringData or the last-applied annotation.
        body = scrub_secret_body(r)
    view: tuple[str, ...] | None = None
    meta: _ViewMeta | _PodMeta | None = None
    if r.kind == "Pod" and group == "":
        try:  # one parse gives the labels and the view_index row
            meta = _decode_pod_head(body).metadata
        except msgspec.DecodeError:
            meta = None  # not as Kubernetes writes metadata: stored, not indexed
        if meta is not None:
            owner_kind, owner_name = _controller(meta.ownerReferences)
            view = pod_view_row(r.account, r.namespace, r.name, owner_kind, owner_name)
    elif role_of(group, r.kind) is not None:
        try:
            meta = _decode_view_head(body).metadata
        except msgspec.DecodeError:
            meta = None
        if meta is not None:
            view = _view_of(r, group, meta)
    if meta is not None:
        labels = meta.labels
    else:
        try:
            labels = _decode_head(body).metadata.labels
        except msgspec.DecodeError as exc:
            raise InvalidRecord(
                f"record {index} ({r.kind} {r.namespace}/{r.name}): object is not valid "
                f"Kubernetes JSON: {exc}"
            ) from exc
    row = [
        r.account,
        group,
        r.kind,
        r.namespace,
        r.name,
        r.api_version,
        r.uid,
        r.resource_version,
        epoch,
        now,
        encode(labels).decode() if labels else None,
        body,
    ]
    return row, view
