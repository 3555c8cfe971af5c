"""Fuzzing the gateway.v1 gRPC API (Gateway and Admin) of a real `gateway serve` process.

Requests for every method are generated from the proto descriptors (random field values with
the extremes of each type and the values the gateway cares about), then raw garbage bytes, then
Consume streams with garbage or generated frames before and after a valid subscribe. Whatever
comes in, the gateway never answers UNKNOWN or INTERNAL, stays up, keeps its memory bounded, and
a control message published before each round is consumed exactly once after it.

Bounded to about a minute: fixed seeds (derandomized), a fixed number of examples.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.v1 import admin_pb2, gateway_pb2

pytestmark = pytest.mark.slow

MAX_MESSAGE_BYTES = 64 * 1024
RSS_LIMIT_KB = 256 * 1024
"""The gateway's resident memory stays below this (it runs at about 75 MB here)."""
CALL_TIMEOUT_S = 2.0
FORBIDDEN = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
NOW_MS = int(time.time() * 1000)
DAY_MS = 86_400_000
FUZZ = settings(derandomize=True, deadline=None, database=None, print_blob=False,
                suppress_health_check=list(HealthCheck))

SERVICES = [gateway_pb2.DESCRIPTOR.services_by_name["Gateway"],
            admin_pb2.DESCRIPTOR.services_by_name["Admin"]]
METHODS = [m for s in SERVICES for m in s.methods]
UNARY = [m for m in METHODS if not m.client_streaming and not m.server_streaming]
assert {m.name for m in METHODS} - {m.name for m in UNARY} == {"Consume", "PublishStream"}, (
    "a new kind of method")


def path(method: Any) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


# ------------------------------------------------------------------ values from descriptors

INTS = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
}
INTERESTING = [0, 1, -1, 2, 100, 1000, 1001, 10_000, 10_001, 60_000, 60_001, 100_000, 100_001,
               43_200_000, 400 * DAY_MS, 400 * DAY_MS + 1, NOW_MS, NOW_MS + 400 * DAY_MS + 1,
               2**31 - 1, 2**32 - 1, 2**62, 2**63 - 1, -(2**63)]
NAMES = ["t1", "t2", "g1", "%DLQ%g1", "%RETRY%g1", "t1.dlq", "t1-g1-DLQ", "", " ", "a" * 255,
         "a" * 256, "\u00e9" * 128, "x" * 100_000, "\x00", "a\nb", "\ud7ff", "\U0001f600" * 70]
HINTS: dict[str, list[str]] = {
    "policy": ["rocketmq", "rocketmq-orderly", "rocketmq-simple", "rocketmq-http", "rabbitmq",
               "pulsar", "pulsar-nack", "kafka", ""],
    "naming": ["", "rocketmq", "pulsar-2.9", "pulsar-2.7", "pulsar-2.6", "rabbitmq", "nope"],
    "page_token": ["", "0", "1", "-1", "99999999999999999999999", "9223372036854775807",
                   "9223372036854775808", "abc", " 1", "1_0", "\u0663"],
    "tag_filter": ["", "*", "a||b", "||", "a" * 2000],
    "receipt": ["", "r", "0.1.deadbeef", "x" * 5000],
}
USUAL = ["t1", "t2", "g1"]
"""Valid names, often drawn, so that generated requests also reach the engine and the store."""
INT_HINTS: dict[str, list[int]] = {
    "max_messages": [1, 2, 10], "wait_ms": [0, 5], "invisible_ms": [0, 10_000, 30_000],
    "prefetch": [0, 1, 8], "limit": [0, 1, 10], "delay_ms": [0, 1000, 10_000],
    "deliver_at_ms": [0, 1, NOW_MS + 1000], "messages": [1, 4], "credit": [0, 1],
    "delay_level": [1, 3, 18], "consumer_type": [0, 1],
}
OPTION_KEYS = ["max_retries", "version", "broadcast", "dead_letter", "suspend_ms",
               "x_retry_interval_s", "subscription_type", "ack_timeout_ms", "nack_delay_ms",
               "ordered", "", "k" * 300]
OPTION_VALUES = ["0", "1", "-1", "16", "1000", "1001", "true", "maybe", "4", "5",
                 "shared", "9" * 5000, ""]


