"""Retry transition events: the record type, its JSON-lines form and its table schemas.

One `TransitionEvent` is emitted for every state change of the retry state machine. The spool
writes them as JSON lines, the exporter reads those lines with Spark and appends them to the lake,
and the report reads the lake back with pyarrow. All three use the column list in `FIELDS`, so the
schemas are defined in exactly one place.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from gateway.errors import InvalidArgument

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
    from pyspark.sql.types import StructType

STATES: Final = (
    "READY",
    "INFLIGHT",
    "WAITING_RETRY",
    "COMMITTED",
    "DEAD_LETTERED",
    "DISCARDED",
)
"""State names of the retry state machine, in the order a message normally moves through them."""

TERMINAL_STATES: Final = frozenset({"COMMITTED", "DEAD_LETTERED", "DISCARDED"})

_KNOWN_STATES: Final = frozenset(STATES)

Kind = Literal["string", "long", "int"]

FIELDS: Final[tuple[tuple[str, Kind], ...]] = (
    ("event_id", "string"),
    ("seq", "long"),
    ("ts_ms", "long"),
    ("gateway_id", "string"),
    ("dialect", "string"),
    ("backend", "string"),
    ("topic", "string"),
    ("group", "string"),
    ("message_id", "string"),
    ("attempt", "int"),
    ("from_state", "string"),
    ("to_state", "string"),
    ("delay_ms", "long"),
    ("reason", "string"),
    ("destination", "string"),
)
"""Columns of an event, in order, with their kind: the source of every schema below."""

FIELD_NAMES: Final = tuple(name for name, _ in FIELDS)

PARTITION_COLUMNS: Final = ("event_date", "dialect")
"""How the lake is partitioned; `event_date` is the UTC date of `ts_ms`, added by the exporter."""


@dataclass(frozen=True, slots=True)
class TransitionEvent:
    """One state transition of one message, as the engine saw it.

    `seq` is stamped by the `Spool` that records the event (it is unique and increasing per
    gateway, across restarts); producers pass 0. `from_state` is "" for a message's first event.
    """

    event_id: str
    seq: int
    ts_ms: int
    gateway_id: str
    dialect: str
    backend: str
    topic: str
    group: str
    message_id: str
    attempt: int
    from_state: str
    to_state: str
    delay_ms: int = 0
    reason: str = ""
    destination: str = ""

    def __post_init__(self) -> None:
        if self.to_state not in _KNOWN_STATES:
            raise InvalidArgument("to_state", self.to_state, f"one of {', '.join(STATES)}")
        if self.from_state and self.from_state not in _KNOWN_STATES:
            raise InvalidArgument(
                "from_state", self.from_state, f"'' or one of {', '.join(STATES)}"
            )

    @classmethod
    def new(
        cls,
        *,
        ts_ms: int,
        gateway_id: str,
        dialect: str,
        backend: str,
        topic: str,
        group: str,
        message_id: str,
        attempt: int,
        from_state: str,
        to_state: str,
        delay_ms: int = 0,
        reason: str = "",
        destination: str = "",
    ) -> TransitionEvent:
        """Build an event with a fresh uuid4 `event_id` and `seq` 0 (the spool stamps it)."""
        return cls(
            uuid.uuid4().hex,
            0,
            ts_ms,
            gateway_id,
            dialect,
            backend,
            topic,
            group,
            message_id,
            attempt,
            from_state,
            to_state,
            delay_ms,
            reason,
            destination,
        )

    def to_row(self, seq: int | None = None) -> dict[str, Any]:
        """The event as a column-name mapping, with `seq` replaced when one is given."""
        row = {name: getattr(self, name) for name in FIELD_NAMES}
        if seq is not None:
            row["seq"] = seq
        return row


class TransitionLike(Protocol):
    """What the engine's observer hook passes (`gateway.engine.observe.Transition`): an event
    without id, seq or gateway id, naming the policy that decided it."""

    @property
    def ts_ms(self) -> int: ...
    @property
    def dialect(self) -> str: ...
    @property
    def policy(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def message_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def from_state(self) -> str: ...
    @property
    def to_state(self) -> str: ...
    @property
    def delay_ms(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def destination(self) -> str: ...


def _name(state: object) -> str:
    return str(getattr(state, "value", state))


def row_of(item: TransitionEvent | TransitionLike, seq: int, gateway_id: str) -> dict[str, Any]:
    """The lake row of a recorded item: a `TransitionEvent` as it is (with the spool's seq), or
    an engine transition given a fresh event id, the spool's gateway id and its policy name."""
    if isinstance(item, TransitionEvent):
        return item.to_row(seq)
    return {
        "event_id": uuid.uuid4().hex,
        "seq": seq,
        "ts_ms": int(item.ts_ms),
        "gateway_id": gateway_id,
        "dialect": str(item.policy or item.dialect),
        "backend": str(item.backend),
        "topic": str(item.topic),
        "group": str(item.group),
        "message_id": str(item.message_id),
        "attempt": int(item.attempt),
        "from_state": _name(item.from_state),
        "to_state": _name(item.to_state),
        "delay_ms": int(item.delay_ms),
        "reason": str(item.reason),
        "destination": str(item.destination),
    }


_ID_PREFIX = uuid.uuid4().hex[:16]
"""Event ids of engine transitions: this process's random prefix and the spool's sequence."""


def to_json_line(item: TransitionEvent | TransitionLike, seq: int, gateway_id: str = "") -> bytes:
    """One JSON line (newline included) for the spool, carrying the spool's `seq`.

    Engine transitions take a fast path (the spool writes every transition the gateway makes):
    strings go through the C string encoder of `json` and the line is formatted directly, with
    the same columns and values `row_of` gives."""
    if isinstance(item, TransitionEvent):
        return (json.dumps(item.to_row(seq), separators=(",", ":")) + "\n").encode()
    q = _quote
    return (
        f'{{"event_id":"{_ID_PREFIX}{seq:016x}","seq":{seq},"ts_ms":{int(item.ts_ms)},'
        f'"gateway_id":{q(gateway_id)},"dialect":{q(str(item.policy or item.dialect))},'
        f'"backend":{q(str(item.backend))},"topic":{q(str(item.topic))},'
        f'"group":{q(str(item.group))},"message_id":{q(str(item.message_id))},'
        f'"attempt":{int(item.attempt)},"from_state":{q(_name(item.from_state))},'
        f'"to_state":{q(_name(item.to_state))},"delay_ms":{int(item.delay_ms)},'
        f'"reason":{q(str(item.reason))},"destination":{q(str(item.destination))}}}\n'
    ).encode()


_quote = json.encoder.encode_basestring_ascii


def from_row(row: dict[str, Any]) -> TransitionEvent:
    """Rebuild an event from a lake row or a parsed JSON line (extra columns are ignored)."""
    return TransitionEvent(**{name: row[name] for name in FIELD_NAMES})


def spark_schema() -> StructType:
    """The explicit Spark schema of a spool line (every column nullable, as JSON may omit one)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    kinds = {"string": StringType(), "long": LongType(), "int": IntegerType()}
    return StructType([StructField(name, kinds[kind], True) for name, kind in FIELDS])


def arrow_schema(*, with_event_date: bool = True) -> pa.Schema:
    """The pyarrow schema of a lake row: the event columns, then `event_date` (date32) if asked."""
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

    kinds = {"string": pa.string(), "long": pa.int64(), "int": pa.int32()}
    fields = [pa.field(name, kinds[kind], nullable=True) for name, kind in FIELDS]
    if with_event_date:
        fields.append(pa.field("event_date", pa.date32(), nullable=True))
    return pa.schema(fields)
