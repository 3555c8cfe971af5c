"""Figures computed from lake rows: what the report charts, without any plotting.

Messages are identified by (group, message_id): the message id stays the same on every retry of a
message within a group. Rows are plain dicts with the columns of `events.FIELDS`.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.errors import InvalidArgument

Row = Mapping[str, Any]
MessageKey = tuple[str, str]

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")


def parse_duration_ms(text: str) -> int:
    """`500ms`, `10s`, `1m`, `2h`, `1d` -> milliseconds."""
    m = _DURATION.match(text)
    if not m:
        raise InvalidArgument("duration", text, "a whole number with a unit: ms, s, m, h or d")
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


def parse_expected(spec: str) -> tuple[str, list[int]]:
    """`name=10s,30s,1m` -> ("name", [10000, 30000, 60000])."""
    name, sep, table = spec.partition("=")
    if not sep or not name.strip() or not table.strip():
        raise InvalidArgument("expected", spec, "NAME=DELAY[,DELAY...], e.g. orders=10s,30s,1m")
    return name.strip(), [parse_duration_ms(part) for part in table.split(",")]


def expected_delay_ms(table: Sequence[int], retry: int) -> int:
    """The delay a policy table gives retry `retry` (1-based); past the end, the last entry.
    The dialects' own tables are in their registry (`Registry.retry_tables`)."""
    return table[min(max(retry, 1), len(table)) - 1]


def by_message(rows: Iterable[Row]) -> dict[MessageKey, list[Row]]:
    """Rows grouped per message, each list ordered by time then seq."""
    out: dict[MessageKey, list[Row]] = defaultdict(list)
    for row in rows:
        out[(row["group"], row["message_id"])].append(row)
    for events in out.values():
        events.sort(key=lambda r: (r["ts_ms"], r["seq"]))
    return dict(out)


def attempts_by_group(messages: Mapping[MessageKey, list[Row]]) -> dict[str, Counter[int]]:
    """For each group: how many messages needed 1, 2, 3 ... deliveries."""
    out: dict[str, Counter[int]] = defaultdict(Counter)
    for (group, _), events in messages.items():
        out[group][max(int(r["attempt"]) for r in events)] += 1
    return dict(out)


def time_to_commit_ms(messages: Mapping[MessageKey, list[Row]]) -> dict[str, list[int]]:
    """For each group: ms from a message's first event to its COMMITTED event."""
    out: dict[str, list[int]] = defaultdict(list)
    for (group, _), events in messages.items():
        for r in events:
            if r["to_state"] == "COMMITTED":
                out[group].append(int(r["ts_ms"]) - int(events[0]["ts_ms"]))
                break
    return dict(out)


@dataclass(frozen=True, slots=True)
class RetryInterval:
    """One observed wait: from entering WAITING_RETRY (a failure) to READY again."""

    dialect: str
    retry: int
    """1 for the retry after the first failed delivery."""
    observed_ms: int
    planned_ms: int


def retry_intervals(messages: Mapping[MessageKey, list[Row]]) -> list[RetryInterval]:
    """Every WAITING_RETRY -> READY wait in the lake, with the retry number it belongs to."""
    out: list[RetryInterval] = []
    for events in messages.values():
        entered: Row | None = None
        for r in events:
            if r["to_state"] == "WAITING_RETRY":
                entered = r
            elif r["to_state"] == "READY" and r["from_state"] == "WAITING_RETRY" and entered:
                out.append(
                    RetryInterval(
                        dialect=str(entered["dialect"]),
                        retry=int(entered["attempt"]),
                        observed_ms=int(r["ts_ms"]) - int(entered["ts_ms"]),
                        planned_ms=int(entered["delay_ms"]),
                    )
                )
                entered = None
    return out


