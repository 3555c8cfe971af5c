"""Random and mutated frames against the Pulsar port of a real gateway process.

The gateway runs as `gateway serve --pulsar-listen` on a free port. A control message is published
with pulsar-client first; then seeded generators send valid CONNECT / PRODUCER / SEND / SUBSCRIBE /
FLOW / ACK / GET_TOPICS_OF_NAMESPACE / ... sessions whose frames are mutated (bit flips,
truncation, huge and tiny sizes, extreme and negative numbers, invalid UTF-8, missing fields,
wrong wire types, garbage, ZLIB bombs, LZ4 / ZSTD / SNAPPY payloads, batch counts that lie) over
many connections. Afterwards: the process is up, its log has no traceback, the control message
is consumed exactly once, and the process's peak RSS grew by less than `RSS_GROWTH_KIB`. Bounded
to about a minute (fixed seed, fixed number of connections).
"""

from __future__ import annotations

import functools
import os
import random
import socket
import struct
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import cramjam
import pulsar
import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

import tests.pulsar_raw as raw
from adapters.pulsar.wire import wire_pb2 as pb

Cmd = pb.BaseCommand
SEED = int(os.environ.get("FUZZ_SEED", "16"))
"""Fixed, so CI runs the same cases; set FUZZ_SEED to explore others."""
CONNECTIONS = 3000
"""Fuzzed connections (each a session of several frames)."""
RSS_GROWTH_KIB = 160 * 1024
"""Peak RSS (VmHWM) may exceed the RSS before fuzzing by at most this much."""
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
MARK = "@@"
"""A string value replaced by invalid UTF-8 once serialized."""
BAD_UTF8 = b"\xff\xfe"

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the gateway exited at start"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the Pulsar port did not open")


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key}")


# ------------------------------------------------------------------ valid sessions


def connect() -> Message:
    cmd = Cmd(type=Cmd.CONNECT)
    cmd.connect.client_version = "fuzz"
    cmd.connect.protocol_version = 19
    return cmd


def command(kind: int, field: str, **values: object) -> Message:
    cmd = Cmd(type=kind)  # type: ignore[arg-type]
    body = getattr(cmd, field)
    body.SetInParent()
    for key, value in values.items():
        setattr(body, key, value)
    return cmd


def message_id(rng: random.Random) -> pb.MessageIdData:
    return pb.MessageIdData(ledgerId=rng.randrange(2**40), entryId=rng.randrange(64))


def seek_to(mid: pb.MessageIdData) -> pb.BaseCommand:
    cmd = command(Cmd.SEEK, "seek", consumer_id=1, request_id=11)
    cmd.seek.message_id.CopyFrom(mid)  # type: ignore[attr-defined]
    return cmd


