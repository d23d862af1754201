"""HPACK (RFC 7541), the header compression of HTTP/2, for the Kubernetes client.

Why not the hpack library's Encoder/Decoder: they log a DEBUG record per header field (about
30 ``logging.debug`` calls per request even with DEBUG off), and the encoder searched and
grew its dynamic table for every field of every request: about a quarter of the client's CPU
per HTTP/2 request. Huffman decoding stays the library's (``decode_huffman``).

Encoding is stateless: every field is a literal *without indexing* (never indexed for
credentials), with its name from the static table where it is there, or an indexed static
field (``:method GET``). The encoder's dynamic table stays empty, so a SETTINGS_HEADER_TABLE
_SIZE from the server never needs an answer, and each field's bytes can be cached: a request
is the join of cached pieces. Requests are a little larger than with indexing (the repeated
``user-agent``, ``accept``, ``:authority``: ~60 bytes); the bearer token, the bulk of a
request's headers, is never indexed anyway.

Decoding is the full format: indexed fields, literals with and without indexing, dynamic
table size updates, Huffman-coded strings, with the table bounded by what we advertise and
the decoded list capped in bytes (``max_header_list_size``).
"""

from __future__ import annotations

from collections import deque

from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

__all__ = ["Decoder", "HpackError", "encode_field"]

_STATIC: tuple[tuple[bytes, bytes], ...] = HeaderTable.STATIC_TABLE
_STATIC_NAMES: dict[bytes, int] = {}
_STATIC_PAIRS: dict[tuple[bytes, bytes], int] = {}
for _index, (_name, _value) in enumerate(_STATIC, start=1):
    _STATIC_NAMES.setdefault(_name, _index)
    _STATIC_PAIRS.setdefault((_name, _value), _index)
_ENTRY_OVERHEAD = 32  # RFC 7541 section 4.1
_CACHE_LIMIT = 512


class HpackError(ValueError):
    """A header block that cannot be decoded (a COMPRESSION_ERROR for the connection)."""


def _integer(value: int, prefix_bits: int, flags: int) -> bytes:
    """An HPACK integer with a ``prefix_bits`` prefix, the first byte or-ed with ``flags``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((flags | value,))
    out = bytearray((flags | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_cache: dict[tuple[bytes, bytes, bool], bytes] = {}


def encode_field(name: bytes, value: bytes, sensitive: bool = False) -> bytes:
    """One field's representation (see the module docstring); ``name`` is lowercase."""
    key = (name, value, sensitive)
    cached = _cache.get(key)
    if cached is not None:
        return cached
    index = None if sensitive else _STATIC_PAIRS.get((name, value))
    if index is not None:
        encoded = _integer(index, 7, 0x80)
    else:
        flags = 0x10 if sensitive else 0x00  # never indexed / without indexing
        name_index = _STATIC_NAMES.get(name)
        if name_index is not None:
            head = _integer(name_index, 4, flags)
        else:
            head = bytes((flags,)) + _integer(len(name), 7, 0) + name
        encoded = head + _integer(len(value), 7, 0) + value
    if len(_cache) >= _CACHE_LIMIT:
        _cache.clear()  # paths and lengths vary; what repeats is back after one request
    _cache[key] = encoded
    return encoded


class Decoder:
    """The decoding side of one connection (its dynamic table is the connection's state)."""

    def __init__(self, *, max_table_size: int = 4096, max_header_list_size: int = 65536) -> None:
        self._max_allowed = max_table_size  # what we advertise (SETTINGS_HEADER_TABLE_SIZE)
        self._max_size = max_table_size  # what the encoder set (<= allowed)
        self.max_header_list_size = max_header_list_size
        self._table: deque[tuple[bytes, bytes]] = deque()  # newest first
        self._size = 0

    def _field(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= len(_STATIC):
            return _STATIC[index - 1]
        position = index - len(_STATIC) - 1
        if index <= 0 or position >= len(self._table):
            raise HpackError(f"header index {index} is not in the tables")
        return self._table[position]

    def _add(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value) + _ENTRY_OVERHEAD
        if size > self._max_size:
            self._table.clear()
            self._size = 0
            return
        self._size += size
        self._table.appendleft((name, value))
        self._shrink()

    def _shrink(self) -> None:
        while self._size > self._max_size:
            old_name, old_value = self._table.pop()
            self._size -= len(old_name) + len(old_value) + _ENTRY_OVERHEAD

    def decode(self, data: bytes) -> list[tuple[bytes, bytes]]:
        """The fields of one complete header block. Raises HpackError."""
        fields: list[tuple[bytes, bytes]] = []
        total = 0
        pos = 0
        end = len(data)
        try:
            while pos < end:
                byte = data[pos]
                if byte & 0x80:  # indexed field
                    index, pos = self._int(data, pos, 7)
                    field = self._field(index)
                elif byte & 0xE0 == 0x20:  # dynamic table size update
                    size, pos = self._int(data, pos, 5)
                    if size > self._max_allowed:
                        raise HpackError(f"a table size of {size}, over the {self._max_allowed}")
                    self._max_size = size
                    self._shrink()
                    continue
                else:
                    indexing = byte & 0xC0 == 0x40
                    index, pos = self._int(data, pos, 6 if indexing else 4)
                    if index:
                        name = self._field(index)[0]
                    else:
                        name, pos = self._string(data, pos)
                    value, pos = self._string(data, pos)
                    field = (name, value)
                    if indexing:
                        self._add(name, value)
                total += len(field[0]) + len(field[1]) + _ENTRY_OVERHEAD
                if total > self.max_header_list_size:
                    raise HpackError(f"header fields over {self.max_header_list_size} bytes")
                fields.append(field)
        except IndexError as exc:
            raise HpackError("a header block that ends mid-field") from exc
        return fields

    @staticmethod
    def _int(data: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
        limit = (1 << prefix_bits) - 1
        value = data[pos] & limit
        pos += 1
        if value < limit:
            return value, pos
        shift = 0
        while True:
            byte = data[pos]
            pos += 1
            value += (byte & 0x7F) << shift
            if not byte & 0x80:
                return value, pos
            shift += 7
            if shift > 28:
                raise HpackError("an integer too large")

    @staticmethod
    def _string(data: bytes, pos: int) -> tuple[bytes, int]:
        huffman = data[pos] & 0x80
        length, pos = Decoder._int(data, pos, 7)
        end = pos + length
        if end > len(data):
            raise HpackError("a string past the end of the header block")
        raw = data[pos:end]
        if huffman:
            try:
                raw = decode_huffman(raw)
            except Exception as exc:  # the library's HPACKDecodingError
                raise HpackError(f"bad Huffman coding: {exc}") from exc
        return raw, end
