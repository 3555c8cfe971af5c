"""Malformed, hostile and random AMQP 0-9-1 frames against the AMQP port of a real gateway process.

The gateway runs as `gateway serve --amqp-listen` on a free port. Before any attack a control
message is published with aio-pika, and a pika `BlockingConnection` (a bystander) stays open
throughout. Then:

* targeted cases, each on its own connection, get the reply code the AMQP 0-9-1 specification
  gives (connection.close for connection errors, channel.close for channel errors, as RabbitMQ
  classifies them): bad frame-end octets, frames beyond frame_max, frames on unopened and closed
  channels, unknown classes and methods, truncated and garbled methods and content headers, body
  frames without a header, more content than announced, huge and deeply nested field tables,
  invalid UTF-8, negative and overflowing values, refused tuning, wrong protocol headers;
* limits: channel_max, consumers per channel, incomplete content across channels, the
  connection limit;
* connections that never finish the handshake, stop sending heartbeats, or never answer the
  server's close are dropped (opened first, checked last);
* generated methods with extreme field values, and valid sessions mutated at the byte level
  (hypothesis, fixed seed).

Afterwards: the process is up, its log has no traceback, the bystander still works, the control
message is consumed exactly once by aio-pika, and the peak RSS grew by less than
`RSS_GROWTH_KIB`. About a minute in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import decimal
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pamqp import commands, encode, frame, header

from tests.amqp_raw import (
    PROTOCOL_HEADER,
    RawConnection,
    content_header_bytes,
    method_bytes,
    method_payload,
    publish_bytes,
    raw_frame,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MAX_CONNECTIONS = 48
MAX_MESSAGE_BYTES = 1 << 20
PARTIAL_LIMIT = 16 * MAX_MESSAGE_BYTES
"""Bytes of incomplete messages one connection may hold (16 messages' worth)."""
CHANNEL_MAX = 2047
FRAME_MAX = 131_072
RSS_GROWTH_KIB = 200 * 1024
SPEC_CODES = frozenset({403, 404, 405, 406, 501, 502, 503, 504, 505, 506, 530, 540})
"""Reply codes a client's fault may get (never 541 INTERNAL_ERROR)."""
CONTROL = b"control message"
SETTINGS = settings(derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


# --- the gateway process ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayProcess:
    """`gateway serve --amqp-listen` in a subprocess; its log goes to a file."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.log = root / "gateway.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        env.update(PYTHONPATH=str(REPO), GATEWAY_AMQP_MAX_CONNECTIONS=str(MAX_CONNECTIONS))
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(root / "data"),
                 "--listen", "127.0.0.1:0", "--amqp-listen", f"127.0.0.1:{self.port}",
                 "--max-message-bytes", str(MAX_MESSAGE_BYTES), "--log-level", "warning",
                 "--grace-s", "0.5"],
                stdout=subprocess.DEVNULL, stderr=log, cwd=REPO, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                with RawConnection(self.port, timeout=2) as conn:
                    conn.send(PROTOCOL_HEADER)
                    conn.expect(commands.Connection.Start)
                return
            except (OSError, EOFError, TimeoutError):
                time.sleep(0.1)
        raise AssertionError("the AMQP port did not open")

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def kib(self, key: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {key}")

    def assert_up(self) -> None:
        assert self.proc.poll() is None, "the gateway died:\n" + self.log.read_text()[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    running = GatewayProcess(tmp_path_factory.mktemp("fuzz-amqp"))
    yield running
    running.stop()


@dataclass
class Lingering:
    """Connections opened before the attacks that the server must drop by itself."""

    conns: dict[str, RawConnection] = field(default_factory=dict)
    opened: float = 0.0


@pytest.fixture(scope="module")
def lingering(gateway: GatewayProcess) -> Iterator[Lingering]:
    out = Lingering(opened=time.monotonic())
    silent = RawConnection(gateway.port)
    out.conns["sends nothing"] = silent
    partial = RawConnection(gateway.port)
    partial.send(b"AMQ")
    out.conns["half a protocol header"] = partial
    header_only = RawConnection(gateway.port)
    header_only.send(PROTOCOL_HEADER)
    out.conns["no start-ok"] = header_only
    no_tune = RawConnection(gateway.port)
    no_tune.send(PROTOCOL_HEADER)
    no_tune.expect(commands.Connection.Start)
    no_tune.send_method(0, commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\x00guest\x00guest", locale="en_US"))
    no_tune.expect(commands.Connection.Tune)
    out.conns["no tune-ok"] = no_tune
    no_open = RawConnection(gateway.port)
    no_open.send(PROTOCOL_HEADER)
    no_open.expect(commands.Connection.Start)
    no_open.send_method(0, commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\x00guest\x00guest", locale="en_US"))
    no_open.expect(commands.Connection.Tune)
    no_open.send_method(0, commands.Connection.TuneOk(channel_max=0, frame_max=0, heartbeat=0))
    out.conns["no connection.open"] = no_open
    heartbeats = RawConnection(gateway.port)
    heartbeats.handshake(heartbeat=1)
    out.conns["heartbeats missed"] = heartbeats
    no_close_ok = RawConnection(gateway.port)
    no_close_ok.handshake()
    no_close_ok.send(raw_frame(1, 1, struct.pack(">HH", 999, 10)))
    closed = no_close_ok.until_closed(answer=False)
    assert closed.code == 540, closed
    out.conns["never answers connection.close"] = no_close_ok
    # Garbage follows instead of the close-ok: discarded, never buffered.
    no_close_ok.send(os.urandom(4 << 20))
    yield out
    for conn in out.conns.values():
        conn.close()


@dataclass
class Control:
    queue: str
    rss_kib: int
    bystander: Any
    bystander_queue: str


@pytest.fixture(scope="module")
def control(gateway: GatewayProcess, lingering: Lingering) -> Iterator[Control]:
    """The control message (published with confirms before any attack), the RSS then, and the
    bystander: a pika connection that stays open throughout."""
    queue = f"control-{uuid.uuid4().hex[:8]}"

    async def publish() -> None:
        connection = await aio_pika.connect(gateway.url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.declare_queue(queue, durable=True)
            await channel.default_exchange.publish(
                aio_pika.Message(CONTROL, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key=queue)

    asyncio.run(publish())
    params = pika.URLParameters(gateway.url + "?heartbeat=0")
    bystander = pika.BlockingConnection(params)
    bystander_queue = f"bystander-{uuid.uuid4().hex[:8]}"
    bystander.channel().queue_declare(bystander_queue)
    yield Control(queue, gateway.kib("VmRSS"), bystander, bystander_queue)
    with contextlib.suppress(Exception):
        bystander.close()


# --- targeted cases -----------------------------------------------------------------------


def encode_method(cls: type, **values: Any) -> bytes:
    """A method frame's payload with any field values (pamqp encodes each field; its
    validation of names is left out)."""
    index = int(cls.index)  # type: ignore[attr-defined]
    out = [struct.pack(">I", index)]
    bits, count = 0, 0
    for name in cls.__slots__:
        kind = cls.amqp_type(name)  # type: ignore[attr-defined]
        value = values.get(name, _default(kind))
        if kind == "bit":
            bits |= bool(value) << count
            count += 1
            if count == 8:
                out.append(bytes([bits]))
                bits, count = 0, 0
            continue
        if count:
            out.append(bytes([bits]))
            bits, count = 0, 0
        out.append(encode.by_type(value, kind))
    if count:
        out.append(bytes([bits]))
    return b"".join(out)


def _default(kind: str) -> Any:
    return {"shortstr": "", "longstr": "", "table": {}, "bit": False}.get(kind, 0)


def properties(**values: Any) -> commands.Basic.Properties:
    props = commands.Basic.Properties()
    for name, value in values.items():
        setattr(props, name, value)
    return props


def nested(depth: int) -> dict[str, Any]:
    table: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        table = {"t": table}
    return table


def nested_arrays(depth: int) -> bytes:
    """An array in an array ... `depth` deep, encoded by hand."""
    inner = b""
    for _ in range(depth):
        inner = b"A" + struct.pack(">I", len(inner)) + inner
    return inner


def table_bytes(entries: int) -> bytes:
    """A field table of `entries` one-byte values, encoded by hand (fast)."""
    body = b"".join(b"\x01k" + b"b\x01" for _ in range(entries))
    return struct.pack(">I", len(body)) + body


def declare_with_table(table: bytes, queue: bytes = b"\x03abc") -> bytes:
    payload = struct.pack(">HHH", 50, 10, 0) + queue + b"\x00" + table
    return raw_frame(1, 1, payload)


PUBLISH = method_bytes(1, commands.Basic.Publish(routing_key="fuzz-nowhere"))
CHANNEL_CLOSE = commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
QOS = method_bytes(1, commands.Basic.Qos(prefetch_count=1))


@dataclass(frozen=True)
class Case:
    name: str
    data: Callable[[RawConnection], bytes]
    code: int
    hard: bool = True
    stage: str = "open"
    """How far the handshake goes first: "none", "start", "tune", "open" (channel 1 open)."""
    method: tuple[int, int] | None = None
    """The class and method ids the close must name."""
    setup: Callable[[RawConnection], object] | None = None
    """Run after the handshake, before the case's bytes are sent."""
    after_close: bytes = b""
    """Sent after the server's close and before the close-ok (the server must discard it)."""


def _chunked_publish(size: int, sent: int, publish: bytes = PUBLISH) -> bytes:
    out = publish + content_header_bytes(1, size)
    step = FRAME_MAX - 8
    for start in range(0, sent, step):
        out += raw_frame(3, 1, b"x" * min(step, sent - start))
    return out


CASES = [
    # framing
    Case("bad frame-end octet", lambda c: QOS[:-1] + b"\x00", 501),
    Case("frame-end octet of another frame type", lambda c: QOS[:-1] + b"\x01", 501),
    Case("frame beyond frame_max", lambda c: struct.pack(">BHI", 1, 1, FRAME_MAX), 501),
    Case("frame size 2**32-1", lambda c: struct.pack(">BHI", 3, 1, 2**32 - 1) + b"x" * 100, 501),
    Case("frame beyond the handshake frame_max", lambda c: PROTOCOL_HEADER
         + struct.pack(">BHI", 1, 0, 1 << 20), 501, stage="none"),
    Case("unknown frame type", lambda c: raw_frame(9, 1, b""), 501),
    Case("frame type 0", lambda c: raw_frame(0, 1, b"abc"), 501),
    Case("heartbeat on a channel", lambda c: raw_frame(8, 1, b""), 505),
    Case("heartbeat with a payload", lambda c: raw_frame(8, 0, b"boom"), 505),
    # channels
    Case("method on an unopened channel", lambda c: method_bytes(5, commands.Basic.Qos()), 504,
         method=(60, 10)),
    Case("content header on an unopened channel", lambda c: content_header_bytes(5, 3), 504),
    Case("body on an unopened channel", lambda c: raw_frame(3, 5, b"abc"), 504),
    Case("method on a closed channel", lambda c: QOS, 504, setup=lambda c: (
        c.send_method(1, CHANNEL_CLOSE), c.expect(commands.Channel.CloseOk, 1))),
    Case("channel beyond channel_max", lambda c: method_bytes(CHANNEL_MAX + 1,
                                                              commands.Channel.Open()), 504),
    Case("channel 65535", lambda c: method_bytes(65535, commands.Channel.Open()), 504),
    Case("channel opened twice", lambda c: method_bytes(1, commands.Channel.Open()), 504,
         method=(20, 10)),
    Case("a channel method on channel 0", lambda c: method_bytes(0, commands.Basic.Qos()), 503),
    Case("content on channel 0", lambda c: content_header_bytes(0, 1), 505),
    Case("channel before connection.open", lambda c: method_bytes(1, commands.Channel.Open()),
         504, stage="tune"),
    # methods
    Case("unknown class", lambda c: raw_frame(1, 1, struct.pack(">HH", 999, 10)), 540,
         method=(999, 10)),
    Case("unknown method", lambda c: raw_frame(1, 1, struct.pack(">HH", 60, 999)), 540,
         method=(60, 999)),
    Case("class and method 0", lambda c: raw_frame(1, 1, b"\x00\x00\x00\x00"), 540),
    Case("method frame without its ids", lambda c: raw_frame(1, 1, b"\x00\x3c"), 501),
    Case("empty method frame", lambda c: raw_frame(1, 1, b""), 501),
    Case("truncated method", lambda c: raw_frame(1, 1, method_payload(
        commands.Queue.Declare(queue="abc"))[:8]), 501),
    Case("short string longer than its frame", lambda c: raw_frame(
        1, 1, struct.pack(">HHH", 50, 10, 0) + b"\xff" + b"q" * 10), 501),
    Case("invalid UTF-8 short string", lambda c: declare_with_table(
        struct.pack(">I", 0), queue=b"\x03\xff\xfe\xfd"), 501),
    Case("invalid UTF-8 table key", lambda c: declare_with_table(
        struct.pack(">I", 3) + b"\x01\xffV"), 501),
    Case("unknown field value type", lambda c: declare_with_table(
        struct.pack(">I", 5) + b"\x01kZ\x00\x00"), 501),
    Case("table value past its table", lambda c: declare_with_table(
        struct.pack(">I", 4) + b"\x01kI\x00\x00\x00\x00\x00"), 501),
    Case("connection.close-ok without a close",
         lambda c: method_bytes(0, commands.Connection.CloseOk()), 503),
    Case("server method from a client", lambda c: method_bytes(1, commands.Basic.Deliver(
        consumer_tag="x", delivery_tag=1, routing_key="k")), 503, method=(60, 60)),
    Case("connection method on a channel",
         lambda c: method_bytes(1, commands.Connection.Open()), 503, method=(10, 40)),
    Case("transactions", lambda c: method_bytes(1, commands.Tx.Select()), 540, method=(90, 10)),
    Case("basic.recover-async", lambda c: method_bytes(1, commands.Basic.RecoverAsync()), 540),
    Case("connection.update-secret", lambda c: method_bytes(0, commands.Connection.UpdateSecret(
        new_secret="x", reason="r")), 540, method=(10, 70)),
    Case("publish immediate", lambda c: method_bytes(1, commands.Basic.Publish(
        routing_key="x", immediate=True)), 540, method=(60, 40)),
    Case("prefetch size", lambda c: raw_frame(1, 1, encode_method(
        commands.Basic.Qos, prefetch_size=2**32 - 1)), 540, method=(60, 10)),
    Case("unknown exchange type", lambda c: method_bytes(1, commands.Exchange.Declare(
        exchange=f"fx-{uuid.uuid4().hex[:6]}", exchange_type="bogus")), 503, method=(40, 10)),
    # content
    Case("body without a content header", lambda c: PUBLISH + raw_frame(3, 1, b"abc"), 505),
    Case("body without a publish", lambda c: raw_frame(3, 1, b"abc"), 505),
    Case("content header without a publish", lambda c: content_header_bytes(1, 3), 505),
    Case("method where content was due", lambda c: PUBLISH + QOS, 505, method=(60, 40)),
    Case("method where the body was due", lambda c: PUBLISH + content_header_bytes(1, 3) + QOS,
         505),
    Case("content header of another class", lambda c: PUBLISH + raw_frame(
        2, 1, struct.pack(">HHQH", 50, 0, 0, 0)), 505),
    Case("truncated content header", lambda c: PUBLISH + raw_frame(
        2, 1, struct.pack(">HHQ", 60, 0, 3)[:6]), 501),
    Case("content header missing its flagged properties", lambda c: PUBLISH + raw_frame(
        2, 1, struct.pack(">HHQH", 60, 0, 3, 0x8000)), 501),
    Case("content header with endless flag words", lambda c: PUBLISH + raw_frame(
        2, 1, struct.pack(">HHQ", 60, 0, 3) + b"\x00\x01" * 20), 501),
    Case("timestamp beyond the year 9999", lambda c: PUBLISH + raw_frame(
        2, 1, struct.pack(">HHQHQ", 60, 0, 0, 0x0040, 2**64 - 1)), 502),
    Case("more content than announced", lambda c: PUBLISH + content_header_bytes(1, 3)
         + raw_frame(3, 1, b"abcdef"), 505, method=(60, 40)),
    Case("a second body after the whole content", lambda c: PUBLISH + content_header_bytes(1, 2)
         + raw_frame(3, 1, b"ab") + raw_frame(3, 1, b"c"), 505),
    Case("a body after an empty content", lambda c: PUBLISH + content_header_bytes(1, 0)
         + raw_frame(3, 1, b"c"), 505),
    Case("a message over max_message_bytes", lambda c: PUBLISH + content_header_bytes(
        1, MAX_MESSAGE_BYTES + 1) + raw_frame(3, 1, b"x" * 100), 406, hard=False,
        method=(60, 40)),
    Case("a body size of 2**64-1", lambda c: PUBLISH + raw_frame(
        2, 1, struct.pack(">HHQH", 60, 0, 2**64 - 1, 0)), 406, hard=False),
    # field tables
    Case("huge field table", lambda c: declare_with_table(table_bytes(5000)), 506),
    Case("huge message headers", lambda c: PUBLISH + raw_frame(2, 1, struct.pack(
        ">HHQH", 60, 0, 0, 0x2000) + table_bytes(5000)), 506),
    Case("costly field table", lambda c: declare_with_table(
        struct.pack(">I", 4000 * 3 + 7 + 100_000) + b"\x01kV" * 4000 + b"\x01sS"
        + struct.pack(">I", 100_000) + b"x" * 100_000), 506),
    Case("deeply nested field table", lambda c: method_bytes(1, commands.Queue.Declare(
        queue="q", arguments=nested(100))), 506),
    Case("deeply nested arrays", lambda c: declare_with_table(
        struct.pack(">I", 2 + 5 * 200) + b"\x01k" + nested_arrays(200)), 506),
    # values
    Case("ack of delivery tag 0", lambda c: raw_frame(1, 1, encode_method(
        commands.Basic.Ack, delivery_tag=0)), 406, hard=False, method=(60, 80)),
    Case("ack of delivery tag 2**64-1", lambda c: raw_frame(1, 1, struct.pack(
        ">HHQB", 60, 80, 2**64 - 1, 0)), 406, hard=False, method=(60, 80)),
    Case("nack of an unknown tag, multiple", lambda c: raw_frame(1, 1, struct.pack(
        ">HHQB", 60, 120, 7, 3)), 406, hard=False, method=(60, 120)),
    Case("x-retry-interval -1", lambda c: method_bytes(1, commands.Queue.Declare(
        queue=f"fq-{uuid.uuid4().hex[:6]}", arguments={"x-retry-interval": -1})), 406,
        hard=False, method=(50, 10)),
    Case("x-retry-interval 2**63-1", lambda c: method_bytes(1, commands.Queue.Declare(
        queue=f"fq-{uuid.uuid4().hex[:6]}", arguments={"x-retry-interval": 2**63 - 1})), 406,
        hard=False, method=(50, 10)),
    Case("x-retry-interval as text", lambda c: method_bytes(1, commands.Queue.Declare(
        queue=f"fq-{uuid.uuid4().hex[:6]}", arguments={"x-retry-interval": "10"})), 406,
        hard=False, method=(50, 10)),
    Case("x-message-ttl -5", lambda c: method_bytes(1, commands.Queue.Declare(
        queue=f"fq-{uuid.uuid4().hex[:6]}", arguments={"x-message-ttl": -5})), 406,
        hard=False, method=(50, 10)),
    Case("expiration -1", lambda c: publish_bytes(1, b"x", "fuzz-nowhere", properties=properties(
        expiration="-1")), 406, hard=False, method=(60, 40)),
    Case("expiration beyond 2**32-1 ms", lambda c: publish_bytes(
        1, b"x", "fuzz-nowhere", properties=properties(expiration="99999999999")), 406,
        hard=False, method=(60, 40)),
    Case("empty header name", lambda c: publish_bytes(1, b"x", "fuzz-nowhere", properties=(
        properties(headers={"": "v"}))), 406, hard=False, method=(60, 40)),
    Case("queue name of control characters", lambda c: raw_frame(1, 1, encode_method(
        commands.Queue.Declare, queue="a\x00\x01b")), 406, hard=False, method=(50, 10)),
    Case("reserved queue name", lambda c: method_bytes(1, commands.Queue.Declare(
        queue="amq.fuzz")), 403, hard=False, method=(50, 10)),
    Case("consume from a missing queue", lambda c: method_bytes(1, commands.Basic.Consume(
        queue=f"missing-{uuid.uuid4().hex[:6]}")), 404, hard=False, method=(60, 20)),
    Case("frames on a closing channel are discarded", lambda c: method_bytes(
        1, commands.Basic.Consume(queue=f"missing-{uuid.uuid4().hex[:6]}")) + QOS
        + publish_bytes(1, b"x", "fuzz-nowhere"), 404, hard=False,
        after_close=QOS + raw_frame(3, 1, b"stray") + content_header_bytes(1, 5)),
    # negotiation
    Case("wrong mechanism", lambda c: method_bytes(0, commands.Connection.StartOk(
        client_properties={}, mechanism="EXTERNAL", response="x", locale="en_US")), 403,
        stage="start", method=(10, 11)),
    Case("malformed PLAIN response", lambda c: method_bytes(0, commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="guest", locale="en_US")), 403,
        stage="start"),
    Case("malformed AMQPLAIN response", lambda c: method_bytes(0, commands.Connection.StartOk(
        client_properties={}, mechanism="AMQPLAIN", response="\x05LOGINS\xff\xff\xff\xff",
        locale="en_US")), 403, stage="start"),
    Case("connection.open before start-ok", lambda c: method_bytes(0, commands.Connection.Open(
        virtual_host="/")), 504, stage="start"),
    Case("frame_max below 4096", lambda c: method_bytes(0, commands.Connection.TuneOk(
        channel_max=0, frame_max=4095, heartbeat=0)), 530, stage="tune", method=(10, 31)),
    Case("frame_max beyond the server's", lambda c: method_bytes(0, commands.Connection.TuneOk(
        channel_max=0, frame_max=2**32 - 1, heartbeat=0)), 530, stage="tune"),
    Case("channel_max beyond the server's", lambda c: method_bytes(0, commands.Connection.TuneOk(
        channel_max=65535, frame_max=0, heartbeat=0)), 530, stage="tune"),
    Case("another virtual host", lambda c: method_bytes(0, commands.Connection.TuneOk(
        channel_max=0, frame_max=0, heartbeat=0)) + method_bytes(0, commands.Connection.Open(
            virtual_host="other")), 530, stage="tune", method=(10, 40)),
]


