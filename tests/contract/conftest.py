"""The `backend` fixture: every contract test runs once per registered back end.

To add a back end, write an async factory that returns it opened and add one entry to
`BACKEND_FACTORIES`; the fixture closes it after the test (running its `BACKEND_CLEANUPS` entry
first, if any).

Capabilities: a back end whose model cannot give something a test relies on declares what it can
do in a class attribute `capabilities` (a frozenset of names from `CAPABILITIES`); one without the
attribute has them all. A test needing one says so with `@pytest.mark.requires("name")` (or, for
tests written before, an entry in `REQUIRES`) and is skipped, with the reason, on back ends that
do not declare it. Nothing else skips.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable

import aio_pika
import pytest

from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.queues import queue_name
from adapters.pulsar.backend import PulsarBackend
from gateway.backend.base import Backend
from gateway.backend.memory import InMemoryBackend
from gateway.engine.clock import SystemClock
from gateway.store import EmbeddedStore

BackendFactory = Callable[[pathlib.Path], Awaitable[Backend]]
BackendCleanup = Callable[[Backend], Awaitable[None]]

AMQP_URL = os.environ.get("GATEWAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")

CAPABILITIES = frozenset(
    {
        "delayed-delivery",
        "per-key-order",
        "independent-groups",
        "oldest-ready-time",
        "backlog-view",
        "positions",
        "retry-reset",
        "purge-keeps-inflight",
        "delay-skip",
        "catch-up",
    }
)
"""Every capability a contract test may require:

* delayed-delivery: `deliver_at_ms` and future releases hold messages until their time;
* per-key-order: `exclude_keys` skips a key entirely after its first skipped message;
* independent-groups: each group of a topic gets every message, from the earliest retained one;
* oldest-ready-time: `stats` reports the publish time of the oldest ready message;
* backlog-view: `peek`, `remove` and `purge` reach messages the back end has not received yet
  (a broker's backlog), not only those it holds;
* positions: groups keep positions the back end can set (`seekable`: `create_group` at the end,
  `seek`);
* retry-reset: `reset_retries` counts a group's failures from 0 again (the count is the back
  end's, not a property or header of each message in a broker);
* purge-keeps-inflight: `purge` leaves leased messages leased, as durably as before (an ack
  commits one, a release brings it back, a restart delivers it again), and counts only what it
  removed.
* delay-skip: `fetch(..., publish_delays=False)` hands one group messages published with a future
  time at once while the topic's other groups wait (`Backend.skips_delays`; a broker that holds
  a delayed message for the whole topic cannot).
* catch-up: after `catch_up`, `fetch` finds every message whose publish returned before it, at
  once (a back end fetching from what a broker consumer buffered asks the broker: RabbitMQ's
  flushes its channel, Pulsar's waits until its consumer received the topic's last message).
