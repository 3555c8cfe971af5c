"""Message payloads: decompression and the batch format.

A batched payload (metadata `num_messages_in_batch` set) is a sequence of entries
`[4-byte size][SingleMessageMetadata][payload]`, compressed as a whole per the metadata.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import MAX_MESSAGE_SIZE, FrameError

_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Entry:
    """One application message taken from a SEND payload (batched or not)."""

    payload: bytes
    properties: dict[str, str] = field(default_factory=dict)
    partition_key: str = ""
    ordering_key: bytes = b""
    event_time: int = 0
    sequence_id: int | None = None


def decompress(metadata: pb.MessageMetadata, payload: bytes) -> bytes:
    """The uncompressed payload; only NONE and ZLIB are supported."""
    kind = metadata.compression
    if kind == pb.NONE:
        return payload
    if kind == pb.ZLIB:
        size = metadata.uncompressed_size
        if size > MAX_MESSAGE_SIZE:
            raise FrameError(f"uncompressed size {size} exceeds {MAX_MESSAGE_SIZE}")
        try:
            return zlib.decompress(payload)
        except zlib.error as exc:
            raise FrameError(f"corrupt ZLIB payload: {exc}") from exc
    raise FrameError(f"compression {pb.CompressionType.Name(kind)} is not supported")


def is_batch(metadata: pb.MessageMetadata) -> bool:
    """True when the payload is in the batch format."""
    return metadata.HasField("num_messages_in_batch")


def entries(metadata: pb.MessageMetadata, payload: bytes) -> list[Entry]:
    """The application messages carried by one SEND frame, in order."""
    data = decompress(metadata, payload)
    if not is_batch(metadata):
        return [
            Entry(
                payload=data,
                properties={kv.key: kv.value for kv in metadata.properties},
                partition_key=metadata.partition_key,
                ordering_key=metadata.ordering_key,
                event_time=metadata.event_time,
            )
        ]
    return split_batch(data, metadata.num_messages_in_batch)


def split_batch(data: bytes, count: int) -> list[Entry]:
    """Split an uncompressed batch payload of `count` entries."""
    out: list[Entry] = []
    pos = 0
    for _ in range(count):
        if pos + 4 > len(data):
            raise FrameError("batch payload ends before its entry count")
        (size,) = _U32.unpack_from(data, pos)
        pos += 4
        single = pb.SingleMessageMetadata()
        try:
            single.MergeFromString(data[pos : pos + size])
        except Exception as exc:
            raise FrameError(f"undecodable single message metadata: {exc}") from exc
        pos += size
        end = pos + single.payload_size
        if end > len(data):
            raise FrameError("batch entry payload exceeds the batch")
        out.append(
            Entry(
                payload=bytes(data[pos:end]),
                properties={kv.key: kv.value for kv in single.properties},
                partition_key=single.partition_key,
                ordering_key=single.ordering_key,
                event_time=single.event_time,
                sequence_id=single.sequence_id if single.HasField("sequence_id") else None,
            )
        )
        pos = end
    return out


def build_batch(items: Sequence[Entry]) -> bytes:
    """Serialize entries into an uncompressed batch payload (the inverse of `split_batch`)."""
    parts: list[bytes] = []
    for item in items:
        single = pb.SingleMessageMetadata(payload_size=len(item.payload))
        for key, value in item.properties.items():
            single.properties.add(key=key, value=value)
        if item.partition_key:
            single.partition_key = item.partition_key
        if item.ordering_key:
            single.ordering_key = item.ordering_key
        if item.event_time:
            single.event_time = item.event_time
        if item.sequence_id is not None:
            single.sequence_id = item.sequence_id
        meta = single.SerializeToString()
        parts += [_U32.pack(len(meta)), meta, item.payload]
    return b"".join(parts)
