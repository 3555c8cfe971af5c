"""`--tls-cert` turns TLS on for the Pulsar listener too, as for every listener: pulsar-client
connects with `pulsar+ssl://` and the CA, and a plaintext client (which would send its token in
the clear) gets nowhere. It was plaintext whatever the flags said."""

from __future__ import annotations

from pathlib import Path

import pulsar
import pytest

from gateway.server.app import running_gateway
from tests.e2e.pulsar_stack import receive_all, run
from tests.e2e.test_access_control import make_ca

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


async def test_the_pulsar_listener_serves_tls(tmp_path: Path) -> None:
    files = make_ca(tmp_path)
    async with running_gateway(tmp_path / "data", tls_cert=str(files["server.crt"]),
                               tls_key=str(files["server.key"]),
                               pulsar_listen="127.0.0.1:0") as app:
        port = app.front_ends["pulsar"].port  # type: ignore[attr-defined]
        secure = pulsar.Client(f"pulsar+ssl://127.0.0.1:{port}", logger=QUIET,
                               tls_trust_certs_file_path=str(files["ca.crt"]),
                               operation_timeout_seconds=10)
        try:
            consumer = await run(secure.subscribe, "tls-topic", "s",
                                 initial_position=pulsar.InitialPosition.Earliest)
            producer = await run(secure.create_producer, "tls-topic")
            await run(producer.send, b"over tls")
            assert [m.data() for m in await receive_all(consumer)] == [b"over tls"]
        finally:
            await run(secure.close)
        plain = pulsar.Client(f"pulsar://127.0.0.1:{port}", logger=QUIET,
                              operation_timeout_seconds=3, connection_timeout_ms=2000)
        try:
            with pytest.raises(pulsar.PulsarException):
                await run(plain.create_producer, "tls-topic")
        finally:
            await run(plain.close)
