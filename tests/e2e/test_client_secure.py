"""The Python client reaches a secured gateway process: TLS with the gateway's CA, mTLS with a
client certificate, and a bearer token on every call (publish, consume, receive, settle,
describe)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from client_gateway import GatewayProcess, make_ca

from gateway.client import ClientTLS, GatewayClient, Reconnect, StreamFailed

TOKENS = """
[[principal]]
name = "app"
token = "app-secret"
publish = ["orders-*"]
consume = ["orders-*"]
groups = ["billing-*"]
admin = true

[[principal]]
name = "other"
token = "other-secret"
publish = ["invoices"]
"""
WAIT_S = 30.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_ca(tmp_path_factory.mktemp("ca"))


def _gateway(tmp: Path, certs: dict[str, Path], *, mtls: bool) -> Iterator[GatewayProcess]:
    tokens = tmp / "tokens.toml"
    tokens.write_text(TOKENS)
    args = ["--tokens-file", str(tokens), "--tls-cert", str(certs["server.crt"]),
            "--tls-key", str(certs["server.key"])]
    if mtls:
        args += ["--tls-client-ca", str(certs["ca.crt"])]
    gateway = GatewayProcess(tmp / "data", *args).start()
    try:
        yield gateway
    finally:
        gateway.close()


@pytest.fixture(scope="module")
def tls_gateway(tmp_path_factory: pytest.TempPathFactory,
                certs: dict[str, Path]) -> Iterator[GatewayProcess]:
    yield from _gateway(tmp_path_factory.mktemp("tls"), certs, mtls=False)


@pytest.fixture(scope="module")
def mtls_gateway(tmp_path_factory: pytest.TempPathFactory,
                 certs: dict[str, Path]) -> Iterator[GatewayProcess]:
    yield from _gateway(tmp_path_factory.mktemp("mtls"), certs, mtls=True)


def _names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"orders-{suffix}", f"billing-{suffix}"


async def _round_trip(client: GatewayClient) -> None:
    """Publish, consume with process(), pull and settle, describe: every call carries the
    token."""
    topic, group = _names()
    ids = await client.publish(topic, [b"one", b"two"])
    async with client.consume(topic, group, policy="rocketmq") as stream:
        got = []
        while len(got) < 2:
            msg = await stream.next(WAIT_S)
            assert msg is not None
            async with msg.process():
                got.append(msg.message_id)
    assert sorted(got) == sorted(ids)
    await client.publish(topic, [b"three"])
    (pulled,) = await client.receive(topic, group + "-pull", policy="rocketmq-simple",
                                     max_messages=1, wait_ms=5000, invisible_ms=43_200_000)
    assert (await pulled.ack()).ok
    assert (await client.describe(topic, group)).inflight == 0


async def test_tls_with_the_gateways_ca_and_a_token(
    tls_gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    tls = ClientTLS(ca=certs["ca.crt"])
    async with GatewayClient(tls_gateway.target, tls=tls, token="app-secret") as client:
        await _round_trip(client)


async def test_tls_by_host_name_with_pem_bytes(
    tls_gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    tls = ClientTLS(ca=certs["ca.crt"].read_bytes())
    async with GatewayClient(f"localhost:{tls_gateway.port}", tls=tls,
                             token="app-secret") as client:
        topic, _ = _names()
        assert len(await client.publish(topic, [b"x"])) == 1


async def test_mtls_with_a_client_certificate_and_a_token(
    mtls_gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    tls = ClientTLS(ca=certs["ca.crt"], cert=certs["client.crt"], key=certs["client.key"])
    async with GatewayClient(mtls_gateway.target, tls=tls, token="app-secret") as client:
        await _round_trip(client)


async def test_mtls_without_a_client_certificate_cannot_connect(
    mtls_gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    async with GatewayClient(mtls_gateway.target, tls=ClientTLS(ca=certs["ca.crt"]),
                             token="app-secret") as client:
        topic, _ = _names()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.stub.Publish(client_request(topic), metadata=client.metadata,
                                      timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def client_request(topic: str) -> object:
    from gateway.v1 import gateway_pb2

    return gateway_pb2.PublishRequest(topic=topic, messages=[gateway_pb2.Message(body=b"x")])


async def test_plaintext_to_a_tls_gateway_fails(tls_gateway: GatewayProcess) -> None:
    async with GatewayClient(tls_gateway.target, token="app-secret") as client:
        topic, _ = _names()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.stub.Publish(client_request(topic), metadata=client.metadata,
                                      timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(("token", "code"), [
    (None, grpc.StatusCode.UNAUTHENTICATED),
    ("wrong-secret", grpc.StatusCode.UNAUTHENTICATED),
    ("other-secret", grpc.StatusCode.PERMISSION_DENIED),  # another principal's token
])
async def test_a_missing_wrong_or_foreign_token_is_refused(
    tls_gateway: GatewayProcess, certs: dict[str, Path], token: str | None,
    code: grpc.StatusCode,
) -> None:
    topic, group = _names()
    async with GatewayClient(tls_gateway.target, tls=ClientTLS(ca=certs["ca.crt"]),
                             token=token) as client:
        with pytest.raises(grpc.aio.AioRpcError) as publish:
            await client.publish(topic, [b"x"])
        assert publish.value.code() == code
        with pytest.raises(grpc.aio.AioRpcError) as subscribe:
            async with client.consume(topic, group, policy="rocketmq"):
                pass
        assert subscribe.value.code() == code
        # Resubscribing cannot heal a refusal: raised at once, typed.
        with pytest.raises(StreamFailed) as failed:
            async with client.consume(topic, group, policy="rocketmq",
                                      reconnect=Reconnect(max_attempts=50)):
                pass
        assert failed.value.code == code


def test_bad_client_settings_are_refused_before_connecting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs its key"):
        ClientTLS(cert=b"pem")
    with pytest.raises(ValueError, match=r"ClientTLS\.ca: cannot read"):
        GatewayClient("127.0.0.1:1", tls=ClientTLS(ca=tmp_path / "missing.pem"))
    for token in ("", " padded", "line\nbreak", "tök", "nul\x00"):
        with pytest.raises(ValueError, match="bearer token"):
            GatewayClient("127.0.0.1:1", token=token)
