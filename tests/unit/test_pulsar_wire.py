"""The Pulsar wire codec: framing, checksums, batches and compression."""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest

from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.batch import Entry, build_batch, entries, split_batch
from adapters.pulsar.wire.frames import (
    MAX_FRAME_SIZE,
    FrameError,
    decode_frame,
    encode_command,
    encode_payload_command,
    frame_size,
)


def _send(producer_id: int = 1, sequence_id: int = 7) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=pb.BaseCommand.SEND)
    cmd.send.producer_id = producer_id
    cmd.send.sequence_id = sequence_id
    return cmd


def _meta(**fields: object) -> pb.MessageMetadata:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1000)
    for key, value in fields.items():
        setattr(meta, key, value)
    return meta


def _split(data: bytes) -> tuple[int, bytes]:
    """Total size prefix and the rest of a frame."""
    return frame_size(data[:4]), data[4:]


def test_crc32c_is_the_castagnoli_polynomial() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_simple_command_layout_and_round_trip() -> None:
    cmd = pb.BaseCommand(type=pb.BaseCommand.PING)
    cmd.ping.SetInParent()
    data = encode_command(cmd)
    body = cmd.SerializeToString()
    assert data == struct.pack(">II", len(body) + 4, len(body)) + body
    size, rest = _split(data)
    assert size == len(rest)
    decoded = decode_frame(rest)
    assert decoded.command.type == pb.BaseCommand.PING
    assert decoded.metadata is None
    assert decoded.payload == b""


def test_payload_command_layout_checksum_and_round_trip() -> None:
    meta = _meta()
    meta.properties.add(key="a", value="1")
    data = encode_payload_command(_send(), meta, b"hello")
    body = _send().SerializeToString()
    size, rest = _split(data)
    assert size == len(rest)
    magic_at = 4 + len(body)
    assert rest[magic_at : magic_at + 2] == b"\x0e\x01"
    (checksum,) = struct.unpack(">I", rest[magic_at + 2 : magic_at + 6])
    assert checksum == crc32c.crc32c(rest[magic_at + 6 :])
    frame = decode_frame(rest)
    assert frame.checksum_ok
    assert frame.command.send.sequence_id == 7
    assert frame.metadata is not None
    assert frame.metadata.producer_name == "p"
    assert [(kv.key, kv.value) for kv in frame.metadata.properties] == [("a", "1")]
    assert frame.payload == b"hello"


def test_corrupted_payload_fails_the_checksum() -> None:
    _, rest = _split(encode_payload_command(_send(), _meta(), b"hello"))
    corrupted = rest[:-1] + b"X"
    assert not decode_frame(corrupted).checksum_ok


def test_payload_without_checksum_is_accepted() -> None:
    body = _send().SerializeToString()
    meta = _meta().SerializeToString()
    rest = struct.pack(">I", len(body)) + body + struct.pack(">I", len(meta)) + meta + b"raw"
    frame = decode_frame(rest)
    assert frame.checksum_ok
    assert frame.payload == b"raw"
    assert frame.metadata is not None and frame.metadata.sequence_id == 7


def test_frame_size_bounds() -> None:
    assert frame_size(struct.pack(">I", 4)) == 4
    with pytest.raises(FrameError):
        frame_size(struct.pack(">I", 3))
    with pytest.raises(FrameError):
        frame_size(struct.pack(">I", MAX_FRAME_SIZE + 1))


def test_truncated_frames_are_rejected() -> None:
    with pytest.raises(FrameError):
        decode_frame(b"\x00\x00")
    with pytest.raises(FrameError):
        decode_frame(struct.pack(">I", 50) + b"\x08\x12")
    body = _send().SerializeToString()
    with pytest.raises(FrameError):
        decode_frame(struct.pack(">I", len(body)) + body + struct.pack(">I", 99) + b"x")


