"""`cache_mb` reaches the embedded store and is range-checked like every setting."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.engine.clock import SystemClock
from gateway.errors import InvalidArgument
from gateway.server.app import make_backend
from gateway.server.config import ServeConfig
from gateway.store import EmbeddedStore


def test_cache_mb_sets_the_store_tail_budget(tmp_path: object) -> None:
    backend = make_backend(ServeConfig(data_dir=str(tmp_path), cache_mb=3), SystemClock())
    assert isinstance(backend, EmbeddedStore)
    assert backend._tail.budget == 3 << 20


@pytest.mark.parametrize("value", [-1, 65537])
def test_cache_mb_out_of_range_is_refused(value: int) -> None:
    with pytest.raises(InvalidArgument) as raised:
        ServeConfig(cache_mb=value)
    assert "cache_mb" in raised.value.message and "0..65536" in raised.value.message


def test_cache_mb_flag_is_checked(tmp_path: object) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path),
         "--cache-mb", "-5"],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 2
    assert "cache_mb=-5" in run.stderr and "0..65536 MiB" in run.stderr
