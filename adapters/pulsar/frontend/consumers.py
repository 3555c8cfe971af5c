"""One Pulsar consumer on a connection: engine deliveries out as MESSAGE, acks and nacks back.

A message keeps one message id, its engine id (`ids`), as on a Pulsar broker, so the client's
own bookkeeping (duplicate filter for acks still in its grouping window, nack and ack-timeout
trackers, dead-letter candidates, seek) works on redeliveries. The session keeps the id ->
delivery map so that ACK and REDELIVER_UNACKNOWLEDGED_MESSAGES
settle the right receipt; an individual ack of a message another consumer of the subscription
holds settles it there (`peers`): acks are per subscription, as a broker's (it finds the
consumer with the pending ack), and an ack of an id nobody holds changes nothing. A cumulative
ack acknowledges everything up to its id, including a message given back earlier and delivered
again later (settled at once, never sent); on Shared and Key_Shared subscriptions, whose
consumers share the id range, it is refused and changes nothing (a broker ignores it there).

FLOW permits become engine credit one for one (deliveries are never batched on the way out),
but a consumer holds at most `max_unacked` unsettled deliveries (Pulsar's
maxUnackedMessagesPerConsumer): the rest of its permits wait until it settles some. Credit
runs at most `BATCH` ahead of what the pump has written, and the pump writes in chunks of
`CHUNK_BYTES`, waiting for the socket to drain between them and topping up credit only once it
has: a client that does not read holds about one batch per consumer in the gateway, not
everything its permits allow.

Redelivery counts follow Pulsar: they rise for Shared and Key_Shared and stay 0 for Exclusive and
Failover, where the client redelivers everything it holds at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence

import structlog

from adapters.pulsar.frontend import replies
from adapters.pulsar.frontend.ids import ENTRY_LIMIT, U64, IdAllocator, MessageKey
from adapters.pulsar.frontend.messages import delivery_metadata
from adapters.pulsar.frontend.subscriptions import Holder
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import encode_payload_command
from gateway.engine.api import ConsumerType, Delivery, SettleAction, Settlement
from gateway.engine.port import ConsumerPort, EnginePort
from gateway.errors import Unavailable

log = structlog.get_logger(__name__)

SUB_TYPES: dict[int, ConsumerType] = {
    pb.CommandSubscribe.Exclusive: ConsumerType.EXCLUSIVE,
    pb.CommandSubscribe.Shared: ConsumerType.SHARED,
    pb.CommandSubscribe.Failover: ConsumerType.FAILOVER,
    pb.CommandSubscribe.Key_Shared: ConsumerType.KEY_SHARED,
}
SHARED_TYPES = frozenset({ConsumerType.SHARED, ConsumerType.KEY_SHARED})
"""Subscription types whose consumers share the messages (no cumulative acks)."""
COUNTS_REDELIVERIES = SHARED_TYPES
CUMULATIVE_REFUSED = ("cumulative acks are for Exclusive and Failover subscriptions: on Shared "
                      "and Key_Shared ones acknowledge each message")
BATCH = 256
"""Most deliveries taken from the engine at once, and most engine credit given ahead of them."""
CHUNK_BYTES = 256 * 1024
"""MESSAGE frames written before waiting for the socket to drain."""
MAX_UNACKED = 50_000
"""Unsettled deliveries one consumer may hold (Pulsar's default maxUnackedMessagesPerConsumer)."""


class ConsumerSession:
    """Pumps deliveries of one engine consumer to the client and settles what comes back."""

    def __init__(
        self,
        *,
        consumer_id: int,
        consumer_type: ConsumerType,
        engine: EnginePort,
        consumer: ConsumerPort,
        write: Callable[[bytes], None],
        drain: Callable[[], Awaitable[None]],
        ids: IdAllocator,
        epoch: int | None = None,
        max_unacked: int = MAX_UNACKED,
        durable: bool = True,
        start: MessageKey | None = None,
    ) -> None:
        """`start`: the message id a reader's SUBSCRIBE placed its new group at (None for
        none, earliest or latest)."""
        self.consumer_id = consumer_id
        self.durable = durable
        """False for a reader's subscription, whose group goes with its last consumer."""
        self.consumer_type = consumer_type
        self._engine = engine
        self._consumer = consumer
        self._write = write
        self._drain = drain
        self._ids = ids
        self._epoch = epoch
        self._held: dict[MessageKey, Delivery] = {}
        self._acked_upto: MessageKey = (-1, -1)
        """Highest id acknowledged cumulatively."""
        self._sent_upto: MessageKey = (-1, -1)
        """Highest id sent."""
        self._start = start
        self._unsent = 0
        """Deliveries the pump has taken from the engine and not yet written."""
        self._max_unacked = max_unacked
        self._permits = 0
        """Permits the client gave that are not yet engine credit."""
        self._credit = 0
        """Engine credit given and not yet used by a delivery."""
        self._writing = False
        """True while the pump writes a batch (and waits for the socket to drain)."""
        self._task = asyncio.create_task(self._pump(), name=f"pulsar-consumer-{consumer_id}")

    @property
    def held(self) -> int:
        """Deliveries sent and not yet settled."""
        return len(self._held)

    def flow(self, permits: int) -> None:
        """The client can take `permits` more messages."""
        if permits > 0:
            self._permits += permits
            self._top_up()

    def _top_up(self) -> None:
        """Turn permits into engine credit as far as the unacked limit allows, at most `BATCH`
        ahead, and not while the pump waits for the socket to drain (it tops up once it has)."""
        if self._writing:
            return
        room = min(self._max_unacked - len(self._held), BATCH) - self._credit
        grant = min(self._permits, room)
        if grant > 0:
            self._permits -= grant
            self._credit += grant
            self._consumer.add_credit(grant)

    async def ack(
        self, command: pb.CommandAck, peers: Iterable[Holder] = ()
    ) -> tuple[int, str] | None:
        """Settle acknowledged deliveries, those of individual acks that `peers` (the other
        consumers of the subscription) hold among them; returns an error for an ACK_RESPONSE,
        if any."""
        cumulative = command.ack_type == pb.CommandAck.Cumulative
        if cumulative and self.consumer_type in SHARED_TYPES:
            log.info("pulsar cumulative ack refused", consumer=self.consumer_id,
                     subscription_type=self.consumer_type.value)
            return pb.NotAllowedError, CUMULATIVE_REFUSED
        wanted = self._mine(command.message_id)
        if cumulative and command.message_id:
            mark = command.message_id[-1]
            # Never past what this session sent: a made-up id far ahead must not ack later
            # deliveries unseen.
            upto = min((mark.ledgerId, mark.entryId), self._sent_upto)
            self._acked_upto = max(self._acked_upto, upto)
            wanted = [key for key in self._held if key <= self._acked_upto]
            return await self._settle(wanted, SettleAction.ACK)
        receipts = self.take(wanted)
        mine = set(wanted)
        rest = [key for m in command.message_id if (key := (m.ledgerId, m.entryId)) not in mine]
        for peer in peers:
            if rest and peer is not self:
                receipts += peer.take(rest)
        return await self._send_settlements(receipts, SettleAction.ACK)

    def take(self, keys: Sequence[MessageKey]) -> list[str]:
        """Stop holding the deliveries of `keys` (another consumer of the subscription
        acknowledged them); their receipts, to settle."""
        done = [self._held.pop(key).receipt for key in keys if key in self._held]
        if done:
            self._top_up()
        return done

    async def redeliver(self, command: pb.CommandRedeliverUnacknowledgedMessages) -> None:
        """Give back deliveries the client will not process (nack, ack timeout, queue reset)."""
        if command.HasField("consumer_epoch"):
            self._epoch = command.consumer_epoch
        if command.message_ids and self.consumer_type in COUNTS_REDELIVERIES:
            wanted = self._mine(command.message_ids)
        else:
            wanted = list(self._held)
        await self._settle(wanted, SettleAction.FAIL)

    @property
    def sent_nothing(self) -> bool:
        """True until this consumer sends a message: `last_ids` may then answer the topic's
        newest message."""
        return self._sent_upto == (-1, -1)

    def last_ids(
        self, backlog: int, newest: MessageKey | None = None
    ) -> tuple[MessageKey, MessageKey]:
        """GET_LAST_MESSAGE_ID's answer, (last message id, mark-delete position), given the
        group's `backlog` (`EnginePort.backlog`) and the topic's `newest` message id
        (`EnginePort.last_id`, asked before the backlog; None: none, or not known), for the
        client's `hasMessageAvailable`: it asks whether the answer is above the last id it read,
        keeps the answer while it is, and asks again once it has read up to it. So the answer is the
        newest id sent when nothing is waiting (none sent: the topic's newest, as a broker
        answers, else entry -1, "no message"), and otherwise the least id a message still to
        come can have: just above the newest sent (message ids rise in topic order), or the
        reader's start id while nothing is sent (just above it when more than it waits).
        The mark-delete position, which clients read after a seek by time or a start at
        latest, is a broker's: just below the first delivery not yet acknowledged, else the
        newest id sent, else just below the answer when something waits, else the answer
        (a reader at latest has nothing available until a new message comes)."""
        waiting = backlog + self._unsent
        sent = self._sent_upto != (-1, -1)
        if not waiting:
            last = self._sent_upto if sent else newest or (self._ids.ledger_id, U64 - 1)
        elif sent:
            last = _after(self._sent_upto)
        elif self._start is not None:
            last = _after(self._start) if waiting > 1 else self._start
        else:
            last = (0, 0)
        if self._held:
            mark = _before(min(self._held))
        elif sent:
            mark = self._sent_upto
        else:
            mark = _before(last) if waiting else last
        return last, mark

    def watch(self, active: bool) -> None:
        """Tell the client whether this (failover) consumer is the active one."""
        self._write(replies.active_consumer(self.consumer_id, active))

    async def close(self) -> None:
        """Stop delivering and close the engine consumer, which gives back what was held. The
        engine consumer leaves its subscription before the first await (`moves.unsubscribe`
        relies on it); the pump, cancelled first, writes nothing more."""
        self._task.cancel()
        self._held.clear()
        self._consumer.watch_active(None)
        try:
            await self._consumer.close()
        except Exception as exc:
            log.warning("closing engine consumer failed", error=str(exc))
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def _mine(self, ids: Iterable[pb.MessageIdData]) -> list[MessageKey]:
        held = self._held
        return [key for m in ids if (key := (m.ledgerId, m.entryId)) in held]

    async def _settle(
        self, keys: list[MessageKey], action: SettleAction
    ) -> tuple[int, str] | None:
        return await self._send_settlements(self.take(keys), action)

    async def _send_settlements(
        self, receipts: list[str], action: SettleAction
    ) -> tuple[int, str] | None:
        if not receipts:
            return None
        try:
            if action is SettleAction.ACK:
                # By receipt alone: no settlement or result object per message.
                results = list((await self._engine.ack(receipts)).values())
            else:
                results = await self._engine.settle(
                    [Settlement(receipt=r, action=action, delay_ms=0) for r in receipts]
                )
        except Exception as exc:
            log.warning("pulsar settle failed", action=action.value, error=str(exc))
            return replies.server_error(exc), replies.error_text(exc)
        for result in results:
            if not result.ok:
                log.info("pulsar settle refused", receipt=result.receipt, error=result.error)
        return None

    async def _pump(self) -> None:
        try:
            while True:
                batch = await self._consumer.next_batch(BATCH)
                self._unsent = len(batch)
                self._credit = max(self._credit - len(batch), 0)
                self._writing = True
                behind = await self._send(batch)
                self._writing = False
                if behind:
                    # Never sent, so the client's permits for them are still unused.
                    self._permits += len(behind)
                    await self._send_settlements(behind, SettleAction.ACK)
                self._top_up()
        except (Unavailable, ConnectionError):
            return
        except Exception as exc:
            log.error("pulsar delivery pump stopped", error=str(exc), exc_info=True)

    async def _send(self, batch: list[Delivery]) -> list[str]:
        """Write MESSAGE frames for `batch`, waiting for the socket to drain after every
        `CHUNK_BYTES`; the receipts of deliveries a cumulative ack already covers (not sent)."""
        behind: list[str] = []
        frames: list[bytes] = []
        size = 0
        for i, delivery in enumerate(batch):
            self._unsent = len(batch) - i - 1
            key = self._ids.key(delivery.message_id)
            if key <= self._acked_upto:
                behind.append(delivery.receipt)
                continue
            frames.append(self._message(delivery, key))
            size += len(frames[-1])
            if size >= CHUNK_BYTES:
                self._write(b"".join(frames))
                frames, size = [], 0
                await self._drain()
        if frames:
            self._write(b"".join(frames))
        await self._drain()
        return behind

    def _message(self, delivery: Delivery, key: MessageKey) -> bytes:
        self._held[key] = delivery
        self._sent_upto = max(self._sent_upto, key)
        cmd = pb.BaseCommand(type=pb.BaseCommand.MESSAGE)
        msg = cmd.message
        msg.consumer_id = self.consumer_id
        msg.message_id.ledgerId, msg.message_id.entryId = key
        if self.consumer_type in COUNTS_REDELIVERIES:
            msg.redelivery_count = max(delivery.retries, 0)
        if self._epoch is not None:
            msg.consumer_epoch = self._epoch
        return encode_payload_command(cmd, delivery_metadata(delivery), delivery.body)


def _after(key: MessageKey) -> MessageKey:
    """The least message id above `key`."""
    ledger, entry = key
    return (ledger, entry + 1) if entry + 1 < ENTRY_LIMIT else (ledger + 1, 0)


def _before(key: MessageKey) -> MessageKey:
    """The greatest message id below `key` (entry -1 of its ledger, as clients read it, for
    entry 0)."""
    ledger, entry = key
    return (ledger, entry - 1) if entry else (ledger, U64 - 1)
