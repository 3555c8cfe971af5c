"""`[server] pulsar_advertised` (`GATEWAY_PULSAR_ADVERTISED`): the service URL the Pulsar front
end's lookups hand to clients. Any text was taken: `"x y"` started the gateway and every lookup
pointed clients at it, so they failed far from the cause. It is checked at start now, as
`rocketmq.advertised` is: one `pulsar://HOST:PORT` or `pulsar+ssl://HOST:PORT`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.errors import InvalidArgument
from gateway.server.config import load


@pytest.mark.parametrize("url", [
    "x", "x y", "a\nb", "pulsar://", "pulsar://gw", "http://gw:6650", "pulsar://gw:0",
    "pulsar://gw:65536", "pulsar://gw:6650,gw2:6650", "pulsar://u:p@gw:6650", " pulsar://gw:1",
    "pulsar://gw:6650/x",
])
def test_a_malformed_advertised_url_is_refused_by_name(url: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        load(env={"GATEWAY_PULSAR_ADVERTISED": url})
    assert raised.value.field == "GATEWAY_PULSAR_ADVERTISED"
    assert "pulsar://HOST:PORT" in raised.value.allowed


@pytest.mark.parametrize("url", [
    "", "pulsar://gw:6651", "pulsar+ssl://gw.example.com:6651", "pulsar://[::1]:6650",
    "pulsar://10.0.0.1:6650/",
])
def test_a_well_formed_advertised_url_is_taken(url: str) -> None:
    assert load(env={"GATEWAY_PULSAR_ADVERTISED": url}).value("pulsar_advertised") == url


def test_serve_exits_2_naming_the_setting(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[server]\npulsar_listen = "127.0.0.1:0"\npulsar_advertised = "x y"\n')
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data"), "--config", str(config)],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "pulsar_advertised" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
