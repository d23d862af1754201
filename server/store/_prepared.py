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
    parameters (a list, so the epoch and time slots can be set at write time)."""

    records: Sequence[EventRecord]
    groups: list[str]
    rows: list[list[Any] | None]


def prepare_events(records: Sequence[EventRecord], account: str | None) -> PreparedEvents:
    """Check every record and build its row; raises InvalidRecord naming the record (by
    index) and what is wrong with it, before anything is written.

    ``account``, when given, is the one account every record must belong to.
    """
    groups: list[str] = []
    rows: list[list[Any] | None] = []
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
            rows.append(upsert_row(index, r, group))
        else:
            if t == _DELETED and not (r.account and r.kind and r.name):
                raise InvalidRecord(f"record {index}: account, kind and name are required")
            rows.append(None)
    return PreparedEvents(records, groups, rows)


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
    return [
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
