"""Bearer tokens, per-topic and per-group permissions, admin, mTLS, loopback-only default."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.errors import InvalidArgument
from gateway.server.app import GatewayApp, running_gateway
from gateway.server.config import ServeConfig, load
from gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc

TOKENS = """
[[principal]]
name = "billing"
token = "billing-secret"
publish = ["orders", "orders.*"]
consume = ["orders"]
groups = ["billing"]

[[principal]]
name = "ops"
token = "ops-secret"
admin = true
"""


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens)) as running:
        yield running


def stubs(port: int, token: str | None) -> tuple[gateway_pb2_grpc.GatewayStub,
                                                  admin_pb2_grpc.AdminStub, grpc.aio.Channel]:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    return gateway_pb2_grpc.GatewayStub(channel), admin_pb2_grpc.AdminStub(channel), channel


def meta(token: str | None) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")] if token else []


def publish(topic: str) -> gateway_pb2.PublishRequest:
    return gateway_pb2.PublishRequest(topic=topic, messages=[gateway_pb2.Message(body=b"x")])


def receive(topic: str, group: str) -> gateway_pb2.ReceiveRequest:
    return gateway_pb2.ReceiveRequest(topic=topic, group=group, policy="rocketmq-simple",
                                      max_messages=1, invisible_ms=10_000)


async def code_of(call: object) -> grpc.StatusCode:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


async def test_tokens_and_permissions(app: GatewayApp) -> None:
    gw, admin, channel = stubs(app.grpc_port, None)
    async with channel:
        unauth = grpc.StatusCode.UNAUTHENTICATED
        denied = grpc.StatusCode.PERMISSION_DENIED
        ok = grpc.StatusCode.OK
        assert await code_of(gw.Publish(publish("orders"))) == unauth
        assert await code_of(gw.Publish(publish("orders"), metadata=meta("wrong"))) == unauth
        billing = meta("billing-secret")
        assert await code_of(gw.Publish(publish("orders"), metadata=billing)) == ok
        assert await code_of(gw.Publish(publish("payments"), metadata=billing)) == denied
        # Denied the same way whether the topic exists or not.
        assert await code_of(gw.Publish(publish("never-made"), metadata=billing)) == denied
        assert await code_of(gw.Receive(receive("orders", "billing"), metadata=billing)) == ok
        assert await code_of(gw.Receive(receive("orders", "other"), metadata=billing)) == denied
        # Consuming a group covers its retry and dead-letter destinations, not another group's.
        assert await code_of(gw.Receive(receive("%DLQ%billing", "billing"),
                                        metadata=billing)) == ok
        assert await code_of(gw.Receive(receive("orders-billing-RETRY", "billing"),
                                        metadata=billing)) == ok
        assert await code_of(gw.Receive(receive("%DLQ%other", "other"),
                                        metadata=billing)) == denied
        assert await code_of(gw.Receive(receive("%DLQ%other", "billing"),
                                        metadata=billing)) == denied
        describe = admin_pb2.DescribeGroupRequest(topic="orders", group="billing")
        assert await code_of(admin.DescribeGroup(describe, metadata=billing)) == denied
        assert await code_of(admin.DescribeGroup(describe)) == unauth
        assert await code_of(admin.DescribeGroup(describe, metadata=meta("ops-secret"))) == ok


async def test_two_authorization_headers_are_refused(app: GatewayApp) -> None:
    """The first `authorization` value was taken: a caller's own token beat one a proxy in
    front appended (billing's token first got ops' admin call refused, ops' first got it)."""
    gw, admin, channel = stubs(app.grpc_port, None)
    async with channel:
        both = [("authorization", "Bearer billing-secret"), ("authorization", "Bearer ops-secret")]
        for metadata in (both, both[::-1], [both[1], both[1]]):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await admin.ListTopics(admin_pb2.ListTopicsRequest(), metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "one authorization header, not 2" in (err.value.details() or "")
            assert await code_of(gw.Publish(publish("orders"), metadata=metadata)) == \
                grpc.StatusCode.UNAUTHENTICATED
        assert await code_of(admin.ListTopics(admin_pb2.ListTopicsRequest(),
                                              metadata=[both[1]])) == grpc.StatusCode.OK


async def test_stream_subscribe_is_checked(app: GatewayApp) -> None:
    gw, _, channel = stubs(app.grpc_port, None)
    async with channel:
        async def requests(group: str):  # type: ignore[no-untyped-def]
            yield gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
                topic="orders", group=group, policy="rocketmq", prefetch=1))

        call = gw.Consume(requests("other"), metadata=meta("billing-secret"))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in call:
                pass
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        call = gw.Consume(requests("billing"), metadata=meta("billing-secret"))
        first = await call.read()
        assert first.WhichOneof("kind") == "subscribed"
        call.cancel()


