"""GET_TOPICS_OF_NAMESPACE on a raw connection: what the listing holds (full persistent names of
the namespace's topics, unfiltered, no retry or dead-letter destinations, nothing for
NON_PERSISTENT) and how a bad namespace or mode is refused (an ERROR naming the field, and the
connection goes on)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from gateway.backend.base import OutMessage
from gateway.engine.engine import Engine
from tests.e2e.test_pulsar_frontend_unserved_commands import varint
from tests.pulsar_raw import Cmd, RawClient

Request = raw.pb.CommandGetTopicsOfNamespace


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    async with raw.front_end(tmp_path) as made:
        yield made


def listing(request_id: int, namespace: str, mode: int = Request.PERSISTENT) -> raw.pb.BaseCommand:
    cmd = Cmd(type=Cmd.GET_TOPICS_OF_NAMESPACE)
    cmd.getTopicsOfNamespace.request_id = request_id
    cmd.getTopicsOfNamespace.namespace = namespace
    cmd.getTopicsOfNamespace.mode = mode  # type: ignore[assignment]
    cmd.getTopicsOfNamespace.topics_pattern = "persistent://whatever/.*"
    return cmd


async def topics(client: RawClient, request_id: int, namespace: str,
                 mode: int = Request.PERSISTENT) -> list[str]:
    client.send(listing(request_id, namespace, mode))
    reply = (await client.expect(Cmd.GET_TOPICS_OF_NAMESPACE_RESPONSE)).command
    answer = reply.getTopicsOfNamespaceResponse
    assert answer.request_id == request_id
    assert not answer.filtered  # the client applies its pattern
    return list(answer.topics)


async def test_the_listing_holds_the_namespaces_persistent_topics(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, engine = stack
    for topic in ("orders", "payments", "tenant/ns/x", "two/parts", "orders-sub-RETRY",
                  "orders-sub-DLQ", "%DLQ%billing"):
        await engine.publish(topic, [OutMessage(body=b"m")])
    await engine.create_group("quiet", "g")  # a subscription and no message yet
    client = await RawClient.open(front.port)
    default = "persistent://public/default/"
    assert await topics(client, 1, "public/default") == [
        default + "orders", default + "payments", default + "quiet"]
    assert await topics(client, 2, "public/default", Request.ALL) == [
        default + "orders", default + "payments", default + "quiet"]
    assert await topics(client, 3, "public/default", Request.NON_PERSISTENT) == []
    assert await topics(client, 4, "tenant/ns") == ["persistent://tenant/ns/x"]
    assert await topics(client, 5, "nobody/here") == []
    await client.close()


def with_mode(request_id: int, namespace: str, mode: int) -> bytes:
    """A GET_TOPICS_OF_NAMESPACE frame whose mode is `mode`, one the enum may not know."""
    body = Request(request_id=request_id, namespace=namespace).SerializeToString()
    body += bytes([3 << 3]) + varint(mode)
    head = Cmd(type=Cmd.GET_TOPICS_OF_NAMESPACE).SerializeToString()
    field = varint(Cmd.GET_TOPICS_OF_NAMESPACE << 3 | 2)
    return raw.command_frame(head + field + varint(len(body)) + body)


@pytest.mark.parametrize(("namespace", "named"), [
    ("public", "getTopicsOfNamespace.namespace"),
    ("public/default/orders", "getTopicsOfNamespace.namespace"),
    ("/default", "getTopicsOfNamespace.namespace"),
    ("public/", "getTopicsOfNamespace.namespace"),
    ("", "getTopicsOfNamespace.namespace"),
    ("pub\x01lic/default", "getTopicsOfNamespace.namespace"),
    ("tenant/" + "n" * 300, "getTopicsOfNamespace.namespace"),
])
async def test_a_bad_namespace_is_refused_by_name(
    stack: tuple[PulsarFrontEnd, Engine], namespace: str, named: str,
) -> None:
    front, _ = stack
    client = await RawClient.open(front.port)
    client.send(listing(7, namespace))
    error = (await client.expect(Cmd.ERROR)).command.error
    assert error.request_id == 7
    assert named in error.message
    assert await topics(client, 8, "public/default") == []  # the connection goes on
    await client.close()


async def test_an_unknown_mode_is_refused_by_name(stack: tuple[PulsarFrontEnd, Engine]) -> None:
    front, _ = stack
    client = await RawClient.open(front.port)
    client.writer.write(with_mode(9, "public/default", 7))
    error = (await client.expect(Cmd.ERROR)).command.error
    assert error.request_id == 9
    assert "getTopicsOfNamespace.mode" in error.message and "7" in error.message
    client.writer.write(with_mode(10, "public/default", Request.ALL))
    assert (await client.expect(Cmd.GET_TOPICS_OF_NAMESPACE_RESPONSE)).command \
        .getTopicsOfNamespaceResponse.request_id == 10
    await client.close()


async def test_connected_does_not_announce_topic_watchers(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    """Without the flag a client polls GET_TOPICS_OF_NAMESPACE and sends no WATCH_TOPIC_LIST."""
    front, _ = stack
    client = await RawClient.open(front.port, connect=False)
    cmd = Cmd(type=Cmd.CONNECT)
    cmd.connect.client_version = "raw-test"
    cmd.connect.protocol_version = 21
    cmd.connect.feature_flags.supports_topic_watchers = True
    client.send(cmd)
    connected = (await client.expect(Cmd.CONNECTED)).command.connected
    assert not connected.feature_flags.supports_topic_watchers
    await client.close()
