"""Pull: `receive` leases messages to a caller that settles them by receipt later.

The bodies a principal's deliveries hold are bounded by `EngineConfig.max_held_bytes`
(`gateway.engine.holdings`): a receive fetches no more than the room its principal has left,
and one at the limit waits (up to its `wait_ms`) until some are settled or time out.
"""

from __future__ import annotations

import asyncio

from gateway.backend import Release, StoredMessage
from gateway.core import events as ev
from gateway.core.machine import decide
from gateway.core.record import Record
from gateway.engine.api import Delivery, SubscriptionSpec
from gateway.engine.delivering import Delivering
from gateway.engine.dispatch import Subscription, wait_any
from gateway.errors import GatewayError, InvalidArgument, Unavailable
from gateway.limits import MAX_RECEIVE, MAX_WAIT_MS

DEFAULT_INVISIBLE_MS = 30_000
"""A receive that chooses no invisible duration under a policy where each receive chooses one
gets this one, within the policy's range."""


class Pulling(Delivering):
    async def receive(
        self,
        spec: SubscriptionSpec,
        max_messages: int,
        invisible_ms: int | None,
        wait_ms: int,
        *,
        counted: bool = True,
    ) -> list[Delivery]:
        """Pull: lease up to `max_messages`, waiting up to `wait_ms` for the first. `counted`:
        the bodies count against the principal's `max_held_bytes` (False: the gateway's own
        receive, which settles what it gets at once)."""
        if not self._accepting:
            raise Unavailable("the gateway is shutting down")
        if not 1 <= max_messages <= MAX_RECEIVE:
            raise InvalidArgument("max_messages", max_messages, f"1..{MAX_RECEIVE}")
        if not 0 <= wait_ms <= MAX_WAIT_MS:
            raise InvalidArgument("wait_ms", wait_ms, f"0..{MAX_WAIT_MS} ms")
        policy = self.policy_for(spec)
        if policy.invisible_range_ms is not None and invisible_ms is None:
            low, high = policy.invisible_range_ms
            invisible_ms = min(max(DEFAULT_INVISIBLE_MS, low), high)
        if invisible_ms is not None:
            # Validate before anything is leased.
            decide(Record("check", spec.topic, spec.group), ev.Deliver("check", invisible_ms),
                   policy, self._time.policy_now())
        await self._check_topic(spec.topic, spec.owner)
        sub = await self._settled_subscription(spec, policy, False, exclusive=False)
        if sub.own_group and not sub.consumers:
            # A pull consumer's own group lasts while it keeps receiving.
            self._drop_later(sub, self.clock.now_ms())
        owner = spec.owner if counted else None  # None: the gateway's own
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_ms / 1000
        sub.pulls += 1  # in use: not forgotten at `max_groups` while it waits
        caught_up = False
        try:
            while True:
                woken = sub.woken()
                if sub.held and not sub.consumers:
                    # Ordered retries due again go out first, before anything behind them.
                    return self._held_by(owner, [
                        self._redeliver_held(sub, None, policy)
                        for _ in range(min(max_messages, len(sub.held)))])
                room = self._pull_room(owner)
                if room <= 0:
                    # At max_held_bytes: wait for some to be settled (or to time out).
                    left = give_up - loop.time()
                    if left <= 0 or not self._accepting:
                        return []
                    await wait_any([asyncio.shield(self.holdings.freed()), asyncio.shield(woken),
                                    asyncio.ensure_future(asyncio.sleep(left))])
                    continue
                got = await self._pull(sub, max_messages, room, owner)
                if got:
                    now, real = self._time.both()
                    if self._plain(sub):
                        with self._counted():
                            out = self._deliver_all(sub, got, None, now, real, policy,
                                                    invisible_ms)
                    else:
                        out = [self._deliver(sub, s, None, invisible_ms, now, real, policy)
                               for s in got]
                    return self._held_by(owner, out)
                if not caught_up and self._accepting:
                    # Nothing, where the back end's fetch reads a buffer filled behind the
                    # store's back: ask the store (a publish confirmed just now) before waiting,
                    # and once more before answering nothing.
                    caught_up = True
                    if any([await self.backend.catch_up(s, sub.group) for s in sub.sources]):
                        continue
                left = give_up - loop.time()
                if left <= 0 or not self._accepting:
                    return []
                waiters: list[asyncio.Future[object] | asyncio.Task[object]] = [
                    asyncio.ensure_future(self.backend.wait(s, sub.group, left))
                    for s in sub.sources
                ]
                waiters.append(asyncio.shield(woken))  # shared: not cancelled by wait_any
                await wait_any(waiters)
                caught_up = caught_up and give_up > loop.time()
        finally:
            sub.pulls -= 1

    def _pull_room(self, owner: str | None) -> int:
        """Bytes of bodies one receive may fetch: a push consumer's window, within what the
        principal has left of `max_held_bytes`."""
        room = self._config.max_unacked_bytes
        if owner is None:
            return room
        return min(room, self.holdings.room(owner))

    async def _pull(self, sub: Subscription, want: int, room: int, owner: str | None
                    ) -> list[StoredMessage]:
        """`_fetch` within `room`, reserved for `owner` while the fetch is under way (so that
        its receives at once do not each take the same room). What a back end hands out beyond
        the room (messages it holds in memory anyway) is given back."""
        if owner is None:
            return await self._fetch(sub, want, room)
        self.holdings.add(owner, room)
        try:
            got = await self._fetch(sub, want, room)
            n = _within(got, room)
            if n < len(got):
                now = self.clock.now_ms()
                try:
                    await self.backend.release([Release(s.lease, now, s.attempt, s.retries)
                                                for s in got[n:]])
                except GatewayError:
                    return got  # the back end is away: hand them out rather than lose them
                del got[n:]
            return got
        finally:
            self.holdings.less(owner, room)  # the caller counts what it delivers, no await between

    def _held_by(self, owner: str | None, out: list[Delivery]) -> list[Delivery]:
        """`out` (just delivered for no consumer) counted as held by `owner`'s pull."""
        if owner is not None and out:
            self.inflight.pulled([d.receipt for d in out], owner)
        return out


def _within(got: list[StoredMessage], room: int) -> int:
    """How many of `got` fit `room` bytes of bodies: the one that reaches it is the last."""
    total = 0
    for i, stored in enumerate(got):
        if total >= room:
            return i
        total += len(stored.body)
    return len(got)
