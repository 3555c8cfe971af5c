"""`gateway serve --backend pulsar` started while its broker cannot be reached exits with status
75 (EX_TEMPFAIL: try again later, as when a back end is lost while serving) in one line naming the
service URL; before, it exited with 2, the status of a usage error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import free_port

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_an_unreachable_pulsar_at_start_exits_75_in_one_line(tmp_path: Path) -> None:
    url = f"pulsar://127.0.0.1:{free_port()}"  # nothing listens there
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path / "data"),
         "--listen", "127.0.0.1:0", "--backend", "pulsar", "--pulsar-service-url", url],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=120)
    assert done.returncode == 75, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("gateway: error:")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(f"gateway: error: cannot reach Pulsar at {url}: "), errors
    assert errors[0].endswith(" (exit status 75)"), errors
    assert "Traceback" not in done.stderr