def _to_stage(conn: RawConnection, stage: str) -> None:
    if stage == "none":
        return
    if stage == "open":
        conn.handshake()
        return
    conn.send(PROTOCOL_HEADER)
    conn.expect(commands.Connection.Start)
    if stage == "tune":
        conn.send_method(0, commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\x00guest\x00guest",
            locale="en_US"))
        conn.expect(commands.Connection.Tune)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_malformed_frames_get_the_reply_the_specification_gives(
    gateway: GatewayProcess, control: Control, case: Case
) -> None:
    with RawConnection(gateway.port) as conn:
        _to_stage(conn, case.stage)
        if case.setup is not None:
            case.setup(conn)
        conn.send(case.data(conn))
        closed = conn.until_closed(answer=not case.after_close)
        if case.after_close:
            conn.send(case.after_close)
            conn.send_method(closed.channel, commands.Channel.CloseOk()
                             if closed.channel else commands.Connection.CloseOk())
        assert closed.code == case.code, (closed, getattr(closed.close, "reply_text", None))
        text = str(closed.close.reply_text)
        assert len(text.encode()) <= 255 and text.startswith(
            ("FRAME_ERROR", "SYNTAX_ERROR", "COMMAND_INVALID", "CHANNEL_ERROR", "UNEXPECTED",
             "RESOURCE_ERROR", "NOT_ALLOWED", "NOT_IMPLEMENTED", "ACCESS_REFUSED", "NOT_FOUND",
             "RESOURCE_LOCKED", "PRECONDITION_FAILED")), text
        if case.method is not None:
            assert (closed.close.class_id, closed.close.method_id) == case.method, closed.close
        if case.hard:
            assert closed.channel == 0
            assert conn.eof(), "the server did not close the socket after connection.close-ok"
        else:
            assert closed.channel == 1
            conn.open_channel(1)  # the connection serves on (nothing else was answered)
            conn.send_method(1, commands.Queue.Declare(queue=control.queue, passive=True))
            conn.expect(commands.Queue.DeclareOk, 1)
    gateway.assert_up()


