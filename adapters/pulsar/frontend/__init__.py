"""Pulsar binary-protocol front end: unmodified Pulsar clients against the gateway engine."""

from adapters.pulsar.frontend.server import PulsarFrontEnd, parse_listen

__all__ = ["PulsarFrontEnd", "parse_listen"]
