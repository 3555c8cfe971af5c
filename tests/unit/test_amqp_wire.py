"""`adapters.amqp.wire` against pamqp, its reference: the same bytes out, the same objects in, and
for malformed frames the same exceptions."""

from __future__ import annotations

import string
from datetime import UTC, datetime
from typing import Any

import pamqp.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands as spec
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from pamqp.heartbeat import Heartbeat

from adapters.amqp import wire

TEXT = st.text(max_size=40)
SHORT = st.text(alphabet=string.ascii_letters + string.digits + "-._:é", max_size=60)
VALUES = st.one_of(
    TEXT,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False, width=32),
    st.none(),
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1)).map(
        lambda d: d.replace(microsecond=0, tzinfo=UTC)
    ),
    st.dictionaries(SHORT, st.one_of(TEXT, st.integers(-1000, 1000)), max_size=3),
    st.lists(st.integers(-5, 5), max_size=3),
)
HEADERS = st.dictionaries(st.text(max_size=70), VALUES, max_size=8)
STAMPS = st.integers(min_value=0, max_value=2**33).map(lambda s: datetime.fromtimestamp(s, UTC))


@st.composite
def properties(draw: st.DrawFn) -> spec.Basic.Properties:
    maybe = lambda strategy: draw(st.one_of(st.none(), strategy))  # noqa: E731
    return spec.Basic.Properties(
        content_type=maybe(SHORT),
        content_encoding=maybe(SHORT),
        headers=maybe(HEADERS),
        delivery_mode=maybe(st.sampled_from([1, 2])),
        priority=maybe(st.integers(0, 9)),
        correlation_id=maybe(SHORT),
        reply_to=maybe(SHORT),
        expiration=maybe(st.integers(0, 10**6).map(str)),
        message_id=maybe(st.text(max_size=300)),
        timestamp=maybe(STAMPS),
        message_type=maybe(SHORT),
        user_id=maybe(SHORT),
        app_id=maybe(SHORT),
    )


def outcome(call: Any, *args: Any) -> tuple[str, object]:
    try:
        return "ok", call(*args)
    except Exception as exc:
        return "raised", type(exc)


def fields(value: object) -> object:
    """A comparable picture of a pamqp object (they do not all compare by value)."""
    if isinstance(value, tuple):
        return tuple(fields(part) for part in value)
    if isinstance(value, ContentHeader):
        return ("header", value.class_id, value.weight, value.body_size, fields(value.properties))
    if isinstance(value, ContentBody):
        return ("body", value.value)
    if isinstance(value, Heartbeat):
        return ("heartbeat",)
    if isinstance(value, pamqp.base._AMQData):
        return (type(value), {name: getattr(value, name) for name in value.__slots__})
    return value


# ------------------------------------------------------------------------------------ out
@settings(max_examples=400, deadline=None)
@given(properties(), st.binary(max_size=300), st.integers(1, 120), SHORT, SHORT)
def test_publish_payload_is_what_pamqp_writes(
    props: spec.Basic.Properties, body: bytes, max_content: int, exchange: str, route: str
) -> None:
    def reference() -> bytes:
        frames: list[Any] = [
            spec.Basic.Publish(exchange=exchange, routing_key=route, mandatory=True),
            ContentHeader(properties=props, body_size=len(body)),
        ]
        frames += [ContentBody(body[i : i + max_content]) for i in range(0, len(body), max_content)]
        return b"".join(pamqp.frame.marshal(frame, 3) for frame in frames)

    fast = outcome(wire.publish_payload, 3, [(exchange, route, body, props)], max_content)
    assert fast == outcome(reference)


@settings(max_examples=300, deadline=None)
@given(HEADERS)
def test_table_is_what_pamqp_writes(headers: dict[str, Any]) -> None:
    assert outcome(wire.table, headers) == outcome(pamqp.encode.field_table, headers)
    assert outcome(wire.table, headers) == outcome(pamqp.encode.field_table, headers)  # kept


