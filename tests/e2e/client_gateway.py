"""Gateway processes for the Python client's tests: `gateway serve` started, killed and
restarted on the same port and data directory."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

START_S = 60.0


class GatewayProcess:
    """One `gateway serve` process at a time on a port that stays the same across restarts."""

    def __init__(self, data_dir: Path, *args: str, time_scale: float = 0.001) -> None:
        self.data_dir = data_dir
        self.args = args
        self.time_scale = time_scale
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> GatewayProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(self.data_dir),
             "--listen", f"127.0.0.1:{self.port}", "--time-scale", str(self.time_scale),
             "--log-level", "warning", "--grace-s", "1", *self.args],
            stderr=subprocess.PIPE, text=True, env=env,
        )
        assert proc.stderr is not None
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            self.log.append(line)
            match = re.search(r"gateway listening on \S+:(\d+)", line)
            if match:
                self.port = int(match.group(1))
                self.proc = proc
                # Keep reading, so that the gateway never blocks on a full pipe.
                threading.Thread(target=self._drain, args=(proc,), daemon=True).start()
                return self
        proc.kill()
        raise AssertionError("gateway did not start: " + "".join(self.log[-20:]))

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.log.append(line)

    def kill(self) -> None:
        """kill -9, and wait until it is gone."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        """SIGTERM (drain), and the exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def make_ca(tmp: Path) -> dict[str, Path]:
    """A throwaway CA, a server certificate for 127.0.0.1 / localhost and a client
    certificate, made with openssl."""
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
