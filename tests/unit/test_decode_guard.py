"""DecodeGuard: undecodable requests get INVALID_ARGUMENT for each of grpc's four method kinds,
on the services it guards (another front end opts in with its method prefix)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from gateway.server.errors import DecodeGuard, ErrorInterceptor
from gateway.v1 import gateway_pb2

Credit = gateway_pb2.Credit
GOOD = Credit(messages=3).SerializeToString()
BAD = b"\x08" + b"\xff" * 11  # a varint longer than ten bytes


async def unary_unary(request: Any, context: Any) -> bytes:
    return Credit(messages=request.messages + 1).SerializeToString()


async def unary_stream(request: Any, context: Any) -> AsyncIterator[bytes]:
    yield Credit(messages=request.messages).SerializeToString()


async def stream_unary(requests: Any, context: Any) -> bytes:
    total = 0
    async for request in requests:
        total += request.messages
    return Credit(messages=total).SerializeToString()


async def stream_stream(requests: Any, context: Any) -> AsyncIterator[bytes]:
    async for request in requests:
        yield Credit(messages=request.messages).SerializeToString()


def service(name: str) -> grpc.GenericRpcHandler:
    des = Credit.FromString
    return grpc.method_handlers_generic_handler(name, {
        "UU": grpc.unary_unary_rpc_method_handler(unary_unary, des),
        "US": grpc.unary_stream_rpc_method_handler(unary_stream, des),
        "SU": grpc.stream_unary_rpc_method_handler(stream_unary, des),
        "SS": grpc.stream_stream_rpc_method_handler(stream_stream, des),
    })


async def outcome(channel: grpc.aio.Channel, method: str, frames: list[bytes]) -> Any:
    async def each() -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame

    kind = method.rsplit("/", 1)[1]
    try:
        if kind == "UU":
            return await channel.unary_unary(method)(frames[0])
        if kind == "US":
            return [r async for r in channel.unary_stream(method)(frames[0])]
        if kind == "SU":
            return await channel.stream_unary(method)(each())
        return [r async for r in channel.stream_stream(method)(each())]
    except grpc.aio.AioRpcError as err:
        return err.code()


@pytest.fixture
async def channel() -> AsyncIterator[grpc.aio.Channel]:
    server = grpc.aio.server(interceptors=[DecodeGuard(("/guarded.",)), ErrorInterceptor()])
    server.add_generic_rpc_handlers((service("guarded.S"), service("open.S")))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            yield ch
    finally:
        await server.stop(0)


@pytest.mark.parametrize("kind", ["UU", "US", "SU", "SS"])
async def test_every_kind_refuses_garbage(channel: grpc.aio.Channel, kind: str) -> None:
    method = f"/guarded.S/{kind}"
    frames = [BAD] if kind in ("UU", "US") else [GOOD, BAD]
    assert await outcome(channel, method, frames) == grpc.StatusCode.INVALID_ARGUMENT
    good = await outcome(channel, method, [GOOD, GOOD] if kind[0] == "S" else [GOOD])
    assert not isinstance(good, grpc.StatusCode)


async def test_unguarded_services_keep_grpcs_own_answer(channel: grpc.aio.Channel) -> None:
    assert await outcome(channel, "/open.S/UU", [BAD]) == grpc.StatusCode.UNKNOWN


@pytest.mark.parametrize("kind", ["SU", "SS"])
async def test_a_bad_frame_no_handler_turns_into_a_status_is_still_refused(kind: str) -> None:
    """The guard raises a bad frame into the handler (so it can answer what came before); one
    that escapes with no ErrorInterceptor to map it is refused by the guard itself."""
    server = grpc.aio.server(interceptors=[DecodeGuard(("/guarded.",))])
    server.add_generic_rpc_handlers((service("guarded.S"),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            got = await outcome(ch, f"/guarded.S/{kind}", [GOOD, BAD])
            assert got == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await server.stop(0)


async def test_a_stream_answers_the_frames_before_a_bad_one(channel: grpc.aio.Channel) -> None:
    answers: list[bytes] = []

    async def each() -> AsyncIterator[bytes]:
        for frame in (GOOD, GOOD, BAD):
            yield frame

    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for answer in channel.stream_stream("/guarded.S/SS")(each()):
            answers.append(answer)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert answers == [GOOD, GOOD]
