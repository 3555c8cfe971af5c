"""The gateway API end to end over real gRPC on 127.0.0.1, embedded store, compressed time."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.client import ConsumeStream, GatewayClient, Message, SettledTwice
from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import admin_pb2, gateway_pb2

SCALE = 0.0005
"""Policy waits run 2000x faster: RocketMQ's 10 s is 5 ms, 2 h is 3.6 s."""


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    async with running_gateway(tmp_path / "data", time_scale=SCALE) as running:
        yield running


@pytest.fixture
async def client(app: GatewayApp) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as c:
        yield c


@pytest.fixture
async def calm_client(tmp_path: Path) -> AsyncIterator[GatewayClient]:
    """100x faster than real time: a 60 s ack timeout is 0.6 s, enough on a loaded machine."""
    async with (
        running_gateway(tmp_path / "calm", time_scale=0.01) as running,
        GatewayClient(f"127.0.0.1:{running.grpc_port}") as c,
    ):
        yield c


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def fail_all(
    client: GatewayClient,
    topic: str,
    group: str,
    policy: str,
    options: dict[str, str],
    expected: int,
    timeout_s: float = 20.0,
    **kw: object,
) -> list[tuple[Message, float]]:
    """Consume and fail every delivery until `expected` arrived; return them with arrival times."""
    got: list[tuple[Message, float]] = []
    async with client.consume(topic, group, policy=policy, options=options, **kw) as stream:
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            msg = await stream.next(max(0.1, deadline - time.monotonic()))
            if msg is None:
                break
            got.append((msg, time.monotonic()))
            result = await msg.fail()
            # On a loaded machine the (compressed) ack timeout may fire first: also a failure.
            assert result.ok or result.error_code == "FAILED_PRECONDITION", result
        extra = await stream.next(0.3)
        assert extra is None, f"unexpected delivery {extra}"
    return got


async def test_max_retries_three_means_four_deliveries(client: GatewayClient) -> None:
    topic, group = name("t"), name("g")
    ids = await client.publish(topic, [b"poison"])
    got = await fail_all(client, topic, group, "rocketmq", {"max_retries": "3"}, 4)
    assert [m.attempt for m, _ in got] == [1, 2, 3, 4]
    assert {m.delivery.topic for m, _ in got[1:]} == {f"%RETRY%{group}"}
    view = await client.describe(topic, group)
    assert view.dead_letters == 1 and view.dead_letter_topic == f"%DLQ%{group}"
    # The dead-letter topic is an ordinary topic: consume it. (The whole 16-step sequence and
    # every other policy's numbers are engine rules: tests/engine, on a manual clock.)
    dead = await client.receive(
        f"%DLQ%{group}", group, policy="rocketmq-simple", invisible_ms=43_200_000, wait_ms=5000
    )
    assert len(dead) == 1 and dead[0].body == b"poison" and dead[0].message_id == ids[0]
    assert (await dead[0].ack()).ok


@pytest.mark.parametrize(
    ("policy", "options", "deliveries", "dlq"),
    [
        (
            "rabbitmq",
            {"x_retry_interval_s": "10", "x_dead_letter_exchange": "dlx"},
            17,
            "{topic}.dlq",
        ),
        ("pulsar-nack", {"max_retries": "2", "nack_delay_ms": "1000"}, 3, "{topic}-{group}-DLQ"),
        ("rocketmq-orderly", {"max_retries": "3", "suspend_ms": "10"}, 4, "%DLQ%{group}"),
    ],
)
async def test_each_policy_sequence(
    client: GatewayClient,
    policy: str,
    options: dict[str, str],
    deliveries: int,
    dlq: str | None,
) -> None:
    topic, group = name("t"), name("g")
    await client.publish(topic, [b"x"])
    got = await fail_all(client, topic, group, policy, options, deliveries)
    assert [m.attempt for m, _ in got] == list(range(1, deliveries + 1))
    view = await client.describe(topic, group)
    if dlq is None:
        assert view.dead_letters == 0
    else:
        assert view.dead_letter_topic == dlq.format(topic=topic, group=group)
        assert view.dead_letters == 1