def test_after_connection_close_only_the_close_ok_goes_out(gateway: GatewayProcess) -> None:
    """Deliveries flow when the client errs: once the server has sent connection.close it
    sends nothing else (the specification), however busy its consumers were."""
    with RawConnection(gateway.port) as conn:
        conn.handshake()
        queue = f"busy-{uuid.uuid4().hex[:6]}"
        conn.send_method(1, commands.Queue.Declare(queue=queue, auto_delete=True))
        conn.expect(commands.Queue.DeclareOk, 1)
        conn.send(b"".join(publish_bytes(1, b"m" * 4000, queue) for _ in range(2000)))
        conn.send_method(1, commands.Basic.Consume(queue=queue, consumer_tag="c", no_ack=True))
        while not isinstance(conn.read()[1], commands.Basic.Deliver):
            pass
        time.sleep(1.0)  # not reading: the server's deliveries wait for room in its buffer
        conn.send(raw_frame(1, 1, struct.pack(">HH", 999, 10)))
        closed = conn.until_closed(answer=False)
        assert closed.code == 540
        after = len(conn.frames)
        conn.send_method(0, commands.Connection.CloseOk())
        with contextlib.suppress(EOFError):
            while True:
                conn.read()
        assert conn.frames[after:] == [], conn.frames[after:][:3]


