"""The authorization matrix (issue 16, deliver 5): every call of every listener × every caller.

One gateway with a tokens file serves gateway.v1 (Gateway and Admin), RocketMQ 5, the Pulsar
port and the AMQP 0-9-1 port. Each row names a call, its topic and group, and the principals it
must allow; each row is
tried by five callers: no credentials, a wrong token (or RocketMQ secret), and the principals
`app`, `other` and `ops` (admin). A cell is DENIED when the listener answers with its protocol's
refusal (UNAUTHENTICATED / PERMISSION_DENIED; RocketMQ UNAUTHORIZED / FORBIDDEN; Pulsar
AuthenticationError / AuthorizationError or a refused CONNECT; AMQP 403 ACCESS_REFUSED closing the
connection at login or the method's channel) and, for settlements, the delivery
is still unsettled afterwards; any other answer counts as ALLOWED. Rows cover publishing to and
consuming from a topic and from its retry and dead-letter destinations under every naming scheme,
and settling deliveries of each, on every path. The assertion: no cell is allowed that should be
denied, and every principal a row names is allowed.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from auth_matrix_cells import Caller, Matrix, Row

from adapters import builtin_registry
from gateway.server.app import running_gateway

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOKENS = """
[[principal]]
name = "app"
token = "app-token"
publish = ["orders"]
consume = ["orders"]
groups = ["app"]
rocketmq_access_key = "app-ak"
rocketmq_secret_key = "app-sk"

[[principal]]
name = "other"
token = "other-token"
publish = ["payments"]
consume = ["payments"]
groups = ["other"]
rocketmq_access_key = "other-ak"
rocketmq_secret_key = "other-sk"