async def test_pulsar_retry_copies_carry_properties(client: GatewayClient) -> None:
    topic, group = name("persistent://t/ns/in"), name("sub")
    ids = await client.publish(topic, [b"x"])
    got = await fail_all(client, topic, group, "pulsar", {"max_retries": "2"}, 3)
    retry = got[1][0]
    assert retry.delivery.topic == f"{topic}-{group}-RETRY"
    assert retry.properties["REAL_TOPIC"] == topic
    assert retry.properties["ORIGIN_MESSAGE_ID"] == ids[0]
    assert retry.properties["RETRY_TOPIC"] == f"{topic}-{group}-RETRY"
    assert [m.properties.get("RECONSUMETIMES") for m, _ in got] == [None, "1", "2"]


async def test_ordered_queue_blocks_behind_failing_message(calm_client: GatewayClient) -> None:
    topic, group = name("t"), name("g")
    for body in (b"1", b"2", b"3"):
        await calm_client.publish(topic, [body], key="order-7")
    seen: list[bytes] = []
    async with calm_client.consume(
        topic, group, policy="rocketmq-orderly", options={"suspend_ms": "1000"}, prefetch=10
    ) as stream:
        while len(seen) < 5:
            msg = await stream.next(5)
            assert msg is not None
            seen.append(msg.body)
            if msg.body == b"1" and msg.attempt < 3:
                assert (await msg.fail()).ok
            else:
                assert (await msg.ack()).ok
    assert seen == [b"1", b"1", b"1", b"2", b"3"]


async def test_pull_invisible_duration_and_change(tmp_path: Path) -> None:
    # 100x faster than real time: 60 s of invisible duration is 0.6 s here.
    async with (
        running_gateway(tmp_path / "pull", time_scale=0.01) as app,
        GatewayClient(f"127.0.0.1:{app.grpc_port}") as client,
    ):
        topic, group = name("t"), name("g")
        await client.publish(topic, [b"x"])
        twelve_hours = 12 * 3600 * 1000
        first = await client.receive(
            topic, group, policy="rocketmq-simple", invisible_ms=twelve_hours, wait_ms=1000
        )
        assert len(first) == 1 and first[0].attempt == 1
        old_receipt = first[0].delivery.receipt
        started = time.monotonic()
        changed = await first[0].extend(60_000)
        assert changed.ok and changed.receipt_next and changed.receipt_next != old_receipt
        # Not visible while invisible.
        assert (
            await client.receive(topic, group, policy="rocketmq-simple", invisible_ms=twelve_hours)
            == []
        )
        # The changed invisible duration runs out: delivered again, one retry counted.
        again = await client.receive(
            topic, group, policy="rocketmq-simple", invisible_ms=twelve_hours, wait_ms=5000
        )
        assert time.monotonic() - started >= 0.5
        assert len(again) == 1 and again[0].attempt == 2 and again[0].retries == 1
        # The receipt replaced by the change is spent.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.stub.Settle(
                gateway_pb2.SettleRequest(
                    settlements=[gateway_pb2.Settlement(receipt=old_receipt, ack=gateway_pb2.Ack())]
                )
            )
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert (await again[0].ack()).ok