def test_a_wrong_protocol_header_gets_ours_and_a_close(gateway: GatewayProcess) -> None:
    for sent in (b"AMQP\x00\x00\x09\x02", b"AMQP\x01\x01\x00\x0a", b"AMQP\x00\x00\x08\x00",
                 b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01", b"\x00" * 8):
        with RawConnection(gateway.port) as conn:
            conn.send(sent)
            got = b""
            with contextlib.suppress(OSError):
                while chunk := conn.sock.recv(100):
                    got += chunk
            assert got == PROTOCOL_HEADER, (sent, got)


# --- limits -------------------------------------------------------------------------------


def test_every_channel_up_to_channel_max_and_not_one_more(gateway: GatewayProcess) -> None:
    with RawConnection(gateway.port) as conn:
        conn.handshake(channel=None)
        conn.send(b"".join(method_bytes(n, commands.Channel.Open())
                           for n in range(1, CHANNEL_MAX + 1)))
        for n in range(1, CHANNEL_MAX + 1):
            conn.expect(commands.Channel.OpenOk, n)
        conn.send_method(CHANNEL_MAX + 1, commands.Channel.Open())
        assert conn.until_closed().code == 504
        assert conn.eof()
    gateway.assert_up()


def test_consumers_per_channel_are_bounded(gateway: GatewayProcess, control: Control) -> None:
    with RawConnection(gateway.port) as conn:
        conn.handshake()
        queue = f"many-{uuid.uuid4().hex[:6]}"
        conn.send_method(1, commands.Queue.Declare(queue=queue, auto_delete=True))
        conn.expect(commands.Queue.DeclareOk, 1)
        conn.send(b"".join(method_bytes(1, commands.Basic.Consume(
            queue=queue, consumer_tag=f"c{i}", nowait=True)) for i in range(1000)))
        conn.send_method(1, commands.Basic.Consume(queue=queue, consumer_tag="one-too-many"))
        closed = conn.until_closed(timeout=60)
        assert (closed.channel, closed.code) == (1, 506), closed
        conn.open_channel(1)
    gateway.assert_up()


def test_incomplete_messages_on_many_channels_are_bounded(gateway: GatewayProcess) -> None:
    """Content announced on many channels and never finished: the connection may hold 16
    messages' worth; beyond that it is closed (RESOURCE_ERROR), not buffered without end."""
    with RawConnection(gateway.port) as conn:
        conn.handshake(channel=None)
        channels = PARTIAL_LIMIT // MAX_MESSAGE_BYTES + 2
        for n in range(1, channels + 1):
            conn.open_channel(n)
        for n in range(1, channels + 1):
            with contextlib.suppress(OSError):
                conn.send(_retarget(_chunked_publish(MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES - 1), n))
        closed = conn.until_closed(timeout=30)
        assert (closed.channel, closed.code) == (0, 506), closed
    gateway.assert_up()


def test_a_client_that_does_not_read_is_not_read_from(gateway: GatewayProcess) -> None:
    """Unroutable mandatory messages come back (basic.return) whole: a client that publishes
    them and never reads is read from only until 8 MiB wait for it, not buffered without end."""
    size = MAX_MESSAGE_BYTES - 1024
    message = _chunked_publish(size, size, method_bytes(1, commands.Basic.Publish(
        routing_key=f"nowhere-{uuid.uuid4().hex[:6]}", mandatory=True)))
    sent = 0
    with RawConnection(gateway.port) as conn:
        conn.handshake()
        conn.sock.settimeout(3)
        with contextlib.suppress(TimeoutError):
            while sent < 256 << 20:
                conn.sock.sendall(message)
                sent += len(message)
        assert sent < 64 << 20, f"{sent >> 20} MiB read from a client that reads nothing"
    gateway.assert_up()


def _retarget(data: bytes, channel: int) -> bytes:
    """The same frames on another channel."""
    out = bytearray()
    pos = 0
    while pos < len(data):
        kind, _, size = struct.unpack_from(">BHI", data, pos)
        out += struct.pack(">BHI", kind, channel, size) + data[pos + 7:pos + 8 + size]
        pos += 8 + size
    return bytes(out)


def test_connections_beyond_the_limit_are_refused_and_then_served_again(
    gateway: GatewayProcess, control: Control
) -> None:
    held: list[RawConnection] = []
    refused = False
    try:
        for _ in range(MAX_CONNECTIONS + 1):
            conn = RawConnection(gateway.port)
            try:
                conn.handshake(channel=None)
            except (EOFError, OSError):
                conn.close()
                refused = True
                break
            held.append(conn)
        assert refused, f"{len(held)} connections served; the limit is {MAX_CONNECTIONS}"
        assert len(held) <= MAX_CONNECTIONS
    finally:
        for conn in held:
            conn.close()
    deadline = time.monotonic() + 15
    while True:
        try:
            with RawConnection(gateway.port) as conn:
                conn.handshake()
            break
        except (EOFError, OSError):
            assert time.monotonic() < deadline, "no connection served after the others closed"
            time.sleep(0.1)
    gateway.assert_up()


# --- generated and mutated frames ---------------------------------------------------------

METHODS = [cls for cls in commands.INDEX_MAPPING.values()
           if cls not in (commands.Connection.Close, commands.Connection.CloseOk)]
CLIENT_METHODS = [commands.Queue.Declare, commands.Queue.Bind, commands.Queue.Unbind,
                  commands.Queue.Purge, commands.Queue.Delete, commands.Exchange.Declare,
                  commands.Exchange.Delete, commands.Exchange.Bind, commands.Basic.Publish,
                  commands.Basic.Consume, commands.Basic.Cancel, commands.Basic.Get,
                  commands.Basic.Ack, commands.Basic.Nack, commands.Basic.Qos,
                  commands.Confirm.Select, commands.Channel.Flow]
"""What clients send most, drawn three times as often as any method."""
SHORT_TEXT = st.one_of(
    st.sampled_from(["", "q-fuzz", "x-fuzz", "amq.direct", "amq.fuzz", "#", "*.a", "x" * 255,
                     "é" * 127, "a\x00b", "q!é", "%DLQ%g", "x" * 200 + "!"]),
    st.text(max_size=12))
INTS = {
    "octet": st.one_of(st.sampled_from([0, 1, 255]), st.integers(0, 255)),
    "short": st.one_of(st.sampled_from([0, 1, 10, 2047, 2048, 65535]), st.integers(0, 65535)),
    "long": st.one_of(st.sampled_from([0, 1, 4095, 4096, 131_072, 2**31, 2**32 - 1]),
                      st.integers(0, 2**32 - 1)),
    "longlong": st.one_of(st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63)]),
                          st.integers(-(2**63), 2**63 - 1)),
}
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), SHORT_TEXT,
    st.binary(max_size=16), st.floats(allow_nan=True),
    st.sampled_from([decimal.Decimal("1.5"), datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC),
                     10, 9, 1801, "10", -1]))
