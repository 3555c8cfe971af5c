"""RocketMQ transactional messages: half messages, EndTransaction and orphan checks.

A transactional send stores the message as a half message on the topic `HALF_TOPIC`, with its
real topic, namespace and SDK message id in RocketMQ's own property names, so consumers of the
real topic never see it. The transaction id the producer gets is the half message's store id.

The front end's checker (`TransactionDesk.run`) takes every half message as a simple consumer of
group `CHECK_GROUP` and holds it, invisible, until the producer ends the transaction:
COMMIT publishes the message to its real topic (with the producer's message id, properties and
born time) and then acks the half; ROLLBACK acks the half. A half not ended within
`check_first_ms` (or the message's own `orphaned_transaction_recovery_duration`) is asked about:
a `RecoverOrphanedTransactionCommand` goes to a producer that declared the topic on its
telemetry stream, and again every `check_interval_ms`; after `check_max` checks the half goes
to `%DLQ%CID_RMQ_SYS_TRANS` (where RocketMQ drops it), kept for an operator to look at.

Durability: the half is stored before the send is answered; a commit is answered after the
message is stored on its real topic. A crash between that store and the half's ack makes the
half come back and be checked again: a producer answering COMMIT again stores it twice (at
least once, as RocketMQ).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rocketmq.grpc_protocol import definition_pb2, service_pb2

from adapters.rocketmq.dialect import INVISIBLE_RANGE_MS
from adapters.rocketmq.naming import with_namespace
from gateway.backend import OutMessage
from gateway.engine.api import Delivery, SettleAction, Settlement, SubscriptionSpec
from gateway.engine.port import EnginePort
from gateway.errors import GatewayError

from . import codec
from .codec import Rejected
from .open_halves import OVERHEAD, OpenHalves
from .settings import CheckTimes

log = logging.getLogger(__name__)
Code = definition_pb2.Code
Resolution = definition_pb2.TransactionResolution

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
CHECKER_ID = "gateway-transaction-checker"
REAL_TOPIC = "REAL_TOPIC"
"""The topic's name as the producer gave it."""
NAMESPACE = "INSTANCE_ID"
"""The producer's namespace ("" for none)."""
SDK_MESSAGE_ID = "UNIQ_KEY"
"""The message id the producer gave (what its consumers see once committed)."""
HALF_MARK = "TRAN_MSG"
FIRST_CHECK_MS = "TRAN_CHECK_MS"
"""The message's own first-check delay (orphaned_transaction_recovery_duration), policy ms."""
INTERNAL = frozenset({REAL_TOPIC, NAMESPACE, SDK_MESSAGE_ID, HALF_MARK, FIRST_CHECK_MS})
RECOVERY_RANGE_MS = (0, INVISIBLE_RANGE_MS[1])
RECEIVE_BATCH = 64
RECEIVE_WAIT_MS = 20_000
PURGE_S = 0.5
"""While the checker holds all it may, how often it looks for halves dead-lettered meanwhile."""
END_WAIT_S = 2.0
"""How long an EndTransaction waits for a half message just stored to reach the checker."""
EXPECTED_MAX = 100_000
OUTBOX = 256
"""Commands queued to one producer's telemetry stream; a check that finds it full waits for
the next round."""


@dataclass
class Half:
    """A half message the checker holds."""

    delivery: Delivery
    receipt: str
    topic: str
    """The real topic's store name."""
    message_id: str
    size: int
    deadline_ms: int = 0
    """Wall-clock ms when its lease ends (it comes back to the checker, or is dead-lettered)."""
    final: bool = False
    """Its last check is done: when its lease ends it is dead-lettered, its transaction over."""


def half_message(out: OutMessage, topic: Any, first_check_ms: int, field: str) -> OutMessage:
    """The half message to store for a transactional send (the store assigns its id)."""
    if FIRST_CHECK_MS in out.properties:
        raise Rejected(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"{field}.user_properties",
                       FIRST_CHECK_MS, "names other than the gateway's own half-message ones")
    properties = dict(out.properties)
    properties[REAL_TOPIC] = topic.name
    properties[NAMESPACE] = topic.resource_namespace
    properties[SDK_MESSAGE_ID] = out.message_id
    properties[HALF_MARK] = "true"
    if first_check_ms:
        properties[FIRST_CHECK_MS] = str(first_check_ms)
    return replace(out, properties=properties, message_id="", deliver_at_ms=0)


