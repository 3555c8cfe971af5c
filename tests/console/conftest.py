"""Fixtures for the console and admin CLI tests: one `gateway serve` process with tokens,
telemetry and the console per module, and a directory for screenshots."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.gateway_proc import Gateway, start, stop


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = start(tmp_path_factory.mktemp("console") / "data")
    try:
        yield gateway
    finally:
        stop(gateway)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: $ARTIFACTS_DIR/console when set, else a pytest temp directory."""
    root = os.environ.get("ARTIFACTS_DIR")
    path = Path(root) / "console" if root else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path
