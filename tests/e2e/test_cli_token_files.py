"""Every command that reads a bearer token from a file (`--token-file` of the admin commands and
`migrate rename`, `migrate copy --from-token-file / --to-token-file`, a Pulsar URL's
`token-file=`) refuses a file that holds no token, by name, with exit status 2: an empty file,
one that is not ASCII (it was a UnicodeDecodeError traceback), several lines, or one too large
to be a token (`/dev/zero` was read until the memory ran out)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.token_file import MAX_TOKEN_FILE_BYTES

LIMIT_BYTES = 2 << 30
"""Address space the command may use: the unbounded read of /dev/zero fails fast under it."""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def _files(tmp: Path) -> dict[str, str]:
    (tmp / "empty").write_bytes(b"  \n")
    (tmp / "binary").write_bytes(b"\xff\xfetoken\n")
    (tmp / "lines").write_bytes(b"token-one\ntoken-two\n")
    (tmp / "large").write_bytes(b"t" * (MAX_TOKEN_FILE_BYTES + 1))
    return {"empty": str(tmp / "empty"), "binary": str(tmp / "binary"),
            "lines": str(tmp / "lines"), "large": str(tmp / "large"), "zero": "/dev/zero"}


COMMANDS = {
    "describe": ["describe", "t", "g", "--target", "127.0.0.1:1", "--token-file", "{f}"],
    "rename": ["migrate", "rename", "--topic", "t", "--group", "g", "--from-scheme", "rocketmq",
               "--to-scheme", "pulsar-2.9", "--target", "127.0.0.1:1", "--token-file", "{f}"],
    "copy-from": ["migrate", "copy", "--from", "gateway://127.0.0.1:1/t?group=g",
                  "--to", "gateway://127.0.0.1:1/u", "--from-token-file", "{f}"],
    "copy-to": ["migrate", "copy", "--from", "gateway://127.0.0.1:1/t?group=g",
                "--to", "gateway://127.0.0.1:1/u", "--to-token-file", "{f}"],
    "pulsar": ["migrate", "copy", "--from",
               "pulsar://127.0.0.1:1/t?subscription=s&token-file={f}",
               "--to", "gateway://127.0.0.1:1/u"],
}


@pytest.mark.parametrize("kind", ["empty", "binary", "lines", "large", "zero"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_file_without_a_token_is_refused_by_name(tmp_path: Path, command: str,
                                                   kind: str) -> None:
    path = _files(tmp_path)[kind]
    args = [a.replace("{f}", path) for a in COMMANDS[command]]
    done = subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True,
                          text=True, timeout=120, preexec_fn=_limited)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "token" in done.stderr and "is not allowed" in done.stderr


@pytest.mark.parametrize("args, env", [
    (["describe", "t", "g", "--target", "127.0.0.1:1", "--token", "a\nb"], {}),
    (["describe", "t", "g", "--target", "127.0.0.1:1", "--token", "é"], {}),
    (["describe", "t", "g", "--target", "127.0.0.1:1"], {"GATEWAY_TOKEN": "a\nb"}),
    (["migrate", "copy", "--from", "gateway://127.0.0.1:1/t?group=g",
      "--to", "gateway://127.0.0.1:1/u"], {"GATEWAY_TO_TOKEN": "a\nb"}),
    (["migrate", "copy", "--from", "gateway://127.0.0.1:1/t?group=g",
      "--to", "gateway://127.0.0.1:1/u"], {"GATEWAY_TOKEN": "tok\u00e9n"}),
], ids=["arg-newline", "arg-non-ascii", "env-newline", "copy-env-newline", "copy-env-non-ascii"])
def test_a_token_grpc_cannot_send_is_refused_by_name(args: list[str],
                                                     env: dict[str, str]) -> None:
    """It was a traceback from gRPC's C core (ExecuteBatchError) at the first call."""
    done = subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "printable ASCII" in done.stderr and "a\nb" not in done.stderr


@pytest.mark.parametrize("args", [
    ["describe", "t", "g", "--target", "127.0.0.1:1", "--tls-ca", "/dev/zero"],
    ["migrate", "copy", "--from", "gateways://127.0.0.1:1/t?group=g",
     "--to", "gateway://127.0.0.1:1/u", "--tls-ca", "/dev/zero"],
], ids=["describe", "copy"])
def test_a_pem_file_too_large_is_refused_by_name(args: list[str]) -> None:
    """/dev/zero as --tls-ca was read until the memory ran out."""
    done = subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True,
                          text=True, timeout=120, preexec_fn=_limited)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "tls_ca" in done.stderr
