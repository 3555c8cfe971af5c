"""A hierarchical timing wheel: every deadline of the gateway in one compact structure.

Pure: no I/O, no clock reads, no asyncio. The caller says what time it is (`advance(now_ms)`)
and gets back the keys that are due; `gateway.engine.timers.TimerService` drives it on a loop.

Layout. Deadlines are bucketed by tick (`deadline_ms // tick_ms`) into three levels:

* level 0 holds ticks below the near horizon ``H0`` (about 65 s ahead): one bucket per tick;
* level 1 holds ticks in ``[H0, H1)`` (up to about 70 min ahead): one bucket per 1024 ticks;
* level 2 holds everything from ``H1`` on, however far: one bucket per 2**20 ticks.

A bucket is an ``array('q')`` of keys (8 bytes each) and each level keeps a min-heap of its bucket
numbers, so finding the earliest bucket never scans empty ones. The one dict ``key -> deadline``
is the truth: a bucket entry whose key was cancelled or moved elsewhere is stale and is dropped
when its bucket is read (lazy cancellation); if stale entries ever outnumber live ones the
buckets are rebuilt from the dict (one pass over every pending timer). As time advances the
horizons move forward and buckets of the level above are split into the level below well before
they are due, a bounded number of entries per `advance` (all at once only when the bucket could
hold something due, or the earliest deadline is asked for and might be in it). So a far timer is
touched once per level and costs nothing per tick, and a dense far bucket causes no stall.
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque

_KEY_LIMIT = 1 << 62
_SHIFTS = (0, 10, 20)
"""log2 of the bucket width in ticks, per level."""
_REACH = (1 << 16, 1 << 22)
"""How far (in ticks) past the current tick levels 0 and 1 reach, before alignment."""
_COMPACT_SLACK = 1 << 16
_MOVE_BUDGET = 2048
"""Entries of split buckets re-placed per `advance` when nothing forces the whole split."""


class _Move:
    """A bucket taken from the level above, whose entries are being re-placed a few at a time."""

    __slots__ = ("bucket", "first_tick", "number", "pos", "shift")

    def __init__(self, bucket: array[int], number: int, shift: int) -> None:
        self.bucket = bucket
        self.number = number
        self.shift = shift
        self.first_tick = number << shift
        self.pos = 0


class TimerWheel:
    """Pending deadlines keyed by an integer; `advance` hands back what is due, in order.

    `key` is an int in ``[0, 2**62)``; a deadline is an absolute time in ms on whatever clock the
    caller uses. Scheduling a key again replaces its deadline. A deadline at or before the wheel's
    current time fires at the next `advance`. Time never moves backwards: an `advance` to an
    earlier time is treated as an advance to the current time.
    """

    __slots__ = (
        "_bounds",
        "_buckets",
        "_cur",
        "_deadline",
        "_due",
        "_heaps",
        "_move_at",
        "_moves",
        "_next",
        "_next_valid",
        "_now",
        "_stored",
        "_tick",
    )

    def __init__(self, now_ms: int, tick_ms: int = 1) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms={tick_ms!r} must be >= 1")
        self._tick = tick_ms
        self._now = now_ms
        self._cur = now_ms // tick_ms
        self._deadline: dict[int, int] = {}
        self._due: list[int] = []
        self._buckets: list[dict[int, array[int]]] = [{} for _ in _SHIFTS]
        self._heaps: list[list[int]] = [[] for _ in _SHIFTS]
        self._moves: deque[_Move] = deque()
        self._bounds: list[int] = [self._cur + 1, self._cur + 1]
        self._stored = 0
        self._move_at = 0
        self._next: int | None = None
        self._next_valid = True
        self._move_horizons()

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._deadline)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, int) and key in self._deadline

    def deadline_of(self, key: int) -> int | None:
        """The deadline `key` is scheduled for, or None if it is not scheduled."""
        return self._deadline.get(key)

    def entries(self) -> list[tuple[int, int]]:
        """Every pending (deadline_ms, key), unordered."""
        return [(d, key) for key, d in self._deadline.items()]

    @property
    def now_ms(self) -> int:
        """The wheel's current time: the latest `advance` (or the start time)."""
        return self._now

    def next_deadline_ms(self) -> int | None:
        """The earliest scheduled deadline, exactly; None when nothing is scheduled."""
        if not self._next_valid:
            nxt = self._find_next()
            if self._moves and (nxt is None or nxt >= self._first_moving_tick() * self._tick):
                # A bucket still being split may hold the earliest deadline: finish splitting.
                self._finish_moves(None)
                nxt = self._find_next()
            self._next = nxt
            self._next_valid = True
        return self._next

    # ------------------------------------------------------------------ updates

    def schedule(self, deadline_ms: int, key: int) -> None:
        """Fire `key` at `deadline_ms`; replaces the deadline if `key` is already scheduled."""
        if not 0 <= key < _KEY_LIMIT:
            raise ValueError(f"key={key!r} must be an int in [0, 2**62)")
        deadlines = self._deadline
        old = deadlines.get(key)
        if old == deadline_ms:
            return
        deadlines[key] = deadline_ms
        if self._next_valid:
            nxt = self._next
            if nxt is None or deadline_ms < nxt:
                self._next = deadline_ms
            elif old == nxt:
                self._next_valid = False
        if deadline_ms <= self._now:
            self._due.append(key)
        else:
            t = deadline_ms // self._tick
            bounds = self._bounds
            level = 0 if t < bounds[0] else 1 if t < bounds[1] else 2
            number = t >> _SHIFTS[level]
            buckets = self._buckets[level]
            bucket = buckets.get(number)
            if bucket is None:
                bucket = buckets[number] = array("q")
                heapq.heappush(self._heaps[level], number)
            bucket.append(key)
        self._stored += 1
        if self._stored > 2 * len(deadlines) + _COMPACT_SLACK:
            self._compact()

    def cancel(self, key: int) -> bool:
        """Unschedule `key`; True if it was scheduled."""
        old = self._deadline.pop(key, None)
        if old is None:
            return False
        if self._next_valid and old == self._next:
            self._next_valid = False
        if self._stored > 2 * len(self._deadline) + _COMPACT_SLACK:
            self._compact()
        return True

    def advance(self, now_ms: int) -> list[int]:
        """Move to `now_ms`; return every key due by then, by deadline, and unschedule them."""
        fired: list[int] = []
        deadlines = self._deadline
        if self._due:
            self._fire_due(fired)
        if now_ms <= self._now:
            return fired
        self._now = now_ms
        tick = self._tick
        target = now_ms // tick
        self._cur = target
        if target >= self._move_at:
            self._move_horizons()
        if self._moves and self._first_moving_tick() <= target:
            self._finish_moves(target)
        heap = self._heaps[0]
        near = self._buckets[0]
        pop = deadlines.pop
        while heap and heap[0] <= target:
            t = heapq.heappop(heap)
            bucket = near.pop(t)
            self._stored -= len(bucket)
            if tick == 1:
                for key in bucket:
                    d = pop(key, None)
                    if d == t:
                        fired.append(key)
                    elif d is not None:  # stale entry: the key now lives elsewhere
                        deadlines[key] = d
                continue
            rest = self._fire_coarse(t, bucket, now_ms, fired)
            if rest:  # the current tick is only partly over: keep what is not due yet
                near[t] = rest
                heapq.heappush(heap, t)
                self._stored += len(rest)
                break
        if fired:
            # Only firing changes which deadline is the earliest (re-placing entries keeps them):
            # the cached one stays good otherwise, so a caller asking after every advance does
            # not scan a coarse bucket of thousands of far timers each time.
            self._next_valid = False
        if self._moves:
            self._continue_moves(_MOVE_BUDGET)
        return fired

    # ------------------------------------------------------------------ internals

    def _fire_coarse(self, t: int, bucket: array[int], now_ms: int, fired: list[int]) -> array[int]:
        """Fire the keys of tick `t` due by `now_ms`, by deadline; return the ones not yet due."""
        deadlines = self._deadline
        tick = self._tick
        live = sorted(
            (d, key) for key in bucket if (d := deadlines.get(key)) is not None and d // tick == t
        )
        rest = array("q")
        for d, key in live:
            if d > now_ms:
                rest.append(key)
            elif key in deadlines:
                del deadlines[key]
                fired.append(key)
        return rest

    def _fire_due(self, fired: list[int]) -> None:
        """Fire the keys that were scheduled at or before the current time, by deadline."""
        deadlines = self._deadline
        now = self._now
        due = self._due
        self._due = []
        self._stored -= len(due)
        live = sorted((d, key) for key in due if (d := deadlines.get(key)) is not None and d <= now)
        for _, key in live:
            if key in deadlines:
                del deadlines[key]
                fired.append(key)
        self._next_valid = False

    def _place(self, t: int, key: int) -> None:
        """Put `key` (due at tick `t`, later than now) into the bucket its level gives it.

        `schedule` and `_split` carry the same few lines inline: they are the hot paths.
        """
        bounds = self._bounds
        level = 0 if t < bounds[0] else 1 if t < bounds[1] else 2
        number = t >> _SHIFTS[level]
        buckets = self._buckets[level]
        bucket = buckets.get(number)
        if bucket is None:
            bucket = buckets[number] = array("q")
            heapq.heappush(self._heaps[level], number)
        bucket.append(key)

    def _move_horizons(self) -> None:
        """Pull the horizons up to the current tick, splitting buckets of the level above.

        Top level first, so that level 1 is filled before level 0 takes from it.
        """
        cur = self._cur
        bounds = self._bounds
        for level in (1, 0):
            upper_shift = _SHIFTS[level + 1]
            horizon = ((cur + _REACH[level]) >> upper_shift) << upper_shift
            if level == 0:
                horizon = min(horizon, bounds[1])
            if horizon <= bounds[level]:
                continue
            bounds[level] = horizon
            limit = horizon >> upper_shift
            heap = self._heaps[level + 1]
            source = self._buckets[level + 1]
            while heap and heap[0] < limit:
                number = heapq.heappop(heap)
                self._moves.append(_Move(source.pop(number), number, upper_shift))
        # The first tick at which either horizon has room for another bucket of the level above.
        self._move_at = min(
            bounds[level] + (1 << _SHIFTS[level + 1]) - _REACH[level] for level in (0, 1)
        )

    def _first_moving_tick(self) -> int:
        """The earliest tick any bucket still being split can hold."""
        return min(move.first_tick for move in self._moves)

    def _finish_moves(self, upto_tick: int | None) -> None:
        """Finish splitting every bucket that starts at or before `upto_tick` (None: all)."""
        for move in list(self._moves):
            if upto_tick is None or move.first_tick <= upto_tick:
                self._split(move, len(move.bucket))
        self._moves = deque(move for move in self._moves if move.pos < len(move.bucket))

    def _continue_moves(self, budget: int) -> None:
        """Re-place up to `budget` entries of the buckets being split, oldest split first."""
        moves = self._moves
        while moves and budget > 0:
            move = moves[0]
            end = min(len(move.bucket), move.pos + budget)
            budget -= end - move.pos
            self._split(move, end)
            if end == len(move.bucket):
                moves.popleft()

    def _split(self, move: _Move, end: int) -> None:
        """Re-place the live entries of `move` from its position up to `end`."""
        get = self._deadline.get
        tick = self._tick
        shift = move.shift
        number = move.number
        bounds = self._bounds
        all_buckets = self._buckets
        heaps = self._heaps
        placed = 0
        for key in move.bucket[move.pos : end]:
            d = get(key)
            if d is None:
                continue
            t = d // tick
            if t >> shift != number:
                continue
            level = 0 if t < bounds[0] else 1 if t < bounds[1] else 2
            sub = t >> _SHIFTS[level]
            buckets = all_buckets[level]
            bucket = buckets.get(sub)
            if bucket is None:
                bucket = buckets[sub] = array("q")
                heapq.heappush(heaps[level], sub)
            bucket.append(key)
            placed += 1
        self._stored += placed - (end - move.pos)
        move.pos = end

    def _find_next(self) -> int | None:
        """The exact earliest deadline; drops buckets that hold only stale entries."""
        deadlines = self._deadline
        if not deadlines:
            return None
        get = deadlines.get
        now = self._now
        best: int | None = None
        for key in self._due:
            d = get(key)
            if d is not None and d <= now and (best is None or d < best):
                best = d
        if best is not None:
            return best
        tick = self._tick
        for level, shift in enumerate(_SHIFTS):
            heap = self._heaps[level]
            buckets = self._buckets[level]
            while heap:
                number = heap[0]
                bucket = buckets[number]
                if level == 0 and tick == 1:
                    for key in bucket:
                        if get(key) == number:
                            return number
                else:
                    for key in bucket:
                        d = get(key)
                        if (
                            d is not None
                            and (d // tick) >> shift == number
                            and (best is None or d < best)
                        ):
                            best = d
                    if best is not None:
                        return best
                heapq.heappop(heap)
                del buckets[number]
                self._stored -= len(bucket)
        return None

    def _compact(self) -> None:
        """Rebuild every bucket from the key -> deadline dict, dropping stale entries."""
        for level in range(len(_SHIFTS)):
            self._buckets[level] = {}
            self._heaps[level] = []
        self._moves.clear()
        self._due = []
        self._stored = 0
        now = self._now
        tick = self._tick
        for key, d in self._deadline.items():
            if d <= now:
                self._due.append(key)
            else:
                self._place(d // tick, key)
        self._stored = len(self._deadline)
