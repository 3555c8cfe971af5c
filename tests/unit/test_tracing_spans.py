"""The W3C trace context a message carries, and the spans the engine's tracer makes (the SDK's
in-memory exporter; the engine on a manual clock)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.backend.base import OutMessage
from gateway.engine.config import EngineConfig
from gateway.engine.engine import Engine
from gateway.errors import InvalidArgument
from gateway.server.config import load
from gateway.tracing.context import carry, from_metadata, parse, with_carrier
from gateway.tracing.spans import Tracing
from tests.engine.harness import GROUP, TOPIC, Harness, idle

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


@pytest.mark.parametrize("value", [
    PARENT, f"01-{TRACE}-00f067aa0ba902b7-01", f"cc-{TRACE}-00f067aa0ba902b7-09-future-part",
])
def test_valid_traceparents(value: str) -> None:
    parsed = parse(value)
    assert parsed is not None and parsed.trace_id == TRACE


@pytest.mark.parametrize("value", [
    "", "garbage", None, 42, f"ff-{TRACE}-00f067aa0ba902b7-01",
    f"00-{'0' * 32}-00f067aa0ba902b7-01", f"00-{TRACE}-{'0' * 16}-01",
    f"00-{TRACE.upper()}-00f067aa0ba902b7-01", f"00-{TRACE}-00f067aa0ba902b7-01-extra",
    f"00-{TRACE}-00f067aa0ba902b7-1", "x" * 100_000,
])
def test_invalid_traceparents_are_no_context(value: object) -> None:
    assert parse(value) is None


def test_carry_keeps_the_message_own_context() -> None:
    other = f"00-{'1' * 32}-{'2' * 16}-01"
    props = {"traceparent": other}
    assert not carry(props, PARENT, "a=b")
    assert props == {"traceparent": other}
    props = {"traceparent": "junk", "tracestate": "old=1"}
    assert carry(props, PARENT, "a=b")
    assert props == {"traceparent": PARENT, "tracestate": "a=b"}
    props = {}
    assert carry(props, PARENT, "\x00bad")
    assert props == {"traceparent": PARENT}
    assert not carry(props := {}, "junk", "a=b") and props == {}


def test_with_carrier_copies() -> None:
    props = {"k": "v"}
    got = with_carrier(props, PARENT)
    assert got == {"k": "v", "traceparent": PARENT} and props == {"k": "v"}
    assert with_carrier(props, "junk") is props


def test_from_metadata() -> None:
    md = [("traceparent", PARENT), ("tracestate", "a=1"), ("tracestate", "b=2"),
          ("traceparent-bin", b"x"), ("other", "y")]
    assert from_metadata(md) == (PARENT, "a=1,b=2")
    assert from_metadata(None) == ("", "")


# ------------------------------------------------------------------ spans on the engine
@pytest.fixture
async def traced() -> AsyncIterator[tuple[Harness, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tracing = Tracing(processor=SimpleSpanProcessor(exporter))
    h = Harness()
    h.engine = Engine(h.backend, h.registry, h.clock, EngineConfig(backend_name="memory"),
                      [tracing])
    await h.engine.start()
    try:
        yield h, exporter
    finally:
        await h.engine.close()
        tracing.close()


def by_name(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


async def test_retried_twice_then_dead_lettered_is_one_trace(
    traced: tuple[Harness, InMemorySpanExporter],
) -> None:
    h, exporter = traced
    spec = h.spec("rocketmq", {"max_retries": 2})
    await h.engine.publish(TOPIC, [OutMessage(b"x", {"traceparent": PARENT,
                                                     "tracestate": "v=1"})])
    await idle()
    for _ in range(3):
        d = await h.one(spec)
        # Every consumer sees the trace of the publisher, under the gateway's publish span.
        assert parse(d.properties["traceparent"]).trace_id == TRACE  # type: ignore[union-attr]
        assert d.properties["tracestate"] == "v=1"
        assert (await h.fail(d)).ok
        await h.advance(3 * 3_600_000)
    assert await h.receive(spec) == []
    spans = exporter.get_finished_spans()
    assert {f"{s.context.trace_id:032x}" for s in spans} == {TRACE}
    [publish] = by_name(spans, "publish")
    assert publish.parent is not None and publish.parent.span_id == 0x00f067aa0ba902b7
    delivers = sorted(by_name(spans, "deliver"),
                      key=lambda s: s.attributes["retry_gateway.attempt"])
    assert [s.attributes["retry_gateway.attempt"] for s in delivers] == [1, 2, 3]
    assert all(s.parent.span_id == publish.context.span_id for s in delivers)  # type: ignore[union-attr]
    first = delivers[0].context.span_id
    assert not delivers[0].links
    for later in delivers[1:]:
        assert [link.context.span_id for link in later.links] == [first]
    settles = by_name(spans, "settle")
    assert sorted(s.attributes["retry_gateway.outcome"] for s in settles) == [
        "dead_letter", "retry", "retry"]
    delivery_ids = {s.context.span_id for s in delivers}
    assert {s.parent.span_id for s in settles} == delivery_ids  # type: ignore[union-attr]
    retries = by_name(spans, "retry scheduled")
    assert len(retries) == 2
    assert all(s.attributes["retry_gateway.destination"] == f"%RETRY%{GROUP}" for s in retries)
    [dead] = by_name(spans, "dead-lettered")
    assert dead.attributes["retry_gateway.destination"] == f"%DLQ%{GROUP}"
    assert dead.parent.span_id == delivers[2].context.span_id  # type: ignore[union-attr]
    # The dead letter keeps the trace context.
    [stored] = await h.stored(f"%DLQ%{GROUP}")
    assert parse(stored.properties["traceparent"]).trace_id == TRACE  # type: ignore[union-attr]


async def test_message_without_context_gets_the_publish_span_as_root(
    traced: tuple[Harness, InMemorySpanExporter],
) -> None:
    h, exporter = traced
    spec = h.spec("pulsar-nack", {"max_retries": 1, "nack_delay_ms": 1000})
    await h.engine.publish(TOPIC, [OutMessage(b"x", {"traceparent": "junk"})])
    await idle()
    for _ in range(2):
        d = await h.one(spec)
        assert (await h.fail(d)).ok
        await h.advance(60_000)
    spans = exporter.get_finished_spans()
    [publish] = by_name(spans, "publish")
    assert publish.parent is None
    assert {s.context.trace_id for s in spans} == {publish.context.trace_id}
    assert len(by_name(spans, "deliver")) == 2


async def test_spans_of_a_message_stored_without_context_form_one_trace(
    traced: tuple[Harness, InMemorySpanExporter],
) -> None:
    """A message a broker's own client stored (no publish through the engine): its spans share
    a trace id derived from its message id."""
    h, exporter = traced
    await h.backend.publish(TOPIC, [OutMessage(b"x")])
    spec = h.spec("rocketmq", {"max_retries": 1})
    for _ in range(2):
        d = await h.one(spec)
        assert (await h.fail(d)).ok
        await h.advance(3 * 3_600_000)
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    delivers = by_name(spans, "deliver")
    assert len(delivers) == 2 and all(s.parent is None for s in delivers)


def test_tracing_off_imports_no_sdk(tmp_path: object) -> None:
    code = (
        "import sys\n"
        "from gateway.server.app import GatewayApp\n"
        "from gateway.server.config import build\n"
        f"app = GatewayApp(build({{'data_dir': {str(tmp_path)!r}}}))\n"
        "assert app.tracing is None\n"
        "bad = [m for m in sys.modules if m.startswith('opentelemetry.sdk.trace')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ------------------------------------------------------------------ configuration
def test_tracing_section_of_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_text('[tracing]\nenabled = true\nendpoint = "http://collector:4317"\n'
                    'protocol = "http/protobuf"\nsample_ratio = 0.25\nservice_name = "gw"\n')
    config = load(str(path), env={})
    assert (config.tracing, config.tracing_endpoint, config.tracing_protocol,
            config.tracing_sample_ratio, config.tracing_service_name) == (
        True, "http://collector:4317", "http/protobuf", 0.25, "gw")
    assert not load(None, env={}).tracing
    assert load(None, env={"GATEWAY_TRACING": "true"}).tracing


@pytest.mark.parametrize(("text", "field"), [
    ('protocol = "thrift"', "tracing_protocol"),
    ("sample_ratio = 1.5", "tracing_sample_ratio"),
    ("sample_ratio = -0.1", "tracing_sample_ratio"),
    ('endpoint = "collector:4317"', "tracing_endpoint"),
    ('service_name = ""', "tracing_service_name"),
    ("colour = 1", "tracing.colour"),
    ('enabled = "maybe"', "tracing.enabled"),  # the key as the file spells it
])
def test_bad_tracing_settings_are_refused(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "g.toml"
    path.write_text(f"[tracing]\n{text}\n")
    with pytest.raises(InvalidArgument) as err:
        load(str(path), env={})
    assert err.value.field == field


async def test_a_malformed_tracestate_logs_nothing(
    traced: tuple[Harness, InMemorySpanExporter], caplog: pytest.LogCaptureFixture,
) -> None:
    """A stored tracestate that is not W3C-shaped is left out of the spans' context: no
    OpenTelemetry warning per transition for a client to fill the log with."""
    h, exporter = traced
    await h.backend.publish(TOPIC, [OutMessage(b"x", {"traceparent": PARENT,
                                                      "tracestate": "NOT VALID" * 10})])
    spec = h.spec("rocketmq")
    with caplog.at_level("WARNING", logger="opentelemetry"):
        d = await h.one(spec)
        assert (await h.ack(d)).ok
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]
    assert {f"{s.context.trace_id:032x}" for s in exporter.get_finished_spans()} == {TRACE}
