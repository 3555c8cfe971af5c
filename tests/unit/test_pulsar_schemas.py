"""The Pulsar front end's schema registry on its own: a stored file it cannot fully name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.pulsar.frontend.schemas import FILE_NAME, IncompatibleSchema, SchemaRegistry
from adapters.pulsar.wire import wire_pb2 as pb


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
    assert json.loads((tmp_path / FILE_NAME).read_text()) == {"orders": [[1, "text", ""]]}
