"""Compressed SEND frames attacked at the Pulsar front end's edge: a lying uncompressed_size,
bombs, garbage payloads and unknown codecs for LZ4, ZSTD and SNAPPY. Each gets a SEND_ERROR
naming what is wrong, nothing is stored, the payload is never inflated past the declared size
or the limit, and the connection goes on serving."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import cramjam
import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway
from tests.e2e.test_pulsar_frontend_raw_limits import (
    LIMIT,
    hwm_kib,
    hwm_reset,
    only_sentinel_stored,
    producing,
    refused_send,
)
from tests.pulsar_raw import Cmd


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[PulsarFrontEnd]:
    async with running_gateway(
        data_dir=tmp_path / "data", listen="127.0.0.1:0", clock=SystemClock()
    ) as app:
        instance = PulsarFrontEnd(app.engine, "127.0.0.1", 0, max_message_size=LIMIT)
        await instance.start()
        yield instance
        await instance.stop()


CODECS = {"lz4": pb.LZ4, "zstd": pb.ZSTD, "snappy": pb.SNAPPY}


def pack(kind: int, data: bytes) -> bytes:
    if kind == pb.LZ4:
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    if kind == pb.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    return bytes(cramjam.snappy.compress_raw(data))


def meta(sequence_id: int, kind: int, uncompressed_size: int | None) -> pb.MessageMetadata:
    out = raw.meta("edge", sequence_id)
    out.compression = kind  # type: ignore[assignment]
    if uncompressed_size is not None:
        out.uncompressed_size = uncompressed_size
    return out


@pytest.mark.parametrize("codec", sorted(CODECS))
async def test_lying_sizes_and_garbage_are_refused_and_nothing_is_stored(
    front: PulsarFrontEnd, codec: str
) -> None:
    kind = CODECS[codec]
    body = b"compressible " * 100
    packed = pack(kind, body)
    client = await producing(front.port)
    cases = [
        (len(body) - 1, packed),
        (len(body) + 1, packed),
        (0, packed),
        (None, packed),
        (LIMIT + 1, packed),
        (len(body), b"garbage, not compressed at all"),
        (len(body), b""),
        (len(body), packed[: len(packed) // 2]),
        (len(body), packed + b"\x00\x01tail"),
    ]
    for seq, (declared, payload) in enumerate(cases):
        client.send(raw.send(1, seq), meta(seq, kind, declared), payload)
        reply = await refused_send(client, seq)
        assert "uncompressed_size" in reply.message or codec.upper() in reply.message
    client.send(raw.send(1, len(cases)), meta(len(cases), kind, len(body)), packed)
    receipt = (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt
    assert receipt.sequence_id == len(cases)
    client.send(raw.subscribe(2, 2, pb.CommandSubscribe.Exclusive))
    await client.expect(Cmd.SUCCESS)
    client.send(raw.flow(2, 5))
    assert (await client.expect(Cmd.MESSAGE)).payload == body
    await client.close()


@pytest.mark.parametrize("codec", sorted(CODECS))
async def test_a_bomb_is_refused_without_inflating_it(front: PulsarFrontEnd, codec: str) -> None:
    kind = CODECS[codec]
    bomb = pack(kind, bytes((32 if kind == pb.SNAPPY else 64) << 20))  # snappy packs ~21:1
    assert len(bomb) < LIMIT
    client = await producing(front.port)
    measured = hwm_reset()
    before = hwm_kib()
    for seq, declared in enumerate((10, LIMIT, 2 * LIMIT)):
        client.send(raw.send(1, seq), meta(seq, kind, declared), bomb)
        reply = await refused_send(client, seq)
        assert "uncompressed_size" in reply.message
    if measured:
        assert hwm_kib() - before < 32 * 1024, "the payload was inflated"
    await only_sentinel_stored(client, 3)


async def test_an_unknown_codec_is_refused(front: PulsarFrontEnd) -> None:
    client = await producing(front.port)
    for seq, value in enumerate((5, 9, 127)):
        data = meta(seq, pb.NONE, 4).SerializeToString() + bytes([8 << 3, value])
        command = raw.send(1, seq).SerializeToString()
        client.writer.write(raw.payload_frame(command, data, b"body"))
        reply = await refused_send(client, seq)
        assert f"compression={value}" in reply.message
    await only_sentinel_stored(client, 3)
