"""A publish whose headers use the gateway's reserved `x-gateway-*` names is refused, and the
refusal speaks of the AMQP message's headers: before, its 406 named the gRPC API's field
(`messages[0].properties`), which an AMQP client never sent."""

from __future__ import annotations

from pathlib import Path

from pamqp import commands

from tests.amqp_front import RawAmqp, amqp_gateway


async def test_a_reserved_header_is_refused_naming_the_headers(tmp_path: Path) -> None:
    async with amqp_gateway(tmp_path / "data") as gateway:
        raw = await RawAmqp.connect(gateway.port)
        try:
            raw.send(1, commands.Queue.Declare(queue="q"))
            await raw.expect(commands.Queue.DeclareOk)
            raw.publish(1, b"forged", "q", properties=commands.Basic.Properties(
                headers={"x-gateway-attempt": "7"}))
            channel, close = await raw.closed_with()
            assert (channel, close.reply_code) == (1, 406)
            assert "headers" in close.reply_text and "x-gateway-attempt" in close.reply_text
            assert "messages[" not in close.reply_text
        finally:
            raw.close()
