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
    return pb.Schema(name=tag, schema_data=tag.encode() + b"x" * size, type=pb.Schema.Json)


async def test_one_principal_registers_at_most_its_share_and_keeps_it_across_a_restart(
    tmp_path: Path,
) -> None:
    """Each version counts its definition, its name and 256 bytes: 1,000-byte definitions
    take about 1.3 KB each, so a share of 3,000 bytes takes two."""
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
