"""One Pulsar producer on a connection: SEND frames in, SEND_RECEIPT frames out, in order.

The client expects receipts in sequence order, so a single task per producer takes whatever SEND
frames have queued up, stores their messages with one `engine.publish` call (group commit) and only
then answers each frame. Resends of frames already stored under the same producer name are
answered without storing them again, with message id -1:-1 as from a broker. The session holds
its name on its topic (see `DedupRegistry.attach`) until `close` has answered or given up every
store under way.

A publish that fails in a way that may have stored its messages all the same (`unknown_outcome`:
the store's writer lost after its commit), or that is given up unanswered at `close`, puts the
topic in doubt (`DedupRegistry.doubt`): the topic's next store first reads what was stored
(`dedup_recovery.settle`), and is refused while that cannot be read, so the client's resend of
those sequence ids is answered, not stored twice. Sends on other topics, and every send while
nothing is in doubt, take no extra step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from adapters.pulsar.frontend import dedup_recovery, edge, replies
from adapters.pulsar.frontend.budget import MESSAGE_COST, ReadBudget
from adapters.pulsar.frontend.ids import DedupRegistry, IdAllocator
from adapters.pulsar.frontend.messages import SEQUENCE
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import Frame, FrameError
from gateway.backend.base import OutMessage
from gateway.engine.port import EnginePort
from gateway.errors import GatewayError, Unavailable

log = structlog.get_logger(__name__)

MAX_GROUP_MESSAGES = 1000
"""Most messages stored by one publish call."""
DUPLICATE = (2**64 - 1, 2**64 - 1)
"""The message id of a receipt for a SEND not stored as a duplicate: -1:-1 (as uint64), what a
broker answers."""
CLOSE_WAIT_S = 5.0
"""How long closing a producer waits for a store that is under way."""


@dataclass(slots=True)
class _Send:
    sequence_id: int
    highest: int
    cost: int
    """What the frame holds of the listener's read budget until it is answered."""
    messages: list[OutMessage] = field(default_factory=list)
    sequences: list[int] = field(default_factory=list)
    """Each message's sequence id (a batch's entries have one each)."""
    error: tuple[int, str] | None = None


def unknown_outcome(exc: BaseException) -> bool:
    """Whether a failed publish may have stored its messages all the same: the back end went
    away mid-call (Unavailable: the store's writer lost or hung after its commit, a broker's
    connection dropped) or failed unexpectedly. A refusal (a bad value, a limit, a denied
    topic) stored nothing."""
    return not isinstance(exc, GatewayError) or isinstance(exc, Unavailable)


def sequence_of(message: OutMessage) -> int:
    """The sequence id the edge wrote on a message."""
    return int(message.properties[SEQUENCE])


