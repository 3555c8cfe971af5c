"""`gateway serve` on an address that is taken ends at once with one line naming it and exit
status 2, whichever listener it is; nothing it started is left running (the store's writer
process ends with it)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

LISTENERS = ["--listen", "--pulsar-listen", "--amqp-listen", "--admin-listen",
             "--console-listen"]


@pytest.mark.parametrize("flag", LISTENERS)
def test_a_taken_address_is_one_line_and_exit_2(tmp_path: Path, flag: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        args = ["--listen", "127.0.0.1:0"] if flag != "--listen" else []
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path / "data"),
             *args, flag, address], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gateway: error: cannot ") and address.split(":")[1] in last, last
    assert "Traceback" not in done.stderr and "never awaited" not in done.stderr, done.stderr
    writers = subprocess.run(["pgrep", "-f", f"writer_proc {tmp_path / 'data'}"],
                             capture_output=True, text=True)
    assert writers.stdout == "", "the store's writer process was left running"
