"""Routes, assignments and the Settings the gateway hands to SDK clients.

The gateway presents every topic as one queue on one broker (id 0, the master) at its own
endpoint: a receive serves the whole topic, so the SDK's random queue choice does not matter.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from rocketmq.grpc_protocol import definition_pb2

from . import codec
from .settings import FrontendSettings

BROKER_NAME = "retry-gateway"
ACCEPTED_TYPES = (
    definition_pb2.MessageType.NORMAL,
    definition_pb2.MessageType.FIFO,
    definition_pb2.MessageType.DELAY,
    definition_pb2.MessageType.TRANSACTION,
)

PRODUCERS = (definition_pb2.ClientType.PRODUCER,)


def endpoints_for(advertised: str, fallback: Any) -> Any:
    """`Endpoints` to advertise: the configured one, else the address the client dialled."""
    if not advertised:
        result = definition_pb2.Endpoints()
        result.CopyFrom(fallback)
        return result
    host, _, port = advertised.rpartition(":")
    host = host.strip("[]")
    scheme = definition_pb2.AddressScheme.DOMAIN_NAME
    try:
        ip = ipaddress.ip_address(host)
        scheme = (
            definition_pb2.AddressScheme.IPv4
            if ip.version == 4
            else definition_pb2.AddressScheme.IPv6
        )
    except ValueError:
        pass
    result = definition_pb2.Endpoints(scheme=scheme)
    result.addresses.add(host=host, port=int(port))
    return result


def message_queue(topic: Any, endpoints: Any) -> Any:
    """The single readable and writable queue of a topic."""
    queue = definition_pb2.MessageQueue()
    queue.topic.CopyFrom(topic)
    queue.id = 0
    queue.permission = definition_pb2.Permission.READ_WRITE
    queue.broker.name = BROKER_NAME
    queue.broker.id = 0
    queue.broker.endpoints.CopyFrom(endpoints)
    queue.accept_message_types.extend(ACCEPTED_TYPES)
    return queue


def settings_reply(client: Any, settings: FrontendSettings, endpoints: Any) -> Any:
    """The Settings answer to a client's Settings command (publishing or subscription side)."""
    reply = definition_pb2.Settings()
    reply.CopyFrom(client)
    reply.ClearField("backoff_policy")  # the gateway's policy, not appended to the client's
    ctype = definition_pb2.ClientType
    if client.client_type == ctype.PRODUCER:
        reply.publishing.max_body_size = settings.max_body_size
        reply.publishing.validate_message_type = True
        backoff = reply.backoff_policy
        backoff.max_attempts = 3
        backoff.exponential_backoff.initial.nanos = 10_000_000
        backoff.exponential_backoff.max.seconds = 1
        backoff.exponential_backoff.multiplier = 2.0
        reply.metric.on = False
        return reply
    sub = reply.subscription
    group = codec.store_name(client.subscription.group)
    fifo = group in settings.fifo_groups
    sub.fifo = fifo
    sub.receive_batch_size = settings.receive_batch_size
    if client.client_type == ctype.PUSH_CONSUMER or not sub.HasField("long_polling_timeout"):
        sub.long_polling_timeout.seconds = settings.long_polling_timeout_s
        sub.long_polling_timeout.nanos = 0
    backoff = reply.backoff_policy
    if fifo:
        backoff.max_attempts = settings.orderly_max_delivery_attempts
        backoff.customized_backoff.next.add(seconds=settings.orderly_suspend_ms // 1000)
    else:
        backoff.max_attempts = settings.push_max_attempts
        for step in settings.backoff_s:
            backoff.customized_backoff.next.add(seconds=step)
    push = client.client_type == ctype.PUSH_CONSUMER
    reply.metric.on = push and settings.metrics
    if reply.metric.on:
        reply.metric.endpoints.CopyFrom(endpoints)
    else:
        reply.metric.ClearField("endpoints")
    return reply
