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


def table_bytes(*entries: bytes) -> bytes:
    payload = b"".join(entries)
    return struct.pack(">I", len(payload)) + payload


def test_plain_tables_are_pamqps_bytes_and_values() -> None:
    data = encode.field_table(PLAIN)
    assert encode_table(PLAIN) == data
    assert decode_table(data) == decode.field_table(data)
    assert encode_table(None) == encode_table({}) == b"\x00\x00\x00\x00"


def test_a_double_stays_a_double_with_its_value() -> None:
    for value in (1e300, 0.1, 1e-50, -2.5, float("inf")):
        data = table_bytes(entry(b"v", b"d", struct.pack(">d", value)))
        used, table = decode_table(data)
        assert used == len(data)
        assert isinstance(table["v"], Double) and table["v"] == value
        assert encode_table(table) == data  # written back as it came: a double
        assert from_json(to_json(table["v"])) == value
        assert isinstance(from_json(to_json(table["v"])), Double)


def test_a_float_stays_a_float_and_no_float_overflows() -> None:
    data = table_bytes(entry(b"v", b"f", struct.pack(">f", 0.1)))
    _, table = decode_table(data)
    assert not isinstance(table["v"], Double)
    assert encode_table(table) == data
    # A float value from elsewhere that a float cannot hold goes out as a double, unchanged.
    for value in (1e300, 0.1, 1e-50):
        (kind,) = struct.unpack_from(">c", encode_table({"v": value}), 6)
        assert kind == b"d"
        assert decode_table(encode_table({"v": value}))[1]["v"] == value


def test_a_long_string_that_is_not_utf8_stays_a_long_string() -> None:
    data = table_bytes(entry(b"v", b"S", struct.pack(">I", 2) + b"\xff\xfe"))
    _, table = decode_table(data)
    assert isinstance(table["v"], LongBytes) and table["v"] == b"\xff\xfe"
    assert encode_table(table) == data
    assert isinstance(from_json(to_json(table["v"])), LongBytes)
    # A byte array stays a byte array.
    array = table_bytes(entry(b"v", b"x", struct.pack(">I", 2) + b"\xff\xfe"))
    assert encode_table(decode_table(array)[1]) == array


def test_names_up_to_255_bytes_stay_whole_at_every_depth() -> None:
    name = b"k" * 200
    inner = table_bytes(entry(name, b"S", struct.pack(">I", 1) + b"x"))
    data = table_bytes(entry(b"a", b"A", struct.pack(">I", 9) + b"d" + struct.pack(">d", 0.1)),
                       entry(name, b"b", b"\x07"), entry(b"n", b"F", inner))
    _, table = decode_table(data)
    assert table[name.decode()] == 7 and table["n"] == {name.decode(): "x"}
    assert isinstance(table["a"][0], Double)
    assert encode_table(table) == data


def test_a_table_that_runs_past_its_data_is_refused() -> None:
    data = table_bytes(entry(b"v", b"S", struct.pack(">I", 50) + b"short"))
    for cut in (data, data[:-2], struct.pack(">I", 99) + data[4:]):
        try:
            decode_table(cut)
        except (ValueError, struct.error):
            continue
        raise AssertionError(f"decoded {cut!r}")
