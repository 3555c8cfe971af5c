"""Fuzz the RocketMQ 5 front end (`apache.rocketmq.v2.MessagingService`) of a real gateway process.

Three kinds of input reach every method: random and mutated raw bytes (identity serializers),
requests generated from the protocol's descriptors with extreme values in every field, and
SendMessage / ReceiveMessage / settle requests that are valid enough to reach the engine but
carry extreme times, sizes and names. Every answer must be a clear refusal or a success: no
UNKNOWN / INTERNAL gRPC status, no INTERNAL_ERROR / INTERNAL_SERVER_ERROR RocketMQ status.
Afterwards the process is up, its memory bounded, and a control message published before the
fuzzing is consumed exactly once. Fixed seeds (`derandomize`), about a minute in all.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2, service_pb2

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
METHODS = {method.name: method for method in SERVICE.methods}
UNSUPPORTED = {"PullMessage", "UpdateOffset", "GetOffset", "QueryOffset", "RecallMessage",
               "SyncLiteSubscription"}
Code = definition_pb2.Code
BAD_CODES = {Code.INTERNAL_ERROR, Code.INTERNAL_SERVER_ERROR}
RSS_GROWTH_LIMIT_KB = 256 * 1024
RECEIVE_TIMEOUT_S = 1.0
"""A receive long-polls until shortly before its deadline: keep it short."""
CALL_TIMEOUT_S = 15.0
MAX_BODY = 4 * 1024 * 1024
CONTROL = b"control message"
SETTINGS = settings(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)


# --- the gateway process ------------------------------------------------------------------


class GatewayProcess:
    """`gateway serve` in a subprocess; stderr goes to a file (nothing can block on a pipe)."""

    def __init__(self, data_dir: Path) -> None:
        self.log = data_dir.parent / "gateway.log"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data_dir),
                 "--listen", "127.0.0.1:0", "--log-level", "warning", "--grace-s", "0.5"],
                stdout=subprocess.DEVNULL, stderr=log, cwd=REPO, env=env,
            )
        self.target = self._wait_for_listening()

    def _wait_for_listening(self) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            match = re.search(r"gateway listening on ([^\s\"]+)", self.log.read_text())
            if match:
                return match.group(1)
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"gateway did not start:\n{self.log.read_text()[-3000:]}")

    def rss_kb(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        assert match, status
        return int(match.group(1))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class Fuzzer:
    """Raw calls to the gateway's MessagingService and the checks on every answer."""

    def __init__(self, gateway: GatewayProcess, channel: grpc.Channel) -> None:
        self.gateway = gateway
        self.channel = channel
        self.calls = 0

    def call(self, name: str, payload: bytes | list[bytes]) -> None:
        """One call with raw bytes (a list of frames for Telemetry); asserts a clean answer."""
        method = METHODS[name]
        path = f"/{SERVICE.full_name}/{name}"
        response_type = message_factory.GetMessageClass(method.output_type)
        self.calls += 1
        try:
            if method.client_streaming:
                frames = payload if isinstance(payload, list) else [payload]
                call = self.channel.stream_stream(path)
                raw = list(call(iter(frames), timeout=CALL_TIMEOUT_S))
            elif method.server_streaming:
                assert isinstance(payload, bytes)
                raw = list(self.channel.unary_stream(path)(payload, timeout=RECEIVE_TIMEOUT_S))
            else:
                assert isinstance(payload, bytes)
                raw = [self.channel.unary_unary(path)(payload, timeout=CALL_TIMEOUT_S)]
        except grpc.RpcError as error:
            self._check_refusal(name, error, payload)
            return
        for data in raw:
            reply = response_type.FromString(data)
            if reply.HasField("status"):
                assert reply.status.code not in BAD_CODES, (name, reply.status, payload[:300])
                assert len(reply.status.message) <= 2048, (name, len(reply.status.message))

    def _check_refusal(self, name: str, error: grpc.RpcError, payload: Any) -> None:
        code = error.code()  # type: ignore[attr-defined]
        allowed = {grpc.StatusCode.INVALID_ARGUMENT}
        if name in UNSUPPORTED:
            allowed.add(grpc.StatusCode.UNIMPLEMENTED)
        if name == "ReceiveMessage":
            allowed.add(grpc.StatusCode.DEADLINE_EXCEEDED)  # the client's own short long poll
        shown = payload[:300] if isinstance(payload, bytes) else payload[:3]
        assert code in allowed, (name, code, error.details(), shown)  # type: ignore[attr-defined]
        assert len(error.details() or "") < 1024  # type: ignore[attr-defined]
        assert self.gateway.proc.poll() is None, "the gateway process died"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    running = GatewayProcess(tmp_path_factory.mktemp("fuzz-rocketmq") / "data")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def channel(gateway: GatewayProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(gateway.target) as opened:
        yield opened


@pytest.fixture(scope="module")
def fuzzer(gateway: GatewayProcess, channel: grpc.Channel) -> Fuzzer:
    return Fuzzer(gateway, channel)


@pytest.fixture(scope="module")
def control(channel: grpc.Channel, gateway: GatewayProcess) -> dict[str, Any]:
    """A message published before any fuzzing, and the gateway's RSS then."""
    topic = f"fuzz-control-{uuid.uuid4().hex[:8]}"
    request = service_pb2.SendMessageRequest()
    message = request.messages.add(body=CONTROL)
    message.topic.name = topic
    message.system_properties.message_id = uuid.uuid4().hex
    reply = _unary(channel, "SendMessage", request, service_pb2.SendMessageResponse)
    assert reply.status.code == Code.OK, reply.status
    return {"topic": topic, "group": f"{topic}-g", "rss_kb": gateway.rss_kb()}


def _unary(channel: grpc.Channel, name: str, request: Any, response_type: Any) -> Any:
    call = channel.unary_unary(f"/{SERVICE.full_name}/{name}",
                               request_serializer=type(request).SerializeToString,
                               response_deserializer=response_type.FromString)
    return call(request, timeout=CALL_TIMEOUT_S)


# --- valid requests, the seeds of the mutations -------------------------------------------


def _seed_requests() -> dict[str, list[bytes]]:
    send = service_pb2.SendMessageRequest()
    message = send.messages.add(body=b"seed body")
    message.topic.name = "fuzz-seed"
    props = message.system_properties
    props.message_id, props.tag, props.message_type = "MSEED", "TagA", definition_pb2.DELAY
    props.keys.extend(["k1", "k2"])
    props.delivery_timestamp.seconds = int(time.time()) + 60
    message.user_properties["p"] = "v"
    receive = service_pb2.ReceiveMessageRequest(batch_size=4)
    receive.group.name, receive.message_queue.topic.name = "fuzz-g", "fuzz-seed"
    receive.invisible_duration.seconds, receive.long_polling_timeout.seconds = 30, 0
    receive.filter_expression.expression = "TagA||TagB"
    ack = service_pb2.AckMessageRequest()
    ack.group.name, ack.topic.name = "fuzz-g", "fuzz-seed"
    ack.entries.add(message_id="MSEED", receipt_handle="s.1.2.abcdef01")
    change = service_pb2.ChangeInvisibleDurationRequest(receipt_handle="s.1.2.abcdef01")
    change.group.name, change.topic.name = "fuzz-g", "fuzz-seed"
    change.invisible_duration.seconds = 60
    telemetry = service_pb2.TelemetryCommand()
    telemetry.settings.client_type = definition_pb2.ClientType.PUSH_CONSUMER
    telemetry.settings.subscription.group.name = "fuzz-g"
    entry = telemetry.settings.subscription.subscriptions.add()
    entry.topic.name, entry.expression.expression = "fuzz-seed", "*"
    route = service_pb2.QueryRouteRequest()
    route.topic.name = "fuzz-seed"
    route.endpoints.addresses.add(host="127.0.0.1", port=8081)
    valid = {"SendMessage": send, "ReceiveMessage": receive, "AckMessage": ack,
             "ChangeInvisibleDuration": change, "Telemetry": telemetry, "QueryRoute": route}
    seeds: dict[str, list[bytes]] = {}
    for name, method in METHODS.items():
        example = valid.get(name) or message_factory.GetMessageClass(method.input_type)()
        seeds[name] = [example.SerializeToString()]
    return seeds


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        action = rng.randrange(4)
        position = rng.randrange(len(out) + 1)
        if action == 0 and out:
            out[min(position, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif action == 1:
            out[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif action == 2:
            del out[position:position + rng.randint(1, 8)]
        else:
            out = out[:position]
    return bytes(out)


def test_raw_and_mutated_bytes_to_every_method(
    fuzzer: Fuzzer, control: dict[str, Any]
) -> None:
    rng = random.Random(16)
    seeds = _seed_requests()
    jobs: list[tuple[str, bytes | list[bytes]]] = []
    for name in METHODS:
        for size in (0, 1, 2, 3, 7, 16, 64, 512, 4096, 70_000):
            jobs.append((name, rng.randbytes(size)))
        for _ in range(60):
            jobs.append((name, _mutate(rng.choice(seeds[name]), rng)))
    jobs.append(("Telemetry", [seeds["Telemetry"][0], b"\xff\xff", seeds["Telemetry"][0]]))
    jobs.append(("Telemetry", [rng.randbytes(10) for _ in range(5)]))
    with ThreadPoolExecutor(16) as pool:
        for result in [pool.submit(fuzzer.call, name, payload) for name, payload in jobs]:
            result.result()
    assert fuzzer.gateway.proc.poll() is None


# --- requests generated from the protocol's descriptors -----------------------------------

INT32 = (0, 1, -1, 2**31 - 1, -(2**31), 10_000, 10_001, 1024, 1025)
INT64 = (*INT32, 2**62, -(2**62), 2**63 - 1, -(2**63), 34_560_000_000)
UINT32 = (0, 1, 2**32 - 1)
UINT64 = (0, 1, 2**64 - 1)
TEXT = st.one_of(
    st.sampled_from(["", " ", "t", "fuzz-a", "%DLQ%fuzz-g", "%RETRY%fuzz-g", "a|b", "a b", "KEYS",
                     "s.1.2.abcdef01", "p.1.2.abcdef01", "t" * 128, "g" * 256, "é" * 64, "\x00",
                     "\u202e", "x" * 100_000]),
    st.text(max_size=12),
    st.from_regex(r"[a-zA-Z0-9%|_-]{1,12}", fullmatch=True),
)
BYTES = st.one_of(st.sampled_from([b"", b"x", b"\x00" * 64]), st.binary(max_size=64))


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32,
                FieldDescriptor.TYPE_SFIXED32):
        return st.one_of(st.sampled_from(INT32), st.integers(-(2**31), 2**31 - 1))
    if kind in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64,
                FieldDescriptor.TYPE_SFIXED64):
        return st.one_of(st.sampled_from(INT64), st.integers(-(2**63), 2**63 - 1))
    if kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return st.sampled_from(UINT32)
    if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.sampled_from(UINT64)
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(width=32 if kind == FieldDescriptor.TYPE_FLOAT else 64)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_STRING:
        return TEXT
    if kind == FieldDescriptor.TYPE_BYTES:
        return BYTES
    if kind == FieldDescriptor.TYPE_ENUM:
        known = [value.number for value in field.enum_type.values]
        return st.sampled_from([*known, 99, -1, 2**31 - 1])
    raise AssertionError(f"unexpected field type {kind} of {field.full_name}")


_MESSAGES: dict[tuple[str, int], st.SearchStrategy[Any]] = {}


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Any]:
    """Any message of `descriptor`: each field set or not, with extreme values; 4 levels deep."""
    key = (descriptor.full_name, depth)
    if key in _MESSAGES:
        return _MESSAGES[key]
    message_type = message_factory.GetMessageClass(descriptor)
    fields: list[tuple[FieldDescriptor, st.SearchStrategy[Any]]] = []
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry = field.message_type.fields_by_name
            if entry["value"].message_type is not None:
                continue
            value: st.SearchStrategy[Any] = st.dictionaries(
                _scalar(entry["key"]), _scalar(entry["value"]), max_size=3)
        elif field.message_type is not None:
            if depth >= 3:
                continue
            value = messages(field.message_type, depth + 1)
        else:
            value = _scalar(field)
        fields.append((field, st.lists(value, max_size=3) if _is_list(field) else value))

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        message = message_type()
        for field, strategy in fields:
            if draw(st.booleans()):
                _assign(message, field, draw(strategy))
        return message

    _MESSAGES[key] = build()
    return _MESSAGES[key]


def _is_list(field: FieldDescriptor) -> bool:
    is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
    return bool(field.is_repeated) and not is_map


def _assign(message: Any, field: FieldDescriptor, value: Any) -> None:
    target = getattr(message, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        target.update(value)
    elif _is_list(field) and field.message_type is not None:
        for item in value:
            target.add().CopyFrom(item)
    elif _is_list(field):
        target.extend(value)
    elif field.message_type is not None:
        target.CopyFrom(value)
    else:
        setattr(message, field.name, value)


@st.composite
def any_call(draw: st.DrawFn) -> tuple[str, bytes | list[bytes]]:
    name = draw(st.sampled_from(sorted(METHODS)))
    strategy = messages(METHODS[name].input_type)
    if METHODS[name].client_streaming:
        frames = draw(st.lists(strategy, min_size=1, max_size=3))
        return name, [frame.SerializeToString() for frame in frames]
    return name, draw(strategy).SerializeToString()


@settings(SETTINGS, max_examples=1200)
@given(call=any_call())
def test_generated_requests_with_extreme_values(
    fuzzer: Fuzzer, control: dict[str, Any], call: tuple[str, bytes | list[bytes]]
) -> None:
    fuzzer.call(*call)


# --- requests valid enough to reach the engine, with extreme values -----------------------

NAMES = st.sampled_from(["fuzz-a", "fuzz-b", "%DLQ%fuzz-g", "t" * 127])
SECONDS = st.one_of(st.sampled_from(INT64), st.integers(-(2**40), 2**40),
                    st.just(int(time.time()) + 400 * 86_400 - 60))
NANOS = st.one_of(st.sampled_from((0, 1, 999_999_999, 1_000_000_000, -1, 2**31 - 1)),
                  st.integers(-(2**31), 2**31 - 1))
SMALL_TEXT = st.one_of(st.sampled_from(["", " ", "a|b", "a b", "é" * 40, "\x01", "k" * 300]),
                       st.from_regex(r"[a-zA-Z0-9_-]{1,10}", fullmatch=True))


@st.composite
def sdk_messages(draw: st.DrawFn) -> Any:
    message = definition_pb2.Message()
    message.topic.name = draw(NAMES)
    message.body = draw(st.sampled_from([b"x", b"", b"y" * (MAX_BODY + 1), b"z" * 1000]))
    props = message.system_properties
    props.message_id = draw(st.one_of(st.uuids().map(lambda u: u.hex), SMALL_TEXT))
    props.message_type = draw(st.sampled_from([0, 1, 2, 3, 4, 5, 77]))
    if draw(st.booleans()):
        props.delivery_timestamp.seconds = draw(SECONDS)
        props.delivery_timestamp.nanos = draw(NANOS)
    if draw(st.booleans()):
        props.tag = draw(SMALL_TEXT)
    if draw(st.booleans()):
        props.message_group = draw(SMALL_TEXT)
    props.keys.extend(draw(st.lists(SMALL_TEXT, max_size=3)))
    if draw(st.booleans()):
        props.keys.extend(["k"] * draw(st.sampled_from([128, 129])))
    message.user_properties.update(draw(st.dictionaries(SMALL_TEXT, SMALL_TEXT, max_size=3)))
    if draw(st.booleans()):
        count = draw(st.sampled_from([128, 129]))
        message.user_properties.update({f"p{i}": "v" * 120 for i in range(count)})
    return message


@settings(SETTINGS, max_examples=400)
@given(batch=st.lists(sdk_messages(), min_size=1, max_size=3))
def test_sends_with_extreme_values(
    fuzzer: Fuzzer, control: dict[str, Any], batch: list[Any]
) -> None:
    request = service_pb2.SendMessageRequest()
    for message in batch:
        request.messages.add().CopyFrom(message)
    fuzzer.call("SendMessage", request.SerializeToString())


DURATIONS = st.tuples(SECONDS, NANOS)
HANDLES = st.one_of(st.sampled_from(["", "s.", "p.", "s.1.2.abcdef01", "p.x", "s." + "r" * 600]),
                    st.from_regex(r"[sp]\.[0-9a-f.]{1,20}", fullmatch=True))


def _duration(target: Any, value: tuple[int, int]) -> None:
    target.seconds, target.nanos = value


@st.composite
def consumer_calls(draw: st.DrawFn) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["receive", "ack", "change", "forward"]))
    group, topic = draw(st.sampled_from(["fuzz-g", "g" * 255])), draw(NAMES)
    if kind == "receive":
        receive = service_pb2.ReceiveMessageRequest(
            batch_size=draw(st.sampled_from(INT32)), auto_renew=draw(st.booleans()))
        receive.group.name, receive.message_queue.topic.name = group, topic
        if draw(st.booleans()):
            _duration(receive.invisible_duration, draw(DURATIONS))
        else:
            receive.invisible_duration.seconds = draw(st.sampled_from([9, 10, 43_200, 43_201]))
        _duration(receive.long_polling_timeout, draw(st.one_of(st.just((0, 0)), DURATIONS)))
        return "ReceiveMessage", receive.SerializeToString()
    if kind == "ack":
        ack = service_pb2.AckMessageRequest()
        ack.group.name, ack.topic.name = group, topic
        for handle in draw(st.lists(HANDLES, max_size=4)):
            ack.entries.add(receipt_handle=handle, message_id=draw(SMALL_TEXT))
        return "AckMessage", ack.SerializeToString()
    if kind == "change":
        change = service_pb2.ChangeInvisibleDurationRequest(receipt_handle=draw(HANDLES))
        change.group.name, change.topic.name = group, topic
        _duration(change.invisible_duration, draw(DURATIONS))
        return "ChangeInvisibleDuration", change.SerializeToString()
    forward = service_pb2.ForwardMessageToDeadLetterQueueRequest(
        receipt_handle=draw(HANDLES), delivery_attempt=draw(st.sampled_from(INT32)),
        max_delivery_attempts=draw(st.sampled_from(INT32)))
    forward.group.name, forward.topic.name = group, topic
    return "ForwardMessageToDeadLetterQueue", forward.SerializeToString()


