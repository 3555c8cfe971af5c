"""Answers to what a client asks about a topic before it produces or consumes: its partitions
(none: every topic is one non-partitioned topic), where it is served (this front end, at its
service URL) and its schema (none is stored; a producer's schema is taken as given)."""

from __future__ import annotations

from adapters.pulsar.frontend import replies
from adapters.pulsar.frontend.topics import engine_topic
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.errors import GatewayError

Cmd = pb.BaseCommand


def answer(cmd: pb.BaseCommand, service_url: str) -> bytes | None:
    """The reply to a PARTITIONED_METADATA, LOOKUP, GET_SCHEMA or GET_OR_CREATE_SCHEMA; None
    for any other command."""
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
        return replies.schema_not_found(cmd.getSchema.request_id, cmd.getSchema.topic)
    if kind == Cmd.GET_OR_CREATE_SCHEMA:
        return replies.schema_version(cmd.getOrCreateSchema.request_id)
    return None


def _unknown(topic: str) -> tuple[int, str] | None:
    """The error code and text for a name that is no topic, None for a topic."""
    try:
        engine_topic(topic)
    except GatewayError as exc:
        return replies.server_error(exc), exc.message
    return None
