"""The committed `gateway.v1` stubs match the protos, and the public API keeps its wire contract."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor

from gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "gateway" / "v1"
HINT = "run python scripts/gen_protos.py"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_protos", REPO / "scripts" / "gen_protos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_protos", module)
    spec.loader.exec_module(module)
    return module


gen_protos = _load_generator()


def _tree(paths: list[Path]) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in paths}


def test_committed_stubs_are_fresh(tmp_path: Path) -> None:
    fresh = _tree(gen_protos.generate(tmp_path))
    committed = _tree(gen_protos.generated_files(COMMITTED))
    tools = gen_protos.grpc_tools_version()
    assert sorted(fresh) == sorted(committed), (
        f"generated files differ from the committed ones: {HINT}"
    )
    stale = [name for name in sorted(fresh) if fresh[name] != committed[name]]
    assert not stale, f"stale stubs {stale} (grpcio-tools {tools} here): {HINT}"


def test_generation_is_deterministic(tmp_path: Path) -> None:
    first = _tree(gen_protos.generate(tmp_path / "a"))
    second = _tree(gen_protos.generate(tmp_path / "b"))
    assert first == second
    assert {"gateway_pb2.py", "gateway_pb2_grpc.py", "gateway_pb2.pyi"} <= set(first)


def test_generation_removes_stubs_of_deleted_protos(tmp_path: Path) -> None:
    target = tmp_path / "gateway" / "v1"
    target.mkdir(parents=True)
    (target / "removed_pb2.py").write_text("# left over\n")
    (target / "__init__.py").write_text('"""kept"""\n')
    names = {path.name for path in gen_protos.generate(tmp_path)}
    assert "removed_pb2.py" not in names
    assert not (target / "removed_pb2.py").exists()
    assert (target / "__init__.py").read_text() == '"""kept"""\n'


def _methods(service: str) -> dict[str, tuple[str, str, bool, bool]]:
    pool_service = {
        "Gateway": gateway_pb2.DESCRIPTOR.services_by_name,
        "Admin": admin_pb2.DESCRIPTOR.services_by_name,
    }[service][service]
    return {
        method.name: (
            method.input_type.full_name,
            method.output_type.full_name,
            method.client_streaming,
            method.server_streaming,
        )
        for method in pool_service.methods
    }


def test_services_and_methods() -> None:
    assert gateway_pb2.DESCRIPTOR.package == "gateway.v1"
    assert _methods("Gateway") == {
        "Publish": ("gateway.v1.PublishRequest", "gateway.v1.PublishResponse", False, False),
        "PublishStream": ("gateway.v1.PublishStreamRequest", "gateway.v1.PublishResult", True,
                          True),
        "Consume": ("gateway.v1.ConsumeRequest", "gateway.v1.ConsumeResponse", True, True),
        "Receive": ("gateway.v1.ReceiveRequest", "gateway.v1.ReceiveResponse", False, False),
        "Settle": ("gateway.v1.SettleRequest", "gateway.v1.SettleResponse", False, False),
    }
    admin = _methods("Admin")
    assert sorted(admin) == [
        "DeleteDeadLetters",
        "DescribeGroup",
        "ExportMessages",
        "GetDeadLetter",
        "GetTimeline",
        "ImportMessages",
        "ListDeadLetters",
        "ListGroups",
        "ListTopics",
        "ListWaitingRetries",
        "Purge",
        "RemoveExported",
        "RenameDestinations",
        "ResendDeadLetters",
    ]
    assert not any(streaming for *_, streaming in admin.values())


# Field numbers clients depend on: a field may be added, never renumbered or reused.
WIRE_CONTRACT: dict[str, str] = {
    "Message": "body=1 properties=2 key=3 tag=4 deliver_at_ms=5 delay_ms=6",
    "PublishRequest": "topic=1 messages=2",
    "PublishResponse": "message_ids=1",
    "Subscribe": "topic=1 group=2 policy=3 policy_options=4 consumer_type=5 broadcast=6 "
    "naming=7 prefetch=8 consumer_id=9 tag_filter=10",
    "ConsumeRequest": "subscribe=1 settle=2 credit=3",
    "ConsumeResponse": "subscribed=1 deliveries=2 results=3",
    "Subscribed": "consumer_id=1 policy=2 naming=3 retry_topic=4 dead_letter_topic=5 max_retries=6",
    "Credit": "messages=1",
    "Delivery": "receipt=1 message_id=2 topic=3 original_topic=4 body=5 properties=6 key=7 tag=8 "
    "attempt=9 retries=10 deadline_ms=11 publish_ms=12 deliver_at_ms=13 group=14",
    "ReceiveRequest": "topic=1 group=2 policy=3 policy_options=4 consumer_type=5 naming=6 "
    "tag_filter=7 max_messages=8 invisible_ms=9 wait_ms=10",
    "Settlement": "receipt=1 ack=2 fail=3 change_invisible=4 dead_letter=5",
    "Fail": "delay_ms=1 delay_level=2 reason=3",
    "ChangeInvisible": "invisible_ms=1",
    "DeadLetter": "reason=1",
    "SettleResult": "receipt=1 ok=2 error_code=3 error=4 receipt_next=5 deadline_ms=6",
    "DescribeGroupResponse": "ready=1 delayed=2 inflight=3 waiting_retry=4 dead_letters=5 "
    "oldest_ready_ms=6 next_retry_ms=7 retry_topic=8 dead_letter_topic=9",
    "ListDeadLettersRequest": "topic=1 group=2 limit=3 page_token=4",
    "DeadLetterMessage": "message_id=1 original_topic=2 body=3 properties=4 attempt=5 reason=6 "
    "dead_lettered_ms=7 position=8 key=9 tag=10",
    "ResendDeadLettersRequest": "topic=1 group=2 message_ids=3",
}


@pytest.mark.parametrize("message", sorted(WIRE_CONTRACT))
def test_field_numbers_are_stable(message: str) -> None:
    descriptor = (
        gateway_pb2.DESCRIPTOR.message_types_by_name.get(message)
        or admin_pb2.DESCRIPTOR.message_types_by_name[message]
    )
    expected = dict(pair.split("=") for pair in WIRE_CONTRACT[message].split())
    actual = {field.name: str(field.number) for field in descriptor.fields}
    assert {name: actual.get(name) for name in expected} == expected


def test_oneofs_and_optional_presence() -> None:
    settlement = gateway_pb2.Settlement(receipt="r1", fail=gateway_pb2.Fail(delay_level=3))
    assert settlement.WhichOneof("action") == "fail"
    assert settlement.fail.HasField("delay_level")
    assert not settlement.fail.HasField("delay_ms")
    settlement.ack.SetInParent()
    assert settlement.WhichOneof("action") == "ack"
    request = gateway_pb2.ConsumeRequest(credit=gateway_pb2.Credit(messages=5))
    assert request.WhichOneof("kind") == "credit"
    assert gateway_pb2.Subscribe().consumer_type == gateway_pb2.CONSUMER_TYPE_SHARED
    fields = gateway_pb2.Fail.DESCRIPTOR.fields_by_name
    assert fields["delay_ms"].type == FieldDescriptor.TYPE_INT64
    assert fields["delay_level"].type == FieldDescriptor.TYPE_UINT32


class _EchoGateway(gateway_pb2_grpc.GatewayServicer):
    """Answers Publish with one id per message and Consume with one delivery per credit."""

    async def Publish(
        self, request: gateway_pb2.PublishRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PublishResponse:
        return gateway_pb2.PublishResponse(
            message_ids=[f"{request.topic}-{i}" for i in range(len(request.messages))]
        )

    async def Consume(
        self,
        request_iterator: AsyncIterator[gateway_pb2.ConsumeRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[gateway_pb2.ConsumeResponse]:
        async for request in request_iterator:
            kind = request.WhichOneof("kind")
            if kind == "subscribe":
                yield gateway_pb2.ConsumeResponse(
                    subscribed=gateway_pb2.Subscribed(consumer_id=request.subscribe.group + "-c1")
                )
            elif kind == "credit":
                deliveries = [
                    gateway_pb2.Delivery(receipt=f"r{i}", attempt=1)
                    for i in range(request.credit.messages)
                ]
                yield gateway_pb2.ConsumeResponse(
                    deliveries=gateway_pb2.DeliveryBatch(deliveries=deliveries)
                )
            else:
                results = [
                    gateway_pb2.SettleResult(receipt=s.receipt, ok=True)
                    for s in request.settle.settlements
                ]
                yield gateway_pb2.ConsumeResponse(
                    results=gateway_pb2.SettleResults(results=results)
                )


class _TopicsAdmin(admin_pb2_grpc.AdminServicer):
    """Answers ListTopics with a fixed list."""

    async def ListTopics(
        self, request: admin_pb2.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListTopicsResponse:
        return admin_pb2.ListTopicsResponse(topics=["%DLQ%g", "t"])


async def test_stubs_carry_unary_and_bidi_calls_over_a_real_channel() -> None:
    server = grpc.aio.server()
    gateway_pb2_grpc.add_GatewayServicer_to_server(_EchoGateway(), server)
    admin_pb2_grpc.add_AdminServicer_to_server(_TopicsAdmin(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            published = await stub.Publish(
                gateway_pb2.PublishRequest(
                    topic="t", messages=[gateway_pb2.Message(body=b"a"), gateway_pb2.Message()]
                )
            )
            assert list(published.message_ids) == ["t-0", "t-1"]

            call = stub.Consume()
            await call.write(
                gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(topic="t", group="g"))
            )
            first = await call.read()
            assert first.subscribed.consumer_id == "g-c1"
            await call.write(gateway_pb2.ConsumeRequest(credit=gateway_pb2.Credit(messages=2)))
            batch = await call.read()
            assert [d.receipt for d in batch.deliveries.deliveries] == ["r0", "r1"]
            settle = gateway_pb2.SettleBatch(
                settlements=[gateway_pb2.Settlement(receipt="r0", ack=gateway_pb2.Ack())]
            )
            await call.write(gateway_pb2.ConsumeRequest(settle=settle))
            answer = await call.read()
            assert [(r.receipt, r.ok) for r in answer.results.results] == [("r0", True)]
            await call.done_writing()
            assert await call.read() == grpc.aio.EOF

            admin = admin_pb2_grpc.AdminStub(channel)
            topics = await admin.ListTopics(admin_pb2.ListTopicsRequest())
            assert list(topics.topics) == ["%DLQ%g", "t"]
            with pytest.raises(grpc.aio.AioRpcError) as unimplemented:
                await admin.Purge(admin_pb2.PurgeRequest(topic="t", group="g"))
            assert unimplemented.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await server.stop(None)
