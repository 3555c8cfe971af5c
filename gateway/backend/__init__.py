"""The one small interface every back end implements (embedded store, RabbitMQ, Pulsar)."""

from gateway.backend.base import (
    Backend,
    KeyedCopy,
    Lease,
    Move,
    OutMessage,
    Release,
    StoredMessage,
    TopicStats,
)

__all__ = [
    "Backend", "KeyedCopy", "Lease", "Move", "OutMessage", "Release", "StoredMessage",
    "TopicStats",
]