class ProducerSession:
    """Publishes the SEND frames of one producer and answers them in order."""

    def __init__(
        self,
        *,
        producer_id: int,
        topic: str,
        name: str,
        engine: EnginePort,
        write: Callable[[bytes], None],
        ids: IdAllocator,
        dedup: DedupRegistry,
        limit: int,
        budget: ReadBudget,
        client_version: str = "",
        release: Callable[[], None] | None = None,
        schema_version: bytes = b"",
        owner: str = "",
    ) -> None:
        """`limit`: the most bytes of body + key + properties of one message; `client_version`:
        the connection's, for the code of a refusal (`replies.send_failure`); `release`:
        called once the producer has stopped (its access to the topic ends); `schema_version`:
        its schema's version on the topic (`schemas`), b"" for none; `owner`: the connection's
        principal ("": anonymous), whose share of new topics a new one takes."""
        self.producer_id = producer_id
        self.schema_version = schema_version
        self.topic = topic
        self.name = name
        self._engine = engine
        self._write = write
        self._ids = ids
        self._dedup = dedup
        self._limit = limit
        self._budget = budget
        self._client_version = client_version
        self._release = release
        self._owner = owner
        self._held = 0
        """Budget held by frames taken and not yet answered."""
        self._queue: asyncio.Queue[_Send] = asyncio.Queue()
        self._storing = False
        self._closing = False
        self._task = asyncio.create_task(self._run(), name=f"pulsar-producer-{name}")

    def submit(self, frame: Frame, cost: int) -> None:
        """Queue one SEND frame (decoded or not) to be stored and answered in order; it holds
        `cost` of the read budget, and what its messages need, until it is answered."""
        send = frame.command.send
        highest = max(send.highest_sequence_id, send.sequence_id)
        item = _Send(sequence_id=send.sequence_id, highest=highest, cost=cost)
        if frame.metadata is None:
            item.error = (pb.UnknownError, "SEND without message metadata")
        elif not frame.checksum_ok:
            item.error = (pb.ChecksumError, "checksum mismatch")
        else:
            try:
                item.messages = edge.messages(
                    frame, producer=self.name, limit=self._limit, now_ms=self._engine.now_ms()
                )
                item.sequences = [sequence_of(m) for m in item.messages]
                item.highest = max([highest, *item.sequences])
            except FrameError as exc:
                item.error = (pb.NotAllowedError, str(exc))
            except GatewayError as exc:
                item.error = (replies.server_error(exc), exc.message)
        extra = MESSAGE_COST * len(item.messages)
        self._budget.charge(extra)
        item.cost += extra
        self._held += item.cost
        self._queue.put_nowait(item)

    async def close(self) -> None:
        """Stop taking frames; a store under way may finish (its sequence ids then count as
        stored, so the client's resend after reconnecting is not stored twice)."""
        self._closing = True
        if self._storing:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(self._task), CLOSE_WAIT_S)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._dedup.detach(self.topic, self.name)
        if self._release is not None:
            self._release()
            self._release = None
        self._budget.give(self._held)
        self._held = 0

    async def _run(self) -> None:
        while True:
            group = [await self._queue.get()]
            count = len(group[0].messages)
            while not self._queue.empty() and count < MAX_GROUP_MESSAGES:
                item = self._queue.get_nowait()
                group.append(item)
                count += len(item.messages)
            self._storing = True
            try:
                await self._store(group)
            finally:
                self._storing = False
            if self._closing:
                return

    async def _store(self, group: list[_Send]) -> None:
        if self._dedup.in_doubt(self.topic):  # an earlier store's outcome is unknown
            try:
                await dedup_recovery.settle(self._engine, self._dedup, self.topic)
            except Exception as exc:  # nothing is stored that may be a duplicate
                log.warning("pulsar sends refused until the stored messages can be read",
                            topic=self.topic, error=replies.error_text(exc))
                self._refuse_all(group, exc)
                return
        # Only messages above the highest sequence id stored so far are stored: a resend (of a
        # whole batch, or of part of one under other batch boundaries) is answered, not stored.
        mark = self._dedup.last(self.topic, self.name)
        fresh: list[_Send] = []
        kept: dict[int, list[OutMessage]] = {}
        for item in group:
            if item.error is not None or item.highest <= mark:
                continue
            pairs = zip(item.messages, item.sequences, strict=True)
            kept[id(item)] = [m for m, s in pairs if s > mark]
            fresh.append(item)
            mark = item.highest
        messages = [m for item in fresh for m in kept[id(item)]]
        token = self._dedup.begin(self.topic) if messages else 0
        try:
            await self._publish(group, fresh, kept, messages, token)
        finally:
            self._dedup.end(token)

    async def _publish(self, group: list[_Send], fresh: list[_Send],
                       kept: dict[int, list[OutMessage]], messages: list[OutMessage],
                       token: int) -> None:
        failure: BaseException | None = None
        stored: list[str] = []
        if messages:
            try:
                stored = await self._engine.publish(self.topic, messages, owner=self._owner)
            except Exception as exc:
                failure = exc
                log.warning("pulsar publish failed", topic=self.topic, error=str(exc))
                if unknown_outcome(exc):
                    self._dedup.doubt(self.topic, token)
            except asyncio.CancelledError:  # closed while storing: never answered
                self._dedup.doubt(self.topic, token)
                raise
        first_ids: dict[int, str] = {}
        if failure is None:
            at = 0
            for item in fresh:
                if kept[id(item)] and at < len(stored):
                    first_ids[id(item)] = stored[at]
                at += len(kept[id(item)])
        stored_highest = max(
            (item.highest for item in fresh if failure is None), default=-1
        )
        if stored_highest >= 0:
            try:
                # With the newest message id stored (ordered ids only), for the journal's
                # covered id of the topic (`journal`, `dedup_recovery`).
                newest = stored[-1] if stored and self._ids.ordered else ""
                await self._dedup.persist(self.topic, self.name, stored_highest, newest, token)
            except OSError as exc:
                # Stored all the same: the receipts go out; only a resend after a restart
                # could be stored twice.
                log.error("pulsar dedup state not persisted", topic=self.topic, error=str(exc))
        for item in group:
            self._held -= item.cost
            self._budget.give(item.cost)
            if item.error is not None:
                code, text = item.error
                self._refuse(item.sequence_id, code, text)
            elif failure is not None and item in fresh:
                self._refuse(item.sequence_id, replies.server_error(failure),
                             replies.error_text(failure))
            else:
                self._dedup.record(self.topic, self.name, item.highest)
                # Its first message's id; a duplicate (nothing stored) gets -1:-1, as from a
                # broker, so the client can tell.
                first = first_ids.get(id(item))
                ledger, entry = DUPLICATE if first is None else self._ids.key(first)
                self._write(
                    replies.send_receipt(
                        self.producer_id, item.sequence_id, item.highest, ledger, entry
                    )
                )

    def _refuse_all(self, group: list[_Send], exc: BaseException) -> None:
        for item in group:
            self._held -= item.cost
            self._budget.give(item.cost)
            code, text = item.error or (replies.server_error(exc), replies.error_text(exc))
            self._refuse(item.sequence_id, code, text)

    def _refuse(self, sequence_id: int, code: int, text: str) -> None:
        code = replies.send_failure(code, self._client_version)
        self._write(replies.send_error(self.producer_id, sequence_id, code, text))