async def test_admin_resend_returns_dead_letters(calm_client: GatewayClient) -> None:
    topic, group = name("t"), name("g")
    ids = await calm_client.publish(topic, [b"a", b"b"])
    got = await fail_all(calm_client, topic, group, "rocketmq", {"max_retries": "0"}, 2)
    assert len(got) == 2
    page = await calm_client.admin.ListDeadLetters(
        admin_pb2.ListDeadLettersRequest(topic=topic, group=group, limit=1)
    )
    assert len(page.dead_letters) == 1 and page.next_page_token
    assert page.dead_letters[0].original_topic == topic
    assert "retries exhausted" in page.dead_letters[0].reason
    rest = await calm_client.admin.ListDeadLetters(
        admin_pb2.ListDeadLettersRequest(
            topic=topic, group=group, limit=10, page_token=page.next_page_token
        )
    )
    assert len(rest.dead_letters) == 1 and not rest.next_page_token
    resent = await calm_client.admin.ResendDeadLetters(
        admin_pb2.ResendDeadLettersRequest(topic=topic, group=group, message_ids=[ids[1]])
    )
    assert resent.resent == 1
    async with calm_client.consume(topic, group, policy="rocketmq") as stream:
        msg = await stream.next(5)
        assert msg is not None and msg.message_id == ids[1] and msg.attempt == 1
        assert (await msg.ack()).ok
    view = await calm_client.describe(topic, group)
    assert view.dead_letters == 1


async def test_purge_and_list_topics(calm_client: GatewayClient) -> None:
    topic, group = name("t"), name("g")
    await calm_client.publish(topic, [b"a", b"b", b"c"])
    await calm_client.describe(topic, group)
    purged = await calm_client.admin.Purge(admin_pb2.PurgeRequest(topic=topic, group=group))
    assert purged.purged == 3
    assert (
        await calm_client.receive(topic, group, policy="rocketmq-simple", invisible_ms=43_200_000)
        == []
    )
    topics = await calm_client.admin.ListTopics(admin_pb2.ListTopicsRequest())
    assert topic in topics.topics


async def test_consumer_disconnect_gives_messages_back(calm_client: GatewayClient) -> None:
    topic, group = name("t"), name("g")
    await calm_client.publish(topic, [b"x"])
    async with calm_client.consume(topic, group, policy="rocketmq") as stream:
        msg = await stream.next(5)
        assert msg is not None and msg.attempt == 1
    async with calm_client.consume(topic, group, policy="rocketmq") as stream:
        msg = await stream.next(5)
        assert msg is not None and msg.body == b"x" and msg.attempt == 2
        assert (await msg.ack()).ok


async def test_settle_once_and_delayed_publish(calm_client: GatewayClient) -> None:
    topic, group = name("t"), name("g")
    await calm_client.publish(topic, [b"later"], delay_ms=800)
    t0 = time.monotonic()
    msgs = await calm_client.receive(
        topic, group, policy="rocketmq-simple", invisible_ms=43_200_000, wait_ms=5000
    )
    assert len(msgs) == 1 and time.monotonic() - t0 >= 0.7
    receipt = msgs[0].delivery.receipt
    assert (await msgs[0].ack()).ok
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await calm_client.stub.Settle(
            gateway_pb2.SettleRequest(
                settlements=[gateway_pb2.Settlement(receipt=receipt, ack=gateway_pb2.Ack())]
            )
        )
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert receipt in err.value.details()


async def test_tag_filter(calm_client: GatewayClient) -> None:
    topic, group = name("t"), name("g")
    await calm_client.publish(topic, [b"a"], tag="TagA")
    await calm_client.publish(topic, [b"b"], tag="TagB")
    async with calm_client.consume(topic, group, policy="rocketmq", tag_filter="TagB") as stream:
        msg = await stream.next(5)
        assert msg is not None and msg.body == b"b"
        assert (await msg.ack()).ok
        assert await stream.next(0.3) is None


async def test_settled_deliveries_leave_no_timers(tmp_path: Path) -> None:
    """Acked and extended deliveries cancel their deadlines at once: a busy gateway does not
    hold a timer per settled delivery until its ack timeout."""
    async with (
        running_gateway(tmp_path / "real-time") as app,
        GatewayClient(f"127.0.0.1:{app.grpc_port}") as client,
    ):
        await _settle_and_count_timers(app, client)