async def test_health_needs_no_token(app: GatewayApp) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "liveness"):
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_no_auth_means_loopback_only() -> None:
    with pytest.raises(InvalidArgument) as err:
        ServeConfig(listen="0.0.0.0:50051")
    assert "loopback" in str(err.value)
    assert ServeConfig(listen="0.0.0.0:50051", allow_remote_unauthenticated=True)


LISTENERS = ("listen", "pulsar_listen", "admin_listen")


@pytest.mark.parametrize("field", LISTENERS)
@pytest.mark.parametrize("address", ["0.0.0.0:7000", "[::]:7000", "10.1.2.3:7000",
                                     "example.com:7000"])
def test_every_listener_is_loopback_only_without_auth(field: str, address: str) -> None:
    """Issue 16, defect 8: --pulsar-listen and --admin-listen bound every interface."""
    with pytest.raises(InvalidArgument) as err:
        load(env={}, flags={field: address})
    assert err.value.field == field
    assert "loopback" in err.value.message
    assert load(env={}, flags={field: address, "allow_remote_unauthenticated": True})
    assert load(env={}, flags={field: address, "tokens_file": "/tokens.toml"})


@pytest.mark.parametrize("field", LISTENERS)
@pytest.mark.parametrize("address", ["127.0.0.1:7000", "127.0.0.2:0", "localhost:7000",
                                     "[::1]:7000"])
def test_loopback_listeners_need_no_auth(field: str, address: str) -> None:
    assert load(env={}, flags={field: address}).value(field) == address


@pytest.mark.parametrize("flag", ["--pulsar-listen", "--admin-listen"])
def test_the_cli_refuses_a_remote_listener_without_auth(tmp_path: Path, flag: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
             "--data-dir", str(tmp_path / "data"), flag, "0.0.0.0:0"],
            capture_output=True, text=True, timeout=30, env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"gateway serve {flag} 0.0.0.0:0 started without auth")
    assert done.returncode == 2
    assert flag[2:].replace("-", "_") in done.stderr
    assert "loopback" in done.stderr


DUPLICATES = {
    "name": ('name = "a"\ntoken = "t1"', 'name = "a"\ntoken = "t2"', "principal[1].name"),
    "token": ('name = "a"\ntoken = "same"', 'name = "b"\ntoken = "same"', "principal[b].token"),
    "rocketmq access key": (
        'name = "a"\ntoken = "t1"\nrocketmq_access_key = "AK"\nrocketmq_secret_key = "S1"',
        'name = "b"\ntoken = "t2"\nrocketmq_access_key = "AK"\nrocketmq_secret_key = "S2"',
        "principal[b].rocketmq_access_key"),
}


@pytest.mark.parametrize("what", sorted(DUPLICATES))
def test_the_cli_refuses_a_tokens_file_that_gives_one_credential_twice(
    tmp_path: Path, what: str
) -> None:
    """The last principal with a name, token or access key took it silently: the other lost
    its permissions, or its clients were refused."""
    first, second, field = DUPLICATES[what]
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f"[[principal]]\n{first}\n\n[[principal]]\n{second}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
             "--data-dir", str(tmp_path / "data"), "--tokens-file", str(tokens)],
            capture_output=True, text=True, timeout=30, env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"gateway serve started with a tokens file giving a {what} twice")
    assert done.returncode == 2, done.stderr
    assert field in done.stderr
    assert "same" not in done.stderr  # the token is not echoed


