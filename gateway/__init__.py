"""retry-gateway: one retry state machine under the retry semantics of several message queues."""

__version__ = "0.1.0"
