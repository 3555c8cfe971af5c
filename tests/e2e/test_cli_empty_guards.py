"""A setting that turns a protection on, given an empty value, is refused: `--tokens-file ""`
(an unset variable in a script), an empty `GATEWAY_TLS_CERT` in a manifest or
`tls_client_ca = ""` in a config file each served without authentication or TLS, and said so
only in the start line's `auth` or `tls` field."""

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
