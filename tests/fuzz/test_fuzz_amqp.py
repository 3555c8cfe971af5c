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
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pamqp import commands

from tests.amqp_attacks import (
    CASES,
    CHANNEL_MAX,
    HANDSHAKE,
    MAX_MESSAGE_BYTES,
    PARTIAL_LIMIT,
    Case,
    any_method,
    check_closes,
    chunked_publish,
    encode_method,
    exchange_session,
    mutated_session,
)
from tests.amqp_raw import (
    PROTOCOL_HEADER,
    RawConnection,
    content_header_bytes,
    method_bytes,
    publish_bytes,
    raw_frame,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MAX_CONNECTIONS = 48
RSS_GROWTH_KIB = 200 * 1024
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
    """As RabbitMQ 3.x: channel_max bounds how many channels are open, whatever their numbers
    (one past it: 530 NOT_ALLOWED, RabbitMQ's text)."""
    numbers = [65535, *range(2, CHANNEL_MAX + 1)]  # CHANNEL_MAX of them, one beyond the max
    with RawConnection(gateway.port) as conn:
        conn.handshake(channel=None)
        conn.send(b"".join(method_bytes(n, commands.Channel.Open()) for n in numbers))
        for n in numbers:
            conn.expect(commands.Channel.OpenOk, n)
        conn.send_method(1, commands.Channel.Open())
        closed = conn.until_closed()
        assert (closed.code, closed.close.reply_text) == (530, (
            f"NOT_ALLOWED - number of channels opened ({CHANNEL_MAX}) has reached the "
            f"negotiated channel_max ({CHANNEL_MAX})")), closed
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
                conn.send(_retarget(chunked_publish(MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES - 1), n))
        closed = conn.until_closed(timeout=30)
        assert (closed.channel, closed.code) == (0, 506), closed
    gateway.assert_up()


def test_a_client_that_does_not_read_is_not_read_from(gateway: GatewayProcess) -> None:
    """Unroutable mandatory messages come back (basic.return) whole: a client that publishes
    them and never reads is read from only until 8 MiB wait for it, not buffered without end."""
    size = MAX_MESSAGE_BYTES - 1024
    message = chunked_publish(size, size, method_bytes(1, commands.Basic.Publish(
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
