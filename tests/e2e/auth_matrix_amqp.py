"""The AMQP 0-9-1 cells of the authorization matrix (`test_auth_matrix.py::test_amqp`): each call
on a connection of its own, logged in as the caller (user = principal, password = token).

A cell is DENIED when the login or the method is refused with 403 ACCESS_REFUSED (a refused login
closes the connection, a refused method its channel); ALLOWED when the method gets its success
answer. The queue, the exchange of the topic's name and a fanout exchange bound to the queue are
made before each cell, as if declared out of band, so that every caller meets the same entities.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pamqp import commands as amqp_commands

from adapters.amqp.frontend.framing import reply
from adapters.amqp.frontend.topology import Binding
from gateway.backend.base import OutMessage
from tests.amqp_front import RawAmqp

if TYPE_CHECKING:
    from auth_matrix_cells import Caller, Row

    from gateway.server.app import GatewayApp

ALLOWED, DENIED = "allowed", "denied"
"""The matrix's outcomes (`auth_matrix_cells`)."""
REFUSED_AMQP = 403
AMQP_FANOUT = "matrix-fanout"


class AmqpCells:
    """The `amqp_*` calls of `Matrix`."""

    app: GatewayApp

    @contextlib.asynccontextmanager
    async def amqp(self, caller: Caller) -> AsyncIterator[RawAmqp | None]:
        """A connection of `caller` (user = principal, password = token; `wrong` logs in as
        `app` with a wrong password, `none` with empty credentials), or None when the login
        was refused with ACCESS_REFUSED."""
        user = {"none": "", "wrong": "app"}.get(caller.name, caller.name)
        conn, answer = await RawAmqp.login(self.app.front_ends["amqp"].port, user,
                                           caller.token or "")
        if conn is None:
            assert isinstance(answer, amqp_commands.Connection.Close), answer
            assert answer.reply_code == REFUSED_AMQP, answer
            yield None
            return
        try:
            yield conn
        finally:
            conn.close()

    def amqp_queue(self, topic: str, group: str) -> None:
        """Queue `topic` consumed by `group` exists (as if declared out of band), and so do an
        exchange of the topic's name and the fanout exchange bound to that queue alone."""
        topology = self.app.front_ends["amqp"].front.ctx.topology  # type: ignore[attr-defined]
        group = group or topic
        existing = topology.queues.get(topic)
        if existing is None or existing.settings.group != group:
            if existing is not None:
                topology.delete_queue(topic)
            topology.declare_queue(topic, connection=0, durable=False, exclusive=False,
                                   auto_delete=False,
                                   arguments={} if group == topic else {"x-consumer-group": group})
        for name, kind in ((topic, "direct"), (AMQP_FANOUT, "fanout")):
            if name not in topology.exchanges:
                topology.declare_exchange(name, kind, passive=False, durable=False,
                                          auto_delete=False, internal=False, arguments={})
        fanout = topology.exchanges[AMQP_FANOUT]
        for binding in list(fanout.bindings):
            topology.unbind(binding)
        topology.bind(Binding(AMQP_FANOUT, topic, True, "", {}))

    async def amqp_call(self, row: Row, caller: Caller, method: Any, success: type,
                        then: Callable[[RawAmqp, Any], Awaitable[str]] | None = None) -> str:
        """Send `method` on channel 1 of the caller's connection: ALLOWED when it is answered
        with `success`, DENIED when refused with ACCESS_REFUSED."""
        self.amqp_queue(row.topic, row.group)
        async with self.amqp(caller) as conn:
            if conn is None:
                return DENIED
            conn.send(1, method)
            channel, answer = await conn.answer()
            if isinstance(answer, success):
                return ALLOWED if then is None else await then(conn, answer)
            if isinstance(answer, amqp_commands.Channel.Close | amqp_commands.Connection.Close
                          ) and answer.reply_code == REFUSED_AMQP:
                return DENIED
            return f"answer {answer!r} on {channel}: {getattr(answer, 'reply_text', '')}"

    async def amqp_CONNECT(self, row: Row, caller: Caller) -> str:
        async with self.amqp(caller) as conn:
            return DENIED if conn is None else ALLOWED

    def _group_args(self, row: Row) -> dict[str, Any]:
        return {"x-consumer-group": row.group} if row.group else {}

    async def amqp_declare(self, row: Row, caller: Caller) -> str:
        return await self.amqp_call(row, caller, reply(amqp_commands.Queue.Declare,
            queue=row.topic, arguments=self._group_args(row)), amqp_commands.Queue.DeclareOk)

    async def amqp_declare_passive(self, row: Row, caller: Caller) -> str:
        return await self.amqp_call(row, caller, reply(amqp_commands.Queue.Declare,
            queue=row.topic, passive=True), amqp_commands.Queue.DeclareOk)

    async def amqp_consume(self, row: Row, caller: Caller) -> str:
        return await self.amqp_call(row, caller, reply(amqp_commands.Basic.Consume,
            queue=row.topic, consumer_tag="matrix"), amqp_commands.Basic.ConsumeOk)

    async def amqp_get_ack(self, row: Row, caller: Caller) -> str:
        """basic.get of a message published for the cell, then basic.ack of it."""
        await self.app.engine.publish(row.topic, [OutMessage(body=b"get me")])

        async def ack(conn: RawAmqp, answer: Any) -> str:
            if isinstance(answer, amqp_commands.Basic.GetEmpty):
                return "get-empty: the message published for the cell was not there"
            conn.send(1, amqp_commands.Basic.Ack(delivery_tag=answer.delivery_tag))
            conn.send(1, amqp_commands.Basic.Qos(prefetch_count=1))
            _, done = await conn.answer()
            return ALLOWED if isinstance(done, amqp_commands.Basic.QosOk) else f"ack: {done!r}"

        return await self.amqp_call(row, caller, reply(amqp_commands.Basic.Get, queue=row.topic),
                                    amqp_commands.Basic.GetOk | amqp_commands.Basic.GetEmpty,
                                    ack)

    async def amqp_purge(self, row: Row, caller: Caller) -> str:
        return await self.amqp_call(row, caller, reply(amqp_commands.Queue.Purge, queue=row.topic),
                                    amqp_commands.Queue.PurgeOk)

    async def amqp_delete(self, row: Row, caller: Caller) -> str:
        return await self.amqp_call(row, caller, reply(amqp_commands.Queue.Delete, queue=row.topic),
                                    amqp_commands.Queue.DeleteOk)

    async def amqp_bind(self, row: Row, caller: Caller) -> str:
        """Bind the queue to the exchange of the topic's name: the exchange's traffic becomes
        readable from the queue."""
        return await self.amqp_call(row, caller, reply(amqp_commands.Queue.Bind,
            queue=row.topic, exchange=row.topic, routing_key="matrix"),
            amqp_commands.Queue.BindOk)

    async def _amqp_publish(self, row: Row, caller: Caller, exchange: str) -> str:
        async def confirmed(conn: RawAmqp, answer: Any) -> str:
            conn.publish(1, b"m", row.topic, exchange)
            channel, got = await conn.answer()
            if isinstance(got, amqp_commands.Basic.Ack):
                return ALLOWED
            if isinstance(got, amqp_commands.Channel.Close) and got.reply_code == REFUSED_AMQP:
                return DENIED
            return f"answer {got!r} on {channel}"

        return await self.amqp_call(row, caller, amqp_commands.Confirm.Select(),
                                    amqp_commands.Confirm.SelectOk, confirmed)

    async def amqp_publish(self, row: Row, caller: Caller) -> str:
        """Through the default exchange, to the queue of the topic's name."""
        return await self._amqp_publish(row, caller, "")

    async def amqp_publish_fanout(self, row: Row, caller: Caller) -> str:
        """Through a fanout exchange bound to the topic's queue (the exchange itself is no
        permission: every topic a message reaches is)."""
        return await self._amqp_publish(row, caller, AMQP_FANOUT)

    async def amqp_exchange_declare(self, row: Row, caller: Caller) -> str:
        return await self.amqp_call(row, caller, reply(amqp_commands.Exchange.Declare,
            exchange=row.topic, exchange_type="direct"), amqp_commands.Exchange.DeclareOk)

    async def amqp_exchange_delete(self, row: Row, caller: Caller) -> str:
        return await self.amqp_call(row, caller, reply(amqp_commands.Exchange.Delete,
            exchange=row.topic), amqp_commands.Exchange.DeleteOk)