@settings(SETTINGS, max_examples=300)
@given(call=consumer_calls())
def test_consumer_calls_with_extreme_values(
    fuzzer: Fuzzer, control: dict[str, Any], call: tuple[str, bytes]
) -> None:
    fuzzer.call(*call)


# --- afterwards ---------------------------------------------------------------------------


def _receive(channel: grpc.Channel, topic: str, group: str, wait_s: int) -> tuple[int, list[Any]]:
    request = service_pb2.ReceiveMessageRequest(batch_size=32)
    request.group.name, request.message_queue.topic.name = group, topic
    request.invisible_duration.seconds = 60
    request.long_polling_timeout.seconds = wait_s
    call = channel.unary_stream(f"/{SERVICE.full_name}/ReceiveMessage",
                                request_serializer=service_pb2.ReceiveMessageRequest.SerializeToString,
                                response_deserializer=service_pb2.ReceiveMessageResponse.FromString)
    replies = list(call(request, timeout=wait_s + 10))
    status = next(reply.status for reply in replies if reply.HasField("status"))
    return status.code, [reply.message for reply in replies if reply.HasField("message")]


def test_afterwards_the_gateway_is_up_bounded_and_delivers_the_control_message_once(
    gateway: GatewayProcess, channel: grpc.Channel, fuzzer: Fuzzer, control: dict[str, Any]
) -> None:
    assert gateway.proc.poll() is None, gateway.log.read_text()[-3000:]
    code, got = _receive(channel, control["topic"], control["group"], wait_s=5)
    assert code == Code.OK
    assert [m.body for m in got] == [CONTROL]
    ack = service_pb2.AckMessageRequest()
    ack.group.name, ack.topic.name = control["group"], control["topic"]
    ack.entries.add(message_id=got[0].system_properties.message_id,
                    receipt_handle=got[0].system_properties.receipt_handle)
    reply = _unary(channel, "AckMessage", ack, service_pb2.AckMessageResponse)
    assert reply.status.code == Code.OK, reply.status
    assert _receive(channel, control["topic"], control["group"], wait_s=1) == (
        Code.MESSAGE_NOT_FOUND, [])
    rss_kb = gateway.rss_kb()
    assert rss_kb - control["rss_kb"] < RSS_GROWTH_LIMIT_KB, (control["rss_kb"], rss_kb)
    assert "Traceback" not in gateway.log.read_text()
