"""The `h` fixture: a started engine over the in-memory back end on a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .harness import Harness


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness()
    await harness.engine.start()
    try:
        yield harness
    finally:
        await harness.engine.close()