def test_publish_payload_of_a_batch_is_each_item_in_turn() -> None:
    items = [
        ("", f"q{i}", bytes([i]) * i, spec.Basic.Properties(message_id=str(i))) for i in range(5)
    ]
    assert wire.publish_payload(1, items, 2) == b"".join(
        wire.publish_payload(1, [item], 2) for item in items
    )


# ------------------------------------------------------------------------------------- in
FRAMES = st.one_of(
    st.builds(
        spec.Basic.Deliver,
        consumer_tag=SHORT, delivery_tag=st.integers(0, 2**64 - 1), redelivered=st.booleans(),
        exchange=st.just(""), routing_key=SHORT,
    ),
    st.builds(spec.Basic.Ack, delivery_tag=st.integers(0, 2**64 - 1), multiple=st.booleans()),
    st.builds(
        spec.Basic.Nack,
        delivery_tag=st.integers(0, 2**64 - 1), multiple=st.booleans(), requeue=st.booleans(),
    ),
    st.builds(spec.Basic.CancelOk, consumer_tag=SHORT),
    st.builds(spec.Basic.QosOk),
    st.builds(
        ContentHeader, body_size=st.integers(0, 2**40),
        properties=properties().filter(lambda p: len((p.message_id or "").encode()) < 256),
    ),
    st.builds(ContentBody, st.binary(min_size=1, max_size=200)),
)


def marshal(frame: Any, channel: int) -> bytes:
    try:
        return pamqp.frame.marshal(frame, channel)
    except (TypeError, ValueError):  # a value pamqp does not write: not a frame to read
        return pamqp.frame.marshal(spec.Basic.QosOk(), channel)


@settings(max_examples=500, deadline=None)
@given(FRAMES, st.integers(0, 65535))
def test_unmarshal_builds_what_pamqp_builds(frame: Any, channel: int) -> None:
    data = marshal(frame, channel)
    assert fields(wire.unmarshal(data)) == fields(pamqp.frame.unmarshal(data))


@settings(max_examples=1500, deadline=None)
@given(FRAMES, st.data())
def test_unmarshal_of_damaged_frames_matches_pamqp(frame: Any, data: st.DataObject) -> None:
    raw = bytearray(marshal(frame, 1))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = bytes(raw[: data.draw(st.integers(0, len(raw)))]) if data.draw(st.booleans()) else None
    for damaged in (bytes(raw), cut):
        if damaged is None:
            continue
        fast = outcome(wire.unmarshal, damaged)
        reference = outcome(pamqp.frame.unmarshal, damaged)
        # By repr: a damaged float may decode to NaN, which equals nothing, not even itself.
        assert repr((fast[0], fields(fast[1]))) == repr((reference[0], fields(reference[1])))


@pytest.mark.parametrize(
    "headers",
    [
        {"s": "text", "n": 7, "big": 2**40, "neg": -70000, "t": True, "f": False},
        {"bytes": b"\xff\xfe".decode("latin-1")},
        {"nested": {"a": 1}, "list": [1, "x"], "none": None, "float": 1.5},
    ],
)
def test_header_tables_of_every_value_type(headers: dict[str, Any]) -> None:
    data = pamqp.frame.marshal(
        ContentHeader(body_size=5, properties=spec.Basic.Properties(headers=headers)), 1
    )
    assert fields(wire.unmarshal(data)) == fields(pamqp.frame.unmarshal(data))


def test_text_header_that_is_not_utf8_stays_bytes_as_in_pamqp() -> None:
    table = b"\x01kS\x00\x00\x00\x02\xff\xfe"
    payload = (
        b"\x00\x3c\x00\x00" + (5).to_bytes(8, "big") + b"\x20\x00"
        + len(table).to_bytes(4, "big") + table
    )
    data = bytes([2, 0, 1]) + len(payload).to_bytes(4, "big") + payload + b"\xce"
    fast, reference = wire.unmarshal(data), pamqp.frame.unmarshal(data)
    assert fields(fast) == fields(reference)
    assert fast[2].properties.headers == {"k": b"\xff\xfe"}
