"""Pulsar retry-letter and dead-letter topic names per cluster version (document 004)."""

from __future__ import annotations

from gateway.core.naming import NamingScheme

PULSAR_2_9 = NamingScheme("pulsar-2.9", "{topic}-{group}-RETRY", "{topic}-{group}-DLQ")
PULSAR_2_7 = NamingScheme("pulsar-2.7", "{ns}{group}-RETRY", "{ns}{group}-DLQ")
PULSAR_2_6 = NamingScheme("pulsar-2.6", "{ns}{group}-retry", "{ns}{group}-dlq")
SCHEMES = (PULSAR_2_9, PULSAR_2_7, PULSAR_2_6)
DEFAULT = PULSAR_2_9
