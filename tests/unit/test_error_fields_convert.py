"""The edge's naming of the fields a policy refuses (`gateway.server.convert`): the cases the
e2e tests (`tests/e2e/test_error_fields.py`) cannot reach with today's policies."""

from __future__ import annotations

from gateway.engine.api import SettleResult
from gateway.errors import InvalidArgument, StaleReceipt
from gateway.server import convert
from gateway.v1 import gateway_pb2 as pb


def test_derived_subscription_type_is_consumer_type() -> None:
    sub = pb.Subscribe(topic="t", group="g", policy="pulsar",
                       consumer_type=pb.CONSUMER_TYPE_EXCLUSIVE)
    error = convert.subscription_error(
        sub, InvalidArgument("subscription_type", "exclusive", "shared, key_shared"))
    assert (error.field, error.value) == ("consumer_type", "CONSUMER_TYPE_EXCLUSIVE")
    assert "shared, key_shared" in error.message
    # Set as an option, it is that option.
    sub.policy_options["subscription_type"] = "exclusive"
    error = convert.subscription_error(
        sub, InvalidArgument("subscription_type", "exclusive", "shared, key_shared"))
    assert error.field == "policy_options['subscription_type']"


def test_request_fields_stay() -> None:
    receive = pb.ReceiveRequest(topic="t", group="g", policy="rocketmq-simple")
    error = InvalidArgument("invisible_ms", 5, "10000..43200000 ms")
    assert convert.subscription_error(receive, error) is error


def test_settle_error_paths() -> None:
    request = pb.SettleRequest(settlements=[
        pb.Settlement(receipt="a", ack=pb.Ack()),
        pb.Settlement(receipt="b", dead_letter=pb.DeadLetter(reason="x")),
    ])
    error = convert.settle_error(request, InvalidArgument("settlements[1].reason", "x", "text"))
    assert error.field == "settlements[1].dead_letter.reason"
    # Not an item the request has, or not an item at all: unchanged.
    for field in ("settlements[2].delay_ms", "delay_ms"):
        bare = InvalidArgument(field, 0, "1000..864000000 ms")
        assert convert.settle_error(request, bare) is bare


def test_refused_results_carry_the_path() -> None:
    fail = pb.Settlement(receipt="r", fail=pb.Fail(delay_ms=5))
    error = InvalidArgument("delay_ms", 5, "1000..864000000 ms")
    result = convert.refused_at(fail, 7, SettleResult("r", False, error.code, error.message))
    assert result.error == "settlements[7].fail.delay_ms=5 is not allowed: 1000..864000000 ms"
    odd = convert.refused_at(fail, 7, SettleResult("r", False, error.code, "no field here"))
    assert odd.error == "settlements[7]: no field here"
    stale = StaleReceipt("r")
    other = SettleResult("r", False, stale.code, stale.message)
    assert convert.refused_at(fail, 7, other) is other
    done = [SettleResult("r", True), SettleResult("r", False, error.code, error.message)]
    assert [r.error for r in convert.batch_results([fail, fail, fail], [0, 2], done)] == [
        "", "settlements[2].fail.delay_ms=5 is not allowed: 1000..864000000 ms"]