ANY_TABLE = st.dictionaries(
    st.sampled_from(["x-retry-interval", "x-dead-letter-exchange", "x-dead-letter-routing-key",
                     "x-message-ttl", "x-consumer-group", "x-queue-type", "x-match",
                     "alternate-exchange", "x-single-active-consumer", "x-max-length", "k",
                     "amqp.exchange", ""]),
    st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(st.text(max_size=3), inner,
                                                                  max_size=3)), max_leaves=6),
    max_size=4)
TABLES = st.one_of(st.just({}), st.just({}), ANY_TABLE)
CHANNELS = st.one_of(st.just(1), st.just(1), st.just(1), st.sampled_from([0, 2, 65535]))


def field_value(kind: str) -> st.SearchStrategy[Any]:
    if kind == "bit":
        return st.one_of(st.just(False), st.booleans())
    if kind == "shortstr":
        return SHORT_TEXT
    if kind == "longstr":
        return st.one_of(st.text(max_size=20), st.binary(max_size=20))
    if kind == "table":
        return TABLES
    return INTS[kind]


@st.composite
def any_method(draw: st.DrawFn) -> bytes:
    cls = draw(st.one_of(*[st.sampled_from(CLIENT_METHODS)] * 3, st.sampled_from(METHODS)))
    values = {name: draw(field_value(cls.amqp_type(name))) for name in cls.__slots__}
    try:
        payload = encode_method(cls, **values)
    except (ValueError, TypeError, struct.error, OverflowError):
        assume(False)
    channel = draw(CHANNELS)
    data = raw_frame(1, channel, payload)
    if cls is commands.Basic.Publish and draw(st.booleans()):
        props = properties(**{name: draw(field_value(commands.Basic.Properties.amqp_type(name)
                                                     if name != "timestamp" else "long"))
                              for name in draw(st.lists(st.sampled_from(
                                  [n for n in commands.Basic.Properties.__slots__
                                   if n != "cluster_id"]), max_size=4, unique=True))})
        if props.timestamp is not None:
            props.timestamp = datetime.datetime.fromtimestamp(props.timestamp, tz=datetime.UTC)
        body = draw(st.binary(max_size=64))
        size = draw(st.one_of(st.just(len(body)), INTS["longlong"].map(abs)))
        try:
            data += frame.marshal(header.ContentHeader(0, size, props), channel)
        except (ValueError, TypeError, struct.error, OverflowError):
            assume(False)
        data += raw_frame(3, channel, body)
    return data


