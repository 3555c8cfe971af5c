"""Attack round 10: the public gRPC API (Gateway and Admin) of a real `gateway serve` process,
driven as an outsider would, beyond what the fuzzing (tests/fuzz/test_fuzz_grpc.py) checks.

* A Consume stream whose client sent settle batches and never read the answers had the gateway
  keep every answer (an unbounded queue per stream): 200 batches of 10000 unknown acks
  (about 14 MB sent) grew the gateway by about 400 MB, and the growth had no end. The answers
  owed (32 batches, 50000 settlements, acks and fails at most) now hold back the reading of
  the stream, as PublishStream's do.
* A Settle with one receipt twice said the receipt was "unknown, expired or already settled";
  it names the repeated settlement.
* A response of deliveries (Receive, Consume) was cut at 4 MiB of message bytes, leaving out
  each delivery's receipt, id and names: with long names it passed gRPC's default client limit
  and failed RESOURCE_EXHAUSTED, its deliveries left invisible.
* RemoveExported removed exported messages a consumer had taken since the export (which
  ExportMessages refuses): processed twice. It is refused the same way.
* A client that cancelled a stream while the gateway wrote to it left an error line with
  gRPC's traceback (ExecuteBatchError) in the log, one per stream, at will.
"""

from __future__ import annotations

import queue
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gateway.v1 import admin_pb2 as apb
from gateway.v1 import admin_pb2_grpc, gateway_pb2_grpc
from gateway.v1 import gateway_pb2 as pb
from tests.console.gateway_proc import ADMIN_TOKEN, APP_TOKEN, Gateway, start, stop

pytestmark = pytest.mark.slow

META = [("authorization", f"Bearer {APP_TOKEN}")]
ADMIN_META = [("authorization", f"Bearer {ADMIN_TOKEN}")]


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    running = start(tmp_path_factory.mktemp("round10") / "data")
    try:
        yield running
    finally:
        stop(running)


@pytest.fixture
def stub(gw: Gateway) -> Iterator[gateway_pb2_grpc.GatewayStub]:
    with grpc.insecure_channel(gw.target) as channel:
        yield gateway_pb2_grpc.GatewayStub(channel)


def rss_mb(gw: Gateway) -> int:
    status = Path(f"/proc/{gw.proc.pid}/status").read_text()
    found = re.search(r"VmRSS:\s+(\d+) kB", status)
    assert found is not None
    return int(found.group(1)) // 1024


def topic() -> str:
    return f"r10-{uuid.uuid4().hex[:8]}"


def round_trip(stub: gateway_pb2_grpc.GatewayStub) -> None:
    """Another client publishes, receives and acks as usual."""
    t = topic()
    stub.Publish(pb.PublishRequest(topic=t, messages=[pb.Message(body=b"still")]),
                 metadata=META, timeout=10)
    got = stub.Receive(pb.ReceiveRequest(topic=t, group="g", policy="rocketmq-simple",
                                         max_messages=1, wait_ms=5000), metadata=META,
                       timeout=10).deliveries
    assert [d.body for d in got] == [b"still"]
    done = stub.Settle(pb.SettleRequest(settlements=[pb.Settlement(
        receipt=got[0].receipt, ack=pb.Ack())]), metadata=META, timeout=10)
    assert done.results[0].ok


SMALL = pb.ConsumeRequest(settle=pb.SettleBatch(acks=[f"x{i}" for i in range(10_000)]))
"""10000 acks of unknown receipts: 69 KB, answered by 10000 failures (about 1 MB)."""
LARGE = pb.ConsumeRequest(settle=pb.SettleBatch(settlements=[
    pb.Settlement(receipt=f"{i:05}" * 204, ack=pb.Ack()) for i in range(10_000)]))
"""10000 settlements of unknown receipts of 1020 bytes: 10 MB, answered by 13 MB."""


@pytest.mark.parametrize("batch, batches, growth_mb", [
    # Every answer was kept: about 2 MB more per batch sent, without end.
    (SMALL, 200, 120),
    # 32 answers of 13 MB each were still owed with a window of batches alone.
    (LARGE, 60, 320),
], ids=["small", "large"])
def test_settle_answers_nobody_reads_do_not_pile_up(
    gw: Gateway, stub: gateway_pb2_grpc.GatewayStub, batch: pb.ConsumeRequest, batches: int,
    growth_mb: int,
) -> None:
    before = rss_mb(gw)
    sent = 0
    stop_sending = threading.Event()

    def frames() -> Iterator[pb.ConsumeRequest]:
        nonlocal sent
        yield pb.ConsumeRequest(subscribe=pb.Subscribe(topic=topic(), group="g",
                                                       policy="rocketmq"))
        for _ in range(batches):
            yield batch
            sent += 1
        stop_sending.wait(60)

    call = stub.Consume(frames(), metadata=META)  # its answers are never read
    try:
        deadline = time.monotonic() + 8
        peak = before
        while time.monotonic() < deadline:
            time.sleep(0.5)
            peak = max(peak, rss_mb(gw))
        assert peak - before < growth_mb, (before, peak, sent)
        assert sent < batches, "the gateway read every batch of a stream nobody reads"
        round_trip(stub)
    finally:
        stop_sending.set()
        call.cancel()


