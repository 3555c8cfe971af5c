"""A store failure is never permanent: the failed commit fails its own callers, the store
restarts its writer and reloads its index from the durable tables by itself, and what was
acknowledged is still there; leases handed out before are void and their messages come again.
If it cannot recover (failures in a row), it says so (`fatal()`) so that the process can exit."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import time
from collections.abc import Callable

import pytest

from gateway.backend.base import OutMessage
from gateway.errors import Unavailable
from gateway.store import EmbeddedStore, writes
from gateway.store.recovery import Recovery
from gateway.store.writer import GroupCommitWriter

T0 = 1_700_000_000_000
FAST = {"restart_backoff_s": (0.001, 0.002)}
"""Back-off for tests: the writer process's start is the only wait."""


async def until(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Wait for a condition that real processes bring about (not a timed rule)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


def fail_commit(store: EmbeddedStore) -> asyncio.Future[object]:
    """Queue a write whose transaction fails in the writer."""
    writer = store._supervisor.writer
    assert writer is not None
    return writer.submit(writes.statement("INSERT INTO no_such_table VALUES (1)"))


async def test_a_failed_commit_fails_its_callers_and_the_store_heals(
    tmp_path: pathlib.Path,
) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    try:
        kept = await store.publish("t", [OutMessage(body=b"kept")])
        first_writer = store._supervisor.writer
        with pytest.raises(Unavailable):
            await fail_commit(store)
        assert not store.healthy()
        with pytest.raises(Unavailable):
            await store.publish("t", [OutMessage(body=b"refused while down")])
        assert await until(store.healthy), "the store did not heal"
        assert store._supervisor.writer is not first_writer
        after = await store.publish("t", [OutMessage(body=b"after")])
        got = await store.fetch("t", "g", 10, T0)
        assert [m.message_id for m in got] == kept + after
    finally:
        await store.close()


async def test_a_full_database_fails_its_callers_and_heals_once_there_is_space(
    tmp_path: pathlib.Path,
) -> None:
    """SQLite's own "database or disk is full", from a page limit on the writer's connection
    (a restarted writer has none: the space is back)."""
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    try:
        kept = await store.publish("t", [OutMessage(body=b"k" * 100) for _ in range(5)])
        assert store._supervisor.writer is not None
        await store._supervisor.writer.submit(writes.statement("PRAGMA max_page_count = 1"))
        with pytest.raises(Unavailable, match="full"):
            await store.publish("t", [OutMessage(body=b"x" * 200_000)])
        assert await until(store.healthy), "the store did not heal"
        after = await store.publish("t", [OutMessage(body=b"x" * 200_000)])
        got = await store.fetch("t", "g", 100, T0)
        assert [m.message_id for m in got] == kept + after
    finally:
        await store.close()


async def test_leases_from_before_the_failure_are_void_and_their_messages_come_again(
    tmp_path: pathlib.Path,
) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    try:
        ids = await store.publish("t", [OutMessage(body=str(i).encode()) for i in range(4)])
        old = await store.fetch("t", "g", 4, T0)
        await store.ack([old[0].lease])
        with pytest.raises(Unavailable):
            await fail_commit(store)
        assert await until(store.healthy)
        await store.ack([m.lease for m in old[1:]])  # stale: ignored, nothing acked
        again = await store.fetch("t", "g", 10, T0)
        assert [m.message_id for m in again] == ids[1:]
        assert [m.attempt for m in again] == [1, 1, 1]  # the void leases were deliveries
        assert {m.lease.token for m in again}.isdisjoint({m.lease.token for m in old})
        await store.ack([m.lease for m in again])
        assert await store.fetch("t", "g", 10, T0) == []
    finally:
        await store.close()


async def test_a_killed_writer_is_restarted_and_listeners_hear_down_then_up(
    tmp_path: pathlib.Path,
) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False, **FAST)
    heard: list[bool] = []
    reset: list[int] = []
    store.on_state_change(lambda: heard.append(store.healthy()))
    store.on_leases_lost(lambda: reset.append(len(heard)))
    await store.open()
    try:
        ids = await store.publish("t", [OutMessage(body=b"one")])
        assert store._supervisor.writer is not None and store._supervisor.writer.pid is not None
        pid = store._supervisor.writer.pid
        os.kill(pid, signal.SIGKILL)
        assert await until(lambda: heard[-1:] == [True])
        assert heard == [False, True]
        assert reset == [1]  # leases were voided before the store said it is up again
        assert store._supervisor.writer.pid != pid
        ids += await store.publish("t", [OutMessage(body=b"two")])
        got = await store.fetch("t", "g", 10, T0)
        assert [m.message_id for m in got] == ids
        assert store.fatal() is None
    finally:
        await store.close()