async def _settle_and_count_timers(app: GatewayApp, client: GatewayClient) -> None:
    topic, group = name("t"), name("g")
    await client.publish(topic, [b"m%d" % i for i in range(40)])
    async with client.consume(topic, group, policy="rabbitmq", prefetch=40) as stream:
        for _ in range(40):
            msg = await stream.next(10.0)
            assert msg is not None
            assert (await msg.ack()).ok
    pulled = await client.receive(topic + "-pull", group, policy="rocketmq-simple",
                                  invisible_ms=60_000, wait_ms=0)
    assert pulled == []
    await client.publish(topic + "-pull", [b"p"])
    (one,) = await client.receive(topic + "-pull", group, policy="rocketmq-simple",
                                  invisible_ms=60_000, wait_ms=2000)
    assert app.engine.pending_timers() == 1
    changed = await one.extend(120_000)
    assert changed.ok and app.engine.pending_timers() == 1
    settled = await client.stub.Settle(gateway_pb2.SettleRequest(settlements=[
        gateway_pb2.Settlement(receipt=changed.receipt_next, ack=gateway_pb2.Ack())]))
    assert settled.results[0].ok
    assert app.engine.pending_timers() == 0


async def test_credit_sent_with_a_settle_batch(calm_client: GatewayClient) -> None:
    """`SettleBatch.credit` grants credit in the same frame as the settlements."""
    topic, group = name("t"), name("g")
    await calm_client.publish(topic, [b"a", b"b", b"c"])
    call = calm_client.stub.Consume()
    await call.write(gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
        topic=topic, group=group, policy="rocketmq", prefetch=1)))
    assert (await call.read()).WhichOneof("kind") == "subscribed"
    first = await call.read()
    assert [d.body for d in first.deliveries.deliveries] == [b"a"]
    receipt = first.deliveries.deliveries[0].receipt
    await call.write(gateway_pb2.ConsumeRequest(settle=gateway_pb2.SettleBatch(
        settlements=[gateway_pb2.Settlement(receipt=receipt, ack=gateway_pb2.Ack())], credit=2)))
    bodies: list[bytes] = []
    acked = False

    async def read_all() -> None:
        nonlocal acked
        while len(bodies) < 2 or not acked:
            response = await call.read()
            if response.WhichOneof("kind") == "results":
                assert [r.ok for r in response.results.results] == [True]
                acked = True
            else:
                bodies.extend(d.body for d in response.deliveries.deliveries)

    try:
        await asyncio.wait_for(read_all(), 10)
    finally:
        call.cancel()
    assert bodies == [b"b", b"c"]


async def raw_consumer(
    client: GatewayClient, topic: str, group: str, bodies: list[bytes]
) -> tuple[Any, dict[bytes, str]]:
    """Publish `bodies`, subscribe a bare Consume stream to them (policy rocketmq) and read
    until each is delivered; return the stream and the receipts by body."""
    await client.publish(topic, bodies)
    call = client.stub.Consume()
    await call.write(gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
        topic=topic, group=group, policy="rocketmq", prefetch=len(bodies))))
    assert (await call.read()).WhichOneof("kind") == "subscribed"
    receipts: dict[bytes, str] = {}
    while len(receipts) < len(bodies):
        response = await asyncio.wait_for(call.read(), 10)
        receipts.update((d.body, d.receipt) for d in response.deliveries.deliveries)
    return call, receipts


async def settle_on(call: Any, batch: gateway_pb2.SettleBatch) -> gateway_pb2.SettleResults:
    """Send one settle batch on a bare stream and return its answer."""
    await call.write(gateway_pb2.ConsumeRequest(settle=batch))
    response = await asyncio.wait_for(call.read(), 10)
    while response.WhichOneof("kind") != "results":
        response = await asyncio.wait_for(call.read(), 10)
    return response.results


