"""Where a Pulsar subscription starts: a reader's start message id, or the subscription's
initial position.

A reader subscribes non-durably with `start_message_id`: `MessageId.earliest` and `.latest`
are the initial positions of the same names; any other id places a new reader group at that
message (inclusive: the client itself skips the start message unless it asked for it), or at
the message's publish time (read from the id) when the topic no longer holds it. A durable
subscription starts at its `initialPosition` (Latest unless the client says otherwise) when it
is new, and keeps its position when it exists. A non-durable subscription's group goes when its
last consumer leaves (`readers`).
"""

from __future__ import annotations

from adapters.pulsar.frontend import ids
from adapters.pulsar.frontend.edge import refused
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.api import InitialPosition
from gateway.engine.port import EnginePort
from gateway.errors import NotFound

INITIAL_POSITIONS = {
    pb.CommandSubscribe.Latest: InitialPosition.LATEST,
    pb.CommandSubscribe.Earliest: InitialPosition.EARLIEST,
}
"""Where a new subscription starts (Latest when the client does not say: Pulsar's default); an
existing one keeps its position."""


def start_id(request: pb.CommandSubscribe) -> str:
    """The engine message id a reader's new group is to be moved to ("" for none); refuses an
    id the front end did not give before anything changes."""
    if request.durable or not request.HasField("start_message_id"):
        return ""
    start = request.start_message_id
    key = (start.ledgerId, start.entryId)
    if key in (ids.EARLIEST, ids.LATEST):
        return ""
    # Message i of a batch (as a batch's send receipt names it): its first + i, as in a seek.
    message_id = ids.engine_id(key, max(start.batch_index, 0))
    if not message_id:
        raise refused("subscribe.start_message_id", f"{start.ledgerId}:{start.entryId}",
                      "the id of a message of this topic, or earliest / latest")
    return message_id


def start_key(request: pb.CommandSubscribe) -> ids.MessageKey | None:
    """The Pulsar id, as deliveries carry it, of the message a reader starts at (None for
    none, earliest or latest)."""
    message_id = start_id(request)
    return ids.store_key(message_id) if message_id else None


def position(request: pb.CommandSubscribe) -> InitialPosition:
    """Where the subscription's group starts when it is new (a reader's start id: at the
    earliest, then moved by `place`)."""
    if not request.durable and request.HasField("start_message_id"):
        start = request.start_message_id
        if (start.ledgerId, start.entryId) == ids.LATEST:
            return InitialPosition.LATEST
        return InitialPosition.EARLIEST
    return INITIAL_POSITIONS[request.initialPosition]


async def place(
    engine: EnginePort, request: pb.CommandSubscribe, topic: str, message_id: str
) -> None:
    """Move a new reader group to its start message `message_id` (see `start_id`)."""
    try:
        await engine.seek(topic, request.subscription, message_id=message_id)
    except NotFound:
        await engine.seek(topic, request.subscription, publish_ms=ids.publish_ms(message_id))


def rollback_ms(request: pb.CommandSubscribe, now_ms: int) -> int:
    """The publish time a reader with `start_message_rollback_duration_sec` starts at."""
    return max(now_ms - request.start_message_rollback_duration_sec * 1000, 0)
