"""The one small interface every back end implements (embedded store, RabbitMQ, Pulsar)."""

from gateway.backend.base import Backend, Lease, OutMessage, Release, StoredMessage, TopicStats

__all__ = ["Backend", "Lease", "OutMessage", "Release", "StoredMessage", "TopicStats"]
