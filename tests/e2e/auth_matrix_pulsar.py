"""The Pulsar binary-protocol cells of the authorization matrix (`test_auth_matrix.py::
test_pulsar`): each call on a raw connection of its own (`auth_clients.PulsarRaw`), CONNECTed
with the caller's token. DENIED when CONNECT or the command is refused with AuthenticationError
or AuthorizationError (a settlement: and its delivery is still unsettled afterwards)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from auth_clients import PulsarRaw

from adapters.pulsar.wire import wire_pb2 as pb
from gateway.backend.base import OutMessage

if TYPE_CHECKING:
    from auth_matrix_cells import Caller, Row

    from gateway.server.app import GatewayApp

ALLOWED, DENIED = "allowed", "denied"
"""The matrix's outcomes (`auth_matrix_cells`)."""
Cmd = pb.BaseCommand
REFUSED_PULSAR = frozenset({pb.AuthenticationError, pb.AuthorizationError})


class PulsarCells:
    """The `pulsar_*` calls of `Matrix` (which gives `inflight` and `settled`)."""

    app: GatewayApp
    callers: tuple[Caller, ...]

    def inflight(self, receipt: str) -> bool:
        raise NotImplementedError  # Matrix's

    async def settled(self, receipt: str, refused: bool) -> str:
        raise NotImplementedError  # Matrix's


    @contextlib.asynccontextmanager
    async def pulsar(self, caller: Caller) -> AsyncIterator[PulsarRaw | None]:
        """A connection of `caller`, or None when CONNECT was refused."""
        client, answer = await PulsarRaw.connect(self.app.front_ends["pulsar"].port, caller.token)
        try:
            if answer.command.type == Cmd.CONNECTED:
                yield client
            else:
                assert answer.command.type == Cmd.ERROR, answer.command
                assert answer.command.error.error in REFUSED_PULSAR, answer.command
                yield None
        finally:
            await client.close()

    @staticmethod
    def pulsar_outcome(answer: Any, success: int) -> str:
        cmd = answer.command
        if cmd.type == success:
            return ALLOWED
        if cmd.type == Cmd.ERROR and cmd.error.error in REFUSED_PULSAR:
            return DENIED
        return f"answer {cmd}"

    async def pulsar_CONNECT(self, row: Row, caller: Caller) -> str:
        async with self.pulsar(caller) as client:
            return DENIED if client is None else ALLOWED

    async def pulsar_LOOKUP(self, row: Row, caller: Caller) -> str:
        async with self.pulsar(caller) as client:
            if client is None:
                return DENIED
            cmd = Cmd(type=Cmd.LOOKUP)
            cmd.lookupTopic.topic = "persistent://public/default/orders"
            cmd.lookupTopic.request_id = client.next_id()
            client.send(cmd)
            return self.pulsar_outcome(await client.reply(), Cmd.LOOKUP_RESPONSE)

    async def pulsar_PARTITIONED_METADATA(self, row: Row, caller: Caller) -> str:
        async with self.pulsar(caller) as client:
            if client is None:
                return DENIED
            cmd = Cmd(type=Cmd.PARTITIONED_METADATA)
            cmd.partitionMetadata.topic = "persistent://public/default/orders"
            cmd.partitionMetadata.request_id = client.next_id()
            client.send(cmd)
            return self.pulsar_outcome(await client.reply(), Cmd.PARTITIONED_METADATA_RESPONSE)

    async def pulsar_PRODUCER_SEND(self, row: Row, caller: Caller) -> str:
        async with self.pulsar(caller) as client:
            if client is None:
                return DENIED
            producer_id, answer = await client.producer(f"persistent://public/default/{row.topic}")
            created = self.pulsar_outcome(answer, Cmd.PRODUCER_SUCCESS)
            cmd = Cmd(type=Cmd.SEND)
            cmd.send.producer_id = producer_id
            cmd.send.sequence_id = 0
            metadata = pb.MessageMetadata(producer_name="matrix", sequence_id=0, publish_time=1)
            client.send(cmd, metadata, b"m")
            sent = await client.reply()
            if created == ALLOWED:
                return self.pulsar_outcome(sent, Cmd.SEND_RECEIPT)
            if sent.command.type == Cmd.SEND_RECEIPT:
                return "SEND stored after PRODUCER was refused"
            return created

    async def pulsar_SUBSCRIBE(self, row: Row, caller: Caller) -> str:
        async with self.pulsar(caller) as client:
            if client is None:
                return DENIED
            _, answer = await client.subscribe(f"persistent://public/default/{row.topic}",
                                               row.group)
            return self.pulsar_outcome(answer, Cmd.SUCCESS)

    def pulsar_receipts(self, topic: str, group: str) -> set[str]:
        return {u.receipt for u in self.app.engine.unsettled(topic, group)
                if u.consumer_id.startswith("pulsar-")}

    async def _pulsar_held(self, client: PulsarRaw, row: Row) -> tuple[int, Any, str] | None:
        """Subscribe and take one delivery: (consumer id, message id, engine receipt)."""
        await self.app.engine.publish(row.topic, [OutMessage(body=b"settle me")])
        before = self.pulsar_receipts(row.topic, row.group)
        consumer_id, answer = await client.subscribe(
            f"persistent://public/default/{row.topic}", row.group)
        if answer.command.type != Cmd.SUCCESS:
            return None
        flow = Cmd(type=Cmd.FLOW)
        flow.flow.consumer_id = consumer_id
        flow.flow.messagePermits = 1
        client.send(flow)
        while (message := await client.reply()).command.type != Cmd.MESSAGE:
            pass
        (receipt,) = self.pulsar_receipts(row.topic, row.group) - before
        return consumer_id, message.command.message.message_id, receipt

    def _pulsar_settle_command(self, call: str, consumer_id: int, message_id: Any) -> Any:
        if call == "ACK":
            cmd = Cmd(type=Cmd.ACK)
            cmd.ack.consumer_id = consumer_id
            cmd.ack.ack_type = pb.CommandAck.Individual
            cmd.ack.message_id.add().CopyFrom(message_id)
            return cmd
        cmd = Cmd(type=Cmd.REDELIVER_UNACKNOWLEDGED_MESSAGES)
        cmd.redeliverUnacknowledgedMessages.consumer_id = consumer_id
        cmd.redeliverUnacknowledgedMessages.message_ids.add().CopyFrom(message_id)
        return cmd

    async def _pulsar_settle(self, row: Row, caller: Caller) -> str:
        """The caller's own consumer settles what it got; a caller that may not subscribe
        tries to settle the owner's delivery by its consumer and message ids instead."""
        if caller.name in row.who:
            async with self.pulsar(caller) as client:
                assert client is not None
                held = await self._pulsar_held(client, row)
                if held is None:
                    return DENIED
                consumer_id, message_id, receipt = held
                client.send(self._pulsar_settle_command(row.call, consumer_id, message_id))
                for _ in range(100):  # the command is answered by nothing: look for its effect
                    if not self.inflight(receipt):
                        break
                    await asyncio.sleep(0.01)
                return await self.settled(receipt, refused=False)
        owner = next(c for c in self.callers if c.name in row.who)
        async with self.pulsar(owner) as own:
            assert own is not None
            held = await self._pulsar_held(own, row)
            assert held is not None
            consumer_id, message_id, receipt = held
            async with self.pulsar(caller) as client:
                if client is None:
                    refused = True
                else:
                    mine, answer = await client.subscribe(
                        f"persistent://public/default/{row.topic}", row.group)
                    refused = self.pulsar_outcome(answer, Cmd.SUCCESS) == DENIED
                    for target in (consumer_id, mine):
                        client.send(self._pulsar_settle_command(row.call, target, message_id))
                    ping = Cmd(type=Cmd.PING)
                    ping.ping.SetInParent()
                    client.send(ping)
                    assert (await client.reply()).command.type == Cmd.PONG  # all handled
            return await self.settled(receipt, refused)

    async def pulsar_ACK(self, row: Row, caller: Caller) -> str:
        return await self._pulsar_settle(row, caller)

    async def pulsar_REDELIVER(self, row: Row, caller: Caller) -> str:
        return await self._pulsar_settle(row, caller)
