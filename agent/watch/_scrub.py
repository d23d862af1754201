"""What leaves the agent: Secrets reduced to metadata, managedFields stripped.

Secrets are listed and watched as PartialObjectMetadata, so their data never reaches the
agent. This module is the defence in depth behind that: a Secret is rebuilt from an
allowlist of top-level fields (apiVersion, kind, metadata, type, immutable), so ``data``,
``stringData`` or anything else a misbehaving server sends is dropped; the
``kubectl.kubernetes.io/last-applied-configuration`` annotation (which holds the whole
Secret, data included, when it was applied with kubectl) is removed, and so is
``metadata.managedFields`` (it names the data keys). The PartialObjectMetadata type is
rewritten to ``v1``/``Secret`` so the server stores what the user would recognise.

Every other object passes through as the API server's bytes unless ``managedFields`` must be
stripped; a substring test decides that before anything is parsed, and then only the top
level and ``metadata`` are decoded (every other value stays raw and is written back as is).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from .._errors import WatchDecodeError

__all__ = ["LAST_APPLIED_ANNOTATION", "Scrubber", "strip_managed_fields_at"]

LAST_APPLIED_ANNOTATION: Final = "kubectl.kubernetes.io/last-applied-configuration"

_SECRET_FIELDS: Final = ("metadata", "type", "immutable")
_MANAGED_FIELDS_MARK: Final = b'"managedFields"'

_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder(dict[str, Any])
_ENCODER = msgspec.json.Encoder()


class Scrubber:
    """Turns an object's bytes from the API server into the bytes the agent sends.

    ``strip_managed_fields`` (default on) applies to every kind; Secrets are always stripped.
    Both methods raise ``WatchDecodeError`` when the bytes are not a JSON object.
    """

    __slots__ = ("strip_managed_fields",)

    def __init__(self, *, strip_managed_fields: bool = True) -> None:
        self.strip_managed_fields = strip_managed_fields

    def clean(self, data: bytes) -> bytes:
        """An ordinary object: the same bytes, or re-encoded without managedFields."""
        if not self.strip_managed_fields or _MANAGED_FIELDS_MARK not in data:
            return data
        try:
            raw_meta = _TOP.decode(data).get("metadata")
        except msgspec.DecodeError as exc:
            raise WatchDecodeError(f"object ({len(data)} bytes) is not JSON: {exc}") from exc
        if raw_meta is None:
            return data
        return strip_managed_fields_at(data, memoryview(raw_meta).tobytes())

    def secret(self, data: bytes) -> bytes:
        """A Secret (metadata-only or, in depth, a full one): the metadata and nothing else."""
        try:
            received = _ANY.decode(data)
        except msgspec.DecodeError as exc:
            problem = f"Secret ({len(data)} bytes) is not a JSON object: {exc}"
            raise WatchDecodeError(problem) from exc
        kept: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret"}
        for name in _SECRET_FIELDS:
            if name in received:
                kept[name] = received[name]
        meta = kept.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
            annotations = meta.get("annotations")
            if isinstance(annotations, dict):
                annotations.pop(LAST_APPLIED_ANNOTATION, None)
                if not annotations:
                    del meta["annotations"]
        else:
            kept.pop("metadata", None)
        return _ENCODER.encode(kept)


def strip_managed_fields_at(data: bytes, metadata: bytes) -> bytes:
    """``data`` with ``metadata.managedFields`` removed, given the exact bytes of its metadata.

    Only the metadata is decoded and re-encoded (its other values stay raw); the rest of the
    object is copied around it. The metadata's text cannot occur earlier inside a JSON string
    (its quotes would be escaped there), so its first occurrence is the metadata itself.
    Raises WatchDecodeError when ``metadata`` is not a JSON object.
    """
    try:
        fields = _TOP.decode(metadata)
    except msgspec.DecodeError as exc:
        raise WatchDecodeError(f"object metadata is not a JSON object: {exc}") from exc
    if fields.pop("managedFields", None) is None:
        # The marker was somewhere else (a label, the spec): nothing to strip.
        return data
    at = data.find(metadata)
    if at < 0:
        return data
    return b"".join((data[:at], _ENCODER.encode(fields), data[at + len(metadata) :]))
