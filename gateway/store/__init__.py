"""The embedded durable store, the default back end (`EmbeddedStore`).

`EmbeddedStore` is imported on first use, so that the store's writer process
(`python -m gateway.store.writer_proc`) starts without loading the rest of the gateway."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.store.embedded import EmbeddedStore

__all__ = ["EmbeddedStore"]


def __getattr__(name: str) -> object:
    if name == "EmbeddedStore":
        from gateway.store.embedded import EmbeddedStore

        return EmbeddedStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