def session(rng: random.Random, topic: str) -> list[tuple[Message, Message | None, bytes]]:
    """A plausible sequence of (command, metadata, payload)."""
    out: list[tuple[Message, Message | None, bytes]] = []
    out.append(
        (command(Cmd.PRODUCER, "producer", topic=topic, producer_id=1, request_id=1), None, b"")
    )
    for seq in range(rng.randrange(1, 4)):
        meta, payload = message(rng, seq)
        out.append((command(Cmd.SEND, "send", producer_id=1, sequence_id=seq), meta, payload))
    sub = command(
        Cmd.SUBSCRIBE, "subscribe", topic=topic, subscription="s", consumer_id=1, request_id=2
    )
    sub.subscribe.subType = rng.choice([0, 1, 2, 3])  # type: ignore[attr-defined]
    out.append((sub, None, b""))
    out.append((command(Cmd.FLOW, "flow", consumer_id=1, messagePermits=10), None, b""))
    ack = command(Cmd.ACK, "ack", consumer_id=1, ack_type=rng.choice([0, 1]))
    ack.ack.message_id.append(message_id(rng))  # type: ignore[attr-defined]
    out.append((ack, None, b""))
    extras = [
        command(Cmd.LOOKUP, "lookupTopic", topic=topic, request_id=3),
        command(Cmd.PARTITIONED_METADATA, "partitionMetadata", topic=topic, request_id=4),
        command(
            Cmd.REDELIVER_UNACKNOWLEDGED_MESSAGES, "redeliverUnacknowledgedMessages", consumer_id=1
        ),
        command(Cmd.GET_LAST_MESSAGE_ID, "getLastMessageId", consumer_id=1, request_id=5),
        command(Cmd.GET_SCHEMA, "getSchema", topic=topic, request_id=6),
        command(Cmd.GET_TOPICS_OF_NAMESPACE, "getTopicsOfNamespace", request_id=12,
                namespace=rng.choice(["public/default", "a/b", "public", "x/y/z"]),
                mode=rng.choice([0, 1, 2]), topics_pattern="persistent://public/default/.*"),
        command(Cmd.SEEK, "seek", consumer_id=1, request_id=10,
                message_publish_time=rng.choice([0, 2**40, 2**64 - 1])),
        seek_to(message_id(rng)),
        command(Cmd.PING, "ping"),
        command(Cmd.CLOSE_PRODUCER, "close_producer", producer_id=1, request_id=7),
        command(Cmd.CLOSE_CONSUMER, "close_consumer", consumer_id=1, request_id=8),
        command(Cmd.UNSUBSCRIBE, "unsubscribe", consumer_id=1, request_id=9),
    ]
    out += [(cmd, None, b"") for cmd in rng.sample(extras, rng.randrange(1, 4))]
    return out


def message(rng: random.Random, seq: int) -> tuple[Message, bytes]:
    meta = pb.MessageMetadata(producer_name="fuzz", sequence_id=seq, publish_time=1)
    if rng.random() < 0.3:
        meta.properties.add(key="k", value="v")
    if rng.random() < 0.2:
        meta.partition_key = "key"
    if rng.random() < 0.4:
        count = rng.randrange(1, 20)
        meta.num_messages_in_batch = count
        payload = raw.tiny_batch(count)
    else:
        payload = rng.randbytes(rng.randrange(0, 200))
    if rng.random() < 0.2:
        meta.compression = rng.choice([pb.ZLIB, pb.LZ4, pb.ZSTD, pb.SNAPPY])
        meta.uncompressed_size = len(payload)
        payload = PACKERS[meta.compression](payload)
    return meta, payload


PACKERS: dict[int, Callable[[bytes], bytes]] = {
    pb.ZLIB: zlib.compress,
    pb.LZ4: lambda data: bytes(cramjam.lz4.compress_block(data, store_size=False)),
    pb.ZSTD: lambda data: bytes(cramjam.zstd.compress(data)),
    pb.SNAPPY: lambda data: bytes(cramjam.snappy.compress_raw(data)),
}
"""Each codec as Pulsar clients write it."""


# ------------------------------------------------------------------ mutations

EXTREMES = {
    FieldDescriptor.TYPE_INT32: [-1, -5, -(2**31), 2**31 - 1, 0],
    FieldDescriptor.TYPE_INT64: [-1, -(2**63), 2**63 - 1, 2**62, 0],
    FieldDescriptor.TYPE_UINT32: [0, 2**32 - 1, 2**31],
    FieldDescriptor.TYPE_UINT64: [0, 2**64 - 1, 2**63],
    FieldDescriptor.TYPE_BOOL: [True, False],
}


