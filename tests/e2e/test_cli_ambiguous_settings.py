"""Settings given a value that reads two ways are refused, naming the setting.

* A setting that turns a protection on, given an empty value (`--tokens-file ""` from an unset
  variable in a script, an empty `GATEWAY_TLS_CERT` in a manifest, `tls_client_ca = ""` in a
  config file), served without authentication or TLS, said only in the start line.
* An IPv6 listen address without brackets (`::1:0`) was read as [::1]:0.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_attack_cli_round10 import REPO, refused, serve

BASE = ("--listen", "127.0.0.1:0", "--data-dir", "data")


@pytest.mark.parametrize(("flag", "value"), [
    ("--tokens-file", ""), ("--tokens-file", " "), ("--tls-cert", ""), ("--tls-key", ""),
    ("--tls-client-ca", ""),
])
def test_an_empty_flag_is_refused(tmp_path: Path, flag: str, value: str) -> None:
    key = flag[2:].replace("-", "_")
    refused(serve(tmp_path, *BASE, flag, value), f"{key}={value!r}", "a file path")


def test_an_empty_variable_is_refused_naming_it(tmp_path: Path) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "serve", *BASE], capture_output=True,
            text=True, cwd=tmp_path, timeout=60,
            env=dict(os.environ, PYTHONPATH=str(REPO), GATEWAY_TOKENS_FILE=""))
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the gateway started: {exc.stderr!r}") from None
    refused(done, "GATEWAY_TOKENS_FILE=''", "a file path")


def test_an_empty_value_in_the_config_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "gateway.toml").write_text('[auth]\ntokens_file = ""\n')
    refused(serve(tmp_path, *BASE, "--config", "gateway.toml"), "tokens_file=''")


@pytest.mark.parametrize(("flag", "address"), [
    ("--listen", "::1:0"), ("--listen", ":::0"), ("--amqp-listen", "::1:5673"),
])
def test_an_ipv6_listen_address_without_brackets_is_refused(tmp_path: Path, flag: str,
                                                           address: str) -> None:
    """`::1:0` served on [::1]:0, though it is also the address ::1:0 (with no port)."""
    key = flag[2:].replace("-", "_")
    refused(serve(tmp_path, *BASE, flag, address), f"{key}={address!r}", "[::1]:PORT")