def transactional(props: Any, system: str) -> None:
    """Raise `Rejected` for what a TRANSACTION message may not carry (`validation`)."""
    for name in ("message_group", "delivery_timestamp"):
        if props.HasField(name):
            raise Rejected(Code.BAD_REQUEST, f"{system}.{name}", "set",
                           "unset on a TRANSACTION message")
    if props.HasField("orphaned_transaction_recovery_duration"):
        codec.duration_ms(props.orphaned_transaction_recovery_duration,
                          f"{system}.orphaned_transaction_recovery_duration", Code.BAD_REQUEST,
                          *RECOVERY_RANGE_MS)


def recovery_ms(props: Any) -> int:
    """The message's own first-check delay (0: the front end's), at least 10 s (the shortest
    invisible time of the checker's simple consumer)."""
    if props.HasField("orphaned_transaction_recovery_duration"):
        return max(INVISIBLE_RANGE_MS[0], codec.to_ms(props.orphaned_transaction_recovery_duration))
    return 0


def real_topic_of(delivery: Delivery) -> tuple[str, str, str] | None:
    """(store name, name, namespace) of a half message's real topic; None if it is not one."""
    props = delivery.properties
    name = props.get(REAL_TOPIC)
    if not name or props.get(HALF_MARK) != "true" or not props.get(SDK_MESSAGE_ID):
        return None
    namespace = props.get(NAMESPACE, "")
    return with_namespace(namespace, name), name, namespace


