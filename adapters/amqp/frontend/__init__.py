"""The AMQP 0-9-1 front end: unmodified AMQP clients (aio-pika, pika, amqplib, …) publish and
consume through the gateway with document 001's retry semantics.

Framing and method codecs are pamqp's. The layout: `server` (the listener), `connection`
(negotiation, heartbeats, channels), `channel` (content, ordering, acks, prefetch), `handlers` and
`queues` (the methods), `publishing`, `consumers`, `topology` (exchanges, queues, bindings and
routing; kept by `journal`), `deadletters` (dead-letter exchanges), `edge` and `guard` (every
value checked), `messages` (AMQP properties to gateway properties and back).
"""

from adapters.amqp.frontend.server import AMQPFrontEnd

__all__ = ["AMQPFrontEnd"]