SYNC = method_bytes(1, commands.Basic.Qos(prefetch_count=7))
SYNC_WAIT_S = 1.0
"""How long a session waits for its channel to answer everything sent (a frame left
incomplete by a mutation keeps the server waiting for its rest)."""


def exchange_session(port: int, data: bytes) -> list[tuple[int, int]]:
    """Send a session and a basic.qos on channel 1, read until it is answered (the channel's
    methods are all handled) or a close comes; then connection.close, half-close, and read
    until the server closes. The (channel, reply code) of every close the server sent."""
    closes: list[tuple[int, int]] = []

    def note(channel: int, got: Any) -> bool:
        if isinstance(got, commands.Channel.Close | commands.Connection.Close):
            closes.append((channel, int(got.reply_code)))
            return True
        return channel == 1 and isinstance(got, commands.Basic.QosOk)

    with RawConnection(port, timeout=15) as conn:
        with contextlib.suppress(OSError):
            conn.send(data + SYNC)
        deadline = time.monotonic() + SYNC_WAIT_S
        with contextlib.suppress(TimeoutError, EOFError, OSError):
            while not note(*conn.read(timeout=max(deadline - time.monotonic(), 0.001))):
                pass
        with contextlib.suppress(OSError):
            conn.send(method_bytes(0, commands.Connection.Close(
                reply_code=200, reply_text="", class_id=0, method_id=0)))
            conn.sock.shutdown(socket.SHUT_WR)
        while True:
            try:
                channel, got = conn.read(timeout=15)
            except EOFError:
                break
            note(channel, got)
    return closes


