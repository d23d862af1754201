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

import msgspec

from wire import EventRecord, EventType

from .._errors import InvalidRecord
from ._records import group_of
from ._secrets import scrub_secret_body
from ._sqlite_records import encode

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


@dataclass(frozen=True, slots=True)
class ObjectParts:
    """What an ADDED/MODIFIED record contributes to its row beyond the record's own fields."""

    labels: str | None  # JSON text of metadata.labels, None when it has none
    body: bytes  # the object JSON, Secrets scrubbed


@dataclass(frozen=True, slots=True)
class PreparedEvents:
    """A validated batch: per record its API group and, for objects written, its parts."""

    records: Sequence[EventRecord]
    groups: list[str]
    parts: list[ObjectParts | None]


def prepare_events(records: Sequence[EventRecord], account: str | None) -> PreparedEvents:
    """Check every record and build its row parts; raises InvalidRecord naming the record
    (by index) and what is wrong with it, before anything is written.

    ``account``, when given, is the one account every record must belong to.
    """
    groups: list[str] = []
    parts: list[ObjectParts | None] = []
    for index, r in enumerate(records):
        if account is not None and r.account != account:
            raise InvalidRecord(f"record {index} is for account {r.account!r}, not {account!r}")
        t = r.type
        if t not in _KNOWN:
            raise InvalidRecord(f"record {index}: unknown event type {t}")
        group = _group(r.api_version)
        groups.append(group)
        if t in (_ADDED, _MODIFIED, _DELETED) and not (r.account and r.kind and r.name):
            raise InvalidRecord(f"record {index}: account, kind and name are required")
        parts.append(object_parts(index, r, group) if t in (_ADDED, _MODIFIED) else None)
    return PreparedEvents(records, groups, parts)


def _group(api_version: str) -> str:
    group = _GROUPS.get(api_version)
    if group is None:
        group = group_of(api_version)
        if len(_GROUPS) < _MAX_GROUPS:
            _GROUPS[api_version] = group
    return group


def object_parts(index: int, r: EventRecord, group: str) -> ObjectParts:
    """The labels and stored body of record ``index``; raises InvalidRecord if its object is
    not JSON."""
    body = r.object
    if r.kind == "Secret" and group == "":
        # Defence in depth: the ingest paths scrub Secrets already (server/_grpc.py,
        # server/ops); the store never keeps data, stringData or the last-applied annotation.
        body = scrub_secret_body(r)
    try:
        labels = _decode_head(body).metadata.labels
    except msgspec.DecodeError as exc:
        raise InvalidRecord(
            f"record {index} ({r.kind} {r.namespace}/{r.name}): object is not valid "
            f"Kubernetes JSON: {exc}"
        ) from exc
    return ObjectParts(encode(labels).decode() if labels else None, body)
