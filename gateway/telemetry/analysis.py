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
    """One retry: from the failure (entering WAITING_RETRY) to READY again, and to the delivery
    that followed."""

    dialect: str
    """The lake's `dialect` column: the policy that decided the retry."""
    retry: int
    """1 for the retry after the first failed delivery."""
    observed_ms: int
    """From the failure to READY again (the retry falling due)."""
    planned_ms: int
    """The wait the policy set (`delay_ms` of the failure)."""
    redelivered_ms: int | None = None
    """From the failure to the next delivery (None when none came)."""


def retry_intervals(messages: Mapping[MessageKey, list[Row]]) -> list[RetryInterval]:
    """Every WAITING_RETRY -> READY wait in the lake, with the retry number it belongs to."""
    out: list[RetryInterval] = []
    for events in messages.values():
        entered: Row | None = None
        due: Row | None = None
        for r in events:
            if r["to_state"] == "WAITING_RETRY":
                entered, due = r, None
            elif r["to_state"] == "READY" and r["from_state"] == "WAITING_RETRY" and entered:
                due = r
            elif r["to_state"] == "INFLIGHT" and r["from_state"] == "READY" and entered and due:
                out.append(_interval(entered, due, r))
                entered = due = None
        if entered is not None and due is not None:
            out.append(_interval(entered, due, None))
    return out


def _interval(entered: Row, due: Row, delivered: Row | None) -> RetryInterval:
    failed = int(entered["ts_ms"])
    return RetryInterval(
        dialect=str(entered["dialect"]),
        retry=int(entered["attempt"]),
        observed_ms=int(due["ts_ms"]) - failed,
        planned_ms=int(entered["delay_ms"]),
        redelivered_ms=None if delivered is None else int(delivered["ts_ms"]) - failed,
    )


def as_planned(interval: RetryInterval, slack_ms: int = 0) -> bool:
    """True when the retry fell due when its policy said: within 1% of the planned wait, 5 ms
    or `slack_ms` (a time scale's rounding: 1 real ms is 1 / scale policy ms)."""
    allowed = max(5, interval.planned_ms // 100, slack_ms)
    return abs(interval.observed_ms - interval.planned_ms) <= allowed


@dataclass(frozen=True, slots=True)
class PolicyFigures:
    """What one policy (the lake's `dialect` column) did, for the report's table."""

    policy: str
    retries: int
    """Retries observed (WAITING_RETRY -> READY)."""
    as_planned: int
    """Of those, the ones that fell due when the policy said (`as_planned`)."""
    dead_lettered: int
    discarded: int
    messages: int
    median_lag_ms: int | None
    """Median time from a retry falling due to its delivery (None: no retry delivered)."""


def policy_figures(
    rows: Iterable[Row], messages: Mapping[MessageKey, list[Row]],
    intervals: Sequence[RetryInterval], slack_ms: int = 0,
) -> list[PolicyFigures]:
    """Per policy: retries observed, how many fell due as planned, dead letters, discards."""
    ends: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        ends[str(r["dialect"])][str(r["to_state"])] += 1
    counted: Counter[str] = Counter(str(events[0]["dialect"]) for events in messages.values()
                                    if events)
    out = []
    for policy in sorted(ends):
        mine = [i for i in intervals if i.dialect == policy]
        lags = sorted(i.redelivered_ms - i.observed_ms for i in mine
                      if i.redelivered_ms is not None)
        out.append(PolicyFigures(
            policy, len(mine), sum(as_planned(i, slack_ms) for i in mine),
            ends[policy]["DEAD_LETTERED"], ends[policy]["DISCARDED"], counted[policy],
            lags[len(lags) // 2] if lags else None,
        ))
    return out


def rescale(rows: Iterable[Row], time_scale: float) -> list[Row]:
    """Rows of a gateway run with `--time-scale` seen in policy time: every time stretched by
    1 / time_scale from the earliest one (delays are policy ms already)."""
    if not 0 < time_scale <= 1:
        raise InvalidArgument("time_scale", time_scale, "greater than 0 and at most 1")
    rows = list(rows)
    if time_scale == 1 or not rows:
        return rows
    t0 = min(int(r["ts_ms"]) for r in rows)
    return [{**r, "ts_ms": t0 + round((int(r["ts_ms"]) - t0) / time_scale)} for r in rows]


def scale_hint(intervals: Sequence[RetryInterval]) -> float | None:
    """When the retries fell due at a steady fraction of their planned waits (a gateway run
    with `--time-scale`, read without it), that fraction; else None."""
    ratios = sorted(i.observed_ms / i.planned_ms for i in intervals if i.planned_ms >= 1000)
    if not ratios:
        return None
    median = ratios[len(ratios) // 2]
    return median if median < 0.5 else None


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


def timeline(events: Sequence[Row]) -> list[tuple[int, str, int]]:
    """(ts_ms, state entered, attempt) for one message, in order."""
    return [(int(r["ts_ms"]), str(r["to_state"]), int(r["attempt"])) for r in events]


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
