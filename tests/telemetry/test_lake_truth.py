"""The lake holds what happened: a real gateway with a failing consumer per policy, its spool
exported by a real local SparkSession into Delta, read back and replayed. Each poisoned
message's rows replay to `gateway plan`'s timeline of its policy (with the time scale), and the
report counts the retries, dead letters and discards the consumers caused.

One gateway run and one export serve every test of the module (the run takes a few seconds,
Spark's first batch more)."""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import main as gateway_main
from gateway.client import GatewayClient
from gateway.server.app import running_gateway
from gateway.telemetry import analysis, export
from gateway.telemetry.lake import read_lake

pytestmark = pytest.mark.slow

SCALE = 0.01
"""Policy waits run 100x faster (RocketMQ's 10 s is 100 ms; the 1 min ack timeout 600 ms)."""
OK, POISON = 3, 2
"""Messages per policy that the consumer acks, and that it fails at every delivery."""


@dataclass(frozen=True)
class Case:
    policy: str
    options: dict[str, str]
    deliveries: int
    """Deliveries of each poisoned message: max retries + 1."""
    end: str
    """What becomes of a poisoned message: dlq or discard."""

    @property
    def topic(self) -> str:
        return f"truth-{self.policy}"

    @property
    def group(self) -> str:
        return f"g-{self.policy}"


CASES = [
    Case("rocketmq", {"max_retries": "2"}, 3, "dlq"),
    Case("pulsar", {"max_retries": "2"}, 3, "dlq"),
    Case("pulsar-nack", {"max_retries": "2", "nack_delay_ms": "20000"}, 3, "dlq"),
    Case("rabbitmq", {"x_retry_interval_s": "10"}, 17, "discard"),  # 16 retries, no DLX
]


@dataclass
class Run:
    rows: list[dict[str, Any]]
    poisoned: dict[str, set[str]]
    """Message ids the consumer failed, by policy."""
    report_dir: Path


async def consume(client: GatewayClient, case: Case, poisoned: set[str]) -> None:
    """Ack the good messages, fail every delivery of the poisoned ones until none comes."""
    expected = OK + POISON * case.deliveries
    seen = 0
    async with client.consume(case.topic, case.group, policy=case.policy,
                              options=case.options) as stream:
        deadline = time.monotonic() + 90
        while seen < expected:
            msg = await stream.next(max(0.1, deadline - time.monotonic()))
            assert msg is not None, f"{case.policy}: {seen} of {expected} deliveries came"
            seen += 1
            if msg.body.startswith(b"poison"):
                poisoned.add(msg.message_id)
                result = await msg.fail()
            else:
                result = await msg.ack()
            assert result.ok, (case.policy, result)
        assert await stream.next(0.5) is None


@pytest.fixture(scope="module")
def run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("truth")
    poisoned: dict[str, set[str]] = {c.policy: set() for c in CASES}

    async def gateway() -> None:
        async with running_gateway(tmp / "gw", time_scale=SCALE, telemetry=True) as app, \
                GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
            for case in CASES:
                bodies = [f"ok-{n}".encode() for n in range(OK)]
                bodies += [f"poison-{n}".encode() for n in range(POISON)]
                await client.publish(case.topic, bodies)
            await asyncio.gather(*(consume(client, c, poisoned[c.policy]) for c in CASES))

    asyncio.run(gateway())
    query = export.start_export(spark, spool=str(tmp / "gw" / "telemetry"),
                                table=str(tmp / "lake"), checkpoint=str(tmp / "ckpt"))
    query.awaitTermination()
    assert query.exception() is None
    out = tmp / "report"
    assert gateway_main(["report", "--table", str(tmp / "lake"), "--out", str(out),
                         "--time-scale", str(SCALE)]) == 0
    return Run(read_lake(tmp / "lake").to_pylist(), poisoned, out)


def planned(case: Case, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """`gateway plan --json` for the case's policy and options."""
    argv = ["plan", "--policy", case.policy, "--topic", case.topic, "--group", case.group,
            "--json"]
    for key, value in case.options.items():
        argv += ["--option", f"{key}={value}"]
    capsys.readouterr()
    assert gateway_main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", CASES, ids=[c.policy for c in CASES])
def test_each_message_replays_to_the_plan_of_its_policy(
    run: Run, case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = planned(case, capsys)
    messages = {key: rows for key, rows in analysis.by_message(run.rows).items()
                if key[0] == case.group}
    assert len(messages) == OK + POISON
    assert len(run.poisoned[case.policy]) == POISON
    for (_, message_id), rows in messages.items():
        seqs = [r["seq"] for r in rows]
        assert seqs == sorted(seqs), "rows of a message are in the order they were made"
        got = analysis.replay(rows)
        assert got.complete, rows
        if message_id not in run.poisoned[case.policy]:
            assert [(r["from_state"], r["to_state"]) for r in rows] == [
                ("", "READY"), ("READY", "INFLIGHT"), ("INFLIGHT", "COMMITTED")]
            continue
        # Exactly the plan: the deliveries, each one's wait and source, the end.
        want = [(a["attempt"], a["delay_ms"], a["topic"]) for a in plan["attempts"]]
        assert [(a.attempt, a.delay_ms, a.topic) for a in got.attempts] == want
        assert got.disposition == plan["disposition"]["kind"] == case.end
        assert got.destination == (plan["disposition"]["destination"] or "")
        # Each retry fell due exactly its (scaled) wait after the failure...
        waits = [a["delay_ms"] for a in plan["attempts"][1:]]
        assert list(got.waits_ms) == [int(w * SCALE) for w in waits]
        # ...and every delivery came at the plan's time, later only by the consumer's and the
        # dispatcher's own latency (the plan assumes none).
        for seen, step in zip(got.attempts, plan["attempts"], strict=True):
            late = seen.at_ms - step["at_ms"] * SCALE
            assert 0 <= late < 2_000 * step["attempt"], (case.policy, seen, step)


def summary(run: Run) -> dict[str, str]:
    page = (run.report_dir / "index.html").read_text()
    return {html.unescape(k): html.unescape(v)
            for k, v in re.findall(r"<tr><th>([^<]+)</th><td>([^<]*)</td></tr>", page)}


def test_the_report_counts_what_the_consumers_did(run: Run) -> None:
    figures = summary(run)
    retries = sum(POISON * (c.deliveries - 1) for c in CASES)
    assert figures["retries observed"] == str(retries)
    assert figures["dead-lettered"] == str(POISON * sum(c.end == "dlq" for c in CASES))
    assert figures["discarded"] == str(POISON * sum(c.end == "discard" for c in CASES))
    assert figures["messages"] == str((OK + POISON) * len(CASES))
    page = (run.report_dir / "index.html").read_text()
    for case in CASES:
        row = re.search(rf"<tr><td>{re.escape(case.policy)}</td>(.*?)</tr>", page)
        assert row is not None, case.policy
        cells = re.findall(r"<td>([^<]*)</td>", row.group(1))
        # retries, waits as planned, dead-lettered, discarded
        assert cells[:4] == [str(POISON * (case.deliveries - 1)),
                             str(POISON * (case.deliveries - 1)),
                             str(POISON if case.end == "dlq" else 0),
                             str(POISON if case.end == "discard" else 0)], (case.policy, cells)
    assert (run.report_dir / "retry_intervals.png").stat().st_size > 8_000