def check_closes(closes: list[tuple[int, int]]) -> None:
    for channel, code in closes:
        assert code in SPEC_CODES, (channel, code)


HANDSHAKE = (PROTOCOL_HEADER + method_bytes(0, commands.Connection.StartOk(
    client_properties={}, mechanism="PLAIN", response="\x00guest\x00guest", locale="en_US"))
    + method_bytes(0, commands.Connection.TuneOk(channel_max=0, frame_max=0, heartbeat=0))
    + method_bytes(0, commands.Connection.Open(virtual_host="/"))
    + method_bytes(1, commands.Channel.Open()))


@settings(SETTINGS, max_examples=250)
@given(methods=st.lists(any_method(), min_size=1, max_size=6))
@example(methods=[  # names the specification allows and pamqp's own pattern does not
    raw_frame(1, 1, encode_method(commands.Queue.Declare, queue="q!é")),
    raw_frame(1, 1, encode_method(commands.Exchange.Declare, exchange="x" * 200 + "!",
                                  exchange_type="topic")),
    raw_frame(1, 1, encode_method(commands.Queue.Bind, queue="q!é", exchange="x" * 200 + "!",
                                  routing_key="#")),
    raw_frame(1, 1, encode_method(commands.Basic.Publish, exchange="x" * 200 + "!",
                                  routing_key="k", mandatory=True))
    + content_header_bytes(1, 1) + raw_frame(3, 1, b"m"),
    raw_frame(1, 1, encode_method(commands.Basic.Consume, queue="q!é", consumer_tag="t t"))])
