"""Queue expiry (`x-expires`), as RabbitMQ has it: a queue unused for its `x-expires`
milliseconds is deleted, with its messages, bindings and group. Unused means no consumers, and
no declare (passive or not), `basic.get` or `basic.consume` on it for that long; the time starts
again at each of those and when its last consumer leaves. After a restart every such queue's time
starts again, as RabbitMQ renews them when it starts.

The queues are looked at every `TICK_S`; a queue goes at most that much after its time.
"""

from __future__ import annotations

import structlog

from adapters.amqp.frontend import queues
from adapters.amqp.frontend.context import Context
from adapters.amqp.frontend.periodic import Periodic

log = structlog.get_logger(__name__)


class QueueLeases(Periodic):
    """Deletes the `x-expires` queues left unused for their time."""

    TICK_S = 0.1
    FAILED = "amqp queue expiry failed"

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self._ctx = ctx

    def start(self) -> None:
        for name in self._ctx.topology.queues:
            self._ctx.used(name)
        self.begin()

    async def sweep(self) -> None:
        """Delete every queue whose unused time has passed."""
        ctx = self._ctx
        now = ctx.engine.now_ms()
        for name, used in list(ctx.last_used.items()):
            queue = ctx.topology.queues.get(name)
            expires = None if queue is None else queue.settings.expires_ms
            if queue is None or expires is None:
                ctx.last_used.pop(name, None)
                continue
            if ctx.consumer_count(name) or name in ctx.declaring:
                ctx.last_used[name] = now  # in use: its time starts when the last consumer goes
                continue
            if now - used < expires:
                continue
            ctx.last_used.pop(name, None)
            log.info("amqp queue expired", queue=name, expires_ms=expires)
            await queues.remove(ctx, queue)
