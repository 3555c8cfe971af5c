"""Pulsar payload codecs: LZ4 (raw block), ZSTD (frame), SNAPPY (raw), inflated within bounds."""

from __future__ import annotations

import os
import zlib

import cramjam
import pytest

from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.batch import Entry, build_batch, entries
from adapters.pulsar.wire.frames import FrameError

LIMIT = 64 * 1024
LIMITS = {"limit": LIMIT, "max_count": 100}


def _meta(**fields: object) -> pb.MessageMetadata:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1000)
    for key, value in fields.items():
        setattr(meta, key, value)
    return meta


def pack(kind: int, data: bytes) -> bytes:
    """`data` compressed as a Pulsar client does."""
    if kind == pb.LZ4:
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    if kind == pb.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if kind == pb.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    return zlib.compress(data)


CODECS = [pb.LZ4, pb.ZSTD, pb.SNAPPY, pb.ZLIB]
IDS = ["lz4", "zstd", "snappy", "zlib"]


@pytest.mark.parametrize("kind", CODECS, ids=IDS)
def test_batches_and_single_messages_are_decompressed(kind: int) -> None:
    items = [Entry(payload=os.urandom(100) + b"z" * 1000), Entry(payload=b"q")]
    raw = build_batch(items)
    meta = _meta(num_messages_in_batch=2, compression=kind, uncompressed_size=len(raw))
    assert [e.payload for e in entries(meta, pack(kind, raw), **LIMITS)] == [
        items[0].payload,
        b"q",
    ]
    body = b"single " * 50
    single = _meta(compression=kind, uncompressed_size=len(body))
    assert entries(single, pack(kind, body), **LIMITS)[0].payload == body


@pytest.mark.parametrize("kind", CODECS, ids=IDS)
def test_a_lying_uncompressed_size_is_refused(kind: int) -> None:
    body = b"x" * 5000
    packed = pack(kind, body)
    for declared in (0, 10, 4999, 5001):
        with pytest.raises(FrameError, match="uncompressed_size"):
            entries(_meta(compression=kind, uncompressed_size=declared), packed, **LIMITS)
    with pytest.raises(FrameError, match="uncompressed_size"):
        entries(_meta(compression=kind), packed, **LIMITS)


@pytest.mark.parametrize("kind", CODECS, ids=IDS)
def test_a_bomb_is_not_inflated_past_the_limit(kind: int) -> None:
    bomb = pack(kind, bytes(LIMIT * 16))
    for declared in (LIMIT, LIMIT + 1, LIMIT * 16):
        with pytest.raises(FrameError, match="uncompressed_size"):
            entries(_meta(compression=kind, uncompressed_size=declared), bomb, **LIMITS)


@pytest.mark.parametrize("kind", CODECS, ids=IDS)
@pytest.mark.parametrize(
    "garbage", [b"", b"\x00", b"\xff" * 64, bytes(range(256)), b"garbage, not compressed"]
)
def test_garbage_payloads_are_refused(kind: int, garbage: bytes) -> None:
    with pytest.raises(FrameError):
        entries(_meta(compression=kind, uncompressed_size=100), garbage, **LIMITS)


@pytest.mark.parametrize("kind", CODECS, ids=IDS)
def test_trailing_bytes_after_the_payload_are_refused(kind: int) -> None:
    body = b"abc" * 300
    packed = pack(kind, body) + b"\x00tail"
    with pytest.raises(FrameError):
        entries(_meta(compression=kind, uncompressed_size=len(body)), packed, **LIMITS)


def test_an_unknown_compression_value_is_refused_not_read_as_none() -> None:
    meta = _meta()
    data = meta.SerializeToString() + bytes([8 << 3, 9])  # compression = 9, no such codec
    decoded = pb.MessageMetadata()
    decoded.MergeFromString(data)
    with pytest.raises(FrameError, match="compression=9"):
        entries(decoded, b"plain", **LIMITS)
