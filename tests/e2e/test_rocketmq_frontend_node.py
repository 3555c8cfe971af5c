"""The RocketMQ 5 Node.js SDK (`rocketmq-client-nodejs`, unmodified, from npm) against `gateway
serve`, changing only the endpoint: every kind of send, a simple consumer, a push consumer's
retries along the back-off table and its dead letter, and a FIFO group
(`tests/node/rocketmq_client.js` runs each scenario and prints what it saw as JSON lines).

The scenarios run at once (a push consumer's shutdown waits out its long poll, 20 s). npm
installs the client into `tests/node/node_modules` the first time; without node and npm the
test is skipped and says so.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.rocketmq.dialect import BACKOFF_MS
from tests.e2e.client_gateway import GatewayProcess
from tests.node_clients import node_script

pytestmark = pytest.mark.slow

SCALE = 0.01
DLQ_SCALE = 0.001
LONG_POLL_S = 20
RUN_S = 150


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[tuple[GatewayProcess, GatewayProcess, str]]:
    """One gateway at time scale 0.01 with a FIFO group, one at 0.001 for the whole table."""
    fifo_group = name("fifo")
    config = tmp_path / "gateway.toml"
    config.write_text(f'[rocketmq]\nfifo_groups = ["{fifo_group}"]\n')
    main = GatewayProcess(tmp_path / "main", "--config", str(config), time_scale=SCALE)
    fast = GatewayProcess(tmp_path / "fast", time_scale=DLQ_SCALE)
    try:
        yield main.start(), fast.start(), fifo_group
    finally:
        main.close()
        fast.close()


async def run(script: Path, scenario: str, target: str, topic: str, group: str
              ) -> list[dict[str, Any]]:
    process = await asyncio.create_subprocess_exec(
        "node", str(script), scenario, target, topic, group,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(), RUN_S)
    except TimeoutError:
        process.kill()
        raise AssertionError(f"{scenario}: the Node.js client did not finish") from None
    lines = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    assert process.returncode == 0, (scenario, lines[-3:], err.decode()[-2000:])
    assert lines[-1] == {"done": True}
    return lines


def seen(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [line[kind] for line in lines if kind in line]


async def test_the_node_sdk_sends_consumes_retries_and_dead_letters(
    gateways: tuple[GatewayProcess, GatewayProcess, str],
) -> None:
    main, fast, fifo_group = gateways
    script = node_script("rocketmq-client-nodejs", "rocketmq_client.js")
    simple, push, fifo, dead = await asyncio.gather(
        run(script, "simple", main.target, name("t"), name("g")),
        run(script, "push", main.target, name("t"), name("g")),
        run(script, "fifo", main.target, name("t"), fifo_group),
        run(script, "dead-letter", fast.target, name("t"), name("g")),
    )
    for lines in (simple, push, fifo, dead):
        # Bodies carry the digest the SDK checks (it discards a message it finds corrupted).
        assert not [v for v in seen(lines, "received") + seen(lines, "delivered")
                    + seen(lines, "dead") if v["corrupted"]]
    check_simple(simple)
    check_push(push)
    check_fifo(fifo)
    check_dead_letter(dead)


def check_simple(lines: list[dict[str, Any]]) -> None:
    """Every kind of send reaches a simple consumer as sent; a changed invisible duration
    brings the message again, counted."""
    (sent,) = seen(lines, "sent")
    got = seen(lines, "received")
    by_body = {v["body"]: v for v in got}
    assert set(by_body) == {"plain", "delayed", "grouped"}
    assert {v["id"] for v in got} == set(sent)
    plain = [v for v in got if v["body"] == "plain"]
    assert [v["attempt"] for v in plain] == [1, 2]
    first = plain[0]
    assert (first["tag"], first["keys"], first["props"]) == (
        "TagA", ["k1", "k2"], {"colour": "blue", "size": "L"})
    assert by_body["grouped"]["group"] == "g1"
    assert by_body["delayed"]["tag"] == "TagB"
    # Sent with a delay of 1 s (a wall-clock time: not scaled); not handed out before.
    assert by_body["delayed"]["at"] - by_body["delayed"]["born"] >= 1000 - 50


def check_push(lines: list[dict[str, Any]]) -> None:
    """A failed message comes again along the back-off table (10 s, 30 s: 100 ms, 300 ms at
    time scale 0.01) with its attempt counted; the tag filter keeps TagC away."""
    bodies = {line["body"]: line["sent"] for line in lines if "sent" in line}
    delivered = seen(lines, "delivered")
    assert "skip" not in {v["body"] for v in delivered}
    failing = [v for v in delivered if v["body"] == "fail-1"]
    assert [v["attempt"] for v in failing] == [1, 2, 3]
    assert {v["id"] for v in failing} == {bodies["fail-1"]}
    assert len({v["born"] for v in failing}) == 1  # the producer's, not each copy's
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(failing)]
    for gap, step_ms in zip(gaps, BACKOFF_MS, strict=False):
        assert gap >= 0.8 * step_ms * SCALE, (gaps, step_ms)
    assert [v["attempt"] for v in delivered if v["body"] == "ok"] == [1]


def check_fifo(lines: list[dict[str, Any]]) -> None:
    """Each message group in order, one after the other as each is settled: not one per long
    poll (20 s) as when a freed message group waited for the next receive."""
    assert seen(lines, "fifo") == [True]
    delivered = seen(lines, "delivered")
    for group in ("a", "b"):
        order = [v["body"] for v in delivered if v["group"] == group]
        assert order == sorted(order), order
    assert sorted(v["body"] for v in delivered) == ["a1", "a2", "a3", "a4", "b1", "b2"]
    span_s = (delivered[-1]["at"] - delivered[0]["at"]) / 1000
    assert span_s < LONG_POLL_S / 2, [(v["body"], v["at"]) for v in delivered]
    # The SDK knows no customized retry policy: it forwards the failed one to the DLQ itself.
    (letter,) = seen(lines, "dead")
    assert (letter["body"], letter["group"]) == ("a2", "a")
    assert letter["topic"].startswith("%DLQ%")


def check_dead_letter(lines: list[dict[str, Any]]) -> None:
    """16 retries along the whole table (17 deliveries), then the DLQ, read by another group."""
    (sent,) = seen(lines, "sent")
    delivered = seen(lines, "delivered")
    assert [v["attempt"] for v in delivered] == list(range(1, 18))
    assert {v["id"] for v in delivered} == {sent}
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(delivered)]
    for gap, step_ms in zip(gaps, BACKOFF_MS, strict=True):
        assert gap >= 0.8 * step_ms * DLQ_SCALE, (gaps, step_ms)
    (letter,) = seen(lines, "dead")
    assert letter["body"] == "bad-forever" and letter["topic"].startswith("%DLQ%")
    assert letter["born"] == delivered[0]["born"]
