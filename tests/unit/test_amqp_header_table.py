"""The AMQP front end's header table codec (adapters.amqp.frontend.table) against pamqp's: the
same bytes and values wherever pamqp keeps what a client sent, and what was sent where it does
not (doubles, non-UTF-8 long strings, field names over 128 bytes)."""

from __future__ import annotations

import datetime
import decimal
import struct

from pamqp import decode, encode

from adapters.amqp.frontend.table import Double, LongBytes, decode_table, encode_table
from adapters.amqp.frontend.values import from_json, to_json

PLAIN = {
    "s": "text", "i": 7, "neg": -70000, "big": 2**40, "t": True, "f": False, "none": None,
    "dec": decimal.Decimal("1.25"), "ts": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC),
    "bytes": bytearray(b"\x00\xff"), "half": 0.5, "nested": {"a": 1, "b": ["x", 2, {"c": "d"}]},
    "list": [1, "two", None, [3]], "ünï": "çödé",
}


def entry(name: bytes, kind: bytes, raw: bytes) -> bytes:
    return bytes([len(name)]) + name + kind + raw


def packed(*entries: bytes) -> bytes:
    payload = b"".join(entries)
    return struct.pack(">I", len(payload)) + payload


def test_plain_tables_are_pamqps_bytes_and_values() -> None:
    data = encode.field_table(PLAIN)
    assert encode_table(PLAIN) == data
    used, table = decode_table(data)
    theirs = decode.field_table(data)[1]
    assert used == len(data) and encode_table(table) == data
    assert table["ts"] == int(PLAIN["ts"].timestamp())  # type: ignore[attr-defined]
    assert {k: v for k, v in table.items() if k != "ts"} == {
        k: v for k, v in theirs.items() if k != "ts"}
    assert encode_table(None) == encode_table({}) == b"\x00\x00\x00\x00"


def test_integers_and_timestamps_keep_their_types_and_values() -> None:
    cases = [(b"b", ">b", -1), (b"B", ">B", 255), (b"s", ">h", -1), (b"u", ">H", 5),
             (b"I", ">i", -1), (b"i", ">I", 5), (b"l", ">q", 5), (b"L", ">Q", 2**64 - 1),
             (b"L", ">Q", 2**63), (b"T", ">Q", 2**32), (b"T", ">Q", 1_700_000_000_123),
             (b"T", ">Q", 2**64 - 1)]
    for kind, fmt, value in cases:
        data = packed(entry(b"v", kind, struct.pack(fmt, value)))
        _, table = decode_table(data)
        assert table["v"] == value, (kind, value)
        assert encode_table(table) == data, (kind, value)
        again = from_json(to_json(table["v"]))
        assert again == value and encode_table({"v": again}) == data, (kind, value)
    # Plain ints (as stored before types were kept) go out in the smallest type, as pamqp does.
    assert encode_table({"v": 5}) == encode.field_table({"v": 5})


def test_a_name_that_comes_twice_is_reported() -> None:
    inner = packed(entry(b"k", b"b", b"\x01"), entry(b"k", b"b", b"\x02"))
    data = packed(entry(b"v", b"S", struct.pack(">I", 1) + b"a"),
                 entry(b"v", b"S", struct.pack(">I", 1) + b"b"), entry(b"n", b"F", inner))
    _, decoded = decode_table(data)
    assert decoded.duplicates == ["v", "k"]
    assert decode_table(packed(entry(b"v", b"b", b"\x01")))[1].duplicates == []


def test_a_double_stays_a_double_with_its_value() -> None:
    for value in (1e300, 0.1, 1e-50, -2.5, float("inf")):
        data = packed(entry(b"v", b"d", struct.pack(">d", value)))
        used, table = decode_table(data)
        assert used == len(data)
        assert isinstance(table["v"], Double) and table["v"] == value
        assert encode_table(table) == data  # written back as it came: a double
        assert from_json(to_json(table["v"])) == value
        assert isinstance(from_json(to_json(table["v"])), Double)


def test_a_float_stays_a_float_and_no_float_overflows() -> None:
    data = packed(entry(b"v", b"f", struct.pack(">f", 0.1)))
    _, table = decode_table(data)
    assert not isinstance(table["v"], Double)
    assert encode_table(table) == data
    # A float value from elsewhere that a float cannot hold goes out as a double, unchanged.
    for value in (1e300, 0.1, 1e-50):
        (kind,) = struct.unpack_from(">c", encode_table({"v": value}), 6)
        assert kind == b"d"
        assert decode_table(encode_table({"v": value}))[1]["v"] == value


def test_a_long_string_that_is_not_utf8_stays_a_long_string() -> None:
    data = packed(entry(b"v", b"S", struct.pack(">I", 2) + b"\xff\xfe"))
    _, table = decode_table(data)
    assert isinstance(table["v"], LongBytes) and table["v"] == b"\xff\xfe"
    assert encode_table(table) == data
    assert isinstance(from_json(to_json(table["v"])), LongBytes)
    # A byte array stays a byte array.
    array = packed(entry(b"v", b"x", struct.pack(">I", 2) + b"\xff\xfe"))
    assert encode_table(decode_table(array)[1]) == array


def test_names_up_to_255_bytes_stay_whole_at_every_depth() -> None:
    name = b"k" * 200
    inner = packed(entry(name, b"S", struct.pack(">I", 1) + b"x"))
    data = packed(entry(b"a", b"A", struct.pack(">I", 9) + b"d" + struct.pack(">d", 0.1)),
                       entry(name, b"b", b"\x07"), entry(b"n", b"F", inner))
    _, table = decode_table(data)
    assert table[name.decode()] == 7 and table["n"] == {name.decode(): "x"}
    assert isinstance(table["a"][0], Double)
    assert encode_table(table) == data


def test_a_table_that_runs_past_its_data_is_refused() -> None:
    data = packed(entry(b"v", b"S", struct.pack(">I", 50) + b"short"))
    for cut in (data, data[:-2], struct.pack(">I", 99) + data[4:]):
        try:
            decode_table(cut)
        except (ValueError, struct.error):
            continue
        raise AssertionError(f"decoded {cut!r}")


def test_every_value_at_every_depth_is_counted() -> None:
    """What flow control and the publish batches count a message's headers by: an array of a
    thousand voids is a thousand and one values, not one header."""
    voids = b"V" * 1000
    data = packed(entry(b"a", b"A", struct.pack(">I", len(voids)) + voids),
                  entry(b"n", b"F", packed(entry(b"x", b"b", b"\x01"), entry(b"y", b"V", b""))))
    _, decoded = decode_table(data)
    assert decoded.entries == 1 + 1000 + 1 + 2
    assert list(decoded.values()) == [[None] * 1000, {"x": 1, "y": None}]
