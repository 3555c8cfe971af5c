"""The spool: segment files, rolling by size and age, bounded buffer and retention, restarts."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gateway.errors import InvalidArgument
from gateway.telemetry.events import TransitionEvent
from gateway.telemetry.spool import BUFFER_WARN_INTERVAL_MS, SEGMENT_RE, Spool

from .conftest import ManualClock, make_event


def read_segments(directory: Path) -> list[tuple[str, list[dict[str, object]]]]:
    out = []
    for path in sorted(directory.iterdir()):
        if SEGMENT_RE.match(path.name):
            rows = [json.loads(line) for line in path.read_text().splitlines()]
            out.append((path.name, rows))
    return out


def visible_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def test_flush_writes_one_segment_named_by_its_seq_range(
    tmp_path: Path, clock: ManualClock
) -> None:
    spool = Spool(tmp_path, clock=clock.now_ms, background=False)
    events = [make_event(n) for n in range(10)]
    for e in events:
        spool.record(e)
    spool.flush()

    segments = read_segments(tmp_path)
    assert [name for name, _ in segments] == ["events-000000000001-000000000010.jsonl"]
    rows = segments[0][1]
    assert [r["seq"] for r in rows] == list(range(1, 11))
    assert [r["event_id"] for r in rows] == [e.event_id for e in events]
    assert rows[3] == events[3].to_row(4)
    assert visible_files(tmp_path) == ["events-000000000001-000000000010.jsonl"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert spool.written == 10 and spool.dropped == 0


def test_size_limit_cuts_contiguous_segments(tmp_path: Path, clock: ManualClock) -> None:
    line = len(json.dumps(make_event(0).to_row(1), separators=(",", ":"))) + 1
    spool = Spool(tmp_path, segment_max_bytes=3 * line + 5, clock=clock.now_ms, background=False)
    for n in range(10):
        spool.record(make_event(n))
    assert spool.pump() >= 3  # three full segments are due without forcing
    spool.flush()

    segments = read_segments(tmp_path)
    seqs = [[r["seq"] for r in rows] for _, rows in segments]
    assert [s for chunk in seqs for s in chunk] == list(range(1, 11))
    assert all(1 <= len(chunk) <= 3 for chunk in seqs)
    for name, rows in segments:
        assert name == f"events-{rows[0]['seq']:012d}-{rows[-1]['seq']:012d}.jsonl"
        assert (tmp_path / name).stat().st_size <= 3 * line + 5


def test_age_limit_closes_a_segment_on_the_injected_clock(
    tmp_path: Path, clock: ManualClock
) -> None:
    spool = Spool(tmp_path, segment_max_age_ms=1_000, clock=clock.now_ms, background=False)
    spool.record(make_event(0))
    clock.advance(400)
    spool.record(make_event(1))
    assert spool.pump() == 0
    clock.advance(599)
    assert spool.pump() == 0
    assert read_segments(tmp_path) == []
    clock.advance(1)  # 1000 ms after the first event
    assert spool.pump() == 1
    assert [len(rows) for _, rows in read_segments(tmp_path)] == [2]


def test_full_buffer_drops_the_oldest_events_and_counts_them(
    tmp_path: Path, clock: ManualClock
) -> None:
    spool = Spool(tmp_path, max_buffered_events=5, clock=clock.now_ms, background=False)
    events = [make_event(n) for n in range(8)]
    for e in events:
        spool.record(e)
    assert spool.dropped == 3
    spool.flush()

    ((_, rows),) = read_segments(tmp_path)
    assert [r["event_id"] for r in rows] == [e.event_id for e in events[3:]]
    assert [r["seq"] for r in rows] == [4, 5, 6, 7, 8]  # the gap shows what was dropped
    assert spool.dropped == 3


def test_retention_deletes_the_oldest_segments_and_counts_their_events(
    tmp_path: Path, clock: ManualClock
) -> None:
    line = len(json.dumps(make_event(0).to_row(1), separators=(",", ":"))) + 1
    spool = Spool(
        tmp_path,
        segment_max_bytes=2 * line + 10,
        max_total_bytes=6 * line + 40,
        clock=clock.now_ms,
        background=False,
    )
    for n in range(20):
        spool.record(make_event(n))
        if n % 2:
            spool.flush()  # ten segments of two events each

    segments = read_segments(tmp_path)
    kept = [r["seq"] for _, rows in segments for r in rows]
    assert len(segments) == 3
    assert kept == list(range(15, 21))  # the newest events survive
    assert spool.total_bytes == sum((tmp_path / n).stat().st_size for n, _ in segments)
    assert spool.total_bytes <= 6 * line + 40
    assert spool.dropped == 14
    assert spool.segments() == [n for n, _ in segments]


def test_retention_applies_to_segments_left_by_an_earlier_run(
    tmp_path: Path, clock: ManualClock
) -> None:
    line = len(json.dumps(make_event(0).to_row(1), separators=(",", ":"))) + 1
    first = Spool(tmp_path, segment_max_bytes=line, clock=clock.now_ms, background=False)
    for n in range(6):
        first.record(make_event(n))
        first.flush()
    first.close()
    assert len(read_segments(tmp_path)) == 6

    second = Spool(
        tmp_path,
        segment_max_bytes=line,
        max_total_bytes=2 * line + 10,
        clock=clock.now_ms,
        background=False,
    )
    assert [r["seq"] for _, rows in read_segments(tmp_path) for r in rows] == [5, 6]
    assert second.dropped == 4


def test_seq_continues_across_restarts_even_without_segments(
    tmp_path: Path, clock: ManualClock
) -> None:
    with Spool(tmp_path, clock=clock.now_ms, background=False) as spool:
        for n in range(5):
            spool.record(make_event(n))
    for segment in tmp_path.glob("events-*.jsonl"):
        segment.unlink()  # an operator emptied the spool: names must still never repeat

    with Spool(tmp_path, clock=clock.now_ms, background=False) as spool:
        spool.record(make_event(5))
    assert visible_files(tmp_path) == ["events-000000000006-000000000006.jsonl"]


def test_leftover_temp_files_are_removed_on_open(tmp_path: Path, clock: ManualClock) -> None:
    (tmp_path / ".tmp-events-000000000001-000000000002.jsonl-abc").write_text('{"half":')
    Spool(tmp_path, clock=clock.now_ms, background=False).close()
    assert list(tmp_path.glob(".tmp-*")) == []


def test_close_writes_everything_stops_the_writer_and_counts_late_events(
    tmp_path: Path, clock: ManualClock
) -> None:
    spool = Spool(tmp_path, clock=clock.now_ms, segment_max_age_ms=3_600_000)
    for n in range(1000):
        spool.record(make_event(n))
    spool.close()
    assert sum(len(rows) for _, rows in read_segments(tmp_path)) == 1000
    assert spool._thread is not None and not spool._thread.is_alive()

    spool.on_transition(make_event(1000))
    assert spool.dropped == 1
    assert sum(len(rows) for _, rows in read_segments(tmp_path)) == 1000


def test_observer_hook_logs_failures_instead_of_raising(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, clock=clock.now_ms, background=False)

    def broken(event: TransitionEvent) -> None:
        raise RuntimeError("disk on fire")

    spool.record = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        spool.on_transition(make_event(0))
    assert "failed to record" in caplog.text


def test_an_event_that_cannot_be_serialized_is_dropped_alone(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, clock=clock.now_ms, background=False)
    spool.on_transition(make_event(0))
    spool.on_transition(make_event(1, reason=object()))  # type: ignore[arg-type]
    spool.on_transition(make_event(2))
    with caplog.at_level(logging.ERROR):
        spool.flush()
    assert [r["seq"] for _, rows in read_segments(tmp_path) for r in rows] == [1, 3]
    assert spool.dropped == 1
    assert "could not be serialized" in caplog.text


def test_bad_limits_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument) as err:
        Spool(tmp_path, segment_max_bytes=1000, max_total_bytes=999, background=False)
    assert err.value.field == "max_total_bytes"
    with pytest.raises(InvalidArgument):
        Spool(tmp_path, max_buffered_events=0, background=False)


def test_events_reject_unknown_states() -> None:
    with pytest.raises(InvalidArgument) as err:
        TransitionEvent.new(
            ts_ms=0, gateway_id="g", dialect="d", backend="b", topic="t", group="g",
            message_id="m", attempt=1, from_state="READY", to_state="LOST",
        )  # fmt: skip
    assert err.value.field == "to_state"
    first = make_event(0)
    assert len(first.event_id) == 32 and first.event_id != make_event(0).event_id


def test_engine_transitions_through_the_observer_hook_become_events(
    tmp_path: Path, clock: ManualClock
) -> None:
    from gateway.engine.observe import Observers, Transition

    spool = Spool(tmp_path, clock=clock.now_ms, gateway_id="gw-7", background=False)
    observers = Observers([spool])
    for attempt in (1, 2):
        observers.emit(
            Transition(
                ts_ms=1_000 * attempt, dialect="rocketmq", policy="rocketmq-fifo",
                backend="embedded",
                topic="orders", group="g1", message_id="m1", attempt=attempt,
                from_state="INFLIGHT", to_state="WAITING_RETRY", delay_ms=10_000, reason="nack",
                destination="%RETRY%g1",
            )
        )  # fmt: skip
    spool.flush()

    ((_, rows),) = read_segments(tmp_path)
    assert [r["seq"] for r in rows] == [1, 2]
    assert len({r["event_id"] for r in rows}) == 2 and all(len(r["event_id"]) == 32 for r in rows)
    first = {k: v for k, v in rows[0].items() if k != "event_id"}
    assert first == {
        "seq": 1, "ts_ms": 1_000, "gateway_id": "gw-7", "dialect": "rocketmq-fifo",
        "backend": "embedded", "topic": "orders", "group": "g1", "message_id": "m1",
        "attempt": 1, "from_state": "INFLIGHT", "to_state": "WAITING_RETRY", "delay_ms": 10_000,
        "reason": "nack", "destination": "%RETRY%g1",
    }  # fmt: skip


def test_segments_removed_by_someone_else_are_not_counted_as_dropped(
    tmp_path: Path, clock: ManualClock
) -> None:
    line = len(json.dumps(make_event(0).to_row(1), separators=(",", ":"))) + 1
    spool = Spool(
        tmp_path,
        segment_max_bytes=line,
        max_total_bytes=2 * line + 10,
        clock=clock.now_ms,
        background=False,
    )
    for n in range(2):
        spool.record(make_event(n))
        spool.flush()
    for segment in tmp_path.glob("events-*.jsonl"):
        segment.unlink()  # e.g. the exporter cleaned up what it had processed
    for n in range(2, 4):
        spool.record(make_event(n))
        spool.flush()
    assert spool.dropped == 0
    assert [r["seq"] for _, rows in read_segments(tmp_path) for r in rows] == [3, 4]


def test_drops_are_counted_by_reason(tmp_path: Path, clock: ManualClock) -> None:
    """`dropped` only had a total: a full buffer and the disk cap were told apart nowhere."""
    line = len(json.dumps(make_event(0).to_row(1), separators=(",", ":"))) + 1
    spool = Spool(tmp_path, segment_max_bytes=line, max_total_bytes=2 * line + 10,
                  max_buffered_events=2, clock=clock.now_ms, background=False)
    for n in range(5):
        spool.record(make_event(n))  # three over the buffer's two
    spool.flush()  # two segments of one event: under the cap
    for n in range(5, 7):
        spool.record(make_event(n))
        spool.flush()  # two more segments: the two oldest are deleted
    spool.record(make_event(7, reason=object()))  # type: ignore[arg-type]
    spool.close()
    spool.record(make_event(8))
    assert spool.dropped_counts() == {"buffer_full": 3, "disk_cap": 2, "write_failed": 1,
                                      "closed": 1}
    assert spool.dropped == 7


def test_full_buffer_drops_are_logged_at_most_once_a_minute(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A full buffer dropped events without a word in the log."""
    spool = Spool(tmp_path, max_buffered_events=2, clock=clock.now_ms, background=False)

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and "buffer full" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="gateway.telemetry.spool"):
        for n in range(5):
            spool.record(make_event(n))
        spool.flush()
        assert len(warnings()) == 1
        assert "dropped the 3 oldest events (3 since start)" in warnings()[0]
        for n in range(5, 9):
            spool.record(make_event(n))  # two more dropped
        spool.flush()
        clock.advance(BUFFER_WARN_INTERVAL_MS - 1)
        spool.flush()
        assert len(warnings()) == 1  # not again within the minute
        clock.advance(1)
        spool.flush()
        assert len(warnings()) == 2
        assert "dropped the 2 oldest events (5 since start)" in warnings()[1]
        clock.advance(BUFFER_WARN_INTERVAL_MS)
        spool.flush()
        assert len(warnings()) == 2  # nothing new dropped: nothing said
