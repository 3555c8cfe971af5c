"""Pulsar binary protocol: generated command types (`wire_pb2`), framing and batch codec."""
