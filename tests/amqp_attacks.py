"""A catalogue of hostile AMQP 0-9-1 input for the attack suite (`tests/fuzz/test_fuzz_amqp.py`):
malformed frames each with the reply code the specification gives (`CASES`), hypothesis strategies
for methods with extreme field values (`any_method`) and for byte-level mutations of a valid
session (`mutated_session`), and a conversation that collects every close the server sends
(`exchange_session`). Frames are encoded with pamqp's field encoders, without its name pattern."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import socket
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import assume
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

MAX_MESSAGE_BYTES = 1 << 20
"""The attacked gateway's `--max-message-bytes`."""
PARTIAL_LIMIT = 16 * MAX_MESSAGE_BYTES
"""Bytes of incomplete messages one connection may hold (16 messages' worth)."""
CHANNEL_MAX = 2047
FRAME_MAX = 131_072
SPEC_CODES = frozenset({403, 404, 405, 406, 501, 502, 503, 504, 505, 506, 530, 540})
"""Reply codes a client's fault may get (never 541 INTERNAL_ERROR)."""

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


def chunked_publish(size: int, sent: int, publish: bytes = PUBLISH) -> bytes:
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
    Case("heartbeat with a payload", lambda c: raw_frame(8, 0, b"boom"), 501),  # RabbitMQ's
    # channels
    Case("method on an unopened channel", lambda c: method_bytes(5, commands.Basic.Qos()), 504,
         method=(60, 10)),
    # RabbitMQ: a content frame where a method belongs (505), not a channel error
    Case("content header on an unopened channel", lambda c: content_header_bytes(5, 3), 505),
    Case("body on an unopened channel", lambda c: raw_frame(3, 5, b"abc"), 505),
    Case("method on a closed channel", lambda c: QOS, 504, setup=lambda c: (
        c.send_method(1, CHANNEL_CLOSE), c.expect(commands.Channel.CloseOk, 1))),
    # RabbitMQ opens any channel number, up to channel_max channels (tested in the fuzz suite)
    Case("method on an unopened channel beyond channel_max", lambda c: method_bytes(
        CHANNEL_MAX + 1, commands.Basic.Qos()), 504, method=(60, 10)),
    Case("method on unopened channel 65535", lambda c: method_bytes(65535, commands.Basic.Qos()),
         504, method=(60, 10)),
    Case("channel opened twice", lambda c: method_bytes(1, commands.Channel.Open()), 504,
         method=(20, 10)),
    Case("a channel method on channel 0", lambda c: method_bytes(0, commands.Basic.Qos()),
         504),  # RabbitMQ's "unexpected method in connection state running"
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
    Case("tx.commit without tx.select", lambda c: method_bytes(1, commands.Tx.Commit()), 406,
         hard=False, method=(90, 20)),
    Case("tx.rollback without tx.select", lambda c: method_bytes(1, commands.Tx.Rollback()), 406,
         hard=False, method=(90, 30)),
    Case("tx.select in confirm mode", lambda c: method_bytes(1, commands.Tx.Select()), 406,
         hard=False, method=(90, 10), setup=lambda c: (
             c.send_method(1, commands.Confirm.Select()), c.expect(commands.Confirm.SelectOk, 1))),
    Case("confirm.select in tx mode", lambda c: method_bytes(1, commands.Confirm.Select()), 406,
         hard=False, method=(85, 10), setup=lambda c: (
             c.send_method(1, commands.Tx.Select()), c.expect(commands.Tx.SelectOk, 1))),
    Case("unknown delivery tag acked in a transaction",
         lambda c: method_bytes(1, commands.Basic.Ack(delivery_tag=99)), 406, hard=False,
         method=(60, 80), setup=lambda c: (
             c.send_method(1, commands.Tx.Select()), c.expect(commands.Tx.SelectOk, 1))),
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
                     "alternate-exchange", "x-single-active-consumer", "x-max-length",
                     "x-overflow", "x-expires", "k", "amqp.exchange", ""]),
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