[[principal]]
name = "ops"
token = "ops-token"
admin = true
rocketmq_access_key = "ops-ak"
rocketmq_secret_key = "ops-sk"
"""
PRINCIPALS = frozenset({"app", "other", "ops"})


CALLERS = (
    Caller("none"),
    Caller("wrong", "not-a-token", "app-ak", "not-the-secret"),
    Caller("app", "app-token", "app-ak", "app-sk"),
    Caller("other", "other-token", "other-ak", "other-sk"),
    Caller("ops", "ops-token", "ops-ak", "ops-sk"),
)
HOME = {"none": ("orders", "app"), "wrong": ("orders", "app"), "app": ("orders", "app"),
        "other": ("payments", "other"), "ops": ("orders", "app")}
"""The subscription each caller opens a Consume stream on to send settle frames."""


def destinations(topic: str, group: str) -> list[str]:
    """The retry and dead-letter destinations of (topic, group) under every naming scheme."""
    schemes = builtin_registry().schemes
    assert set(schemes) >= {"rocketmq", "pulsar-2.9", "pulsar-2.7", "pulsar-2.6", "rabbitmq"}
    names: list[str] = []
    for scheme in schemes.values():
        for name in (scheme.retry_topic(topic, group), scheme.dead_letter_topic(topic, group)):
            if name not in names:
                names.append(name)
    return names


APP_OWN = [("orders", "app")] + [(name, "app") for name in destinations("orders", "app")]
OTHER_OWN = [("payments", "other")] + [(n, "other") for n in destinations("payments", "other")]
FOREIGN = [
    # Issue 16, defect 4, and their kin: nobody may consume these as the group given.
    ("B.dlq", "app"), ("secret.retry", "app"), ("payroll-app-DLQ", "app"),
    ("payroll-app-RETRY", "app"), ("payments.dlq", "app"), ("payments-app-RETRY", "app"),
    ("%DLQ%other", "app"), ("%DLQ%app", "other"), ("orders-app-DLQ", "other"),
    ("orders.dlq", "other"), ("app-RETRY", "other"), ("payments", "app"), ("orders", "other"),
]
RESERVED_FOREIGN = ["B.dlq", "secret.retry", "payroll-app-DLQ", "%DLQ%nobody", "x-nobody-RETRY",
                    "nobody-retry"]


def consume_rows(listener: str, call: str) -> list[Row]:
    return ([Row(listener, call, t, g, frozenset({"app"})) for t, g in APP_OWN]
            + [Row(listener, call, t, g, frozenset({"other"})) for t, g in OTHER_OWN]
            + [Row(listener, call, t, g) for t, g in FOREIGN])


def publish_rows(listener: str, call: str) -> list[Row]:
    rows = [Row(listener, call, "orders", "", frozenset({"app"})),
            Row(listener, call, "payments", "", frozenset({"other"})),
            Row(listener, call, "elsewhere")]
    # A reserved destination takes a consumer of its topic and group, or an admin.
    rows += [Row(listener, call, t, "", frozenset({"app", "ops"})) for t, _ in APP_OWN[1:]]
    rows += [Row(listener, call, t, "", frozenset({"other", "ops"})) for t, _ in OTHER_OWN[1:]]
    rows += [Row(listener, call, t, "", frozenset({"ops"})) for t in RESERVED_FOREIGN]
    return rows


def settle_rows(listener: str, calls: list[str]) -> list[Row]:
    targets = [*APP_OWN, ("payments", "other")]
    return [Row(listener, call, t, g, frozenset({"other" if g == "other" else "app"}))
            for call in calls for t, g in targets]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def matrix(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Matrix]:
    root: Path = tmp_path_factory.mktemp("matrix")
    tokens = root / "tokens.toml"
    tokens.write_text(TOKENS)
    async with (
        running_gateway(root / "data", tokens_file=str(tokens),
                        pulsar_listen="127.0.0.1:0", amqp_listen="127.0.0.1:0") as app,
        grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel,
    ):
        yield Matrix(app, channel, CALLERS, HOME)


def check(cells: int, problems: list[str], at_least: int) -> None:
    assert not problems, f"{len(problems)} of {cells} cells wrong:\n" + "\n".join(problems)
    assert cells >= at_least


async def test_gateway_publish_and_consume(matrix: Matrix) -> None:
    rows = (publish_rows("gateway", "Publish") + publish_rows("gateway", "PublishStream")
            + consume_rows("gateway", "Receive") + consume_rows("gateway", "Consume"))
    check(*await matrix.run(rows), at_least=220)


async def test_gateway_settles(matrix: Matrix) -> None:
    rows = settle_rows("gateway", ["Settle", "ConsumeSettle", "ConsumeAck"])
    check(*await matrix.run(rows), at_least=150)


async def test_admin(matrix: Matrix) -> None:
    calls = ["DescribeGroup", "ListDeadLetters", "ResendDeadLetters", "Purge", "ListTopics",
             "RenameDestinations", "ExportMessages", "RemoveExported", "ImportMessages"]
    check(*await matrix.run([Row("admin", c, who=frozenset({"ops"})) for c in calls]),
          at_least=45)


async def test_rocketmq(matrix: Matrix) -> None:
    anyone = ["QueryRoute", "QueryAssignment", "Heartbeat", "NotifyClientTermination",
              "Telemetry"]
    unsupported = ["PullMessage", "UpdateOffset", "GetOffset", "QueryOffset",
                   "RecallMessage", "SyncLiteSubscription"]
    rows = ([Row("rocketmq", c, who=PRINCIPALS) for c in anyone]
            + [Row("rocketmq", "unsupported", c, who=PRINCIPALS) for c in unsupported]
            + publish_rows("rocketmq", "SendMessage")
            + publish_rows("rocketmq", "SendHalf")
            + publish_rows("rocketmq", "EndTransaction")
            + consume_rows("rocketmq", "ReceiveMessage")
            + settle_rows("rocketmq", ["AckMessage", "ChangeInvisibleDuration",
                                       "ForwardMessageToDeadLetterQueue"]))
    # Names RocketMQ cannot hold (`orders.dlq`) are refused by the RocketMQ edge before any
    # permission check (ILLEGAL_TOPIC): nobody reaches them over RocketMQ.
    rows = [r if rocketmq_name(r.topic or "t") and rocketmq_name(r.group or "g")
            else replace(r, who=frozenset()) for r in rows]
    check(*await matrix.run(rows), at_least=400)


def rocketmq_name(name: str) -> bool:
    return re.fullmatch(r"[%|a-zA-Z0-9_-]+", name) is not None


async def test_pulsar(matrix: Matrix) -> None:
    rows = ([Row("pulsar", c, who=PRINCIPALS)
             for c in ("CONNECT", "LOOKUP", "PARTITIONED_METADATA")]
            + publish_rows("pulsar", "PRODUCER_SEND")
            + consume_rows("pulsar", "SUBSCRIBE")
            + settle_rows("pulsar", ["ACK", "REDELIVER"]))
    check(*await matrix.run(rows), at_least=300)


AMQP_FOREIGN = [
    # The AMQP front end's own retry and dead-letter topics of other groups.
    ("amqp-dead-letters/other/payments", "app"), ("amqp-retries/other/payments", "app"),
    ("amqp-dead-letters/app/orders", "other"), ("amqp-retries/app/orders", "other"),
    ("amqp-dead-letters/app/orders", "amqp-dead-letter-router"),
]


async def test_amqp(matrix: Matrix) -> None:
    """Over AMQP a delivery tag belongs to the channel that received it: nobody can name
    another's delivery, so settling is covered by `get_ack` (get, then ack what was got)."""
    consume_calls = ["declare", "declare_passive", "consume", "get_ack", "purge", "delete",
                     "bind"]
    rows = [Row("amqp", "CONNECT", who=PRINCIPALS)]
    for call in consume_calls:
        rows += consume_rows("amqp", call)
        rows += [Row("amqp", call, t, g) for t, g in AMQP_FOREIGN]
    for call in ("publish", "publish_fanout", "exchange_declare", "exchange_delete"):
        rows += publish_rows("amqp", call)
    check(*await matrix.run(rows), at_least=1500)