def test_unknown_command_type_still_decodes() -> None:
    # type = 99 (not in our enum) and an unknown field 200: must not make the frame unreadable.
    body = b"\x08\x63" + b"\xc0\x0c\x01"
    frame = decode_frame(struct.pack(">I", len(body)) + body)
    assert not frame.command.HasField("type")


def test_required_fields_are_enforced_on_replies() -> None:
    reply = pb.BaseCommand(type=pb.BaseCommand.SUCCESS)
    reply.success.SetInParent()
    assert not reply.IsInitialized()
    reply.success.request_id = 3
    assert reply.IsInitialized()


LIMITS = {"limit": 64 * 1024, "max_count": 100}


def test_batch_round_trip() -> None:
    items = [
        Entry(payload=b"one", properties={"k": "v"}, partition_key="key-1", sequence_id=10),
        Entry(payload=b"", properties={}, ordering_key=b"\x01", event_time=55, sequence_id=11),
        Entry(payload=b"three" * 100),
    ]
    data = build_batch(items)
    assert split_batch(data, 3) == items


def test_entries_of_a_batched_send() -> None:
    items = [Entry(payload=b"a", properties={"i": "0"}), Entry(payload=b"b", properties={"i": "1"})]
    meta = _meta(num_messages_in_batch=2)
    found = entries(meta, build_batch(items), **LIMITS)
    assert [(e.payload, e.properties) for e in found] == [(b"a", {"i": "0"}), (b"b", {"i": "1"})]


def test_entries_of_a_single_send_take_metadata_fields() -> None:
    meta = _meta(partition_key="pk", event_time=9)
    meta.properties.add(key="x", value="y")
    (entry,) = entries(meta, b"body", **LIMITS)
    assert entry == Entry(payload=b"body", properties={"x": "y"}, partition_key="pk", event_time=9)


def test_zlib_batches_are_decompressed() -> None:
    raw = build_batch([Entry(payload=b"z" * 1000), Entry(payload=b"q")])
    meta = _meta(num_messages_in_batch=2, compression=pb.ZLIB, uncompressed_size=len(raw))
    assert [e.payload for e in entries(meta, zlib.compress(raw), **LIMITS)] == [b"z" * 1000, b"q"]


def test_unsupported_compression_and_corrupt_batches_are_errors() -> None:
    with pytest.raises(FrameError, match="LZ4"):
        entries(_meta(compression=pb.LZ4, uncompressed_size=3), b"...", **LIMITS)
    raw = build_batch([Entry(payload=b"abc")])
    with pytest.raises(FrameError):
        split_batch(raw[:-1], 1)
    with pytest.raises(FrameError):
        split_batch(raw, 2)


def test_zlib_inflates_no_more_than_declared_nor_the_limit() -> None:
    raw = b"x" * 5000
    packed = zlib.compress(raw)
    for declared in (10, 4999, 5001):
        meta = _meta(compression=pb.ZLIB, uncompressed_size=declared)
        with pytest.raises(FrameError, match="uncompressed_size"):
            entries(meta, packed, **LIMITS)
    over = _meta(compression=pb.ZLIB, uncompressed_size=64 * 1024 + 1)
    with pytest.raises(FrameError, match="uncompressed_size"):
        entries(over, zlib.compress(bytes(64 * 1024 + 1)), **LIMITS)
    with pytest.raises(FrameError, match="uncompressed_size"):
        entries(_meta(compression=pb.ZLIB), packed, **LIMITS)
    exact = _meta(compression=pb.ZLIB, uncompressed_size=5000)
    assert entries(exact, packed, **LIMITS)[0].payload == raw


def test_batch_counts_must_match_the_payload_and_the_limit() -> None:
    raw = build_batch([Entry(payload=b"a"), Entry(payload=b"b")])
    for count in (-5, 0, 1, 3, 101):
        with pytest.raises(FrameError, match="num_messages_in_batch"):
            entries(_meta(num_messages_in_batch=count), raw, **LIMITS)
    with pytest.raises(FrameError, match="payload"):
        entries(_meta(), b"x" * (64 * 1024 + 1), **LIMITS)