def mutate_fields(rng: random.Random, message: Message) -> None:
    """Set one to three fields (nested ones too) to extreme, empty, long or invalid values.

    In a command, the command's own part is mutated, and its type only now and then.
    """
    for _ in range(rng.randrange(1, 4)):
        target = message
        if isinstance(message, pb.BaseCommand) and rng.random() < 0.9:
            parts = [f for f, _ in message.ListFields() if f.name != "type"]
            if not parts:
                continue
            target = getattr(message, parts[0].name)
        for _depth in range(2):
            subs = [
                f
                for f in target.DESCRIPTOR.fields
                if f.type == FieldDescriptor.TYPE_MESSAGE and not f.is_repeated
            ]
            if not subs or rng.random() < 0.7:
                break
            target = getattr(target, rng.choice(subs).name)
        fields = [f for f in target.DESCRIPTOR.fields if f.type != FieldDescriptor.TYPE_MESSAGE]
        if not fields:
            continue
        field = rng.choice(fields)
        if rng.random() < 0.15 and not field.is_repeated:
            target.ClearField(field.name)  # perhaps a required one
            continue
        value = pick_value(rng, field)
        if value is None:
            continue
        try:
            if field.is_repeated:
                getattr(target, field.name).append(value)
            else:
                setattr(target, field.name, value)
        except (ValueError, TypeError):
            continue


def pick_value(rng: random.Random, field: FieldDescriptor) -> object:
    if field.type in EXTREMES:
        return rng.choice(EXTREMES[field.type])
    if field.type == FieldDescriptor.TYPE_STRING:
        return rng.choice(["", MARK, "x" * rng.choice([600, 100_000]), "a\x00b", "ü" * 300])
    if field.type == FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.choice([0, 10, 70_000]))
    if field.type == FieldDescriptor.TYPE_ENUM:
        return rng.choice([v.number for v in field.enum_type.values])
    return None


def serialize(message: Message) -> bytes:
    data = message.SerializePartialToString()
    return data.replace(MARK.encode(), BAD_UTF8)


def wrong_wire_type(rng: random.Random, data: bytes) -> bytes:
    """Change the wire type of one tag-like byte."""
    if not data:
        return data
    i = rng.randrange(len(data))
    out = bytearray(data)
    out[i] = (out[i] & ~7) | rng.choice([1, 2, 3, 5, 7])
    return bytes(out)


@functools.cache
def zeros_packed(size: int) -> bytes:
    """`size` zero bytes ZLIB-compressed (about 1 KiB per MiB), made without holding them."""
    packer = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    return b"".join([*(packer.compress(chunk) for _ in range(size >> 20)), packer.flush()])


def bomb(rng: random.Random, seq: int) -> bytes:
    size = rng.choice([64 << 20, 256 << 20])
    meta = pb.MessageMetadata(producer_name="fuzz", sequence_id=seq, publish_time=1)
    meta.compression = pb.ZLIB
    meta.uncompressed_size = rng.choice([10, size, 4 << 20])
    send = command(Cmd.SEND, "send", producer_id=1, sequence_id=seq)
    return raw.payload_frame(serialize(send), serialize(meta), zeros_packed(size))


def lying_batch(rng: random.Random, seq: int) -> bytes:
    count = rng.choice([300_000, 10_001, -5, 0, 3])
    meta = pb.MessageMetadata(producer_name="fuzz", sequence_id=seq, publish_time=1)
    meta.num_messages_in_batch = count
    send = command(Cmd.SEND, "send", producer_id=1, sequence_id=seq)
    entries = rng.choice([300_000, 10_001, 4, 0])
    return raw.payload_frame(serialize(send), serialize(meta), raw.tiny_batch(entries))


def frame_of(rng: random.Random, cmd: Message, meta: Message | None, payload: bytes) -> bytes:
    """The frame, perhaps with a few fields mutated."""
    if rng.random() < 0.15:
        mutate_fields(rng, cmd if meta is None or rng.random() < 0.5 else meta)
    body = serialize(cmd)
    if rng.random() < 0.02:
        body = wrong_wire_type(rng, body)
    if meta is None:
        return raw.command_frame(body)
    data = raw.payload_frame(body, serialize(meta), payload)
    if rng.random() < 0.05:
        data = data[:-1] + bytes([data[-1] ^ 1])  # checksum mismatch
    return data


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """Bit flips, truncation, a huge or tiny size, or garbage."""
    roll = rng.random()
    if roll < 0.4:
        out = bytearray(data)
        for _ in range(rng.randrange(1, 9)):
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        return bytes(out)
    if roll < 0.6:
        return data[: rng.randrange(len(data))]
    if roll < 0.85:
        size = rng.choice([0, 3, 0x7FFFFFFF, 0xFFFFFFFF, 6 << 20, len(data) + 10])
        return struct.pack(">I", size) + data[4:]
    return rng.randbytes(rng.randrange(1, 64))