def test_generated_methods_with_extreme_values(
    gateway: GatewayProcess, control: Control, methods: list[bytes]
) -> None:
    check_closes(exchange_session(gateway.port, HANDSHAKE + b"".join(methods)))
    gateway.assert_up()


def _session() -> bytes:
    queue = "fuzz-mutated"
    return b"".join([
        method_bytes(1, commands.Confirm.Select()),
        method_bytes(1, commands.Queue.Declare(queue=queue, arguments={
            "x-retry-interval": 10, "x-dead-letter-exchange": "amq.fanout"})),
        method_bytes(1, commands.Exchange.Declare(exchange="fuzz-x", exchange_type="topic")),
        method_bytes(1, commands.Queue.Bind(queue=queue, exchange="fuzz-x", routing_key="a.#")),
        method_bytes(1, commands.Basic.Qos(prefetch_count=5)),
        publish_bytes(1, b"m" * 300, "a.b", "fuzz-x", properties(
            headers={"h": 1, "t": {"n": [1, "x"]}}, message_id="m", expiration="60000",
            delivery_mode=2, priority=3, correlation_id="c")),
        method_bytes(1, commands.Basic.Consume(queue=queue, consumer_tag="c")),
        method_bytes(1, commands.Basic.Get(queue=queue)),
        method_bytes(1, commands.Basic.Nack(delivery_tag=1, multiple=True, requeue=True)),
        method_bytes(1, commands.Basic.Cancel(consumer_tag="c")),
        method_bytes(1, commands.Queue.Purge(queue=queue)),
        method_bytes(1, commands.Channel.Flow(active=False)),
        method_bytes(1, CHANNEL_CLOSE),
    ])


SESSION = HANDSHAKE + _session()


@st.composite
def mutated_session(draw: st.DrawFn) -> bytes:
    out = bytearray(SESSION)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(out) - 1))
        action = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "size"]))
        if action == "flip":
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del out[at:at + draw(st.integers(1, 8))]
        elif action == "truncate":
            del out[at:]
        else:
            size = draw(st.sampled_from([0, 1, 4, 2**31, 2**32 - 1, FRAME_MAX]))
            out[at:at + 4] = struct.pack(">I", size)
        if not out:
            break
    return bytes(out)


@settings(SETTINGS, max_examples=250)
@given(data=mutated_session())
def test_mutated_sessions(gateway: GatewayProcess, control: Control, data: bytes) -> None:
    check_closes(exchange_session(gateway.port, data))
    gateway.assert_up()


# --- afterwards ---------------------------------------------------------------------------


def test_lingering_connections_were_dropped(gateway: GatewayProcess,
                                            lingering: Lingering) -> None:
    """Handshakes never finished (10 s), heartbeats missed (2 s), a close never answered
    (5 s): the server closed each socket by itself."""
    deadline = lingering.opened + 30
    for name, conn in lingering.conns.items():
        assert conn.eof(timeout=max(deadline - time.monotonic(), 0.1)), name


def test_afterwards_the_gateway_is_up_bounded_and_delivers_the_control_message_once(
    gateway: GatewayProcess, control: Control
) -> None:
    gateway.assert_up()
    channel = control.bystander.channel()
    channel.basic_publish("", control.bystander_queue, b"still here")
    deadline = time.monotonic() + 10
    while (got := channel.basic_get(control.bystander_queue, auto_ack=True))[0] is None:
        assert time.monotonic() < deadline, "the bystander got nothing"
        time.sleep(0.05)
    assert got[2] == b"still here"

    async def consume() -> list[bytes]:
        connection = await aio_pika.connect(gateway.url)
        async with connection:
            ch = await connection.channel()
            queue = await ch.declare_queue(control.queue, durable=True)
            bodies: list[bytes] = []
            async with queue.iterator() as messages:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(3):
                        async for message in messages:
                            bodies.append(message.body)
                            await message.ack()
            return bodies

    assert asyncio.run(consume()) == [CONTROL]
    peak = gateway.kib("VmHWM")
    assert peak - control.rss_kib < RSS_GROWTH_KIB, (control.rss_kib, peak)
    text = gateway.log.read_text(errors="replace")
    for bad in ("Traceback", "frame handling failed", "method failed", "pump stopped"):
        assert bad not in text, text[max(text.index(bad) - 2000, 0):text.index(bad) + 2000]
    gateway.assert_up()