class TransactionDesk:
    """Holds half messages until their transaction ends; asks producers about orphans."""

    def __init__(self, engine: EnginePort, times: CheckTimes, host: Callable[[], str],
                 *, shared: bool = False) -> None:
        """`shared` (authentication on): each principal may have half of `times.held_bytes`
        open at once (`open_halves`)."""
        self._engine = engine
        self.open = OpenHalves(times.held_bytes // 2 if shared else 0)
        self._times = times
        self._host = host
        self._held: dict[str, Half] = {}
        self._expected: set[str] = set()
        """Transaction ids of half messages stored but not yet taken by the checker."""
        self._held_bytes = 0
        self._purge_at = 0
        """The earliest lease deadline of a half held (0: none held)."""
        self._arrived = asyncio.Condition()
        self._room = asyncio.Event()
        self._room.set()
        self._producers: dict[str, dict[int, asyncio.Queue[Any]]] = {}
        self._declared: dict[int, list[str]] = {}
        """Each producer stream's topics (by its outbox's id)."""
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._waking = False
        self.checks_sent = 0

    @property
    def spec(self) -> SubscriptionSpec:
        return SubscriptionSpec(
            topic=HALF_TOPIC, group=CHECK_GROUP, policy="rocketmq-simple",
            options={"max_retries": str(self._times.max_checks)}, consumer_id=CHECKER_ID,
            owner=None,  # the gateway's own group: not refused at max_stored_groups
        )

    def expect(self, transaction_ids: list[str]) -> None:
        """Half messages just stored: an EndTransaction for one waits for it to arrive."""
        for transaction_id in transaction_ids:
            if transaction_id not in self._held and len(self._expected) < EXPECTED_MAX:
                self._expected.add(transaction_id)

    # --- producers' telemetry streams ------------------------------------------------------

    def add_producer(self, topics: list[str], outbox: asyncio.Queue[Any]) -> None:
        """A producer's stream declared `topics` (what it declared before is dropped)."""
        self.drop_producer(outbox)
        self._declared[id(outbox)] = topics
        for topic in topics:
            self._producers.setdefault(topic, {})[id(outbox)] = outbox

    def drop_producer(self, outbox: asyncio.Queue[Any]) -> None:
        """The stream ended: only its own topics are looked at (not every producer's)."""
        for topic in self._declared.pop(id(outbox), ()):
            streams = self._producers.get(topic)
            if streams is not None:
                streams.pop(id(outbox), None)
                if not streams:
                    del self._producers[topic]

    # --- the checker ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start checking when half messages were left from before (the back end can tell);
        otherwise the first transactional send or EndTransaction starts it (`wake`), so a
        gateway whose clients use no transactions runs no checker group."""
        try:
            left = await self._engine.last_id(HALF_TOPIC)
        except GatewayError as error:
            log.warning("transaction checker: cannot look for half messages: %s", error.message)
            left = None
        if left is not None:
            await self.wake()

    async def wake(self) -> None:
        """Start the checker unless it runs."""
        if self._waking or self._task is not None or self._stopped:
            return
        self._waking = True
        try:
            with contextlib.suppress(GatewayError):  # from the first half message on
                await self._engine.create_group(HALF_TOPIC, CHECK_GROUP, owner=None)
        finally:
            self._waking = False
        if self._task is None and not self._stopped:
            self._task = asyncio.create_task(self.run(), name="rocketmq-transaction-checker")

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self) -> None:
        """Take half messages as they come (and come back) until cancelled."""
        while True:
            self._purge()
            if not self._room.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), PURGE_S)
                continue
            try:
                deliveries = await self._engine.receive(
                    self.spec, RECEIVE_BATCH, self._times.first_ms, RECEIVE_WAIT_MS,
                    counted=False)  # the gateway's own; `_room` bounds what it holds
            except GatewayError as error:
                log.warning("transaction checker: receive failed: %s", error.message)
                await asyncio.sleep(1.0)
                continue
            for delivery in deliveries:
                try:
                    await self._take(delivery)
                except GatewayError as error:
                    log.warning("transaction checker: half message %s: %s",
                                delivery.message_id, error.message)

    async def _take(self, delivery: Delivery) -> None:
        real = real_topic_of(delivery)
        if real is None:  # not a half message this front end stored: nothing to end
            log.warning("transaction checker: %s is not a half message; dropped",
                        delivery.message_id)
            await self._engine.ack([delivery.receipt])
            return
        topic, name, namespace = real
        receipt, deadline = delivery.receipt, delivery.deadline_ms
        if delivery.attempt > 1:
            self._check(delivery, topic, name, namespace)
            receipt, deadline = await self._extend(receipt, self._times.interval_ms)
        else:
            own = delivery.properties.get(FIRST_CHECK_MS, "")
            if own.isdigit() and int(own) != self._times.first_ms:
                receipt, deadline = await self._extend(receipt, int(own))
        if not receipt:
            return
        self._expected.discard(delivery.message_id)
        again = self._held.pop(delivery.message_id, None)  # its earlier delivery timed out
        if again is not None:
            self._released(again)
        self._hold(Half(delivery, receipt, topic, delivery.properties[SDK_MESSAGE_ID],
                        len(delivery.body) + OVERHEAD, deadline,
                        delivery.attempt > self._times.max_checks))
        async with self._arrived:
            self._arrived.notify_all()

    def _hold(self, half: Half) -> None:
        self._held[half.delivery.message_id] = half
        self._held_bytes += half.size
        if self._held_bytes >= self._times.held_bytes:
            self._room.clear()
        if not self._purge_at or half.deadline_ms < self._purge_at:
            self._purge_at = half.deadline_ms

    def _purge(self) -> None:
        """Forget the halves whose lease ended: they are no longer the checker's. One past its
        last check is dead-lettered, its transaction over (a late EndTransaction is refused);
        the others come back to the checker, for their next check, once it has room (while
        it held all it may it took none, and so never saw them come back)."""
        now = self._engine.now_ms()
        if not self._purge_at or now < self._purge_at:
            return
        self._purge_at = 0
        for transaction_id, half in list(self._held.items()):
            if half.deadline_ms <= now:
                del self._held[transaction_id]
                self._released(half)
                if half.final:
                    self.open.ended(transaction_id)
                else:
                    self.expect([transaction_id])  # an EndTransaction waits for it to come back
            elif not self._purge_at or half.deadline_ms < self._purge_at:
                self._purge_at = half.deadline_ms

    async def _extend(self, receipt: str, invisible_ms: int) -> tuple[str, int]:
        """The receipt and deadline of a lease made `invisible_ms` long from now; ("", 0) when
        the lease is no longer the checker's (timed out, or dead-lettered)."""
        (result,) = await self._engine.settle(
            [Settlement(receipt, SettleAction.EXTEND, invisible_ms=invisible_ms)])
        return (result.new_receipt, result.deadline_ms) if result.ok else ("", 0)

    def _check(self, delivery: Delivery, topic: str, name: str, namespace: str) -> None:
        streams = self._producers.get(topic)
        if not streams:
            log.info("transaction check of %s on %s: no producer of the topic is connected",
                     delivery.message_id, topic)
            return
        outbox = next(iter(streams.values()))
        shown = replace(delivery, message_id=delivery.properties[SDK_MESSAGE_ID],
                        properties={k: v for k, v in delivery.properties.items()
                                    if k not in INTERNAL})
        resource = definition_pb2.Resource(name=name, resource_namespace=namespace)
        message = codec.sdk_message(shown, resource, codec.SIMPLE, 0, self._host())
        message.system_properties.message_type = definition_pb2.MessageType.TRANSACTION
        message.system_properties.ClearField("receipt_handle")
        command = service_pb2.TelemetryCommand(
            recover_orphaned_transaction_command=service_pb2.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=delivery.message_id))
        try:
            outbox.put_nowait(command)
        except asyncio.QueueFull:
            return
        self.checks_sent += 1
        # The next producer gets the next check of this topic.
        streams[id(outbox)] = streams.pop(id(outbox))

    # --- EndTransaction ------------------------------------------------------------------

    async def end(self, topic: str, message_id: str, transaction_id: str,
                  resolution: int, owner: str = "") -> None:
        """Commit or roll back, for principal `owner` (whose share of new topics a commit to a
        new one takes); raises `Rejected` for a transaction it does not hold."""
        receipt = ""
        for _ in range(2):
            half = await self._find(transaction_id)
            if half is None or half.topic != topic or half.message_id != message_id:
                break
            del self._held[transaction_id]
            self._released(half)
            # The lease is made new first: a half whose lease ended meanwhile is not the
            # checker's to end any more (dead-lettered after its last check, or on its way
            # back to the checker: then it is waited for once more).
            receipt, deadline = await self._extend(half.receipt, self._times.interval_ms)
            if receipt:
                break
            if half.final:
                self.open.ended(transaction_id)
                half = None
                break
            self._expected.add(transaction_id)
        else:
            half = None
        if half is None or not receipt or half.topic != topic or half.message_id != message_id:
            raise Rejected(
                Code.INVALID_TRANSACTION_ID, "transaction_id", transaction_id,
                "the id a transactional send of this topic and message_id returned, of a "
                "transaction not yet ended")
        half.receipt, half.deadline_ms = receipt, deadline
        try:
            if resolution == Resolution.COMMIT:
                await self._commit(half, owner)
            await self._engine.ack([half.receipt])
        except GatewayError:
            self._hold(half)
            raise
        self.open.ended(transaction_id)

    def _released(self, half: Half) -> None:
        self._held_bytes -= half.size
        if self._held_bytes < self._times.held_bytes:
            self._room.set()

    async def _commit(self, half: Half, owner: str) -> None:
        delivery = half.delivery
        properties = {k: v for k, v in delivery.properties.items() if k not in INTERNAL}
        out = OutMessage(delivery.body, properties, delivery.key, delivery.tag, 0,
                         half.message_id)
        await self._engine.publish(half.topic, [out], born=[delivery.born_ms], owner=owner)

    async def _find(self, transaction_id: str) -> Half | None:
        half = self._held.get(transaction_id)
        if half is not None or transaction_id not in self._expected:
            return half
        with contextlib.suppress(TimeoutError):
            async with self._arrived:
                await asyncio.wait_for(
                    self._arrived.wait_for(lambda: transaction_id in self._held), END_WAIT_S)
        self._expected.discard(transaction_id)
        return self._held.get(transaction_id)
