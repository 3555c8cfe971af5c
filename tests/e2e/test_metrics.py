"""Metrics by convention on a live gateway: the process and Python collectors, the status code on
request counts, consume-stream metrics, capped topic and group labels, and the Grafana dashboard
querying only metrics that exist."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.client import GatewayClient
from gateway.client_errors import InvalidArgumentError
from gateway.server.app import GatewayApp, running_gateway
from gateway.server.metrics import OTHER, Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "retry-gateway.json"
METRIC = re.compile(r"\b((?:gateway|process|python)_[a-z_]+)\b")


def scrape(app: GatewayApp) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] of the gateway's /metrics."""
    url = f"http://127.0.0.1:{app.metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    async with running_gateway(tmp_path / "data", admin_listen="127.0.0.1:0", time_scale=0.01,
                               metrics_label_cap=3) as running:
        yield running


async def traffic(app: GatewayApp) -> str:
    """Publishes, deliveries, an ack, retries, a dead letter, a discard, a refused call; returns
    the topic."""
    topic = f"m-{uuid.uuid4().hex[:8]}"
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
        await client.publish(topic, [b"ok", b"bad", b"drop"])
        with pytest.raises(InvalidArgumentError):
            await client.publish(topic, [b"x"], delay_ms=-1)
        async with client.consume(topic, "g", policy="rocketmq",
                                  options={"max_retries": "1"}) as stream:
            seen = 0
            while seen < 4:  # ok; drop; bad twice (one retry, then the dead letter)
                msg = await stream.next(30)
                assert msg is not None
                seen += 1
                if msg.body == b"bad":
                    await msg.fail()
                else:
                    await msg.ack()
        async with client.consume(topic, "r", policy="rabbitmq") as stream:
            for _ in range(3):
                msg = await stream.next(30)
                assert msg is not None
                # rabbitmq's 1 min ack timeout is 600 ms at this scale: settled well before it
                result = await msg.dead_letter("no dead-letter exchange: discarded")
                assert result.ok, result
    return topic


async def test_every_metric_the_dashboard_queries_exists(app: GatewayApp) -> None:
    await traffic(app)
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client, \
            client.consume(f"m-{uuid.uuid4().hex[:8]}", "open", policy="rocketmq"):
        samples = scrape(app)  # with a stream open
    assert any(value >= 1 for _, value in samples["gateway_open_streams"])
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    names = {name for query in queries for name in METRIC.findall(query)}
    assert len(names) >= 15, names
    assert "gateway_telemetry_dropped_total" in names  # lost telemetry rows had no panel
    # It has samples only with --telemetry (this gateway runs without): declared is enough.
    text = urllib.request.urlopen(f"http://127.0.0.1:{app.metrics_port}/metrics",
                                  timeout=10).read().decode()
    assert "# TYPE gateway_telemetry_dropped_total counter" in text
    missing = sorted(name for name in names if not samples.get(name)
                     and name != "gateway_telemetry_dropped_total")
    assert not missing, f"the dashboard queries metrics the gateway does not have: {missing}"
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"]
               if p["type"] != "row")


async def test_conventions(app: GatewayApp) -> None:
    topic = await traffic(app)
    samples = scrape(app)
    # Process and Python collectors.
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_info",
                 "python_gc_collections_total"):
        assert samples.get(name), name
    # The status code on request counts.
    codes = {(labels["method"], labels["code"]) for labels, _ in samples["gateway_requests_total"]}
    assert ("/gateway.v1.Gateway/Publish", "OK") in codes
    assert ("/gateway.v1.Gateway/Publish", "INVALID_ARGUMENT") in codes
    assert any(method.endswith("/Consume") for method, _ in codes)
    # Consume streams: deliveries, settle latency by outcome, consumers, open streams.
    deliveries = {(labels["topic"], labels["group"]): value
                  for labels, value in samples["gateway_deliveries_total"]}
    assert deliveries[(topic, "g")] == 4
    outcomes = {labels["outcome"]: value
                for labels, value in samples["gateway_settle_seconds_count"]}
    assert outcomes == {"ack": 2, "retry": 1, "dead_letter": 1, "discard": 3}
    assert {labels["outcome"] for labels, _ in samples["gateway_settlements_total"]} == set(
        outcomes)
    assert samples["gateway_open_streams"]
    # The streams were closed by the client: the gateway sees them end soon after.
    for _ in range(300):
        if all(value == 0 for _, value in scrape(app)["gateway_open_streams"]):
            break
        await asyncio.sleep(0.1)
    assert all(value == 0 for _, value in scrape(app)["gateway_open_streams"])
    assert {(labels["topic"], labels["group"]) for labels, _ in samples["gateway_consumers"]} >= {
        (topic, "g"), (topic, "r")}


async def test_topic_and_group_labels_are_capped(app: GatewayApp) -> None:
    """metrics_label_cap=3: the fourth topic and later ones are counted under _other."""
    topics = [f"cap-{i}-{uuid.uuid4().hex[:6]}" for i in range(6)]
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
        for topic in topics:
            await client.publish(topic, [b"x"])
            async with client.consume(topic, f"group-{topic}", policy="rocketmq") as stream:
                msg = await stream.next(30)
                assert msg is not None
                await msg.ack()
    samples = scrape(app)
    labels = [labels for labels, _ in samples["gateway_deliveries_total"]]
    assert {lab["topic"] for lab in labels} == {*topics[:3], OTHER}
    assert {lab["group"] for lab in labels} == {*(f"group-{t}" for t in topics[:3]), OTHER}
    other = [value for lab, value in samples["gateway_deliveries_total"] if lab["topic"] == OTHER]
    assert sum(other) == 3


def test_label_cap_bounds_memory() -> None:
    metrics = Metrics(label_cap=2)
    for i in range(10_000):
        metrics.count_transition("INFLIGHT", f"t{i}", f"g{i}", "rocketmq", 1)
        metrics.count_transition("WAITING_RETRY", "t0", "g0", "pulsar-nack", i)
    assert len(metrics.topics.kept) == 2 and len(metrics.groups.kept) == 2
    assert len(metrics._counts) <= 3 + 34


async def test_label_cap_setting_is_checked(tmp_path: Path) -> None:
    from gateway.errors import InvalidArgument
    from gateway.server.config import build

    for bad in (0, -1, 100_001):
        with pytest.raises(InvalidArgument) as err:
            build({"data_dir": str(tmp_path), "metrics_label_cap": bad})
        assert err.value.field == "metrics_label_cap"


def test_a_topic_named_other_is_told_from_the_names_beyond_the_cap() -> None:
    """A client could name its topic and group `_other`: its counts and those of every name
    beyond the cap were one series. A name of that form gets one more leading underscore."""
    from prometheus_client import generate_latest

    metrics = Metrics(label_cap=2)
    metrics.count_transition("INFLIGHT", "_other", "_other", "rocketmq", 1)
    metrics.count_transition("INFLIGHT", "__other", "g", "rocketmq", 1)
    for i in range(3):  # beyond the cap
        metrics.count_transition("INFLIGHT", f"late-{i}", f"late-{i}", "rocketmq", 1)
    text = generate_latest(metrics.registry).decode()
    lines = [line for line in text.splitlines() if line.startswith("gateway_deliveries_total{")]
    assert any('topic="__other"' in line and 'group="__other"' in line and line.endswith(" 1.0")
               for line in lines), lines
    assert any('topic="___other"' in line for line in lines), lines
    assert any('topic="_other"' in line and line.endswith(" 3.0") for line in lines), lines
