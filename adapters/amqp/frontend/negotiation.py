"""Connection negotiation: what the server announces, and the client's tuning and virtual host
checked against the listener's limits (`connection.Connection` runs the handshake)."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from adapters.amqp.frontend.context import Limits
from adapters.amqp.frontend.errors import NOT_ALLOWED, AMQPError, short

SERVER_PROPERTIES: dict[str, Any] = {
    "product": "retry-gateway",
    "platform": "Python/asyncio",
    "information": "AMQP 0-9-1 front end of retry-gateway",
    "capabilities": {
        "publisher_confirms": True,
        "exchange_exchange_bindings": True,
        "basic.nack": True,
        "consumer_cancel_notify": True,
        "per_consumer_qos": True,
        "authentication_failure_close": True,
        "direct_reply_to": True,
    },
}
VHOST = "/"
HANDSHAKE_FRAME_MAX = 65_536
"""Frames before tuning may be this large (a client's properties; the spec's floor is 4096)."""
FRAME_MIN = 4096


def tuned(limits: Limits, method: commands.Connection.TuneOk) -> tuple[int, int]:
    """The frame_max and channel_max a client's tune-ok chose (0: the server's), checked."""
    frame_max = method.frame_max or limits.frame_max
    if not FRAME_MIN <= frame_max <= limits.frame_max:
        raise AMQPError(NOT_ALLOWED, f"frame_max={frame_max}: allowed {FRAME_MIN}.."
                                     f"{limits.frame_max}", (10, 31))
    channel_max = method.channel_max or limits.channel_max
    if channel_max > limits.channel_max:
        raise AMQPError(NOT_ALLOWED, f"channel_max={channel_max}: allowed 1.."
                                     f"{limits.channel_max}", (10, 31))
    return frame_max, channel_max


def check_vhost(method: commands.Connection.Open) -> None:
    if method.virtual_host not in (VHOST, ""):
        raise AMQPError(NOT_ALLOWED, f"vhost {short(method.virtual_host)} not found: the "
                                     "gateway serves the virtual host '/' only", (10, 40))
