"""Payload compression as Pulsar clients write it, decompressed within a bound.

Pulsar compresses a message payload (a whole batch when batching) with the codec its metadata
names and records the uncompressed size: ZLIB is a zlib stream, LZ4 the raw LZ4 *block* format
(no frame, no size prefix), ZSTD one zstd frame, SNAPPY raw snappy (no framing format). LZ4,
ZSTD and SNAPPY come from `cramjam`, one maintained library for the three.

A payload is never inflated beyond its declared `uncompressed_size`, which may be no larger than
the caller's limit: the output buffer is allocated at the declared size and a codec that would
write past it fails. A payload that inflates to another size than declared, has bytes left over
or is corrupt is refused (`FrameError`), as is a codec this module does not know.
"""

from __future__ import annotations

import zlib

from google.protobuf.unknown_fields import UnknownFieldSet

from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import FrameError

SUPPORTED = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")
"""The CompressionType names the front end accepts."""
COMPRESSION_FIELD = pb.MessageMetadata.DESCRIPTOR.fields_by_name["compression"].number


def codec_name(kind: int) -> str:
    """The name of a CompressionType value, or the number when it is not one."""
    try:
        return str(pb.CompressionType.Name(kind))
    except ValueError:
        return str(kind)


def declared(metadata: pb.MessageMetadata) -> int:
    """The compression the metadata names, including a value the enum does not know (proto2
    keeps such a value among the unknown fields, and the field then reads as NONE)."""
    unknown = UnknownFieldSet(metadata)
    for i in range(len(unknown)):
        item = unknown[i]
        if item.field_number == COMPRESSION_FIELD and isinstance(item.data, int):
            return item.data
    return int(metadata.compression)


def check_kind(kind: int) -> None:
    """Raise FrameError unless `kind` is a codec the front end decompresses."""
    if codec_name(kind) not in SUPPORTED:
        raise FrameError(
            f"compression={codec_name(kind)} is not allowed: one of {', '.join(SUPPORTED)}"
        )


def decompress(kind: int, payload: bytes, size: int) -> bytes:
    """`payload` compressed with `kind`, inflated to exactly `size` bytes (never more)."""
    check_kind(kind)
    if kind == pb.ZLIB:
        return _zlib(payload, size)
    if kind == pb.LZ4:
        return _cramjam("LZ4", payload, size)
    if kind == pb.ZSTD:
        return _cramjam("ZSTD", payload, size)
    if kind == pb.SNAPPY:
        return _cramjam("SNAPPY", payload, size)
    raise FrameError(f"compression={codec_name(kind)} is not allowed here")


def _zlib(payload: bytes, size: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(payload, size + 1)
    except zlib.error as exc:
        raise FrameError(f"corrupt ZLIB payload: {exc}") from exc
    if len(data) != size or not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
        raise FrameError(
            f"uncompressed_size={size} is not allowed: the ZLIB payload inflates to "
            + ("more" if len(data) > size or inflater.unconsumed_tail else "another size")
        )
    return data


def _cramjam(name: str, payload: bytes, size: int) -> bytes:
    try:
        import cramjam
    except ImportError as exc:  # pragma: no cover - a dependency of the pulsar extra
        raise FrameError(f"compression={name} needs cramjam: pip install cramjam") from exc
    if name == "SNAPPY":
        # Raw snappy starts with its own uncompressed length: check it before anything else.
        try:
            stated = int(cramjam.snappy.decompress_raw_len(payload))
        except Exception as exc:
            raise FrameError(f"corrupt SNAPPY payload: {exc}") from exc
        if stated != size:
            raise FrameError(
                f"uncompressed_size={size} is not allowed: the SNAPPY payload inflates to "
                f"{stated} bytes"
            )
    out = bytearray(size)
    try:
        if name == "LZ4":
            written = int(cramjam.lz4.decompress_block_into(payload, out, output_len=size))
        elif name == "ZSTD":
            written = int(cramjam.zstd.decompress_into(payload, out))
        else:
            written = int(cramjam.snappy.decompress_raw_into(payload, out))
    except Exception as exc:
        # A payload that would inflate past the declared size fails here, as a corrupt one.
        raise FrameError(
            f"uncompressed_size={size} is not allowed, or the {name} payload is corrupt: "
            f"{str(exc)[:200]}"
        ) from exc
    if written != size:
        raise FrameError(
            f"uncompressed_size={size} is not allowed: the {name} payload inflates to "
            f"{written} bytes"
        )
    return bytes(out)
