"""The target options and consumer requests that come closest to the source's timeline.

Only the knobs the target's dialect declares are used (`gateway.core.traits`), each within its
allowed range, in this order: the retry count, dead-lettering, the delivery timeout, then the
waits — a level of a delay table or a delay asked for on each failure where the consumer may
ask (exact when every source wait is a level or a whole delay in range), else the one fixed
interval that keeps the time to the end closest to the source's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.core.backoff import format_ms
from gateway.core.plan import Plan, plan
from gateway.core.policy import RetryPolicy, RetryRequest
from gateway.core.registry import Registry
from gateway.core.traits import (
    DeadLetterOption,
    DelayRequest,
    IntervalOption,
    LevelRequest,
    RetriesOption,
    TimeoutOption,
)
from gateway.migrate.plan_sides import Side, Timing

TrialPlan = Callable[[int], Plan]
"""A timeline for a candidate interval (in the knob's unit)."""


@dataclass(frozen=True, slots=True)
class Suggestion:
    """The closest the target comes to the source, and how close."""

    options: dict[str, str]
    """Target options to set (on top of those given), by key."""
    requests: tuple[RetryRequest, ...]
    """What the consumer asks for on failure k (`requests[k-1]`); empty: nothing new."""
    how: tuple[str, ...]
    """Each change in the target's own words."""
    plan: Plan
    """The target's timeline with them."""
    exact: bool
    """The same deliveries at the same times and the same end as the source."""
    difference_ms: int | None
    """Time to the end under the suggestion minus under the source (None: either unlimited)."""
    waits_matched: int
    """Retries (among those both timelines list) whose wait is the source's."""
    waits_compared: int


def suggest(
    registry: Registry, source: Side, target: Side, timing: Timing, topic: str, group: str
) -> Suggestion:
    """See the module docstring."""
    traits = target.traits
    changes: dict[str, str] = {}
    how: list[str] = []
    policy = target.plan.policy

    def rebuild() -> RetryPolicy:
        return registry.policy(policy.name, {**target.options, **changes}, target.naming)

    want = source.retries
    count = traits.knob(RetriesOption)
    if want is not None and count is not None and policy.max_retries != want \
            and count.low <= want <= count.high:
        changes[count.option] = str(want)
        how.append(f"{count.label or count.option} = {want}")
    policy = rebuild()

    dead = traits.knob(DeadLetterOption)
    kept = source.plan.disposition == "dlq"
    dropped = source.plan.disposition == "discard" and source.plan.policy.retries_enabled
    if dead is not None and ((kept and not policy.dead_letter)
                             or (dropped and policy.dead_letter and dead.off)):
        changes[dead.option] = (dead.value if kept else dead.off).format(topic=topic, group=group)
        how.append(f"{dead.label or dead.option} = {changes[dead.option]}")
        policy = rebuild()

    wanted_ms = source.plan.policy.delivery_timeout_ms
    timeout = traits.knob(TimeoutOption)
    if wanted_ms is not None and wanted_ms != policy.delivery_timeout_ms and timeout is not None \
            and wanted_ms % timeout.unit_ms == 0 \
            and timeout.low <= wanted_ms // timeout.unit_ms <= timeout.high:
        changes[timeout.option] = str(wanted_ms // timeout.unit_ms)
        how.append(f"{timeout.label or timeout.option} = {format_ms(wanted_ms)}")
        policy = rebuild()

    def run(p: RetryPolicy, requests: Sequence[RetryRequest] = ()) -> Plan:
        asked = target.request if not requests else RetryRequest()
        return plan(p, topic=topic, group=group, processing_ms=timing.processing_ms,
                    pickup_ms=timing.pickup_ms, invisible_ms=target.invisible_ms,
                    delay_ms=asked.delay_ms, delay_level=asked.delay_level, limit=timing.limit,
                    requests=requests)

    current = run(policy)
    requests: tuple[RetryRequest, ...] = ()
    waits = _source_waits(source, current)
    if waits and _waits(current)[: len(waits)] != waits:
        requests, described = _requests(traits.knob(LevelRequest), traits.knob(DelayRequest),
                                        waits)
        interval = traits.knob(IntervalOption)
        if requests:
            how.append(described)
            current = run(policy, requests)
        elif interval is not None:
            value = _interval(interval, source, waits, lambda v: run(
                registry.policy(policy.name, {**target.options, **changes,
                                              interval.option: str(v)}, target.naming)))
            changes[interval.option] = str(value)
            how.append(f"{interval.label or interval.option} = {value}"
                       f"{_unit(interval.unit_ms)}")
            policy = rebuild()
            current = run(policy)
    return _judge(source, current, changes, requests, how)


def _waits(p: Plan) -> list[int]:
    return [a.delay_ms for a in p.attempts[1:]]


def _source_waits(source: Side, target: Plan) -> list[int]:
    """The source's wait before each retry the target makes (or the source lists, when the
    target has no limit)."""
    retries = target.total_attempts - 1 if target.total_attempts is not None else None
    listed = len(source.plan.attempts) - 1
    shown = max(len(target.attempts), len(source.plan.attempts)) - 1
    count = listed if retries is None else min(retries, shown)
    out = []
    for k in range(1, count + 1):
        wait = source.wait_ms(k)
        if wait is None:
            return []
        out.append(wait)
    return out


def _requests(
    levels: LevelRequest | None, delays: DelayRequest | None, waits: list[int]
) -> tuple[tuple[RetryRequest, ...], str]:
    """Requests that give exactly `waits` (a level each, else a delay each); else the nearest
    the finer knob allows; ((), "") when the consumer cannot ask."""
    if levels is not None and all(w in levels.levels_ms for w in waits):
        chosen = [levels.levels_ms.index(w) + 1 for w in waits]
        return _by_level(chosen), _level_text(levels, chosen, "")
    if delays is not None and all(_delay_fits(delays, w) for w in waits):
        return _by_delay(waits), _delay_text(delays, waits, "")
    if delays is not None:
        near = [_near_delay(delays, w) for w in waits]
        return _by_delay(near), _delay_text(delays, near, " (nearest allowed)")
    if levels is not None:
        chosen = [_near_level(levels, w) for w in waits]
        return _by_level(chosen), _level_text(levels, chosen, " (nearest levels)")
    return (), ""


def _by_level(chosen: list[int]) -> tuple[RetryRequest, ...]:
    return tuple(RetryRequest(delay_level=level) for level in chosen)


def _by_delay(waits: list[int]) -> tuple[RetryRequest, ...]:
    return tuple(RetryRequest(delay_ms=w) for w in waits)


def _delay_fits(delays: DelayRequest, wait: int) -> bool:
    return delays.low_ms <= wait <= delays.high_ms and wait % delays.unit_ms == 0


def _near_delay(delays: DelayRequest, wait: int) -> int:
    units = round(wait / delays.unit_ms) * delays.unit_ms
    return min(max(units, delays.low_ms), delays.high_ms)


def _near_level(levels: LevelRequest, wait: int) -> int:
    table = levels.levels_ms
    return min(range(len(table)), key=lambda i: (abs(table[i] - wait), i)) + 1


def _level_text(levels: LevelRequest, chosen: list[int], note: str) -> str:
    if len(set(chosen)) == 1:
        return f"on every failure ask for {levels.call.format(level=chosen[0])}{note}"
    return (f"on failure k ask for level L(k): {levels.call.format(level='L(k)')}, "
            f"levels {runs(chosen)} in order{note}")


def _delay_text(delays: DelayRequest, waits: list[int], note: str) -> str:
    units = [w // delays.unit_ms for w in waits]
    if len(set(units)) == 1:
        return f"on every failure ask for {delays.call.format(delay=units[0])}{note}"
    return (f"on failure k ask for delay D(k): {delays.call.format(delay='D(k)')}, "
            f"D = {runs(units)}{note}")


def runs(values: list[int]) -> str:
    """3,4,5,6 -> '3..6'; 5,5,5 -> '5 (x3)'; else comma-separated runs."""
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        step = values[i + 1] - values[i] if i + 1 < len(values) else 0
        if step in (0, 1):
            while j + 1 < len(values) and values[j + 1] - values[j] == step:
                j += 1
        if j == i:
            parts.append(str(values[i]))
        elif step == 1:
            parts.append(f"{values[i]}..{values[j]}")
        else:
            parts.append(f"{values[i]} (x{j - i + 1})")
        i = j + 1
    return ", ".join(parts)


def _unit(unit_ms: int) -> str:
    return {1: " ms", 1_000: " s", 60_000: " min"}.get(unit_ms, f" x {unit_ms} ms")


def _interval(knob: IntervalOption, source: Side, waits: list[int], trial: TrialPlan) -> int:
    """The fixed interval (in the knob's unit, within its range) whose timeline ends closest to
    the source's; without an end to compare, the one closest to the mean wait."""
    mean = sum(waits) / len(waits) / knob.unit_ms

    def clamp(v: float) -> int:
        return min(max(math.floor(v), knob.low), knob.high)

    target_end = source.plan.ended_ms
    if target_end is None:
        return clamp(mean + 0.5)
    base = trial(knob.low)
    if base.ended_ms is None:
        return clamp(mean + 0.5)
    # The end moves by one unit per retry for each unit of interval.
    ideal = knob.low + (target_end - base.ended_ms) / (len(waits) * knob.unit_ms)
    best: tuple[int, int] | None = None
    for candidate in sorted({clamp(ideal), clamp(ideal + 1)}):
        ended = trial(candidate).ended_ms
        if ended is None:
            continue
        miss = abs(ended - target_end)
        if best is None or miss < best[0]:
            best = (miss, candidate)
    return best[1] if best is not None else clamp(mean + 0.5)


def _judge(
    source: Side, result: Plan, changes: dict[str, str], requests: tuple[RetryRequest, ...],
    how: list[str],
) -> Suggestion:
    ours, theirs = _waits(source.plan), _waits(result)
    compared = min(len(ours), len(theirs))
    matched = sum(1 for a, b in zip(ours, theirs, strict=False) if a == b)
    difference = None
    if source.plan.ended_ms is not None and result.ended_ms is not None:
        difference = result.ended_ms - source.plan.ended_ms
    exact = (
        len(ours) == len(theirs)
        and matched == compared
        and source.plan.disposition == result.disposition
        and source.plan.total_attempts == result.total_attempts
        and source.plan.truncated == result.truncated
        and difference in (0, None)
    )
    return Suggestion(dict(changes), requests, tuple(how), result, exact, difference, matched,
                      compared)
