"""Request bodies: the one place where every route's JSON body is read, bounded and decoded.

Every way a body can be wrong is a 4xx whose message says what was wrong and where, never a
500: an empty body, a body over ``MAX_BODY_BYTES`` (413), bytes that are not UTF-8 (the byte
offset), text that is not JSON (msgspec names the byte), JSON nested deeper than
``MAX_JSON_DEPTH`` (the byte offset where it goes too deep). What the routes then check (the
top-level type, the fields they know) they report by JSON path (``body[1].name``).

Why a depth limit of our own. msgspec decodes nested arrays and objects by recursion and stops
at Python's recursion limit with a RecursionError, at a depth that depends on how deep the
stack already is; a value just under it then fails again further on (the JSON encoders, the
description parsers). Kubernetes objects nest a few dozen levels at most (a CRD's schema is
among the deepest), so a fixed limit well under the recursion limit refuses nothing real and
makes every later step safe.
"""

from __future__ import annotations

import itertools
import re
from array import array
from typing import Any

import msgspec
from starlette.requests import Request

from ._errors import BadRequest, ContentTooLarge

__all__ = ["MAX_BODY_BYTES", "MAX_JSON_DEPTH", "decode_json", "json_body"]

MAX_BODY_BYTES = 4 * 2**20
MAX_JSON_DEPTH = 128

_decode = msgspec.json.decode
# A JSON string (in valid JSON: no raw quote or backslash inside but escapes), or a bracket.
_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_STRINGS = re.compile(_STRING, re.DOTALL)
_TOKENS = re.compile(_STRING + rb"|[\[\]{}]", re.DOTALL)
# bytes.translate: keep the brackets only, opening ones as 1 and closing ones as -1 (0xff).
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def decode_json(raw: bytes) -> Any:
    """The JSON value of a request body.

    Raises BadRequest when the body is empty (or blank), is not UTF-8, is not JSON or nests
    deeper than MAX_JSON_DEPTH; the message says what and where (a byte offset).
    """
    if not raw.strip():
        raise BadRequest("the request body is empty; a JSON body is required")
    try:
        value = _decode(raw)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        # msgspec's offset is inside the string it was decoding: find the body's own.
        raise BadRequest(_not_utf8(raw)) from exc
    except RecursionError as exc:
        raise BadRequest(_too_deep(_deep_offset(raw))) from exc
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _depth(raw) > MAX_JSON_DEPTH:
        raise BadRequest(_too_deep(_deep_offset(raw)))
    return value


async def json_body(request: Request) -> Any:
    """The request's JSON body, read up to MAX_BODY_BYTES (ContentTooLarge past it), then
    :func:`decode_json` (BadRequest saying why)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ContentTooLarge(_too_large())
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ContentTooLarge(_too_large())
        chunks.append(chunk)
    return decode_json(b"".join(chunks))


def _too_large() -> str:
    return f"the request body is larger than the limit of {MAX_BODY_BYTES} bytes"


def _not_utf8(raw: bytes) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 1].hex()
        return f"the request body is not valid UTF-8: byte 0x{bad} at offset {exc.start}"
    return "the request body is not valid UTF-8"  # not reached: msgspec checks the same


def _too_deep(offset: int | None) -> str:
    where = f" at byte {offset}" if offset is not None else ""
    return f"the request body nests arrays/objects deeper than {MAX_JSON_DEPTH} levels{where}"


def _depth(raw: bytes) -> int:
    """The deepest nesting of valid JSON ``raw`` (its strings removed, brackets summed in C)."""
    brackets = _STRINGS.sub(b"", raw).translate(_BRACKETS, _NOT_BRACKETS)
    return max(itertools.accumulate(array("b", brackets)), default=0)


def _deep_offset(raw: bytes) -> int | None:
    """The offset of the first bracket that opens level MAX_JSON_DEPTH + 1 (None: no such)."""
    depth = 0
    for match in _TOKENS.finditer(raw):
        char = raw[match.start()]
        if char in b"[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return match.start()
        elif char in b"]}":
            depth -= 1
    return None
