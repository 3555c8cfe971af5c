"""The Admin calls that move messages (`gateway migrate rename` and `copy`): their checks at the
edge and their translation to the engine's verbs (`gateway.engine.admin_move`).

`MoveCalls` is part of `gateway.server.admin_api.AdminService`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

from gateway.backend import OutMessage, StoredMessage
from gateway.engine.api import Copy
from gateway.engine.port import AdminPort
from gateway.errors import InvalidArgument, MessageTooLarge
from gateway.limits import (
    MAX_BATCH,
    MAX_NAME_BYTES,
    MAX_PROPERTIES,
    check_batch,
    check_name,
    check_publish_properties,
    check_tag,
    message_size,
    properties_size,
    too_long,
    utf8_len,
)
from gateway.server.validate import DEFAULT_PAGE, MAX_ATTEMPT, MAX_PAGE, MAX_POSITION, page_token
from gateway.v1 import admin_pb2 as pb

Ctx: TypeAlias = Any  # grpc.aio.ServicerContext
MAX_KEY_CHARS = 1024
MAX_EARLIER_LEDGERS = 4
"""Earlier names of one copy ledger an ImportMessages call may give."""
"""Longest copy ledger name or source key."""
MAX_COUNT = (1 << 32) - 1
PAGE_BYTES = 16 * 1024 * 1024
"""Most bytes of messages in one page of dead letters or exported messages (at least one
message): a page of 100 messages of 4 MiB was larger than the gRPC send limit (64 MiB) and
failed RESOURCE_EXHAUSTED, page after page, so big dead letters could not be listed at all."""
PAGE_OVERHEAD = 256
"""What a message adds to a page besides its body, key, tag and properties (ids, counts)."""


def fitting(messages: Sequence[StoredMessage]) -> int:
    """How many of `messages`, from the first, a page holds (at least one)."""
    total = 0
    for count, m in enumerate(messages):
        total += len(m.body) + utf8_len(m.key) + utf8_len(m.tag) + PAGE_OVERHEAD
        total += properties_size(m.properties)
        if total > PAGE_BYTES and count:
            return count
    return len(messages)


PARTS: dict[int, str] = {
    pb.MESSAGE_PART_READY: "ready",
    pb.MESSAGE_PART_RETRY: "retry",
    pb.MESSAGE_PART_DEAD_LETTER: "dead-letter",
}


def _part(field: str, value: int) -> str:
    part = PARTS.get(int(value))
    if part is None:
        raise InvalidArgument(field, value, "MESSAGE_PART_READY, _RETRY or _DEAD_LETTER")
    return part


def _naming(field: str, value: str, required: bool) -> None:
    if value or required:
        check_name(field, value)


def _key(field: str, value: str) -> None:
    if not value or len(value) > MAX_KEY_CHARS:
        raise InvalidArgument(field, value, f"1..{MAX_KEY_CHARS} characters")


def _copy(i: int, m: pb.MovedMessage, max_bytes: int) -> Copy:
    field = f"messages[{i}]"
    part = _part(f"{field}.part", m.part)
    _key(f"{field}.source_key", m.source_key)
    if too_long(m.message_id, MAX_NAME_BYTES):
        raise InvalidArgument(f"{field}.message_id", m.message_id,
                              f"\"\" or a message id of 1..{MAX_NAME_BYTES} bytes")
    if len(m.properties) > MAX_PROPERTIES or "" in m.properties:
        raise InvalidArgument(f"{field}.properties", f"{len(m.properties)} entries",
                              f"at most {MAX_PROPERTIES} properties with non-empty keys")
    check_tag(f"{field}.tag", m.tag)  # as Publish
    if m.deliver_at_ms < 0:
        raise InvalidArgument(f"{field}.deliver_at_ms", m.deliver_at_ms,
                              "0 or a wall-clock ms time")
    # A count near 2**32 would overflow `Delivery.attempt` (uint32) on its next delivery: the
    # group's Receive calls would fail and its push streams stall on that message.
    for name, count in (("attempt", m.attempt), ("retries", m.retries)):
        if count > MAX_ATTEMPT:
            raise InvalidArgument(f"{field}.{name}", count, f"0..{MAX_ATTEMPT}")
    out = OutMessage(bytes(m.body), dict(m.properties), m.key, m.tag, m.deliver_at_ms,
                     m.message_id, m.attempt, m.retries)
    size = message_size(out)
    if size > max_bytes:
        raise MessageTooLarge(size, max_bytes)
    return Copy(m.source_key, part, out, m.first_delivery)


def _moved(m: StoredMessage) -> pb.MovedMessage:
    return pb.MovedMessage(
        message_id=m.message_id, body=m.body, properties=dict(m.properties), key=m.key,
        tag=m.tag, deliver_at_ms=m.deliver_at_ms, attempt=min(m.attempt, MAX_COUNT),
        retries=min(m.retries, MAX_COUNT), position=m.lease.position,
    )


class MoveCalls:
    """RenameDestinations, ExportMessages, RemoveExported, ImportMessages."""

    admin: AdminPort
    max_message_bytes: int

    async def RenameDestinations(
        self, request: pb.RenameDestinationsRequest, context: Ctx
    ) -> Any:
        check_name("topic", request.topic)
        check_name("group", request.group)
        _naming("from_naming", request.from_naming, True)
        _naming("to_naming", request.to_naming, True)
        result = await self.admin.rename(request.topic, request.group, request.from_naming,
                                         request.to_naming, request.dry_run)
        return pb.RenameDestinationsResponse(
            retry_from=result.retry_from, retry_to=result.retry_to,
            dead_letter_from=result.dead_letter_from, dead_letter_to=result.dead_letter_to,
            retries=result.retries, dead_letters=result.dead_letters, left=result.left,
            more=result.more,
        )

    async def ExportMessages(self, request: pb.ExportMessagesRequest, context: Ctx) -> Any:
        check_name("topic", request.topic)
        check_name("group", request.group)
        part = _part("part", request.part)
        if request.limit > MAX_PAGE:
            raise InvalidArgument("limit", request.limit, f"0..{MAX_PAGE} (0: {DEFAULT_PAGE})")
        after = page_token(request.page_token)
        _naming("naming", request.naming, False)
        page = await self.admin.export(request.topic, request.group, part, after,
                                       request.limit or DEFAULT_PAGE, request.naming)
        kept = fitting(page.messages)
        next_after = page.next_after
        if kept < len(page.messages):
            next_after = page.messages[kept - 1].lease.position
        return pb.ExportMessagesResponse(
            messages=[_moved(m) for m in page.messages[:kept]],
            next_page_token=str(next_after) if next_after >= 0 else "",
            source_topic=page.source_topic,
        )

    async def RemoveExported(self, request: pb.RemoveExportedRequest, context: Ctx) -> Any:
        check_name("topic", request.topic)
        check_name("group", request.group)
        part = _part("part", request.part)
        check_batch("positions", len(request.positions))
        for i, position in enumerate(request.positions):
            if not 0 <= position <= MAX_POSITION:
                raise InvalidArgument(f"positions[{i}]", position, f"0..{MAX_POSITION}")
        _naming("naming", request.naming, False)
        removed = await self.admin.remove_exported(request.topic, request.group, part,
                                                   list(request.positions), request.naming)
        return pb.RemoveExportedResponse(removed=removed)

    async def ImportMessages(self, request: pb.ImportMessagesRequest, context: Ctx) -> Any:
        check_name("topic", request.topic)
        if request.group:
            check_name("group", request.group)
        _key("ledger", request.ledger)
        if len(request.earlier_ledgers) > MAX_EARLIER_LEDGERS:
            raise InvalidArgument("earlier_ledgers", f"{len(request.earlier_ledgers)} names",
                                  f"0..{MAX_EARLIER_LEDGERS}")
        for i, name in enumerate(request.earlier_ledgers):
            _key(f"earlier_ledgers[{i}]", name)
        _naming("naming", request.naming, False)
        if not 1 <= len(request.messages) <= MAX_BATCH:
            raise InvalidArgument("messages", f"{len(request.messages)} messages",
                                  f"1..{MAX_BATCH} per call")
        for field in ("source_retry_topic", "source_dead_letter_topic"):
            _source_name(field, getattr(request, field))
        check_publish_properties("messages", sum(len(m.properties) for m in request.messages))
        copies = [_copy(i, m, self.max_message_bytes) for i, m in enumerate(request.messages)]
        result = await self.admin.import_copies(
            request.topic, request.group, request.ledger, request.naming, copies,
            (request.source_retry_topic, request.source_dead_letter_topic),
            tuple(request.earlier_ledgers))
        return pb.ImportMessagesResponse(
            stored=result.stored, skipped=result.skipped, retry_topic=result.retry_topic,
            dead_letter_topic=result.dead_letter_topic)


def _source_name(field: str, value: str) -> None:
    """A destination's name at the source, or "" for none: a name as `check_name` takes it,
    but up to twice as long (another product's retry and dead-letter names spell the topic
    and the group, e.g. Pulsar's `{topic}-{subscription}-RETRY`)."""
    if value and (not value.strip() or too_long(value, 2 * MAX_NAME_BYTES)
                  or not value.isprintable()):
        raise InvalidArgument(field, value, f'"" (none) or at most {2 * MAX_NAME_BYTES} bytes '
                                            "(UTF-8) of printable characters")