def make_ca(tmp: Path) -> dict[str, Path]:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client certificate."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    (tmp / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout",
            f"{who}.key", "-out", f"{who}.csr")
        run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-out", f"{who}.crt", "-extfile", "san.ext")
    return {name: tmp / name for name in ("ca.crt", "server.crt", "server.key", "client.crt",
                                          "client.key")}


async def test_mtls(tmp_path: Path) -> None:
    files = make_ca(tmp_path)
    async with running_gateway(tmp_path / "data", tls_cert=str(files["server.crt"]),
                               tls_key=str(files["server.key"]),
                               tls_client_ca=str(files["ca.crt"])) as app:
        target = f"127.0.0.1:{app.grpc_port}"
        ca = files["ca.crt"].read_bytes()
        good = grpc.ssl_channel_credentials(ca, files["client.key"].read_bytes(),
                                            files["client.crt"].read_bytes())
        async with grpc.aio.secure_channel(target, good) as channel:
            reply = await gateway_pb2_grpc.GatewayStub(channel).Publish(publish("orders"))
            assert len(reply.message_ids) == 1
        no_cert = grpc.ssl_channel_credentials(ca)
        async with grpc.aio.secure_channel(target, no_cert) as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            assert await code_of(stub.Publish(publish("orders"), timeout=5)) == \
                grpc.StatusCode.UNAVAILABLE


async def test_rocketmq_listener_uses_the_principals_keys(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS + '''
[[principal]]
name = "rocket"
token = "rocket-token"
publish = ["orders"]
rocketmq_access_key = "rocket-ak"
rocketmq_secret_key = "rocket-sk"
''')
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens)) as app:
        settings = app.front_ends["rocketmq"].settings
        assert settings.credentials == {"rocket-ak": "rocket-sk"}
        assert settings.permissions is not None
        assert settings.permissions.by_access_key["rocket-ak"].name == "rocket"


async def test_overlong_names_are_refused_briefly_under_auth(app: GatewayApp) -> None:
    """The permission check runs first; a 100 KiB name gets a short INVALID_ARGUMENT."""
    gw, _, channel = stubs(app.grpc_port, None)
    async with channel:
        billing = meta("billing-secret")
        for call in (gw.Publish(publish("orders" * 20_000), metadata=billing),
                     gw.Receive(receive("%DLQ%" + "b" * 100_000, "billing"), metadata=billing)):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert len(err.value.details() or "") < 500


@pytest.mark.parametrize("token", [None, "wrong", "billing-secret"])
async def test_a_refused_stream_always_gets_its_own_status(app: GatewayApp,
                                                          token: str | None) -> None:
    """A Consume stream refused before the handler runs (no token, a wrong one, a group not
    allowed) answers UNAUTHENTICATED / PERMISSION_DENIED every time, never INTERNAL: the gateway
    reads the subscription before it answers, so the client is not cut off mid-send."""
    expected = (grpc.StatusCode.PERMISSION_DENIED if token == "billing-secret"
                else grpc.StatusCode.UNAUTHENTICATED)
    gw, _, channel = stubs(app.grpc_port, None)
    async with channel:
        async def one() -> grpc.StatusCode:
            done = asyncio.Event()

            async def requests():  # type: ignore[no-untyped-def]
                yield gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
                    topic="orders", group="other", policy="rocketmq", prefetch=1))
                await done.wait()  # a consumer keeps its side open

            call = gw.Consume(requests(), metadata=meta(token))
            try:
                await call.read()
                return grpc.StatusCode.OK
            except grpc.aio.AioRpcError as err:
                return err.code()
            finally:
                done.set()
                call.cancel()

        # Many at once: the race (a refusal sent while the client still writes its first
        # request arrived as INTERNAL) showed about once in a few hundred calls under load.
        codes: list[grpc.StatusCode] = []
        for _ in range(16):
            codes += await asyncio.gather(*(one() for _ in range(25)))
        assert set(codes) == {expected}, [c for c in codes if c != expected]