def terminal_events(rows: Iterable[Row]) -> dict[str, list[int]]:
    """Times (ms) of dead-letter and discard transitions, by target state."""
    out: dict[str, list[int]] = {"DEAD_LETTERED": [], "DISCARDED": []}
    for r in rows:
        if r["to_state"] in out:
            out[r["to_state"]].append(int(r["ts_ms"]))
    for times in out.values():
        times.sort()
    return out


def busiest_message(messages: Mapping[MessageKey, Sequence[Row]]) -> MessageKey | None:
    """The message with the most transitions (ties: the smallest key), a good timeline sample."""
    if not messages:
        return None
    return min(messages, key=lambda k: (-len(messages[k]), k))


def timeline(events: Sequence[Row]) -> list[tuple[int, str]]:
    """(ts_ms, state entered) for one message, in order."""
    return [(int(r["ts_ms"]), str(r["to_state"])) for r in events]


@dataclass(frozen=True, slots=True)
class ReplayedAttempt:
    """One delivery of a message, rebuilt from its lake rows (the fields of `gateway plan`)."""

    attempt: int
    delay_ms: int
    """The wait the policy set before this delivery's READY time (policy ms; 0 on the first)."""
    at_ms: int
    """Delivery time, ms since the message's first delivery (real time)."""
    ready_ms: int
    """When it became READY for this delivery, ms since its first READY (real time)."""
    topic: str
    """Where this delivery came from: the topic, or the retry destination of the failure
    before it."""


@dataclass(frozen=True, slots=True)
class Replay:
    """A message's life in one group, rebuilt from its rows."""

    attempts: tuple[ReplayedAttempt, ...]
    disposition: str
    """`commit`, `dlq`, `discard`, or "" while the message is still under way."""
    destination: str
    """The dead-letter destination (`dlq`), else ""."""
    waits_ms: tuple[int, ...]
    """Each WAITING_RETRY -> READY wait observed, in order (real ms)."""
    complete: bool
    """True when the rows start with the message's first event ("" -> READY) and every
    delivery follows a READY row."""


_DISPOSITIONS = {"COMMITTED": "commit", "DEAD_LETTERED": "dlq", "DISCARDED": "discard"}


def replay(events: Sequence[Row]) -> Replay:
    """Rebuild one message's timeline from its rows (one group, in order: `by_message`), in the
    terms `gateway plan` prints, so that a run can be checked against the plan of its policy."""
    attempts: list[ReplayedAttempt] = []
    waits: list[int] = []
    first_ready: int | None = None
    first_delivery: int | None = None
    ready_at: int | None = None
    failed_at: int | None = None
    delay = 0
    source = str(events[0]["topic"]) if events else ""
    disposition, destination = "", ""
    complete = bool(events) and events[0]["from_state"] == "" and events[0]["to_state"] == "READY"
    for r in events:
        ts, to, before = int(r["ts_ms"]), str(r["to_state"]), str(r["from_state"])
        if to == "READY":
            if first_ready is None:
                first_ready = ts
            if before == "WAITING_RETRY" and failed_at is not None:
                waits.append(ts - failed_at)
            elif before == "INFLIGHT":
                delay = 0  # made READY again at once (a lost consumer, a simple timeout)
            ready_at = ts
        elif to == "INFLIGHT" and before == "READY":
            if ready_at is None or first_ready is None:
                complete = False
                ready_at = first_ready = ts if first_ready is None else first_ready
            first_delivery = ts if first_delivery is None else first_delivery
            attempts.append(ReplayedAttempt(int(r["attempt"]), delay, ts - first_delivery,
                                            ready_at - first_ready, source))
            ready_at = None
        elif to == "WAITING_RETRY":
            delay, failed_at = int(r["delay_ms"]), ts
            if r["destination"]:
                source = str(r["destination"])
        elif to in _DISPOSITIONS:
            disposition = _DISPOSITIONS[to]
            destination = str(r["destination"]) if to == "DEAD_LETTERED" else ""
    return Replay(tuple(attempts), disposition, destination, tuple(waits), complete)
