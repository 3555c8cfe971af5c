"""One Pulsar producer on a connection: SEND frames in, SEND_RECEIPT frames out, in order.

The client expects receipts in sequence order, so a single task per producer takes whatever SEND
frames have queued up, stores their messages with one `engine.publish` call (group commit) and only
then answers each frame. Resends of frames already stored under the same producer name are
answered without storing them again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from adapters.pulsar.frontend import replies
from adapters.pulsar.frontend.ids import DedupRegistry, IdAllocator
from adapters.pulsar.frontend.messages import out_message
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.batch import entries
from adapters.pulsar.wire.frames import Frame, FrameError
from gateway.backend.base import OutMessage
from gateway.engine.port import EnginePort

log = structlog.get_logger(__name__)

MAX_GROUP_MESSAGES = 1000
"""Most messages stored by one publish call."""
CLOSE_WAIT_S = 5.0
"""How long closing a producer waits for a store that is under way."""


@dataclass(slots=True)
class _Send:
    sequence_id: int
    highest: int
    messages: list[OutMessage] = field(default_factory=list)
    error: tuple[int, str] | None = None


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
    ) -> None:
        self.producer_id = producer_id
        self.topic = topic
        self.name = name
        self._engine = engine
        self._write = write
        self._ids = ids
        self._dedup = dedup
        self._queue: asyncio.Queue[_Send] = asyncio.Queue()
        self._storing = False
        self._closing = False
        self._task = asyncio.create_task(self._run(), name=f"pulsar-producer-{name}")

    def submit(self, frame: Frame) -> None:
        """Queue one SEND frame (decoded or not) to be stored and answered in order."""
        send = frame.command.send
        highest = max(send.highest_sequence_id, send.sequence_id)
        item = _Send(sequence_id=send.sequence_id, highest=highest)
        if frame.metadata is None:
            item.error = (pb.UnknownError, "SEND without message metadata")
        elif not frame.checksum_ok:
            item.error = (pb.ChecksumError, "checksum mismatch")
        else:
            try:
                found = entries(frame.metadata, frame.payload)
            except FrameError as exc:
                item.error = (pb.NotAllowedError, str(exc))
            else:
                base = send.sequence_id
                item.messages = [
                    out_message(e, frame.metadata, self.name, _seq(e.sequence_id, base + i))
                    for i, e in enumerate(found)
                ]
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
        last = self._dedup.last(self.name)
        fresh = [s for s in group if s.error is None and s.highest > last]
        messages = [m for s in fresh for m in s.messages]
        failure: BaseException | None = None
        if messages:
            try:
                await self._engine.publish(self.topic, messages)
            except Exception as exc:
                failure = exc
                log.warning("pulsar publish failed", topic=self.topic, error=str(exc))
        for item in group:
            if item.error is not None:
                self._write(replies.send_error(self.producer_id, item.sequence_id, *item.error))
            elif failure is not None and item in fresh:
                code = replies.server_error(failure)
                text = replies.error_text(failure)
                self._write(replies.send_error(self.producer_id, item.sequence_id, code, text))
            else:
                self._dedup.record(self.name, item.highest)
                self._write(
                    replies.send_receipt(
                        self.producer_id,
                        item.sequence_id,
                        item.highest,
                        self._ids.ledger_id,
                        self._ids.next_entry(),
                    )
                )


def _seq(own: int | None, implied: int) -> int:
    """An entry's sequence id: its own when the batch carries one, else implied by position."""
    return implied if own is None else own
