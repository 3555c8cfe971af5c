"""What the engine's timers carry out: deadlines that passed, and broadcast groups left idle;
and, at `max_groups` (or a principal at its `max_groups_per_principal`), forgetting the
subscriptions nobody uses (the principal's own).

Every delivery deadline (ack timeout, invisible duration, an ordered retry's interval) is a key
in the one `TimerService`; keys from `GROUP_KEYS` up stand for broadcast consumers' own groups
waiting to be dropped.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Coroutine, Sequence
from typing import Any

import structlog

from gateway.backend import Backend
from gateway.core import events as ev
from gateway.core.machine import decide
from gateway.core.registry import Registry
from gateway.engine.base import Batch
from gateway.engine.clock import Clock
from gateway.engine.config import EngineConfig
from gateway.engine.dispatch import Consumer, Subscription
from gateway.engine.observe import Observer
from gateway.engine.settling import Settling
from gateway.errors import GatewayError, TooManyGroups, TooManyOwnGroups

log = structlog.get_logger("gateway.engine")

GROUP_KEYS = 1 << 61
"""Timer keys from here up drop idle broadcast groups; the ones below are delivery numbers."""
ROOM_SCAN_MS = 1000
"""At `max_groups`, the subscriptions are looked over for idle ones at most this often: a
client asking for new groups one after another at the cap costs one scan a second (a principal
at its own cap: one scan of its groups a second, whatever the others do)."""


class Expiring(Settling):
    """Deadlines and idle broadcast groups."""

    def __init__(
        self,
        backend: Backend,
        registry: Registry,
        clock: Clock,
        config: EngineConfig | None = None,
        observers: Sequence[Observer] = (),
    ) -> None:
        super().__init__(backend, registry, clock, config, observers)
        self._expiry_keys = itertools.count(GROUP_KEYS)
        self._next_room_scan_ms: dict[str | None, int] = {}
        """When the subscriptions may next be looked over for idle ones, by principal (None: all
        of them, at `max_groups`); as many keys as principals have been at their cap."""
        self._owned: Counter[str | None] = Counter()
        """Subscriptions the engine runs by the principal that made them (`Subscription.owner`):
        kept with `subscriptions` by `_run_group` and `_forget_group`."""

    def _on_due(self, keys: list[int]) -> None:
        if self._expiring:
            groups = [k for k in keys if k >= GROUP_KEYS]
            keys = [k for k in keys if k < GROUP_KEYS]
            self._spawn(self._drop_idle(groups))
            if not keys:
                return
        self._spawn(self._expire(keys))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _expire(self, keys: list[int]) -> None:
        batch = Batch()
        due = [inf for n in keys for inf in self._take_due(n)]
        for inf in due:
            if inf.held:
                inf.sub.held.append(inf)
                inf.sub.kick()
                continue
            if not inf.record.deadline_ms:
                continue
            policy_now, real = self._time.both()
            now = max(policy_now, inf.record.deadline_ms)
            try:
                decision = decide(inf.record, ev.DeadlinePassed(), inf.policy, now)
            except GatewayError as exc:
                log.warning("deadline not applied", error=exc.message)
                continue
            self._apply(inf, decision, batch, now, real)
        for consumer in {inf.consumer for inf in due if inf.consumer is not None}:
            _drop_untaken(consumer)
        try:
            await self._flush(batch)
        except GatewayError as exc:
            log.error("timeout handling failed", error=exc.message)

    # ------------------------------------------------------- room for groups
    def _run_group(self, key: tuple[str, str], sub: Subscription) -> None:
        """Add a new subscription to the engine's table, counted for its owner."""
        self.subscriptions[key] = sub
        self._owned[sub.owner] += 1

    def _forget_group(self, key: tuple[str, str]) -> Subscription:
        """Take a subscription out of the engine's table (and its owner's count)."""
        sub = self.subscriptions.pop(key)
        left = self._owned[sub.owner] - 1
        if left > 0:
            self._owned[sub.owner] = left
        else:
            del self._owned[sub.owner]
        return sub

    def _check_room(self, owner: str | None) -> None:
        """Raise unless a new group of `owner`'s may run: its own count below
        `max_groups_per_principal` (the gateway's own groups, owner None: no share) and the
        total below `max_groups`, each after making room."""
        per_principal = self._config.groups_per_principal
        if owner is not None and per_principal < self._config.max_groups and (
                self._owned[owner] >= per_principal and not self._make_room(owner)):
            raise TooManyOwnGroups(per_principal, owner)
        if len(self.subscriptions) >= self._config.max_groups and not self._make_room(None):
            raise TooManyGroups(self._config.max_groups)

    def _make_room(self, owner: str | None = None) -> bool:
        """At `max_groups` (`owner` None), or `owner` at `max_groups_per_principal` (only its
        groups): forget every subscription nobody uses now (no consumer, no pull going on,
        nothing delivered and unsettled or held for an ordered retry, no failure counts waiting
        to be forgotten, not a broadcast consumer's own group, which has its own expiry). The
        back end keeps their positions and messages, and the next consumer or receive of such a
        group makes its subscription again. True when there is room."""
        now = self.clock.now_ms()
        if now < self._next_room_scan_ms.get(owner, 0):
            return False
        self._next_room_scan_ms[owner] = now + ROOM_SCAN_MS
        busy = {id(inf.sub) for inf in self.inflight.values()}
        for key, sub in list(self.subscriptions.items()):
            if (sub.consumers or sub.pulls or sub.held or sub.own_group or sub.counts_forgotten
                    or id(sub) in busy or (owner is not None and sub.owner != owner)):
                continue
            self._forget_group(key)
            sub.closed = True
            sub.wake.set()  # its dispatcher, if any, ends after what it is doing (not cancelled:
            # a fetch it made is then given back)
        if owner is not None:
            return self._owned[owner] < self._config.groups_per_principal
        return len(self.subscriptions) < self._config.max_groups

    # ------------------------------------------------- idle broadcast groups
    def _drop_later(self, sub: Subscription, left_ms: int) -> None:
        """(Re)schedule the drop of a broadcast consumer's own group, the idle period after its
        last consumer left at `left_ms`."""
        if not sub.expiry_key:
            sub.expiry_key = next(self._expiry_keys)
            self._expiring[sub.expiry_key] = sub
        self.timers.schedule(left_ms + self._config.broadcast_idle_ms,
                             sub.expiry_key)

    def _keep_group(self, sub: Subscription) -> None:
        """A broadcast consumer came back before its group was dropped."""
        if sub.expiry_key:
            self.timers.cancel(sub.expiry_key)
            self._expiring.pop(sub.expiry_key, None)
            sub.expiry_key = 0

    async def _drop_group(self, sub: Subscription) -> None:
        """Forget a broadcast consumer's own group, here and in the back end, unless a consumer
        joined it meanwhile."""
        key = (sub.topic, sub.group)
        if sub.consumers or self.subscriptions.get(key) is not sub:
            return
        self._forget_group(key)
        try:
            await self.backend.drop_group(sub.topic, sub.group)
        except GatewayError as exc:
            log.warning("broadcast group not dropped", topic=sub.topic, group=sub.group,
                        error=exc.message)
            return
        self.observers.group_dropped(sub.topic, sub.group)
        log.info("broadcast group dropped", topic=sub.topic, group=sub.group)

    async def _drop_idle(self, keys: list[int]) -> None:
        for key in keys:
            sub = self._expiring.pop(key, None)
            if sub is not None and sub.expiry_key == key:
                sub.expiry_key = 0
                await self._drop_group(sub)


def _drop_untaken(consumer: Consumer) -> None:
    """Take out of `consumer`'s outbox the deliveries whose deadline passed before its front
    end took them (a client that stopped reading): each held its body until taken, and the
    dispatcher, with room again, pushed the retries on top, so a stuck consumer's outbox grew
    by one round of bodies per ack timeout. Their credit was never used: it is given back."""
    outbox = consumer.outbox
    if not outbox:
        return
    receipts = consumer.receipts
    kept = [d for d in outbox if d.receipt in receipts]
    dropped = len(outbox) - len(kept)
    if dropped:
        outbox.clear()
        outbox.extend(kept)
        consumer.add_credit(dropped)
