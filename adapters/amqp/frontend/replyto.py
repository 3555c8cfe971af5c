"""Direct reply-to (RabbitMQ's `amq.rabbitmq.reply-to`): RPC replies without a reply queue.

A requester consumes from the pseudo-queue `amq.rabbitmq.reply-to` in no-ack mode and publishes
its requests with `reply_to` = `amq.rabbitmq.reply-to`; the gateway writes in a name of the form
`amq.rabbitmq.reply-to.TOKEN` instead, and a message published to that name through the default
exchange goes straight to the requester's channel: it is never stored, and is lost when the
requester is gone (as on RabbitMQ). As RabbitMQ 3.x does, the name is not a queue: a reply
published `mandatory` is also returned (312 NO_ROUTE). Replies reach requesters connected to the
same gateway process only, and only while the requester reads what it is sent.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import structlog
from pamqp import commands

from adapters.amqp.frontend import edge, framing
from adapters.amqp.frontend.consumers import fit_headers
from adapters.amqp.frontend.errors import NOT_ALLOWED, PRECONDITION_FAILED, AMQPError, short
from adapters.amqp.frontend.state import ChannelState

log = structlog.get_logger(__name__)

PSEUDO_QUEUE = "amq.rabbitmq.reply-to"
PREFIX = PSEUDO_QUEUE + "."
CONSUME, PUBLISH = (60, 20), (60, 40)


@dataclass(slots=True)
class ReplyConsumer:
    channel: ChannelState
    tag: str
    name: str
    """`amq.rabbitmq.reply-to.TOKEN`: where replies to this channel are published."""


def consume(channel: ChannelState, m: commands.Basic.Consume) -> None:
    """`basic.consume` from the pseudo-queue: the channel's reply consumer (no-ack only, one
    per channel)."""
    if not m.no_ack:
        raise AMQPError(PRECONDITION_FAILED, "reply consumer cannot acknowledge", CONSUME)
    if channel.reply_consumer is not None:
        raise AMQPError(PRECONDITION_FAILED, "reply consumer already set", CONSUME)
    tag = m.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
    edge.check_name("consumer_tag", tag)
    if tag in channel.consumers:
        raise AMQPError(NOT_ALLOWED, f"attempt to reuse consumer tag {short(tag)}", CONSUME,
                        hard=True)
    consumer = ReplyConsumer(channel, tag, PREFIX + secrets.token_urlsafe(24))
    channel.reply_consumer = consumer
    channel.ctx.replies[consumer.name] = consumer
    if not m.nowait:
        channel.send(framing.reply(commands.Basic.ConsumeOk, consumer_tag=tag))


def cancel(channel: ChannelState, tag: str) -> bool:
    """Whether `tag` was the channel's reply consumer (now cancelled)."""
    consumer = channel.reply_consumer
    if consumer is None or consumer.tag != tag:
        return False
    forget(channel)
    return True


def forget(channel: ChannelState) -> None:
    """The channel closed, or cancelled its reply consumer: replies to it are lost."""
    consumer = channel.reply_consumer
    if consumer is not None:
        channel.reply_consumer = None
        channel.ctx.replies.pop(consumer.name, None)


def tag_in_use(channel: ChannelState, tag: str) -> bool:
    consumer = channel.reply_consumer
    return consumer is not None and consumer.tag == tag


def request(channel: ChannelState, properties: commands.Basic.Properties) -> None:
    """A publish with `reply_to` = the pseudo-queue: the channel's own reply name goes in."""
    if properties.reply_to != PSEUDO_QUEUE:
        return
    consumer = channel.reply_consumer
    if consumer is None:
        raise AMQPError(PRECONDITION_FAILED, "fast reply consumer does not exist", PUBLISH)
    properties.reply_to = consumer.name


def is_reply(exchange: str, routing_key: str) -> bool:
    """Whether a publish is a reply: to a reply name, through the default exchange."""
    return not exchange and routing_key.startswith(PREFIX)


def deliver(channel: ChannelState, routing_key: str, properties: commands.Basic.Properties,
            body: bytes) -> None:
    """Send a reply to the requester's channel, when it is still there (else it is lost). A
    requester that does not read what it was sent (its socket's send buffer full) loses the
    reply rather than have the gateway hold more than its write backlog limit for it."""
    consumer = channel.ctx.replies.get(routing_key)
    if consumer is None:
        return
    target = consumer.channel
    if target.closing:
        return
    if target.conn.write_backlog() > channel.ctx.limits.write_backlog_bytes:
        log.warning("amqp direct reply dropped: the requester does not read",
                    connection=target.conn.id)
        return
    frames = [framing.method_frame(target.number, framing.reply(
        commands.Basic.Deliver, consumer_tag=consumer.tag, delivery_tag=target.next_tag(),
        redelivered=False, exchange="", routing_key=routing_key))]
    frame_max = target.conn.frame_max
    content = framing.content_frames(target.number, properties, body, frame_max)
    if len(content[0]) > frame_max:  # the requester's frame_max is below the responder's
        content = framing.content_frames(target.number, fit_headers(
            dict(properties), len(content[0]), frame_max, str(properties.message_id or "")),
            body, frame_max)
    target.conn.writelines([*frames, *content])
