"""Shutting a RocketMQ SDK client down in a test so that nothing of it outlives the test.

A push consumer runs an OpenTelemetry meter provider that exports to the gateway; if only
`shutdown()` runs (or it raises because the gateway is gone), that provider keeps exporting to a
closed port from its own thread for the rest of the test session and logs to whichever test's
stderr is being captured then.
"""

from __future__ import annotations

import contextlib
from typing import Any

from rocketmq.grpc_protocol import definition_pb2


def close_rocketmq_client(client: Any) -> None:
    """Shut `client` down and stop its meter provider, each even if the other fails."""
    with contextlib.suppress(Exception):  # a client of a stopped gateway may fail
        client.shutdown()
    with contextlib.suppress(Exception):
        client.client_metrics.reset_metrics(definition_pb2.Metric(on=False))