async def test_compact_acks_count_successes_and_list_failures(
    calm_client: GatewayClient,
) -> None:
    """`SettleBatch.acks` acks by receipt after the batch's settlements; the answer counts the
    applied ones in `acked` and lists each failure, in order, after the settlements' results."""
    topic, group = name("t"), name("g")
    call, receipts = await raw_consumer(calm_client, topic, group, [b"a", b"b", b"c"])
    try:
        a, b, c = receipts[b"a"], receipts[b"b"], receipts[b"c"]
        dead_c = gateway_pb2.Settlement(receipt=c, dead_letter=gateway_pb2.DeadLetter(reason="x"))
        answer = await settle_on(call, gateway_pb2.SettleBatch(
            settlements=[dead_c], acks=[a, "no-such-receipt", "", b, a, c]))
        assert answer.acked == 2
        assert [(r.receipt, r.ok, r.error_code) for r in answer.results] == [
            (c, True, ""),
            ("no-such-receipt", False, "FAILED_PRECONDITION"),
            ("", False, "INVALID_ARGUMENT"),
            (a, False, "FAILED_PRECONDITION"),
            (c, False, "FAILED_PRECONDITION"),
        ]
        assert "acks[2]" in answer.results[2].error
    finally:
        call.cancel()
    view = await calm_client.describe(topic, group)
    assert (view.inflight, view.ready, view.dead_letters) == (0, 0, 1)


async def test_client_acks_go_compact_and_resolve(calm_client: GatewayClient) -> None:
    """The client's acks on a stream travel as `acks`: each future resolves ok, a settle
    after them still gets its own result, and nothing is delivered again."""
    topic, group = name("t"), name("g")
    await calm_client.publish(topic, [b"m%d" % i for i in range(30)])
    async with calm_client.consume(topic, group, policy="rocketmq", prefetch=30) as stream:
        got = [await stream.next(10.0) for _ in range(30)]
        assert all(m is not None for m in got)
        futures = [m.ack_later() for m in got[:29] if m is not None]
        last = got[29]
        assert last is not None
        dead = await last.dead_letter("bad")
        results = await asyncio.wait_for(asyncio.gather(*futures), 10)
        assert all(r.ok for r in results) and dead.ok and dead.receipt == last.delivery.receipt
        assert await stream.next(0.5) is None
    view = await calm_client.describe(topic, group)
    assert (view.inflight, view.ready, view.dead_letters) == (0, 0, 1)


async def test_leaving_a_stream_sends_the_acks_already_given(tmp_path: Path) -> None:
    """Acks given just before leaving the `consume` block still reach the gateway: nothing is
    delivered again to the next consumer of the group."""
    async with (
        running_gateway(tmp_path / "d", time_scale=0.01) as running,
        GatewayClient(f"127.0.0.1:{running.grpc_port}") as client,
    ):
        topic, group = name("t"), name("g")
        await client.publish(topic, [b"m%d" % i for i in range(10)])
        async with client.consume(topic, group, policy="rocketmq", prefetch=10) as stream:
            for _ in range(10):
                msg = await stream.next(10.0)
                assert msg is not None
                msg.ack_later()  # not awaited: leaving the block sends and answers them
        async with client.consume(topic, group, policy="rocketmq", prefetch=10) as again:
            assert await again.next(1.0) is None
        view = await client.describe(topic, group)
        assert (view.inflight, view.ready, view.waiting_retry) == (0, 0, 0)


@contextlib.asynccontextmanager
async def stream_outliving_its_gateway(
    tmp_path: Path,
) -> AsyncIterator[tuple[ConsumeStream, Message, Message]]:
    """A consume stream, and two of its deliveries unsettled, whose gateway has since shut down."""
    async with running_gateway(tmp_path / "d", time_scale=0.01, grace_s=0.2) as running:
        client = GatewayClient(f"127.0.0.1:{running.grpc_port}")
        topic, group = name("t"), name("g")
        await client.publish(topic, [b"a", b"b"])
        stream = await client.consume(topic, group, policy="rocketmq", prefetch=2).__aenter__()
        first, second = await stream.next(10.0), await stream.next(10.0)
        assert first is not None and second is not None
    try:
        yield stream, first, second
    finally:
        await stream.__aexit__(None, None, None)
        await client.close()


