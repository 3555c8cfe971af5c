"""What `gateway migrate copy` reads off a RabbitMQ dead letter's `x-death` header (no broker:
the header as aiormq decodes it)."""

from __future__ import annotations

import datetime

import pytest

from adapters.amqp.migrate_item import death_of
from gateway.core.properties import COUNT_MAX

AT = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def test_the_latest_death_gives_the_reason_and_time_and_refusals_the_attempt() -> None:
    headers = {"x-death": [
        {"count": 3, "reason": "rejected", "queue": "work", "time": AT},
        {"count": 3, "reason": "expired", "queue": "wait", "time": AT},  # a delay queue
        {"count": 1, "reason": "delivery_limit", "queue": "other", "time": AT},
    ], "x-first-death-reason": "expired"}
    assert death_of(headers) == ("rejected", int(AT.timestamp()) * 1000, 4)


def test_an_expired_message_was_never_delivered() -> None:
    assert death_of({"x-death": [{"count": 1, "reason": "expired", "time": AT}]}) == (
        "expired", int(AT.timestamp()) * 1000, 0)


@pytest.mark.parametrize("headers", [
    {}, {"x-death": "rejected"}, {"x-death": []}, {"x-death": ["not a table"]},
])
def test_no_death_is_none(headers: dict[str, object]) -> None:
    assert death_of(headers) is None


def test_odd_entries_are_read_safely() -> None:
    headers = {"x-death": [{"count": "7", "reason": b"maxlen"},
                           {"count": 10 ** 12, "reason": "rejected"},
                           {"count": True, "reason": "rejected"}]}
    assert death_of(headers) == ("maxlen", 0, COUNT_MAX)
    assert death_of({"x-death": [{"count": 1}], "x-first-death-reason": "rejected"}) == (
        "rejected", 0, 0)
