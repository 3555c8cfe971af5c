"""The console and the admin commands against a gateway with TLS and client certificates
(mTLS): the console serves HTTPS and refuses browsers without a certificate; the CLI's TLS flags
reach the admin API."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiohttp
import pytest

from gateway.cli import main
from gateway.server.app import running_gateway
from tests.e2e.test_access_control import make_ca

pytestmark = pytest.mark.slow


async def test_console_and_cli_over_mtls(tmp_path: Path) -> None:
    files = make_ca(tmp_path)
    async with running_gateway(tmp_path / "data", tls_cert=str(files["server.crt"]),
                               tls_key=str(files["server.key"]),
                               tls_client_ca=str(files["ca.crt"]),
                               console_listen="127.0.0.1:0") as app:
        url = f"https://127.0.0.1:{app.console_port}/"
        trusted = ssl.create_default_context(cafile=str(files["ca.crt"]))
        with_cert = ssl.create_default_context(cafile=str(files["ca.crt"]))
        with_cert.load_cert_chain(str(files["client.crt"]), str(files["client.key"]))
        async with aiohttp.ClientSession() as client:
            async with client.get(url, ssl=with_cert) as r:
                assert r.status == 200 and "Overview" in await r.text()
                assert "Secure" in r.headers["Set-Cookie"]
            with pytest.raises(aiohttp.ClientError):
                async with client.get(url, ssl=trusted) as r:
                    await r.text()
            with pytest.raises(aiohttp.ClientError):
                async with client.get(url.replace("https", "http")) as r:
                    await r.text()
        target = f"127.0.0.1:{app.grpc_port}"
        tls = ["--tls-ca", str(files["ca.crt"])]
        cert = ["--tls-cert", str(files["client.crt"]), "--tls-key", str(files["client.key"])]
        assert await asyncio.to_thread(main, ["topics", "--target", target, *tls, *cert]) == 0
        assert await asyncio.to_thread(
            main, ["topics", "--target", target, *tls, "--timeout-s", "5"]) == 5
        assert await asyncio.to_thread(
            main, ["topics", "--target", target, *tls, "--tls-cert",
                   str(files["client.crt"])]) == 2  # a certificate needs its key