def test_a_receipt_repeated_in_a_settle_is_named_as_repeated(
        stub: gateway_pb2_grpc.GatewayStub) -> None:
    """A Settle with one receipt twice was refused as if the receipt were "unknown, expired or
    already settled" (the receipt was good, and nothing said which settlement was wrong)."""
    t = topic()
    stub.Publish(pb.PublishRequest(topic=t, messages=[pb.Message(body=b"m")]), metadata=META,
                 timeout=10)
    got = stub.Receive(pb.ReceiveRequest(topic=t, group="g", policy="rocketmq-simple",
                                         max_messages=1, wait_ms=5000), metadata=META,
                       timeout=10).deliveries
    ack = pb.Settlement(receipt=got[0].receipt, ack=pb.Ack())
    fail = pb.Settlement(receipt=got[0].receipt, fail=pb.Fail())
    with pytest.raises(grpc.RpcError) as refused:
        stub.Settle(pb.SettleRequest(settlements=[ack, fail]), metadata=META, timeout=10)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = refused.value.details() or ""
    assert "repeated" in details and "settlements[1]" in details, details
    assert "unknown" not in details, details
    # Nothing was applied: the one settlement alone goes through.
    assert stub.Settle(pb.SettleRequest(settlements=[ack]), metadata=META,
                       timeout=10).results[0].ok


def test_a_client_gone_mid_write_logs_no_error(gw: Gateway,
                                               stub: gateway_pb2_grpc.GatewayStub) -> None:
    """A client that stopped reading a Consume stream and then cancelled it left an error line
    with gRPC's traceback (ExecuteBatchError) in the gateway's log, one per stream: any client
    could fill the log with errors that were none of the gateway's."""
    t = topic()
    body = b"b" * (1 << 20)
    for _ in range(4):
        stub.Publish(pb.PublishRequest(topic=t, messages=[pb.Message(body=body)] * 8),
                     metadata=META, timeout=30)
    before = gw.log.read_text()
    for _ in range(3):
        call = stub.Consume(iter([pb.ConsumeRequest(subscribe=pb.Subscribe(
            topic=t, group="g", policy="rocketmq", prefetch=32))]), metadata=META)
        time.sleep(1.5)  # 32 MiB of deliveries fill the stream's windows: a write waits
        call.cancel()
    time.sleep(1.0)
    added = gw.log.read_text()[len(before):]
    assert "ExecuteBatchError" not in added, added[-2000:]
    round_trip(stub)


def test_deliveries_with_long_names_fit_a_default_client(gw: Gateway) -> None:
    """A response of deliveries was cut at 4 MiB of message bytes, not counting each
    delivery's receipt, id, topic, original topic and group: on a topic and group of 255 bytes
    a Receive of 300-byte messages answered 4.5 MB, which a client with gRPC's default limit
    (4 MiB) could not take (RESOURCE_EXHAUSTED), and the 4096 deliveries stayed invisible."""
    t = topic().ljust(255, "t")
    group = "g".ljust(255, "g")
    with grpc.insecure_channel(gw.target) as channel:  # gRPC's default limits
        stub = gateway_pb2_grpc.GatewayStub(channel)
        for _ in range(2):
            stub.Publish(pb.PublishRequest(topic=t, messages=[pb.Message(body=b"x" * 300)]
                                           * 5000), metadata=META, timeout=60)
        got = stub.Receive(pb.ReceiveRequest(topic=t, group=group, policy="rocketmq-simple",
                                             max_messages=10_000, wait_ms=1000),
                           metadata=META, timeout=30)
        assert len(got.deliveries) > 0 and got.ByteSize() <= 4 * 1024 * 1024
        consumed = len(got.deliveries)
        frames: queue.Queue[pb.ConsumeRequest | None] = queue.Queue()
        frames.put(pb.ConsumeRequest(subscribe=pb.Subscribe(
            topic=t, group=group, policy="rocketmq", prefetch=10_000)))
        call = stub.Consume(iter(frames.get, None), metadata=META, timeout=30)
        try:
            for response in call:
                assert response.ByteSize() <= 4 * 1024 * 1024
                consumed += len(response.deliveries.deliveries)
                if consumed >= 10_000:
                    break
        finally:
            frames.put(None)
            call.cancel()


def test_remove_exported_is_refused_while_a_delivery_is_in_flight(gw: Gateway) -> None:
    """ExportMessages is refused while the group's deliveries are in flight, but a consumer
    that took an exported message after the export had it removed under it by RemoveExported:
    processed here and, as a copy, where it went (and its dead-lettering made a dead letter of
    a message that was gone)."""
    t = topic()
    with grpc.insecure_channel(gw.target) as channel:
        stub, admin = gateway_pb2_grpc.GatewayStub(channel), admin_pb2_grpc.AdminStub(channel)
        stub.Publish(pb.PublishRequest(topic=t, messages=[pb.Message(body=b"m")] * 2),
                     metadata=META, timeout=10)
        page = admin.ExportMessages(apb.ExportMessagesRequest(
            topic=t, group="g", part=apb.MESSAGE_PART_READY), metadata=ADMIN_META, timeout=10)
        remove = apb.RemoveExportedRequest(topic=t, group="g", part=apb.MESSAGE_PART_READY,
                                           positions=[m.position for m in page.messages])
        got = stub.Receive(pb.ReceiveRequest(topic=t, group="g", policy="rocketmq-simple",
                                             max_messages=1, wait_ms=5000), metadata=META,
                           timeout=10).deliveries
        with pytest.raises(grpc.RpcError) as refused:
            admin.RemoveExported(remove, metadata=ADMIN_META, timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "in flight" in (refused.value.details() or "")
        assert stub.Settle(pb.SettleRequest(settlements=[pb.Settlement(
            receipt=got[0].receipt, ack=pb.Ack())]), metadata=META, timeout=10).results[0].ok
        assert admin.RemoveExported(remove, metadata=ADMIN_META, timeout=10).removed == 1
