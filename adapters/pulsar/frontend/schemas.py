"""Topic schemas, as a broker's schema registry keeps them with its default settings.

A producer or consumer that brings no schema (or the bytes schema) is served whatever the topic
holds (schema validation is not enforced). The first producer with a schema registers it as the
topic's version 0 (a Json, Avro or Protobuf definition must be an Avro schema in JSON:
`schema_check`); a producer with a schema the topic holds gets that version; one of the same
type and another definition registers the next version (the definitions are taken as given: a
broker's Avro compatibility check of two definitions is not made); one of another type than the
topic's latest version is refused with `IncompatibleSchema`, as a broker refuses it
("Incompatible schema"), and so is a consumer that brings such a schema. A consumer registers
none. PRODUCER_SUCCESS carries the version (8 bytes, big-endian, as a broker's).

With a state directory the schemas are kept in `DATA_DIR/pulsar/schemas.json`, written whole
through a temporary file, fsynced and renamed, before the producer that registered a version is
answered, and read at start; without one they last as long as the front end.

With authentication a principal may register at most `share` bytes of schemas (half of
`MAX_TOTAL_BYTES`), so that one client registering schemas on topic after topic cannot leave
none for the others. Each version keeps the principal that registered it (a file written before
this has none: those count against the whole only).
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import structlog

from adapters.pulsar.frontend import schema_check
from adapters.pulsar.frontend.files import replace_durably
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.errors import InvalidArgument, Unavailable

log = structlog.get_logger(__name__)

FILE_NAME = "schemas.json"
MAX_VERSIONS = 100
"""Schema versions kept per topic; a producer that would register more is refused."""
MAX_TOTAL_BYTES = 64 << 20
"""Schemas kept across all topics (each version counts its definition, its name and
`VERSION_COST`); a producer that would pass it is refused."""
VERSION_COST = 256
"""What a version counts beyond its definition and name (so empty ones count too)."""

Version = tuple[int, str, bytes]
"""(type, name, definition) of one schema version (its properties are not kept)."""


class IncompatibleSchema(InvalidArgument):
    """A schema of another type than the topic's (answered `IncompatibleSchema`)."""


def type_name(kind: int) -> str:
    try:
        return str(pb.Schema.Type.Name(kind))
    except ValueError:  # a stored type this version does not know
        return str(kind)


def version_bytes(index: int) -> bytes:
    """A version as the clients carry it."""
    return index.to_bytes(8, "big")