"""

REQUIRES: dict[str, str] = {
    "test_groups_consume_independently": "independent-groups",
    "test_new_group_starts_at_earliest_message": "independent-groups",
    "test_stats_counts_ready_delayed_and_leased": "oldest-ready-time",
    "test_peek_reads_without_leasing": "backlog-view",
    "test_remove_leased_and_waiting_messages": "backlog-view",
    "test_purge_with_leased_takes_leased_messages_too": "backlog-view",
}
"""Tests written before the `requires` mark, by function name, and the capability each needs."""


async def make_embedded(tmp_path: pathlib.Path) -> Backend:
    """The embedded store in a fresh directory, with fsync on as in production."""
    store = EmbeddedStore(tmp_path / "embedded-store")
    await store.open()
    return store


async def make_embedded_disk(tmp_path: pathlib.Path) -> Backend:
    """The embedded store without its in-memory tail: every fetch reads SQLite."""
    store = EmbeddedStore(tmp_path / "embedded-store", tail_bytes=0)
    await store.open()
    return store


async def make_memory(tmp_path: pathlib.Path) -> Backend:
    """The in-memory back end on the system clock (the suite measures real time)."""
    backend = InMemoryBackend(SystemClock())
    await backend.open()
    return backend


async def make_rabbitmq(tmp_path: pathlib.Path) -> Backend:
    """The RabbitMQ back end on the broker at `GATEWAY_AMQP_URL` (default: local guest)."""
    backend = RabbitMQBackend(AMQP_URL)
    await backend.open()
    return backend


async def delete_rabbitmq_queues(backend: Backend) -> None:
    """Delete the queues the test declared on the shared broker (delay queues expire alone)."""
    topics = await backend.topics()
    if not topics:
        return
    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        for topic in topics:
            await channel.queue_delete(queue_name(topic))
    finally:
        await connection.close()


PULSAR_URL = os.environ.get("PULSAR_SERVICE_URL", "")


async def make_pulsar(tmp_path: pathlib.Path) -> Backend:
    """The Pulsar back end on `PULSAR_SERVICE_URL`, else on a gateway's own Pulsar front end
    (embedded store) started for the test and stopped after the back end closes."""
    from gateway.server.app import running_gateway

    stack = contextlib.AsyncExitStack()
    url = PULSAR_URL
    if not url:
        upstream = await stack.enter_async_context(
            running_gateway(tmp_path / "pulsar-upstream", pulsar_listen="127.0.0.1:0")
        )
        url = f"pulsar://127.0.0.1:{upstream.front_ends['pulsar'].port}"
    backend = PulsarBackend(url)
    await backend.open()
    UPSTREAMS[id(backend)] = stack
    return backend


async def stop_pulsar_upstream(backend: Backend) -> None:
    stack = UPSTREAMS.pop(id(backend), None)
    if stack is not None:
        await stack.aclose()


UPSTREAMS: dict[int, contextlib.AsyncExitStack] = {}

BACKEND_FACTORIES: dict[str, BackendFactory] = {
    "embedded": make_embedded,
    "embedded-disk": make_embedded_disk,
    "memory": make_memory,
    "rabbitmq": make_rabbitmq,
    "pulsar": make_pulsar,
}

BACKEND_AFTER_CLOSE: dict[str, BackendCleanup] = {
    "pulsar": stop_pulsar_upstream,
}
"""Run after the back end closed (stopping what it was talking to)."""

BACKEND_CLEANUPS: dict[str, BackendCleanup] = {
    "rabbitmq": delete_rabbitmq_queues,
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "requires(capability): skip on back ends that do not declare the capability"
    )


def capabilities_of(backend: Backend) -> frozenset[str]:
    """What `backend` declares it can do; everything when it declares nothing."""
    declared = getattr(backend, "capabilities", None)
    return CAPABILITIES if declared is None else frozenset(declared)


def required_capabilities(node: pytest.Item) -> set[str]:
    """Capabilities the test needs: its `requires` marks and its `REQUIRES` entry."""
    needed = {str(arg) for mark in node.iter_markers("requires") for arg in mark.args}
    name = getattr(node, "originalname", node.name)
    if name in REQUIRES:
        needed.add(REQUIRES[name])
    unknown = needed - CAPABILITIES
    if unknown:
        raise pytest.UsageError(f"{node.nodeid}: unknown capabilities {sorted(unknown)}")
    return needed


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
async def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Backend]:
    """An opened back end of the parametrized kind, closed after the test; skipped when the back
    end lacks a capability the test requires."""
    opened = await BACKEND_FACTORIES[request.param](tmp_path)
    try:
        missing = required_capabilities(request.node) - capabilities_of(opened)
        if missing:
            pytest.skip(f"{request.param} back end lacks {', '.join(sorted(missing))}")
        yield opened
    finally:
        cleanup = BACKEND_CLEANUPS.get(request.param)
        try:
            if cleanup is not None:
                await cleanup(opened)
        finally:
            await opened.close()
            after = BACKEND_AFTER_CLOSE.get(request.param)
            if after is not None:
                await after(opened)
