"""pulsar adapter."""