class SchemaRegistry:
    """The schema versions of each topic (see the module docstring)."""

    def __init__(self, directory: Path | None = None, share: int = 0) -> None:
        """`share`: the bytes one principal may register (0: no share of its own)."""
        self._path = directory / FILE_NAME if directory is not None else None
        self._topics: dict[str, list[Version]] = {}
        self._owners: dict[str, list[str]] = {}
        """Each topic's versions' principals, in order ("": none known)."""
        self._bytes = 0
        self._share = share
        self._by_owner: dict[str, int] = {}
        self._lock = asyncio.Lock()

    def load(self) -> None:
        """Read the stored schemas (a file that cannot be read is logged and left aside)."""
        if self._path is None or not self._path.exists():
            return
        try:
            stored = json.loads(self._path.read_text(encoding="utf-8"))
            topics = {
                str(topic): [(int(kind), str(name), base64.b64decode(data))
                             for kind, name, data, *_ in versions]
                for topic, versions in stored.items()
            }
            owners = {str(topic): [str(v[3]) if len(v) > 3 else "" for v in versions]
                      for topic, versions in stored.items()}
        except (OSError, ValueError, TypeError) as exc:
            log.warning("pulsar schemas not readable, starting without them",
                        path=str(self._path), error=str(exc))
            return
        self._topics, self._owners = topics, owners
        self._bytes = sum(_cost(v) for versions in topics.values() for v in versions)
        for topic, versions in topics.items():
            for version, owner in zip(versions, owners[topic], strict=True):
                if owner:
                    self._by_owner[owner] = self._by_owner.get(owner, 0) + _cost(version)

    def schema_of(self, topic: str, version: bytes = b"") -> tuple[pb.Schema, bytes] | None:
        """The schema of `version` (b"": the latest) on `topic` and its version; None for
        none."""
        versions = self._topics.get(topic, [])
        index = int.from_bytes(version, "big") if version else len(versions) - 1
        if not 0 <= index < len(versions) or len(version) > 8:
            return None
        kind, name, data = versions[index]
        schema = pb.Schema(name=name, schema_data=data, type=kind)  # type: ignore[arg-type]
        return schema, version_bytes(index)

    def check_consumer(self, topic: str, schema: pb.Schema | None, field: str) -> None:
        """Raise `IncompatibleSchema` for a consumer's schema of another type than the topic's."""
        if schema is None or schema.type == pb.Schema.Bytes:
            return
        versions = self._topics.get(topic)
        if versions:
            _same_type(topic, versions[-1][0], schema.type, field)

    async def admit_producer(self, topic: str, schema: pb.Schema | None, field: str,
                             owner: str = "") -> bytes:
        """The version a producer's schema has on `topic` (registered when new, for principal
        `owner`; b"" for none); raises `IncompatibleSchema` (of another type),
        `InvalidArgument` (past the limits) or `Unavailable` (it could not be written)."""
        if schema is None or schema.type == pb.Schema.Bytes:
            return b""
        wanted: Version = (schema.type, schema.name, bytes(schema.schema_data))
        why = schema_check.problem(schema.type, wanted[2])
        if why is not None:
            raise IncompatibleSchema(f"{field}.schema_data", f"{len(wanted[2])} bytes",
                                     f"an Avro schema in JSON for a {type_name(schema.type)} "
                                     f"schema ({why}: invalid schema data)")
        async with self._lock:
            versions = self._topics.get(topic, [])
            for index, (kind, _, data) in enumerate(versions):
                if (kind, data) == (wanted[0], wanted[2]):
                    return version_bytes(index)
            if versions:
                _same_type(topic, versions[-1][0], schema.type, field)
            if len(versions) >= MAX_VERSIONS:
                raise InvalidArgument(field, type_name(schema.type),
                                      f"at most {MAX_VERSIONS} schema versions per topic")
            cost = _cost(wanted)
            if self._bytes + cost > MAX_TOTAL_BYTES:
                raise InvalidArgument(f"{field}.schema_data", f"{len(wanted[2])} bytes",
                                      f"at most {MAX_TOTAL_BYTES} bytes of schemas in all")
            mine = self._by_owner.get(owner, 0)
            if self._share and owner and mine + cost > self._share:
                raise InvalidArgument(f"{field}.schema_data", f"{len(wanted[2])} bytes",
                                      f"at most {self._share} bytes of schemas registered by "
                                      f"one principal ({owner[:200]!r} has {mine})")
            owners = self._owners.get(topic, [])
            self._topics[topic], self._owners[topic] = [*versions, wanted], [*owners, owner]
            self._bytes += cost
            self._by_owner[owner] = mine + cost
            try:
                await self._save()
            except OSError as exc:
                self._topics[topic], self._owners[topic] = versions, owners
                self._bytes -= cost
                self._by_owner[owner] = mine
                log.warning("pulsar schemas not written", path=str(self._path), error=str(exc))
                raise Unavailable(f"the schema of topic {topic!r} could not be stored") from exc
            return version_bytes(len(versions))

    async def _save(self) -> None:
        if self._path is None:
            return
        text = json.dumps({
            topic: [[kind, name, base64.b64encode(data).decode(), owner]
                    for (kind, name, data), owner in zip(vs, self._owners[topic], strict=True)]
            for topic, vs in self._topics.items()
        })
        await asyncio.to_thread(_write, self._path, text)


def _cost(version: Version) -> int:
    return len(version[2]) + len(version[1].encode()) + VERSION_COST


def _same_type(topic: str, have: int, kind: int, field: str) -> None:
    if have != kind:
        raise IncompatibleSchema(
            f"{field}.type", type_name(kind),
            f"{type_name(have)}, the type of topic {topic!r}'s schema (incompatible schema: "
            "a schema of another type is refused)")


def _write(path: Path, text: str) -> None:
    replace_durably(path, text.encode("utf-8"))
