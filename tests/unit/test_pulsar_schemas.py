"""The Pulsar front end's schema registry on its own: a stored file it cannot fully name, and
each principal's share of the schemas kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.pulsar.frontend.schemas import FILE_NAME, IncompatibleSchema, SchemaRegistry
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.errors import InvalidArgument


async def test_a_stored_type_this_version_does_not_know_is_named_by_its_number(
    tmp_path: Path,
) -> None:
    (tmp_path / FILE_NAME).write_text(json.dumps({"orders": [[99, "future", ""]]}))
    registry = SchemaRegistry(tmp_path)
    registry.load()
    schema = pb.Schema(name="text", schema_data=b"", type=pb.Schema.String)
    with pytest.raises(IncompatibleSchema) as refused:
        await registry.admit_producer("orders", schema, "producer.schema")
    assert "99, the type of topic 'orders'" in refused.value.message


async def test_an_unreadable_file_is_left_aside(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("{not json")
    registry = SchemaRegistry(tmp_path)
    registry.load()
    schema = pb.Schema(name="text", schema_data=b"", type=pb.Schema.String)
    assert await registry.admit_producer("orders", schema, "producer.schema") == bytes(8)
    assert json.loads((tmp_path / FILE_NAME).read_text()) == {"orders": [[1, "text", "", ""]]}


def json_schema(size: int, tag: str) -> pb.Schema:
    """A record schema whose definition is `size` bytes and a bit (its `doc` pads it)."""
    data = json.dumps({"type": "record", "name": tag, "fields": [], "doc": "x" * size})
    return pb.Schema(name=tag, schema_data=data.encode(), type=pb.Schema.Json)


async def test_one_principal_registers_at_most_its_share_and_keeps_it_across_a_restart(
    tmp_path: Path,
) -> None:
    """Each version counts its definition, its name and 256 bytes: 1,000-byte definitions
    take about 1.3 KB each, so a share of 3,000 bytes takes two (and 1,060-byte ones too)."""
    registry = SchemaRegistry(tmp_path, share=3000)
    for topic in ("a1", "a2"):
        await registry.admit_producer(topic, json_schema(1000, topic), "producer.schema",
                                      "alice")
    with pytest.raises(InvalidArgument) as refused:
        await registry.admit_producer("a3", json_schema(1000, "a3"), "producer.schema", "alice")
    assert "registered by one principal ('alice' has" in refused.value.message
    # A schema a topic holds already costs nothing; bob has his own share.
    assert await registry.admit_producer("a1", json_schema(1000, "a1"), "producer.schema",
                                         "bob") == bytes(8)
    await registry.admit_producer("b1", json_schema(1000, "b1"), "producer.schema", "bob")
    again = SchemaRegistry(tmp_path, share=3000)
    again.load()
    with pytest.raises(InvalidArgument):
        await again.admit_producer("a3", json_schema(1000, "a3"), "producer.schema", "alice")
    await again.admit_producer("b2", json_schema(1000, "b2"), "producer.schema", "bob")


async def test_versions_of_an_older_file_are_no_ones(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text(json.dumps({"orders": [[2, "old", "eHh4"]]}))
    registry = SchemaRegistry(tmp_path, share=3000)
    registry.load()
    for topic in ("a1", "a2"):
        await registry.admit_producer(topic, json_schema(1000, topic), "producer.schema",
                                      "alice")
    assert json.loads((tmp_path / FILE_NAME).read_text())["orders"] == [[2, "old", "eHh4", ""]]


@pytest.mark.parametrize(("kind", "data", "why"), [
    (pb.Schema.Json, b"not json at all {", "not JSON"),
    (pb.Schema.Avro, b"\xff\xfe\x00garbage", "not JSON"),
    (pb.Schema.Avro, b'{"type": "nonsense"}', "type 'nonsense' is no Avro type"),
    (pb.Schema.Json, b'{"type": "record", "name": "R"}', "a record needs a list of 'fields'"),
    (pb.Schema.Json, b'{"type": "record", "name": "R", "fields": [{"name": "a"}]}',
     "each field is an object with a 'name' and a 'type'"),
    (pb.Schema.Protobuf, b"5", "a schema is a type name, a list or an object"),
    (pb.Schema.Json, b"[" * 10_000 + b"]" * 10_000, "not JSON"),
])
async def test_a_definition_that_is_no_schema_is_refused_and_not_kept(
    tmp_path: Path, kind: int, data: bytes, why: str,
) -> None:
    """Before, any bytes were kept as a Json or Avro schema: they fixed the topic's schema type
    for every later producer and went to every consumer that asked for the schema."""
    registry = SchemaRegistry(tmp_path)
    schema = pb.Schema(name="bad", schema_data=data, type=kind)  # type: ignore[arg-type]
    with pytest.raises(IncompatibleSchema) as refused:
        await registry.admit_producer("t", schema, "producer.schema")
    assert refused.value.field == "producer.schema.schema_data"
    assert why in refused.value.message
    assert registry.schema_of("t") is None
    good = pb.Schema(name="ok", type=kind,  # type: ignore[arg-type]
                     schema_data=b'{"type": "record", "name": "R", "fields": [{"name": "a", '
                                 b'"type": ["null", "string"]}, {"name": "b", "type": '
                                 b'{"type": "array", "items": "long"}}]}')
    assert await registry.admit_producer("t", good, "producer.schema") == bytes(8)
