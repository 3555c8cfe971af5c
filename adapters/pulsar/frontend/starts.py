"""Where a Pulsar subscription starts: a reader's start message id, or the subscription's
initial position.

A reader subscribes non-durably with `start_message_id`: `MessageId.earliest` and `.latest`
are the initial positions of the same names; any other id creates the group and seeks it to
that message (inclusive: the client itself skips the start message unless it asked for it), or
to the message's publish time (read from the id) when the topic no longer holds it. A durable
subscription starts at its `initialPosition` (Latest unless the client says otherwise) when it
is new, and keeps its position when it exists. A non-durable subscription's group goes when its
last consumer leaves (`Connection`).
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


async def place(engine: EnginePort, request: pb.CommandSubscribe, topic: str) -> InitialPosition:
    """The initial position for the subscription's spec, after seeking a reader's group to its
    start message when it names one."""
    position = INITIAL_POSITIONS[request.initialPosition]
    if request.durable or not request.HasField("start_message_id"):
        return position
    start = request.start_message_id
    key = (start.ledgerId, start.entryId)
    if key == ids.EARLIEST:
        return InitialPosition.EARLIEST
    if key == ids.LATEST:
        return InitialPosition.LATEST
    message_id = ids.engine_id(key)
    if not message_id:
        raise refused("subscribe.start_message_id", f"{start.ledgerId}:{start.entryId}",
                      "the id of a message of this topic, or earliest / latest")
    await engine.create_group(topic, request.subscription)
    try:
        await engine.seek(topic, request.subscription, message_id=message_id)
    except NotFound:
        publish_ms = start.ledgerId >> 16  # the store's id begins with the publish time
        await engine.seek(topic, request.subscription, publish_ms=publish_ms)
    return InitialPosition.EARLIEST
