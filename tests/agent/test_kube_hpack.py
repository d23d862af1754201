"""The client's HPACK against the hpack library: what we encode the library decodes (credentials
never indexed), and what the library encodes (Huffman, a dynamic table that grows, evicts
and is resized) we decode, block after block on one connection's state."""

from __future__ import annotations

import hpack
import pytest

from agent.kube._hpack import Decoder, HpackError, encode_field

REQUEST = [
    (b":method", b"GET"),
    (b":scheme", b"https"),
    (b":authority", b"10.0.0.1:6443"),
    (b":path", b"/api/v1/namespaces/default/pods?limit=500"),
    (b"user-agent", b"kubesvc-agent"),
    (b"x-custom-name", b"a" * 300),  # a name not in the static table, a long value
]


def test_what_we_encode_the_library_decodes_and_credentials_are_never_indexed() -> None:
    token = (b"authorization", b"Bearer " + b"t" * 900)
    block = b"".join(encode_field(n, v) for n, v in REQUEST) + encode_field(*token, True)
    decoded = list(hpack.Decoder().decode(block, raw=True))
    assert [(bytes(n), bytes(v)) for n, v in decoded] == [*REQUEST, token]
    assert isinstance(decoded[-1], hpack.NeverIndexedHeaderTuple)
    assert encode_field(b":method", b"GET") == b"\x82"  # the static table's own entry


def test_we_decode_the_librarys_blocks_as_its_table_evolves() -> None:
    encoder = hpack.Encoder()
    decoder = Decoder()
    for n in range(200):
        fields = [
            (b":status", b"200"),
            (b"content-type", b"application/json"),
            (b"audit-id", f"{n:032x}".encode()),  # new each time: fills and evicts
            (b"x-kubernetes-pf-flowschema-uid", b"f" * 36),
        ]
        if n == 100:
            encoder.header_table_size = 256  # a size update at the start of this block
        assert decoder.decode(encoder.encode(fields, huffman=n % 2 == 0)) == fields


@pytest.mark.parametrize(
    "block",
    [
        b"\xff\xff\xff\xff\xff\x0f",  # an index past every table (and a huge integer)
        b"\xbf",  # index 63: the dynamic table is empty
        b"\x3f\xe2\x1f",  # a size update to 4097, over the 4096 we allow
        b"\x00\x05ab",  # a name longer than the block
        b"\x40",  # ends mid-field
    ],
)
def test_malformed_blocks_are_errors(block: bytes) -> None:
    with pytest.raises(HpackError):
        Decoder().decode(block)


def test_the_decoded_list_is_capped() -> None:
    block = b"".join(encode_field(b"x-big", b"v" * 4000) for _ in range(20))
    with pytest.raises(HpackError, match="over"):
        Decoder(max_header_list_size=65536).decode(block)
