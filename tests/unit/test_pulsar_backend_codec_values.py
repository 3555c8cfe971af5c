"""The Pulsar back end reads its fields from message properties any Pulsar client may write:
odd values are read as absent, never raise, and never exceed what a delivery can carry."""

from __future__ import annotations

import pytest

from adapters.pulsar.backend_codec import (
    ATTEMPT_PROP,
    COUNT_MAX,
    DELIVER_AT_PROP,
    PUBLISH_PROP,
    RETRIES_PROP,
    TIME_MAX_MS,
    count,
    decode,
)


@pytest.mark.parametrize("text", ["²", "٣", "1_000", "-5", "", "x", str(2**32), "9" * 40,
                                  str(COUNT_MAX + 1)])
def test_odd_counts_read_as_absent(text: str) -> None:
    assert count(text) == 0
    env = decode({ATTEMPT_PROP: text, RETRIES_PROP: text}, "", "1:2", 1000)
    assert (env.stated_attempt, env.retries) == (0, 0)


def test_counts_and_times_in_range_are_read() -> None:
    assert count(" 7 ") == 7 and count(str(COUNT_MAX)) == COUNT_MAX
    env = decode({PUBLISH_PROP: str(TIME_MAX_MS), DELIVER_AT_PROP: "1700000000000"}, "", "1:2",
                 1000)
    assert (env.publish_ms, env.deliver_at_ms) == (TIME_MAX_MS, 1_700_000_000_000)


def test_an_impossible_time_falls_back() -> None:
    env = decode({PUBLISH_PROP: "9" * 30, DELIVER_AT_PROP: str(2**63)}, "", "1:2", 1234)
    assert (env.publish_ms, env.deliver_at_ms) == (1234, 0)
