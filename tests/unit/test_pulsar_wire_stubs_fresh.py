"""The committed Pulsar wire modules match `protos/pulsar/wire.proto` and the documented numbers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from adapters.pulsar.wire import wire_pb2 as pb

REPO = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    path = REPO / "scripts" / "gen_pulsar_proto.py"
    spec = importlib.util.spec_from_file_location("gen_pulsar_proto", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_pulsar_proto", module)
    spec.loader.exec_module(module)
    return module


def test_committed_modules_are_fresh(tmp_path: Path) -> None:
    written = _generator().generate(tmp_path)
    assert sorted(p.name for p in written) == ["wire_pb2.py", "wire_pb2.pyi"]
    for path in written:
        committed = REPO / "adapters" / "pulsar" / "wire" / path.name
        assert path.read_bytes() == committed.read_bytes(), (
            f"{committed} is stale: run python scripts/gen_pulsar_proto.py"
        )


def test_documented_command_numbers() -> None:
    numbers = {
        "CONNECT": 2,
        "CONNECTED": 3,
        "SUBSCRIBE": 4,
        "PRODUCER": 5,
        "SEND": 6,
        "SEND_RECEIPT": 7,
        "SEND_ERROR": 8,
        "MESSAGE": 9,
        "ACK": 10,
        "FLOW": 11,
        "UNSUBSCRIBE": 12,
        "SUCCESS": 13,
        "ERROR": 14,
        "CLOSE_PRODUCER": 15,
        "CLOSE_CONSUMER": 16,
        "PRODUCER_SUCCESS": 17,
        "PING": 18,
        "PONG": 19,
        "REDELIVER_UNACKNOWLEDGED_MESSAGES": 20,
        "PARTITIONED_METADATA": 21,
        "PARTITIONED_METADATA_RESPONSE": 22,
        "LOOKUP": 23,
        "LOOKUP_RESPONSE": 24,
        "SEEK": 28,
        "GET_LAST_MESSAGE_ID": 29,
        "GET_LAST_MESSAGE_ID_RESPONSE": 30,
        "GET_SCHEMA": 34,
        "GET_SCHEMA_RESPONSE": 35,
        "ACK_RESPONSE": 38,
    }
    for name, number in numbers.items():
        assert pb.BaseCommand.Type.Value(name) == number
    fields = pb.BaseCommand.DESCRIPTOR.fields_by_name
    assert fields["redeliverUnacknowledgedMessages"].number == 20
    assert fields["lookupTopicResponse"].number == 24
    assert fields["ackResponse"].number == 38
    meta = pb.MessageMetadata.DESCRIPTOR.fields_by_name
    assert (meta["num_messages_in_batch"].number, meta["deliver_at_time"].number) == (11, 19)
    single = pb.SingleMessageMetadata.DESCRIPTOR.fields_by_name
    assert (single["payload_size"].number, single["sequence_id"].number) == (3, 8)
    message = pb.CommandMessage.DESCRIPTOR.fields_by_name
    assert (message["redelivery_count"].number, message["consumer_epoch"].number) == (3, 5)