async def test_the_store_gives_up_after_failures_in_a_row(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False, give_up_after=3, **FAST)
    heard: list[str | None] = []
    store.on_state_change(lambda: heard.append(store.fatal()))
    await store.open()
    starts = 0

    async def refuse(self: GroupCommitWriter) -> None:
        nonlocal starts
        starts += 1
        raise Unavailable("embedded store did not open: simulated")

    monkeypatch.setattr(GroupCommitWriter, "start", refuse)
    try:
        with pytest.raises(Unavailable):
            await fail_commit(store)
        assert await until(lambda: store.fatal() is not None)
        # The failed commit and two failed restarts: three failures in a row.
        assert starts == 2
        fatal = store.fatal()
        assert fatal is not None and "simulated" in fatal
        assert heard[-1] == fatal
        assert not store.healthy()
        with pytest.raises(Unavailable, match="gave up"):
            await store.publish("t", [OutMessage(body=b"late")])
    finally:
        await asyncio.wait_for(store.close(), 30)


async def test_a_store_healthy_long_enough_starts_counting_failures_again(
    tmp_path: pathlib.Path,
) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False, give_up_after=2, stable_s=0.0,
                          **FAST)
    await store.open()
    try:
        for _ in range(3):  # more failures than give_up_after, each after a recovery
            with pytest.raises(Unavailable):
                await fail_commit(store)
            assert await until(store.healthy)
        assert store.fatal() is None
    finally:
        await store.close()


async def test_failures_soon_after_each_recovery_count_as_one_row(
    tmp_path: pathlib.Path,
) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False, give_up_after=3, stable_s=3600.0,
                          **FAST)
    await store.open()
    try:
        for _ in range(2):
            with pytest.raises(Unavailable):
                await fail_commit(store)
            assert await until(store.healthy)
        with pytest.raises(Unavailable):
            await fail_commit(store)
        assert await until(lambda: store.fatal() is not None)
    finally:
        await store.close()


@pytest.mark.parametrize("backoff_s", [(0.001, 0.002), (60.0, 60.0)])
async def test_closing_while_recovering_ends_every_writer(
    tmp_path: pathlib.Path, backoff_s: tuple[float, float]
) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False, restart_backoff_s=backoff_s)
    await store.open()
    assert store._supervisor.writer is not None and store._supervisor.writer.pid is not None
    os.kill(store._supervisor.writer.pid, signal.SIGKILL)
    assert await until(lambda: not store.healthy())
    await asyncio.wait_for(store.close(), 30)
    reopened = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await asyncio.wait_for(reopened.open(), 30)  # the lock is free: no writer is left
    await reopened.close()


def test_the_restart_policy_backs_off_and_gives_up_after_failures_in_a_row() -> None:
    now = [0.0]
    policy = Recovery(monotonic=lambda: now[0])  # the defaults: 0.1 s doubling to 5 s, 30, 30 s
    delays = []
    while not policy.exhausted:
        policy.failed()
        delays.append(policy.delay_s())
    assert delays[:7] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0]
    assert len(delays) == 30 and set(delays[6:]) == {5.0}
    assert 120 < sum(delays[:-1]) < 130  # about two minutes of trying before giving up
    policy.reset()
    policy.failed()
    policy.healed()
    now[0] += 29.0
    policy.failed()  # failed again soon after it healed: the same run
    assert policy.failures == 2
    policy.healed()
    now[0] += 30.0
    policy.failed()  # healthy for 30 s first: a new run
    assert policy.failures == 1 and policy.delay_s() == 0.1
