"""Who may consume and publish which names, retry and dead-letter destinations included.

Every naming scheme the gateway knows (rocketmq, pulsar-2.9, pulsar-2.7, pulsar-2.6, rabbitmq)
names a group's retry and dead-letter destinations; a name counts as a principal's own only when
it is such a destination of a topic and a group the principal may consume.
"""

from __future__ import annotations

import pytest

from adapters import builtin_registry
from gateway.errors import GatewayError, PermissionDenied
from gateway.server.auth import Authorizer, Principal

ALICE = Principal("alice", "a" * 64, consume=("A",), groups=("ga",))
"""May consume topic A with group ga; may publish nowhere."""
BOB = Principal("bob", "b" * 64, publish=("*",))
"""May publish anywhere a plain pattern reaches; consumes nothing."""
CAROL = Principal("carol", "c" * 64, publish=("%DLQ%*", "*.dlq"))
"""Names reserved destinations explicitly in her publish patterns."""
DAVE = Principal("dave", "d" * 64, consume=("*",), groups=("gd",))
"""May consume every plain topic, with group gd only."""
ROOT = Principal("root", "e" * 64, admin=True)


@pytest.fixture(scope="module")
def authz() -> Authorizer:
    registry = builtin_registry()
    assert set(registry.schemes) >= {"rocketmq", "pulsar-2.9", "pulsar-2.7", "pulsar-2.6",
                                     "rabbitmq"}
    return Authorizer([ALICE, BOB, CAROL, DAVE, ROOT], registry.schemes.values())


def allowed(check: object, *args: object) -> bool:
    try:
        check(*args)  # type: ignore[operator]
    except PermissionDenied:
        return False
    return True


OWN = [
    "A",
    "%RETRY%ga", "%DLQ%ga",                     # rocketmq
    "A-ga-RETRY", "A-ga-DLQ",                   # pulsar-2.9
    "ga-RETRY", "ga-DLQ", "t/ns/ga-RETRY",      # pulsar-2.7 (namespace prefix optional)
    "ga-retry", "ga-dlq",                       # pulsar-2.6
    "A.retry", "A.dlq",                         # rabbitmq (no group in the name)
    "A-ga-RETRY-ga-DLQ",                        # dead letters of a consumer of the retry topic
]
FOREIGN = [
    "B", "B.dlq", "secret.retry", "payroll-ga-DLQ", "payroll-ga-RETRY",  # issue 16, defect 4
    "%DLQ%gb", "%RETRY%gb", "A-gb-DLQ", "gb-RETRY", "gb-dlq", "B.retry", "B-ga-RETRY-ga-DLQ",
    "x/y/gb-DLQ",
]


@pytest.mark.parametrize("topic", OWN)
def test_own_destinations_are_consumable(authz: Authorizer, topic: str) -> None:
    assert allowed(authz.check_consume, ALICE, topic, "ga")


@pytest.mark.parametrize("topic", FOREIGN)
def test_other_destinations_are_not(authz: Authorizer, topic: str) -> None:
    assert not allowed(authz.check_consume, ALICE, topic, "ga")


@pytest.mark.parametrize("topic", OWN)
def test_own_destinations_need_an_allowed_group(authz: Authorizer, topic: str) -> None:
    assert not allowed(authz.check_consume, ALICE, topic, "gb")


def test_a_wildcard_consume_pattern_does_not_cover_other_groups_destinations(
    authz: Authorizer,
) -> None:
    assert allowed(authz.check_consume, DAVE, "orders", "gd")
    assert allowed(authz.check_consume, DAVE, "orders-gd-DLQ", "gd")
    assert allowed(authz.check_consume, DAVE, "%DLQ%gd", "gd")
    assert allowed(authz.check_consume, DAVE, "orders.dlq", "gd")
    for topic in ("%DLQ%gx", "%RETRY%gx", "orders-gx-DLQ", "gx-RETRY", "gx-dlq"):
        assert not allowed(authz.check_consume, DAVE, topic, "gd"), topic


def test_plain_publish_patterns_do_not_reach_reserved_destinations(authz: Authorizer) -> None:
    assert allowed(authz.check_publish, BOB, "orders")
    for topic in ("%RETRY%g", "%DLQ%g", "orders-g-RETRY", "orders-g-DLQ", "g-RETRY", "g-dlq",
                  "orders.retry", "orders.dlq"):
        assert not allowed(authz.check_publish, BOB, topic), topic


