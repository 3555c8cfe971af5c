"""The embedded durable store, the default back end (`EmbeddedStore`)."""

from gateway.store.embedded import EmbeddedStore

__all__ = ["EmbeddedStore"]
