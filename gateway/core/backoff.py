"""Back-off shapes shared by the dialects; the numbers come from each dialect."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.policy import RetryRequest, check_range
from gateway.core.record import Record
from gateway.errors import InvalidArgument


def format_ms(ms: int) -> str:
    """1000 -> '1s', 60000 -> '1m', 7200000 -> '2h', 1500 -> '1500ms'."""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def parse_levels(spec: str) -> tuple[int, ...]:
    """'1s 5s 1m 2h' -> (1000, 5000, 60000, 7200000)."""
    sizes = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    out: list[int] = []
    for word in spec.split():
        unit = "ms" if word.endswith("ms") else word[-1]
        number = word[: -len(unit)]
        if unit not in sizes or not number.isdigit():
            raise InvalidArgument("levels", spec, "space-separated durations such as '1s 5s 1m 2h'")
        out.append(int(number) * sizes[unit])
    return tuple(out)


DELAY_LEVELS_MS = parse_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
"""The one 18-level delay table: a consumer names level k (1-based) to wait entry k-1. Two
dialects share it (SEMANTICS.md, "one delay table"); each takes it from here, never a copy."""


def _no_request(request: RetryRequest, allowed: str) -> None:
    if request.delay_ms is not None:
        raise InvalidArgument("delay_ms", request.delay_ms, allowed)
    if request.delay_level is not None:
        raise InvalidArgument("delay_level", request.delay_level, allowed)


def _level(levels: tuple[int, ...], level: int) -> int:
    check_range("delay_level", level, 1, len(levels))
    return levels[level - 1]


@dataclass(frozen=True, slots=True)
class TableBackoff:
    """Retry k waits table[k-1]; past the table every retry waits `beyond_ms`.

    A consumer may name a delay level of `levels` instead (the client's delay level on failure).
    """

    table_ms: tuple[int, ...]
    beyond_ms: int
    levels_ms: tuple[int, ...] = ()

    def delay_ms(self, retry: int, request: RetryRequest, record: Record, now_ms: int) -> int:
        if request.delay_ms is not None:
            allowed = (
                f"unset (not accepted by this policy); ask for delay_level 1..{len(self.levels_ms)}"
                if self.levels_ms
                else "unset (not accepted by this policy: its intervals are fixed)"
            )
            raise InvalidArgument("delay_ms", request.delay_ms, allowed)
        if request.delay_level is not None:
            if not self.levels_ms:
                raise InvalidArgument(
                    "delay_level", request.delay_level, "unset (not accepted by this policy)"
                )
            return _level(self.levels_ms, request.delay_level)
        if retry <= len(self.table_ms):
            return self.table_ms[retry - 1]
        return self.beyond_ms

    def describe(self) -> str:
        table = " ".join(format_ms(ms) for ms in self.table_ms)
        return f"{table}, then {format_ms(self.beyond_ms)}"


@dataclass(frozen=True, slots=True)
class FixedBackoff:
    """Every retry waits `interval_ms`; a consumer may ask for a wait within `request_range_ms`."""

    interval_ms: int
    request_range_ms: tuple[int, int] | None = None

    def delay_ms(self, retry: int, request: RetryRequest, record: Record, now_ms: int) -> int:
        if request.delay_level is not None:
            raise InvalidArgument("delay_level", request.delay_level,
                                  "unset (not accepted by this policy)")
        if request.delay_ms is not None:
            if self.request_range_ms is None:
                raise InvalidArgument(
                    "delay_ms", request.delay_ms,
                    "unset (not accepted by this policy: its interval is fixed)"
                )
            low, high = self.request_range_ms
            return check_range("delay_ms", request.delay_ms, low, high, "ms")
        return self.interval_ms

    def describe(self) -> str:
        return f"every {format_ms(self.interval_ms)}"


@dataclass(frozen=True, slots=True)
class LevelBackoff:
    """Any delay in a range, a level of a table, or incremental levels (retry k uses level k).

    `immediate` ignores the wait (the request is still validated)."""

    levels_ms: tuple[int, ...]
    delay_range_ms: tuple[int, int]
    immediate: bool = False

    def delay_ms(self, retry: int, request: RetryRequest, record: Record, now_ms: int) -> int:
        if request.delay_ms is not None and request.delay_level is not None:
            raise InvalidArgument("delay_level", request.delay_level, "not together with delay_ms")
        if request.delay_ms is not None:
            low, high = self.delay_range_ms
            wait = check_range("delay_ms", request.delay_ms, low, high, "ms")
        elif request.delay_level is not None:
            wait = _level(self.levels_ms, request.delay_level)
        else:
            wait = self.levels_ms[min(retry, len(self.levels_ms)) - 1]
        return 0 if self.immediate else wait

    def describe(self) -> str:
        if self.immediate:
            return "immediate"
        return "incremental " + " ".join(format_ms(ms) for ms in self.levels_ms)


@dataclass(frozen=True, slots=True)
class UntilDeadline:
    """Simple consumer: a failed delivery becomes visible when its invisible duration ends."""

    def delay_ms(self, retry: int, request: RetryRequest, record: Record, now_ms: int) -> int:
        _no_request(request, "unset (not accepted by this policy: a failed delivery becomes "
                             "visible again when its invisible duration ends; change the "
                             "invisible duration to choose when)")
        return max(0, record.deadline_ms - now_ms)

    def describe(self) -> str:
        return "invisible duration minus processing time"