def test_a_consumer_may_publish_to_its_own_destinations(authz: Authorizer) -> None:
    """pulsar-client's reconsumeLater produces to `{topic}-{sub}-RETRY` itself, and its
    dead-letter policy to `{topic}-{sub}-DLQ`."""
    assert not allowed(authz.check_publish, ALICE, "A")
    for topic in ("A-ga-RETRY", "A-ga-DLQ", "%RETRY%ga", "%DLQ%ga", "ga-RETRY",
                  "A-ga-RETRY-ga-DLQ"):
        assert allowed(authz.check_publish, ALICE, topic), topic
    for topic in ("B-ga-RETRY", "%DLQ%gb", "A-gb-DLQ", "B.retry", "payroll-ga-DLQ"):
        assert not allowed(authz.check_publish, ALICE, topic), topic


def test_a_consumer_may_not_publish_into_a_destination_every_group_reads(
    authz: Authorizer,
) -> None:
    """`A.retry` and `A.dlq` (the rabbitmq scheme) hold no group: every group of A reads them,
    and a message published there is each group's retry or dead letter. A consumer of A with
    group ga could publish into them, and so reach other principals' groups of a topic it may
    not publish to (and plant dead letters that their resend published to A). It now takes
    permission to publish to A as well."""
    for topic in ("A.retry", "A.dlq"):
        assert not allowed(authz.check_publish, ALICE, topic), topic
        assert allowed(authz.check_consume, ALICE, topic, "ga"), topic
    assert allowed(authz.check_publish, CAROL, "A.dlq")  # an explicit pattern
    assert allowed(authz.check_publish, ROOT, "A.retry")
    # One who may publish to A itself reaches every group of A anyway (a dead-letter exchange
    # of an AMQP queue routing into `A.dlq`, say).
    owner = Principal("owner", "f" * 64, publish=("A",), consume=("A",), groups=("ga",))
    checker = Authorizer([owner], builtin_registry().schemes.values())
    for topic in ("A.retry", "A.dlq", "A-ga-RETRY"):
        assert allowed(checker.check_publish, owner, topic), topic
    assert not allowed(checker.check_publish, owner, "B.dlq")


def test_explicit_patterns_and_admin_reach_reserved_destinations(authz: Authorizer) -> None:
    assert allowed(authz.check_publish, CAROL, "%DLQ%anyone")
    assert allowed(authz.check_publish, CAROL, "orders.dlq")
    assert not allowed(authz.check_publish, CAROL, "%RETRY%anyone")
    assert allowed(authz.check_publish, ROOT, "%RETRY%anyone")
    assert allowed(authz.check_publish, ROOT, "orders-g-DLQ")


def test_no_principal_means_auth_is_off(authz: Authorizer) -> None:
    authz.check_publish(None, "%DLQ%g")
    authz.check_consume(None, "B.dlq", "ga")


def test_denials_cut_long_names_short(authz: Authorizer) -> None:
    with pytest.raises(GatewayError) as err:
        authz.check_publish(BOB, "%DLQ%" + "g" * 100_000)
    assert len(err.value.message) < 400
    with pytest.raises(GatewayError) as err:
        authz.check_consume(ALICE, "B" * 100_000, "ga")
    assert len(err.value.message) < 400


def test_may_consume_topic_is_consuming_with_some_own_group(authz: Authorizer) -> None:
    """What a topic listing shows a principal (the Pulsar front end's pattern subscriptions)."""
    assert authz.may_consume_topic(None, "anything")  # authentication off
    assert authz.may_consume_topic(ALICE, "A")
    assert not authz.may_consume_topic(ALICE, "B")
    assert not authz.may_consume_topic(BOB, "A")  # no group, no consume pattern
    assert authz.may_consume_topic(DAVE, "B")
    assert authz.may_consume_topic(ALICE, "A-ga-DLQ")  # its own destination
    assert not authz.may_consume_topic(DAVE, "A-ga-DLQ")  # another group's
    assert not authz.may_consume_topic(DAVE, "x" * 600)  # too long a name: no topic