def fuzz_session(rng: random.Random, topic: str) -> bytes:
    """One connection's bytes: CONNECT (mostly), a session, now and then a bomb or a lying
    batch, and in a quarter of the sessions one frame mutated at the byte level."""
    frames = [frame_of(rng, connect(), None, b"") if rng.random() < 0.95 else b""]
    for cmd, meta, payload in session(rng, topic):
        frames.append(frame_of(rng, cmd, meta, payload))
    special = rng.random()
    if special < 0.02:
        frames.append(bomb(rng, 99))
    elif special < 0.06:
        frames.append(lying_batch(rng, 98))
    if rng.random() < 0.25:
        i = rng.randrange(len(frames))
        if frames[i]:
            frames[i] = mutate_bytes(rng, frames[i])
    return b"".join(frames)


PING = raw.command_frame(Cmd(type=Cmd.PING, ping=pb.CommandPing()).SerializeToString())
READ_IDLE_S = 0.3
"""How long a session waits for more replies before it closes (broken framing may leave the
front end waiting for the rest of a frame)."""


def exchange(port: int, data: bytes) -> None:
    """Send a session and a PING; read until the PONG (so the sends are being stored), then
    half-close and read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=READ_IDLE_S) as sock:
        try:
            sock.sendall(data + PING)
            seen = b""
            while PONG not in seen:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                seen = seen[-64:] + chunk
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except OSError:  # reset, closed or quiet: broken framing may do any of these
            pass


PONG = Cmd(type=Cmd.PONG, pong=pb.CommandPong()).SerializeToString()


def sessions(seed: int, count: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    for i in range(count):
        yield fuzz_session(rng, f"fuzz-{i % 7}")


# ------------------------------------------------------------------ the test


def with_client(url: str, fn: Callable[[pulsar.Client], None]) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=QUIET)
    try:
        fn(client)
    finally:
        client.close()


def test_fuzzed_frames_harm_no_one(tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "gateway.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "serve",
                "--data-dir",
                str(tmp_path / "data"),
                "--listen",
                "127.0.0.1:0",
                "--pulsar-listen",
                f"127.0.0.1:{port}",
                "--log-level",
                "info",
            ],
            stdout=log,
            stderr=log,
        )
    try:
        wait_for_port(port, proc)
        url = f"pulsar://127.0.0.1:{port}"
        topic, control = f"control-{uuid.uuid4().hex}", f"control {uuid.uuid4().hex}".encode()

        def publish(client: pulsar.Client) -> None:
            client.subscribe(topic, "control").close()
            client.create_producer(topic).send(control)

        with_client(url, publish)
        before = status_kib(proc.pid, "VmRSS")

        started = time.monotonic()
        for data in sessions(SEED, CONNECTIONS):
            exchange(port, data)
        fuzz_s = time.monotonic() - started

        assert proc.poll() is None, "the gateway died"
        peak = status_kib(proc.pid, "VmHWM")
        got: list[bytes] = []

        def consume(client: pulsar.Client) -> None:
            consumer = client.subscribe(topic, "control")
            while True:
                try:
                    msg = consumer.receive(1500)
                except pulsar.Timeout:
                    return
                got.append(msg.data())
                consumer.acknowledge(msg)

        with_client(url, consume)
        assert got == [control]
        assert peak - before < RSS_GROWTH_KIB, f"peak RSS {peak} KiB, {before} KiB before"
        assert proc.poll() is None
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
    text = log_path.read_text(errors="replace")
    for bad in ("Traceback", "unexpected error", "pulsar connection failed"):
        assert bad not in text, text[text.index(bad) - 2000 : text.index(bad) + 2000]
    print(f"fuzzed {CONNECTIONS} connections in {fuzz_s:.1f} s; RSS {before} -> peak {peak} KiB")
