"""`[rocketmq] access_key` / `secret_key` turn on signature checks together. A secret key
without an access key was dropped without a word and the RocketMQ front end took every caller
unsigned: the operator believed signatures were checked. Half a pair is refused at start now,
naming the missing half (an access key without a secret named an internal `credentials`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.errors import InvalidArgument
from gateway.server.config import load


@pytest.mark.parametrize(("env", "missing"), [
    ({"GATEWAY_ROCKETMQ_SECRET_KEY": "sk"}, "rocketmq_access_key"),
    ({"GATEWAY_ROCKETMQ_ACCESS_KEY": "ak"}, "rocketmq_secret_key"),
])
def test_half_a_key_pair_is_refused_naming_the_missing_half(
    env: dict[str, str], missing: str
) -> None:
    with pytest.raises(InvalidArgument) as raised:
        load(env=env)
    assert raised.value.field == missing
    assert "sk" not in str(raised.value.value)  # a secret is never echoed


def test_a_whole_pair_or_none_is_taken() -> None:
    config = load(env={"GATEWAY_ROCKETMQ_ACCESS_KEY": "ak", "GATEWAY_ROCKETMQ_SECRET_KEY": "sk"})
    assert config.value("rocketmq_access_key") == "ak"
    assert load(env={}).value("rocketmq_secret_key") == ""


def test_serve_exits_2_on_a_secret_key_alone(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[rocketmq]\nsecret_key = "very-secret"\n')
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data"), "--config", str(config)],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "rocketmq_access_key" in done.stderr
    assert "very-secret" not in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize(("entry", "missing"), [
    ('rocketmq_access_key = "AK"', "principal[app].rocketmq_secret_key"),
    ('rocketmq_secret_key = "very-secret"', "principal[app].rocketmq_access_key"),
])
def test_a_principal_with_half_a_key_pair_is_refused_by_name(
    tmp_path: Path, entry: str, missing: str
) -> None:
    """The tokens file's principals alike: an access key without a secret named an internal
    `credentials`; a secret without an access key was dropped without a word."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[[principal]]\nname = "app"\ntoken = "t"\n{entry}\n')
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data"), "--tokens-file", str(tokens)],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert missing in done.stderr
    assert "very-secret" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
