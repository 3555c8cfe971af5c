"""Traces across products and retries: the W3C trace context every message carries
(`gateway.tracing.context`, always on, no dependency) and the OpenTelemetry spans the gateway
makes when tracing is on (`gateway.tracing.spans`, imported only then; the `tracing` extra)."""
