"""The rabbitmq policy's `x_delivery_limit` option (a quorum queue's `x-delivery-limit` over the
AMQP front end) sets its retry limit; `max_retries` stays document 001's fixed 16."""

from __future__ import annotations

import pytest

from adapters.amqp.dialect import MAX_RETRIES, policy
from gateway.errors import InvalidArgument


def test_the_default_is_document_001s_16() -> None:
    assert policy({}, None).max_retries == MAX_RETRIES == 16


@pytest.mark.parametrize("limit", [0, 3, 2**31 - 1])
def test_a_delivery_limit_sets_the_retry_limit(limit: int) -> None:
    assert policy({"x_delivery_limit": str(limit)}, None).max_retries == limit


@pytest.mark.parametrize("options", [{"x_delivery_limit": "-1"}, {"x_delivery_limit": "2147483648"},
                                     {"x_delivery_limit": "three"}, {"max_retries": "3"}])
def test_out_of_range_or_forbidden_is_refused_by_name(options: dict[str, str]) -> None:
    with pytest.raises(InvalidArgument) as raised:
        policy(options, None)
    assert next(iter(options)) in str(raised.value)
