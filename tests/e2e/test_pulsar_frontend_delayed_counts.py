"""Counts of a subscription that does not honour delays. Exclusive and Failover subscriptions get
a message sent with `deliver_after` / `deliver_at` at once (Shared and Key_Shared ones wait for
its time), yet `gateway describe` counted such a message as "delayed" (ready 0) for them while
it was waiting for their consumer's permits; it is ready for them now. Shared and Key_Shared
subscriptions of the same topic still count it as delayed."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import sys

import tests.pulsar_raw as raw
from adapters.pulsar.wire import wire_pb2 as pb
from tests.e2e.pulsar_stack import Stack, client_for, run, stack_fixture  # noqa: F401  (fixture `stack`)
from tests.pulsar_raw import Cmd, RawClient

HOUR = datetime.timedelta(hours=1)
TYPES = {"exclusive": pb.CommandSubscribe.Exclusive, "failover": pb.CommandSubscribe.Failover,
         "shared": pb.CommandSubscribe.Shared, "keyed": pb.CommandSubscribe.Key_Shared}


async def describe(port: int, topic: str, group: str) -> dict[str, object]:
    """`gateway describe --json` against the running gateway."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "describe", topic, group,
        "--target", f"127.0.0.1:{port}", "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    view: dict[str, object] = json.loads(out)
    return view


def send_delayed(url: str, topic: str) -> None:
    client = client_for(url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"after", deliver_after=HOUR)
        producer.send(b"plain")
    finally:
        client.close()


async def test_a_delayed_message_counts_as_ready_where_it_is_delivered_at_once(
    stack: Stack,
) -> None:
    assert stack.app is not None and stack.front is not None
    topic = "counted"
    # One consumer per subscription, none of which gives permits: everything stays waiting.
    consumers = []
    for n, (group, sub_type) in enumerate(TYPES.items(), start=1):
        consumer = await RawClient.open(stack.front.port)
        cmd = raw.subscribe(n, 1, sub_type)
        cmd.subscribe.topic, cmd.subscribe.subscription = topic, group
        consumer.send(cmd)
        await consumer.expect(Cmd.SUCCESS)
        consumers.append(consumer)
    try:
        await run(send_delayed, stack.url, topic)
        got = {group: await describe(stack.app.grpc_port, topic, group) for group in TYPES}
        counts = {group: (view["ready"], view["delayed"])
                  for group, view in got.items()}
        assert counts == {"exclusive": (2, 0), "failover": (2, 0),
                          "shared": (1, 1), "keyed": (1, 1)}, got
        # And the Exclusive consumer gets both at once, in topic order.
        consumers[0].send(raw.flow(1, 10))
        payloads = [(await consumers[0].expect(Cmd.MESSAGE)).payload for _ in range(2)]
        assert payloads == [b"after", b"plain"]
    finally:
        for consumer in consumers:
            await consumer.close()

