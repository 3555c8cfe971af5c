"""Answers to what a client asks about a topic before it produces or consumes: its partitions
(none: every topic is one non-partitioned topic), where it is served (this front end, at its
service URL) and its schema (`adapters.pulsar.frontend.schemas`: GET_OR_CREATE_SCHEMA registers
one as a producer's schema is)."""

from __future__ import annotations

from collections.abc import Callable

from adapters.pulsar.frontend import replies
from adapters.pulsar.frontend.schemas import SchemaRegistry
from adapters.pulsar.frontend.topics import engine_topic, topic_or_none
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.errors import GatewayError

Cmd = pb.BaseCommand


async def answer(
    cmd: pb.BaseCommand, service_url: str, schemas: SchemaRegistry,
    may_publish: Callable[[str], None], owner: str = "",
    may_read: Callable[[str], bool] = lambda topic: True,
) -> bytes | None:
    """The reply to a PARTITIONED_METADATA, LOOKUP, GET_SCHEMA or GET_OR_CREATE_SCHEMA; None
    for any other command. `may_publish(topic)` raises unless the connection may publish to
    the topic (only such a connection registers a schema, as a PRODUCER does); `may_read(topic)`:
    whether it may produce to or consume from the topic (only such a connection reads its
    schema, whether the topic has one or not); `owner`: the connection's principal, whose share
    of schemas one it registers takes."""
    kind = cmd.type
    if kind == Cmd.PARTITIONED_METADATA:
        meta = cmd.partitionMetadata
        problem = _unknown(meta.topic)
        if problem is not None:
            return replies.partitions_failed(meta.request_id, *problem)
        return replies.partitions(meta.request_id, 0)
    if kind == Cmd.LOOKUP:
        lookup = cmd.lookupTopic
        problem = _unknown(lookup.topic)
        if problem is not None:
            return replies.lookup_failed(lookup.request_id, *problem)
        return replies.lookup(lookup.request_id, service_url)
    if kind == Cmd.GET_SCHEMA:
        get = cmd.getSchema
        topic = topic_or_none(get.topic)
        if topic is not None and not may_read(topic):
            return replies.schema_refused(get.request_id, pb.AuthorizationError,
                                          f"may not read the schema of {get.topic}: neither "
                                          "produce to nor consume from the topic")
        found = schemas.schema_of(topic, get.schema_version) if topic is not None else None
        if found is None:
            return replies.schema_not_found(get.request_id, get.topic)
        return replies.schema_found(get.request_id, *found)
    if kind == Cmd.GET_OR_CREATE_SCHEMA:
        create = cmd.getOrCreateSchema
        problem = _unknown(create.topic)
        try:
            if problem is not None:
                return replies.schema_version(create.request_id, b"", *problem)
            topic = engine_topic(create.topic)
            may_publish(topic)
            version = await schemas.admit_producer(topic, create.schema,
                                                   "getOrCreateSchema.schema", owner)
        except Exception as exc:
            return replies.schema_version(create.request_id, b"", replies.server_error(exc),
                                          replies.error_text(exc))
        return replies.schema_version(create.request_id, version)
    return None


def _unknown(topic: str) -> tuple[int, str] | None:
    """The error code and text for a name that is no topic, None for a topic."""
    try:
        engine_topic(topic)
    except GatewayError as exc:
        return replies.server_error(exc), exc.message
    return None
