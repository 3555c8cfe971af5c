"""Shutting RocketMQ SDK clients down in a test so that nothing of them outlives the test.

A push consumer runs an OpenTelemetry meter provider that exports to the gateway. If only
`shutdown()` runs (or it raises because the gateway is gone), that provider keeps exporting to a
closed port from its own thread for the rest of the test session and logs into whichever test's
stderr is being captured then. The SDK also starts a new provider without stopping the old one
when the metrics endpoint changes (a gateway restarted on another port), so the one it still holds
is not the only one: `close_rocketmq_clients` stops every provider still running.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from rocketmq.grpc_protocol import definition_pb2


def close_rocketmq_client(client: Any) -> None:
    """Shut `client` down and stop its meter provider, each even if the other fails."""
    with contextlib.suppress(Exception):  # a client of a stopped gateway may fail
        client.shutdown()
    with contextlib.suppress(Exception):
        client.client_metrics.reset_metrics(definition_pb2.Metric(on=False))


def close_rocketmq_clients(clients: Iterable[Any]) -> None:
    """Close every client in `clients`, then stop any meter provider left running."""
    for client in clients:
        close_rocketmq_client(client)
    for provider in [o for o in gc.get_objects() if isinstance(o, MeterProvider)]:
        if not getattr(provider, "_shutdown", True):
            with contextlib.suppress(Exception):
                provider.shutdown(timeout_millis=1_000)
