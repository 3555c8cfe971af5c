"""Who may do what over AMQP, in the gateway's terms (with a tokens file; without one, every
check passes).

* A queue is its topic consumed by its group: declaring, consuming, getting from, purging,
  deleting or binding a queue needs permission to consume that topic with that group.
* Binding a queue to an exchange also needs permission to consume the exchange's name (with the
  queue's group): it makes that exchange's traffic readable from the queue.
* Declaring, deleting or binding exchanges needs permission to publish to their names.
* A published message needs permission to publish to every topic it is routed to.
"""

from __future__ import annotations

from adapters.amqp.frontend.errors import from_gateway
from adapters.amqp.frontend.state import ChannelState
from adapters.amqp.frontend.topology import Queue
from gateway.errors import GatewayError


def consume(channel: ChannelState, queue: Queue, method: tuple[int, int]) -> None:
    authorizer = channel.ctx.authorizer
    if authorizer is None:
        return
    try:
        authorizer.check_consume(channel.conn.principal, queue.name, queue.settings.group)
    except GatewayError as exc:
        raise from_gateway(exc, method) from None


def read_exchange(channel: ChannelState, exchange: str, queue: Queue,
                  method: tuple[int, int]) -> None:
    authorizer = channel.ctx.authorizer
    if authorizer is None or not exchange:
        return
    try:
        authorizer.check_consume(channel.conn.principal, exchange, queue.settings.group)
    except GatewayError as exc:
        raise from_gateway(exc, method) from None


def exchange(channel: ChannelState, name: str, method: tuple[int, int]) -> None:
    authorizer = channel.ctx.authorizer
    if authorizer is None:
        return
    try:
        authorizer.check_publish(channel.conn.principal, name)
    except GatewayError as exc:
        raise from_gateway(exc, method) from None
