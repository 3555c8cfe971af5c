"""The `backend` fixture: every contract test runs once per registered back end.

To add a back end, write an async factory that returns it opened and add one entry to
`BACKEND_FACTORIES`; the fixture closes it after the test.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from gateway.backend.base import Backend
from gateway.store import EmbeddedStore

BackendFactory = Callable[[pathlib.Path], Awaitable[Backend]]


async def make_embedded(tmp_path: pathlib.Path) -> Backend:
    """The embedded store in a fresh directory, with fsync on as in production."""
    store = EmbeddedStore(tmp_path / "embedded-store")
    await store.open()
    return store


BACKEND_FACTORIES: dict[str, BackendFactory] = {
    "embedded": make_embedded,
}


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
async def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Backend]:
    """An opened back end of the parametrized kind, closed after the test."""
    opened = await BACKEND_FACTORIES[request.param](tmp_path)
    try:
        yield opened
    finally:
        await opened.close()
