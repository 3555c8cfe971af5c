"""Framing of the Pulsar binary protocol: commands in, commands and payload frames out.

A simple frame is `[total size][command size][BaseCommand]`; a payload frame (SEND, MESSAGE)
continues with `[magic 0x0e01][CRC32C][metadata size][MessageMetadata][payload]`, the checksum
covering everything from the metadata size to the end. Sizes are 4-byte big-endian, the magic
2 bytes. The magic and checksum are optional on input.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from adapters.pulsar.wire import wire_pb2 as pb

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
MAX_MESSAGE_SIZE = 5 * 1024 * 1024
"""The largest payload announced in CONNECTED (Pulsar's default)."""
FRAME_OVERHEAD = 64 * 1024
"""Room for command and metadata in a frame beyond its message."""
MAX_FRAME_SIZE = MAX_MESSAGE_SIZE + FRAME_OVERHEAD
"""Largest frame accepted: the message size plus room for command and metadata."""

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")


class FrameError(Exception):
    """A frame that cannot be decoded: the connection must be closed."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame: the command and, for payload commands, metadata and payload."""

    command: pb.BaseCommand
    metadata: pb.MessageMetadata | None = None
    payload: bytes = b""
    checksum_ok: bool = True
    """False when the frame carried a CRC32C that does not match its metadata and payload."""


def encode_command(command: pb.BaseCommand) -> bytes:
    """Frame a command without payload."""
    body = command.SerializeToString()
    return _U32.pack(len(body) + 4) + _U32.pack(len(body)) + body


def encode_payload_command(
    command: pb.BaseCommand, metadata: pb.MessageMetadata, payload: bytes
) -> bytes:
    """Frame a command with metadata and payload, checksummed with CRC32C."""
    body = command.SerializeToString()
    meta = metadata.SerializeToString()
    checked = _U32.pack(len(meta)) + meta + payload
    checksum = crc32c.crc32c(checked)
    total = 4 + len(body) + 2 + 4 + len(checked)
    return b"".join(
        (
            _U32.pack(total),
            _U32.pack(len(body)),
            body,
            _U16.pack(MAGIC_CRC32C),
            _U32.pack(checksum),
            checked,
        )
    )


def frame_size(prefix: bytes, limit: int = MAX_FRAME_SIZE) -> int:
    """The size of the frame that follows a 4-byte total-size prefix; validates the bound."""
    (size,) = _U32.unpack(prefix)
    if size < 4 or size > limit:
        raise FrameError(f"frame size {size} is outside 4..{limit}")
    return int(size)


def decode_frame(frame: bytes) -> Frame:
    """Decode the bytes after the total-size prefix into a command (and payload, if any)."""
    if len(frame) < 4:
        raise FrameError("frame shorter than its command size")
    (cmd_size,) = _U32.unpack_from(frame, 0)
    end = 4 + cmd_size
    if end > len(frame):
        raise FrameError(f"command size {cmd_size} exceeds the frame ({len(frame)} bytes)")
    command = pb.BaseCommand()
    try:
        # MergeFromString: an unknown command type must not make the whole frame unreadable.
        command.MergeFromString(frame[4:end])
    except Exception as exc:
        raise FrameError(f"undecodable command: {exc}") from exc
    if end == len(frame):
        return Frame(command)
    return _decode_payload(command, frame, end)


def _decode_payload(command: pb.BaseCommand, frame: bytes, pos: int) -> Frame:
    checksum_ok = True
    if len(frame) >= pos + 6 and _U16.unpack_from(frame, pos)[0] == MAGIC_BROKER_ENTRY_METADATA:
        (skip,) = _U32.unpack_from(frame, pos + 2)
        pos += 6 + skip
    if len(frame) >= pos + 6 and _U16.unpack_from(frame, pos)[0] == MAGIC_CRC32C:
        (expected,) = _U32.unpack_from(frame, pos + 2)
        pos += 6
        checksum_ok = crc32c.crc32c(frame[pos:]) == expected
    if len(frame) < pos + 4:
        raise FrameError("payload frame without metadata size")
    (meta_size,) = _U32.unpack_from(frame, pos)
    meta_end = pos + 4 + meta_size
    if meta_end > len(frame):
        raise FrameError(f"metadata size {meta_size} exceeds the frame")
    metadata = pb.MessageMetadata()
    try:
        metadata.MergeFromString(frame[pos + 4 : meta_end])
    except Exception as exc:
        raise FrameError(f"undecodable message metadata: {exc}") from exc
    return Frame(command, metadata, bytes(frame[meta_end:]), checksum_ok)