async def test_settling_after_the_stream_ended_answers_unavailable(tmp_path: Path) -> None:
    """A settlement the gateway can no longer answer resolves as UNAVAILABLE instead of
    waiting forever, whether it was queued before the stream ended or given after."""
    async with stream_outliving_its_gateway(tmp_path) as (_, first, second):
        late = await asyncio.wait_for(first.ack(), 10)
        assert (late.ok, late.error_code) == (False, "UNAVAILABLE")
        later = await asyncio.wait_for(second.dead_letter("x"), 10)
        assert (later.ok, later.error_code) == (False, "UNAVAILABLE")


async def test_results_follow_the_order_of_the_settle_batch(calm_client: GatewayClient) -> None:
    """A settlement refused as malformed takes its own place among the batch's results."""
    topic, group = name("t"), name("g")
    call, receipts = await raw_consumer(calm_client, topic, group, [b"a", b"b"])
    try:
        first, second = receipts[b"a"], receipts[b"b"]
        answer = await settle_on(call, gateway_pb2.SettleBatch(settlements=[
            gateway_pb2.Settlement(receipt=first, ack=gateway_pb2.Ack()),
            gateway_pb2.Settlement(receipt=second),  # no action: refused
            gateway_pb2.Settlement(receipt=second, ack=gateway_pb2.Ack()),
        ]))
        assert [(r.receipt, r.ok, r.error_code) for r in answer.results] == [
            (first, True, ""), (second, False, "INVALID_ARGUMENT"), (second, True, ""),
        ]
    finally:
        call.cancel()


async def test_quiet_acks_settle_and_report_only_failures(calm_client: GatewayClient) -> None:
    """`ack_quietly` acks without a future per message: `drain` waits for the answers, and
    only a failed ack shows up, in `failures`, with its receipt and code."""
    topic, group = name("t"), name("g")
    await calm_client.publish(topic, [b"m%d" % i for i in range(40)])
    async with calm_client.consume(topic, group, policy="rocketmq", prefetch=40) as stream:
        for _ in range(40):
            msg = await stream.next(10.0)
            assert msg is not None
            msg.ack_quietly()
            with pytest.raises(SettledTwice):
                msg.ack_quietly()
        stream.ack_quietly("not-a-receipt")
        await asyncio.wait_for(stream.drain(), 10)
        assert [(f.receipt, f.ok, f.error_code) for f in stream.failures] == [
            ("not-a-receipt", False, "FAILED_PRECONDITION")]
        assert await stream.next(0.5) is None
    view = await calm_client.describe(topic, group)
    assert (view.inflight, view.ready, view.waiting_retry) == (0, 0, 0)


async def test_quiet_acks_after_the_stream_ended_are_failures(tmp_path: Path) -> None:
    """A quiet ack the gateway never answered, or given after the stream ended, is reported
    UNAVAILABLE in `failures`; `drain` does not wait for it."""
    async with stream_outliving_its_gateway(tmp_path) as (stream, first, second):
        first.ack_quietly()
        await asyncio.wait_for(stream.drain(), 10)
        second.ack_quietly()
        assert [(f.receipt, f.error_code) for f in stream.failures] == [
            (first.delivery.receipt, "UNAVAILABLE"), (second.delivery.receipt, "UNAVAILABLE")]


async def test_next_after_a_timeout_still_gets_later_deliveries(
    calm_client: GatewayClient,
) -> None:
    """A `next` that timed out leaves the stream usable: what arrives later is delivered."""
    topic, group = name("t"), name("g")
    async with calm_client.consume(topic, group, policy="rocketmq", prefetch=4) as stream:
        assert await stream.next(0.2) is None
        await calm_client.publish(topic, [b"late"])
        msg = await stream.next(10.0)
        assert msg is not None and msg.body == b"late"
        await msg.ack()
