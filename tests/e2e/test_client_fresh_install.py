"""README command 1 in a fresh virtualenv: the gateway it installs serves the gRPC API, the
RocketMQ 5 SDK and pulsar-client (each client imported from that install), and a command that
needs an extra says which in one line.

Fresh means `python3 -m venv` without `--system-site-packages`, then the README's own
`pip install -q -e .`: nothing of the test environment is visible to it. pip's cache is used
as it is (a warm cache makes this a matter of seconds; a cold one downloads some 60 MB).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("client_fresh_probe.py")
INSTALL_TIMEOUT_S = 900


def readme_command() -> list[str]:
    """README command 1 (`python3 -m venv .venv && .venv/bin/pip install ... && .venv/bin/gateway
    serve`), split at `&&`."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Two commands"):]
    block = re.search(r"```sh\n(.+?)\n```", section, re.S)
    assert block is not None
    parts = [part.strip() for part in block.group(1).split("&&")]
    assert len(parts) == 3 and parts[0].startswith("python3 -m venv .venv"), parts
    assert parts[2] == ".venv/bin/gateway serve", parts
    return parts


def clean_env() -> dict[str, str]:
    """The environment without anything that points at the test's own installation."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("GATEWAY_")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv made by README command 1's first two steps, `.venv` replaced by a
    temporary directory and `.` being this repository."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    make, install, _ = readme_command()
    python = os.environ.get("FRESH_PYTHON", "python3")
    steps = [
        shlex.split(make.replace(".venv", str(venv)).replace("python3", python, 1)),
        [part.replace(".venv", str(venv)) for part in shlex.split(install)],
    ]
    for step in steps:
        done = subprocess.run(step, cwd=ROOT, env=clean_env(), capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_S, check=False)
        assert done.returncode == 0, f"{step}: {done.stderr[-3000:]}"
    config = (venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in config
    return venv


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def served(fresh: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`gateway serve --pulsar-listen ...` from the fresh install: (gRPC target, Pulsar
    address)."""
    pulsar = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [str(fresh / "bin" / "gateway"), "serve", "--listen", "127.0.0.1:0", "--data-dir",
         str(tmp_path / "data"), "--pulsar-listen", pulsar, "--log-level", "warning"],
        stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=tmp_path,
    )
    assert proc.stderr is not None
    target = ""
    deadline = time.monotonic() + 60
    while not target and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        match = re.search(r"gateway listening on ([^\s\"]+)", line)
        target = match.group(1) if match else ""
    try:
        assert target, "the fresh gateway did not start"
        yield target, pulsar
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.slow
def test_readme_install_serves_grpc_rocketmq_and_pulsar_clients(
    fresh: Path, served: tuple[str, str]
) -> None:
    target, pulsar = served
    done = subprocess.run([str(fresh / "bin" / "python"), str(PROBE), target, pulsar],
                          env=clean_env(), capture_output=True, text=True, timeout=300,
                          check=False, cwd=fresh)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.splitlines() == ["grpc api ok", "rocketmq sdk ok", "pulsar client ok",
                                        "all ok"]


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["report", "--table", "lake", "--out", "report"],
    ["export", "--spool", "spool", "--table", "lake", "--checkpoint", "ckpt"],
])
def test_readme_install_names_the_telemetry_extra(
    fresh: Path, tmp_path: Path, args: list[str]
) -> None:
    done = subprocess.run([str(fresh / "bin" / "gateway"), *args], env=clean_env(),
                          capture_output=True, text=True, timeout=120, check=False,
                          cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"gateway: error: `gateway {args[0]}` needs the telemetry extra")
    assert line.endswith("pip install 'retry-gateway[telemetry]'")


@pytest.mark.slow
def test_readme_install_has_no_spark_and_knows_its_version(fresh: Path) -> None:
    python = str(fresh / "bin" / "python")
    done = subprocess.run([python, "-c", "import importlib.util as u; "
                           "print([m for m in ('pyspark', 'deltalake', 'pyarrow', 'pytest') "
                           "if u.find_spec(m)])"], env=clean_env(), capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", "nothing of the test environment leaks in"
    version = subprocess.run([str(fresh / "bin" / "gateway"), "--version"], env=clean_env(),
                             capture_output=True, text=True, timeout=60, check=True)
    assert version.stdout.startswith("gateway (retry-gateway) ")

