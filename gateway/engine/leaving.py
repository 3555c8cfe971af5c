"""Leaving: a push consumer that cancels or closes gives its deliveries back, and a group left
without consumers under a policy whose product then forgets the failure counts has them reset
for the next consumer of that product."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

import structlog

from gateway.core import events as ev
from gateway.core.machine import decide
from gateway.core.policy import RetryPolicy
from gateway.engine.base import Batch
from gateway.engine.dispatch import Consumer, Subscription
from gateway.engine.expiry import Expiring
from gateway.errors import GatewayError, Unimplemented

log = structlog.get_logger("gateway.engine")


class Leaving(Expiring):
    """Consumers leaving their subscription."""

    async def _leave(self, work: Coroutine[Any, Any, None]) -> None:
        """Carry a consumer's cancel or close (`work`) out to its end even when its caller is
        cancelled meanwhile: a gRPC stream's handler is cancelled again while it closes its
        consumer, and a close cut short at its give-back's write left the consumer's broadcast
        group for good (never dropped, its idle timer never armed)."""
        task = self._spawn(work)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_said)  # nobody waits for it now: its failure is logged
            raise

    async def _consumer_closed(self, consumer: Consumer) -> None:
        sub = consumer.sub
        last = self._leaves_unattended(consumer)
        left_ms = self.clock.now_ms()  # its group's idle period starts now, not after the write
        await self._give_back(consumer, list(consumer.receipts), uncounted=last)
        for held in [h for h in self.inflight.values() if h.held and h.consumer is consumer]:
            held.consumer = None
        consumer.forget_all()
        if last and not sub.consumers:
            sub.counts_forgotten = True
        if not sub.consumers and sub.own_group:
            if sub.anonymous or self._config.broadcast_idle_ms == 0:
                await self._drop_group(sub)
            else:
                self._drop_later(sub, left_ms)

    def _leaves_unattended(self, consumer: Consumer) -> bool:
        """Whether `consumer` closing leaves its group without anyone, under a policy whose
        product then forgets the failure counts (`RetryPolicy.count_resets_unattended`): it
        is the group's only consumer and no other delivery of the group is out (a pull
        consumer's: the group is attended)."""
        sub = consumer.sub
        if not sub.policy.count_resets_unattended or sub.consumers != [consumer]:
            return False
        return all(inf.consumer is consumer for inf in self.inflight.values() if inf.sub is sub)

    async def _attend(self, sub: Subscription, policy: RetryPolicy) -> None:
        """A consumer comes to `sub` under `policy`. After the group was left unattended
        (`_leaves_unattended`), one whose product forgot the counts then sees its messages
        counted from 0 again, where the back end can (where the count travels with each
        message it stays); one under another policy takes the group over with its counts."""
        if not sub.counts_forgotten:
            return
        sub.counts_forgotten = False
        if not policy.count_resets_unattended:
            return
        try:
            reset = await self.backend.reset_retries(sub.topic, sub.group)
        except Unimplemented:
            return
        except GatewayError as exc:  # the store is down: the counts stay
            log.warning("retry counts not reset", topic=sub.topic, group=sub.group,
                        error=exc.message)
            return
        if reset:
            log.info("retry counts reset: the group was left without consumers", topic=sub.topic,
                     group=sub.group, messages=reset)

    async def _consumer_cancelled(self, consumer: Consumer, untaken: list[str]) -> None:
        """A consumer takes no more: out of the subscription's rotation, its untaken deliveries
        given back; what it took stays settleable until it closes. In an ordered subscription
        (exclusive, failover) a consumer that still holds deliveries keeps its place, without
        room, until it settled them or closes: the next consumer does not get later messages
        while earlier ones may still come back."""
        given = set(untaken)
        stays = consumer.sub.ordered() and any(r not in given for r in consumer.receipts)
        await self._give_back(consumer, untaken, leave=not stays)
        for held in [h for h in self.inflight.values() if h.held and h.consumer is consumer]:
            held.consumer = None

    async def _give_back(
        self, consumer: Consumer, receipts: list[str], *, uncounted: bool = False,
        leave: bool = True,
    ) -> None:
        """Take `consumer` out of its subscription (unless not `leave`) and give `receipts`
        back as a lost consumer's (visible again at once, counted where the policy says so,
        unless `uncounted`: the group's counts are about to be forgotten)."""
        sub = consumer.sub
        if leave and consumer in sub.consumers:
            sub.consumers.remove(consumer)
            consumer.set_active(False)
            sub.announce()
        batch = Batch()
        now, real = self._time.both()
        for receipt in receipts:
            inf = self.inflight.get(receipt)
            if inf is None or inf.consumer is not consumer or inf.held:
                continue
            policy = inf.policy
            if uncounted and policy.lost_counts_as_failure:
                policy = replace(policy, lost_counts_as_failure=False)
            try:
                decision = decide(inf.record, ev.ConsumerLost(), policy, now)
            except GatewayError:
                continue
            self._apply(inf, decision, batch, now, real)
        await self._flush(batch)
        sub.wake.set()
        if not sub.consumers and sub.task is not None:
            sub.task.cancel()
            sub.task = None


def _said(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("a consumer's leave failed", error=getattr(exc, "message", repr(exc)))