def text_for(field: FieldDescriptor) -> st.SearchStrategy[str]:
    if field.name in HINTS:
        return st.one_of(st.sampled_from(HINTS[field.name]), st.text(max_size=12))
    return st.one_of(st.sampled_from(USUAL), st.sampled_from(NAMES), st.text(max_size=12))


def scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in INTS:
        low, high = INTS[kind]
        fitting = [v for v in INTERESTING if low <= v <= high]
        usual = st.sampled_from(INT_HINTS.get(field.name, [0, 1]))
        return st.one_of(usual, st.sampled_from(fitting), st.integers(low, high))
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_STRING:
        return text_for(field)
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.binary(max_size=32),
                         st.sampled_from([b"", b"x" * (MAX_MESSAGE_BYTES - 1),
                                          b"x" * (MAX_MESSAGE_BYTES + 1)]))
    if kind == FieldDescriptor.TYPE_ENUM:
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.sampled_from(known),
                         st.integers(-(2**31), 2**31 - 1))
    raise AssertionError(f"no strategy for {field.full_name}")


def is_map(field: FieldDescriptor) -> bool:
    return (field.type == FieldDescriptor.TYPE_MESSAGE
            and field.message_type.GetOptions().map_entry)


def map_strategy(field: FieldDescriptor) -> st.SearchStrategy[dict[str, str]]:
    if "option" in field.name:
        keys, values = st.sampled_from(OPTION_KEYS), st.sampled_from(OPTION_VALUES)
    else:
        keys = st.one_of(st.sampled_from(["", "k", "k" * 40_000]), st.text(max_size=8))
        values = st.one_of(st.sampled_from(["", "v" * 40_000]), st.text(max_size=8))
    return st.dictionaries(keys, values, max_size=4)


def value_for(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if is_map(field):
        return map_strategy(field)
    single = (message_strategy(field.message_type, depth + 1)
              if field.type == FieldDescriptor.TYPE_MESSAGE else scalar(field))
    if field.is_repeated:
        return st.lists(single, max_size=3)
    return single


def set_field(msg: Message, field: FieldDescriptor, value: Any) -> None:
    name = field.name
    if is_map(field):
        getattr(msg, name).update(value)
    elif field.is_repeated and field.type == FieldDescriptor.TYPE_MESSAGE:
        for item in value:
            getattr(msg, name).add().CopyFrom(item)
    elif field.is_repeated:
        getattr(msg, name).extend(value)
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        sub = getattr(msg, name)
        sub.SetInParent()
        sub.MergeFrom(value)
    else:
        setattr(msg, name, value)


def message_strategy(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Messages of `descriptor`'s type: each field unset or set to a generated value, at most one
    field of each oneof."""
    cls = GetMessageClass(descriptor)
    if depth > 3:
        return st.just(cls())
    groups: dict[str, list[FieldDescriptor]] = {}
    for field in descriptor.fields:
        key = field.containing_oneof.name if field.containing_oneof else f"field {field.name}"
        groups.setdefault(key, []).append(field)
    parts = []
    for fields in groups.values():
        choices = [st.tuples(st.just(f), value_for(f, depth)) for f in fields]
        parts.append(st.one_of(st.none(), *choices))

    def build(chosen: tuple[Any, ...]) -> Message:
        msg = cls()
        for item in chosen:
            if item is not None:
                set_field(msg, *item)
        return msg

    return st.tuples(*parts).map(build)


GARBAGE = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"\xff" * 8, b"\x0a\x05ab", b"\x0a\x02\xc3\x28", b"\x12\xff\xff\xff\xff\x0f",
                     b"\x1a\x80\x80\x80\x80\x10", b"\x08" + b"\xff" * 10 + b"\x01"]),
)


# ------------------------------------------------------------------------------- the process


class Gateway:
    def __init__(self, proc: subprocess.Popen[str], target: str, log: Path) -> None:
        self.proc = proc
        self.log = log
        self.channel = grpc.insecure_channel(target, options=[
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20)])
        self.codes: dict[str, int] = {}
        self.rss_max = 0

    def call(self, method: str, request: bytes) -> None:
        """One unary call with raw bytes; fails the test on UNKNOWN or INTERNAL."""
        try:
            self.channel.unary_unary(method)(request, timeout=CALL_TIMEOUT_S)
            self._count(method, grpc.StatusCode.OK)
        except grpc.RpcError as err:
            self._check(method, err)

    def stream(self, frames: list[bytes], method: str = "Consume") -> None:
        """One stream (Consume or PublishStream) sending `frames` then closing; reads until the
        stream ends. A PublishStream answer never carries UNKNOWN or INTERNAL either."""
        call = self.channel.stream_stream(f"/gateway.v1.Gateway/{method}")
        try:
            for raw in call(iter(frames), timeout=CALL_TIMEOUT_S):
                if method == "PublishStream":
                    answer = gateway_pb2.PublishResult.FromString(raw)
                    assert answer.error_code not in {"UNKNOWN", "INTERNAL"}, answer
            self._count(method, grpc.StatusCode.OK)
        except grpc.RpcError as err:
            self._check(method, err)

    def _check(self, method: str, err: Any) -> None:
        code = err.code()
        self._count(method, code)
        assert code not in FORBIDDEN, f"{method}: {code} {err.details()!r}"
        assert code != grpc.StatusCode.RESOURCE_EXHAUSTED or "Stream removed" not in (
            err.details() or ""), f"{method}: an answer larger than the metadata limit"

    def _count(self, method: str, code: grpc.StatusCode) -> None:
        key = f"{method.rsplit('/', 1)[-1]} {code.name}"
        self.codes[key] = self.codes.get(key, 0) + 1

    def rss_kb(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        assert match is not None
        return int(match.group(1))

    def healthy(self) -> None:
        assert self.proc.poll() is None, "the gateway exited"
        rss = self.rss_kb()
        self.rss_max = max(self.rss_max, rss)
        assert rss < RSS_LIMIT_KB, f"RSS {rss} kB"

    def publish_control(self) -> tuple[str, bytes]:
        topic, body = f"control-{uuid.uuid4().hex}", uuid.uuid4().bytes
        request = gateway_pb2.PublishRequest(topic=topic, messages=[gateway_pb2.Message(body=body)])
        publish = self.channel.unary_unary(
            "/gateway.v1.Gateway/Publish",
            request_serializer=gateway_pb2.PublishRequest.SerializeToString,
            response_deserializer=gateway_pb2.PublishResponse.FromString)
        assert len(publish(request, timeout=10).message_ids) == 1
        return topic, body

    def consume_control(self, topic: str, body: bytes) -> None:
        """The control message comes exactly once (and not again once acked)."""
        receive = self.channel.unary_unary(
            "/gateway.v1.Gateway/Receive",
            request_serializer=gateway_pb2.ReceiveRequest.SerializeToString,
            response_deserializer=gateway_pb2.ReceiveResponse.FromString)
        settle = self.channel.unary_unary(
            "/gateway.v1.Gateway/Settle",
            request_serializer=gateway_pb2.SettleRequest.SerializeToString,
            response_deserializer=gateway_pb2.SettleResponse.FromString)

        def pull(wait_ms: int) -> list[gateway_pb2.Delivery]:
            request = gateway_pb2.ReceiveRequest(topic=topic, group="control", max_messages=10,
                                                 policy="rocketmq-simple", invisible_ms=10_000,
                                                 wait_ms=wait_ms)
            return list(receive(request, timeout=10).deliveries)

        got = pull(5000)
        assert [d.body for d in got] == [body]
        done = settle(gateway_pb2.SettleRequest(settlements=[
            gateway_pb2.Settlement(receipt=got[0].receipt, ack=gateway_pb2.Ack())]), timeout=10)
        assert done.results[0].ok
        assert pull(300) == []


def start(data_dir: Path) -> Gateway:
    """`gateway serve` on a free port; its log goes to a file (a pipe nobody reads could fill
    and stall it)."""
    data_dir.mkdir(parents=True)
    log = data_dir.parent / "gateway.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])}
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data_dir),
             "--listen", "127.0.0.1:0", "--max-message-bytes", str(MAX_MESSAGE_BYTES),
             "--cache-mb", "8", "--log-level", "error", "--grace-s", "1"],
            stdout=sink, stderr=subprocess.STDOUT, text=True, env=env,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        match = re.search(r"gateway listening on ([^\s\"]+)", log.read_text())
        if match:
            return Gateway(proc, match.group(1), log)
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the gateway did not start: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = start(tmp_path_factory.mktemp("fuzz") / "data")
    try:
        yield gw
    finally:
        gw.channel.close()
        gw.proc.terminate()
        try:
            gw.proc.wait(20)
        except subprocess.TimeoutExpired:
            gw.proc.kill()
        print("status codes seen:", gw.codes, "RSS kB:", gw.rss_max)
        print("gateway log (end):", gw.log.read_text()[-3000:])


def round_of(gateway: Gateway, fuzz: Callable[[], None]) -> None:
    """A control message before, the fuzzing, then the checks."""
    topic, body = gateway.publish_control()
    fuzz()
    gateway.healthy()
    gateway.consume_control(topic, body)
    gateway.healthy()


# --------------------------------------------------------------------------------- the tests


SUBSCRIBE = gateway_pb2.Subscribe(topic="t1", group="g1", policy="rocketmq", prefetch=8)
TEMPLATES: dict[str, Message] = {
    "Publish": gateway_pb2.PublishRequest(topic="t1", messages=[gateway_pb2.Message(
        body=b"hello", properties={"a": "b"}, key="k", tag="tg")]),
    "Receive": gateway_pb2.ReceiveRequest(topic="t1", group="g1", policy="rocketmq-simple",
                                          max_messages=2, invisible_ms=10_000),
    "Settle": gateway_pb2.SettleRequest(settlements=[gateway_pb2.Settlement(
        receipt="0.1.x", ack=gateway_pb2.Ack())]),
    "DescribeGroup": admin_pb2.DescribeGroupRequest(topic="t1", group="g1"),
    "ListDeadLetters": admin_pb2.ListDeadLettersRequest(topic="t1", group="g1", limit=10),
    "ResendDeadLetters": admin_pb2.ResendDeadLettersRequest(topic="t1", group="g1"),
    "Purge": admin_pb2.PurgeRequest(topic="t1", group="g1"),
    "ListTopics": admin_pb2.ListTopicsRequest(),
    "ListGroups": admin_pb2.ListGroupsRequest(),
    "ListWaitingRetries": admin_pb2.ListWaitingRetriesRequest(topic="t1", group="g1"),
    "GetDeadLetter": admin_pb2.GetDeadLetterRequest(topic="t1", group="g1", message_id="m1"),
    "GetTimeline": admin_pb2.GetTimelineRequest(topic="t1", group="g1", message_id="m1"),
    "DeleteDeadLetters": admin_pb2.DeleteDeadLettersRequest(
        topic="t1", group="g1", message_ids=["m1"],
        filter=admin_pb2.DeadLetterFilter(reason="r", min_attempt=1, max_attempt=3, text="x")),
    "Consume": gateway_pb2.ConsumeRequest(subscribe=SUBSCRIBE),
    "PublishStream": gateway_pb2.PublishStreamRequest(
        request_id=1, publish=gateway_pb2.PublishRequest(
            topic="t1", messages=[gateway_pb2.Message(body=b"hello", properties={"a": "b"})])),
    "RenameDestinations": admin_pb2.RenameDestinationsRequest(
        topic="t1", group="g1", from_naming="pulsar-2.7", to_naming="pulsar-2.9"),
    "ExportMessages": admin_pb2.ExportMessagesRequest(
        topic="t1", group="g1", part=admin_pb2.MESSAGE_PART_RETRY, limit=5),
    "RemoveExported": admin_pb2.RemoveExportedRequest(
        topic="t1", group="g1", part=admin_pb2.MESSAGE_PART_READY, positions=[1]),
    "ImportMessages": admin_pb2.ImportMessagesRequest(
        topic="t1", group="g1", ledger="fuzz", messages=[admin_pb2.MovedMessage(
            body=b"copy", properties={"a": "b"}, part=admin_pb2.MESSAGE_PART_RETRY,
            source_key="k1", attempt=1, retries=1)]),
}
"""A valid request of each method, for mutants that reach the engine and the store."""
assert set(TEMPLATES) == {m.name for m in METHODS}


Change = tuple[tuple[tuple[str, int], ...], FieldDescriptor, Any]
"""Where to change a template (the message fields leading there, with the element of a
repeated one, else -1), which field, to what."""


def changes(descriptor: Descriptor, template: Message, depth: int = 0) -> st.SearchStrategy[Change]:
    """One field of `template` (or of a message inside it) set to a generated value."""
    here = st.sampled_from(list(descriptor.fields)).flatmap(
        lambda f: value_for(f, depth).map(lambda v: ((), f, v)))
    inner = []
    for field in descriptor.fields:
        if field.type != FieldDescriptor.TYPE_MESSAGE or is_map(field):
            continue
        if field.is_repeated:
            if not getattr(template, field.name):
                continue
            step, within = (field.name, 0), getattr(template, field.name)[0]
        elif template.HasField(field.name):
            step, within = (field.name, -1), getattr(template, field.name)
        else:
            continue
        if field.message_type.fields:
            sub = changes(field.message_type, within, depth + 1)
            inner.append(sub.map(lambda c, step=step: ((step, *c[0]), c[1], c[2])))
    return st.one_of(here, *inner)


def mutant(template: Message, change: Change) -> bytes:
    request = type(template)()
    request.CopyFrom(template)
    steps, field, value = change
    target = request
    for name, index in steps:
        target = getattr(target, name)
        if index >= 0:
            target = target[index]
    target.ClearField(field.name)
    set_field(target, field, value)
    return request.SerializeToString()


def requests_of(method: Any) -> st.SearchStrategy[tuple[str, bytes]]:
    """Generated requests of `method`, and valid ones with one field changed."""
    template = TEMPLATES[method.name]
    generated = message_strategy(method.input_type).map(lambda m: m.SerializeToString())
    if not method.input_type.fields:
        return st.tuples(st.just(path(method)), generated)
    mutants = changes(method.input_type, template).map(lambda c: mutant(template, c))
    return st.tuples(st.just(path(method)), st.one_of(generated, mutants, mutants))


REQUESTS = st.sampled_from(UNARY).flatmap(requests_of)


def test_generated_requests_for_every_method(gateway: Gateway) -> None:
    @settings(FUZZ, max_examples=500)
    @given(REQUESTS)
    def fuzz(item: tuple[str, bytes]) -> None:
        gateway.call(*item)

    round_of(gateway, fuzz)


def test_garbage_bytes_for_every_method(gateway: Gateway) -> None:
    @settings(FUZZ, max_examples=250)
    @given(st.sampled_from([path(m) for m in UNARY]), GARBAGE)
    def fuzz(method: str, garbage: bytes) -> None:
        gateway.call(method, garbage)

    round_of(gateway, fuzz)


FRAMES = st.lists(
    st.one_of(GARBAGE, message_strategy(gateway_pb2.ConsumeRequest.DESCRIPTOR).map(
        lambda m: m.SerializeToString()), st.just(TEMPLATES["Consume"].SerializeToString()),
        st.builds(gateway_pb2.ConsumeRequest, credit=st.builds(
            gateway_pb2.Credit, messages=st.integers(0, 2**32 - 1))).map(
            lambda m: m.SerializeToString())),
    min_size=1, max_size=4)


def test_consume_frames_before_and_after_subscribe(gateway: Gateway) -> None:
    @settings(FUZZ, max_examples=120)
    @given(st.booleans(), FRAMES)
    def fuzz(subscribe_first: bool, frames: list[bytes]) -> None:
        if subscribe_first:
            frames = [TEMPLATES["Consume"].SerializeToString(), *frames]
        gateway.stream(frames)

    round_of(gateway, fuzz)


PUBLISH_FRAMES = st.lists(
    st.one_of(GARBAGE, message_strategy(gateway_pb2.PublishStreamRequest.DESCRIPTOR).map(
        lambda m: m.SerializeToString()),
        changes(gateway_pb2.PublishStreamRequest.DESCRIPTOR, TEMPLATES["PublishStream"]).map(
            lambda c: mutant(TEMPLATES["PublishStream"], c)),
        st.just(TEMPLATES["PublishStream"].SerializeToString())),
    min_size=1, max_size=6)


def test_publish_stream_frames(gateway: Gateway) -> None:
    @settings(FUZZ, max_examples=150)
    @given(PUBLISH_FRAMES)
    def fuzz(frames: list[bytes]) -> None:
        gateway.stream(frames, "PublishStream")

    round_of(gateway, fuzz)
