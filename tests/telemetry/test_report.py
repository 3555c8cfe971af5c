"""The report: reads the lake without Spark and writes index.html with real PNG charts."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import cli
from gateway.errors import FailedPrecondition, InvalidArgument
from gateway.telemetry import analysis, report
from gateway.telemetry.export import DeltaBatchWriter
from gateway.telemetry.lake import read_lake, rows_to_arrow
from gateway.telemetry.simulate import DEFAULT_PROFILES, lifecycles, tables

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHARTS = [
    "attempts.png",
    "time_to_commit.png",
    "retry_intervals.png",
    "terminal.png",
    "timeline.png",
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Delta table of 600 simulated message lifecycles, written as two batches."""
    table = tmp_path_factory.mktemp("lake") / "delta"
    rows = [e.to_row(seq) for seq, e in enumerate(lifecycles(600, seed=11), start=1)]
    writer = DeltaBatchWriter(str(table), "report-test")
    half = len(rows) // 2
    writer.write_arrow(rows_to_arrow(rows[:half]), 0)
    writer.write_arrow(rows_to_arrow(rows[half:]), 1)
    return table


def test_report_writes_index_and_nontrivial_pngs(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert report.main(["--table", str(lake), "--out", str(out)]) == 0

    page = (out / "index.html").read_text()
    assert sorted(re.findall(r'<img src="([^"]+)"', page)) == sorted(CHARTS)
    rows = read_lake(lake).to_pylist()
    assert f"<th>events</th><td>{len(rows)}</td>" in page
    messages = analysis.by_message(rows)
    assert f"<th>messages</th><td>{len(messages)}</td>" in page
    dead = sum(r["to_state"] == "DEAD_LETTERED" for r in rows)
    assert dead > 0 and f"<th>dead-lettered</th><td>{dead}</td>" in page
    for name in CHARTS:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        assert len(data) > 8_000, (name, len(data))


def test_report_for_a_chosen_message_and_table(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    argv = ["--table", str(lake), "--out", str(out), "--message", "ba-00000003",
            "--expected", "backoff-table=5s,10s"]  # fmt: skip
    assert report.main(argv, tables()) == 0
    assert html.escape("ba-00000003 (orders)") in (out / "index.html").read_text()
    assert report.main(["--table", str(lake), "--out", str(out), "--message", "nope"]) == 2
    assert report.main(["--table", str(tmp_path / "missing"), "--out", str(out)]) == 2


def test_retry_intervals_follow_the_policy_tables(lake: Path) -> None:
    messages = analysis.by_message(read_lake(lake).to_pylist())
    intervals = analysis.retry_intervals(messages)
    profile = DEFAULT_PROFILES[0]
    mine = [i for i in intervals if i.dialect == profile.dialect]
    assert mine, "the simulation retries the back-off table's messages"
    table = profile.table_ms
    for i in mine:
        expected = analysis.expected_delay_ms(table, i.retry)
        assert i.planned_ms == expected
        assert expected <= i.observed_ms <= expected + 50
    assert {i.retry for i in mine} >= {1, 2, 3}


def test_analysis_counts_and_parsing() -> None:
    rows = [e.to_row(n) for n, e in enumerate(lifecycles(30, seed=5), start=1)]
    messages = analysis.by_message(rows)
    assert len(messages) == 30
    per_group = analysis.attempts_by_group(messages)
    assert sum(sum(c.values()) for c in per_group.values()) == 30
    assert set(per_group) == {"orders", "billing", "audit"}
    key = analysis.busiest_message(messages)
    assert key is not None
    assert len(analysis.timeline(messages[key])) == max(len(v) for v in messages.values())
    assert analysis.timeline(messages[key])[0][1] == "READY"

    assert analysis.parse_expected("pulsar=1s,500ms,2m,1h") == (
        "pulsar",
        [1000, 500, 120_000, 3_600_000],
    )
    assert analysis.expected_delay_ms([10, 20, 30], 1) == 10
    assert analysis.expected_delay_ms([10, 20, 30], 17) == 30
    for bad in ["pulsar", "=1s", "x=1x", "x=1s,,2s"]:
        with pytest.raises(InvalidArgument):
            analysis.parse_expected(bad)


def test_time_scale_hint_and_rescale(lake: Path, tmp_path: Path) -> None:
    """A run with --time-scale read without it: the page says so; with it, the waits are the
    policy's again."""
    rows = read_lake(lake).to_pylist()
    t0 = min(r["ts_ms"] for r in rows)
    fast = [{**r, "ts_ms": t0 + (r["ts_ms"] - t0) // 100} for r in rows]
    page = report.build_report(fast, tmp_path / "fast")
    assert "--time-scale 0.01" in page.read_text()
    back = analysis.retry_intervals(analysis.by_message(analysis.rescale(fast, 0.01)))
    assert back and all(abs(i.observed_ms - i.planned_ms) <= 100 + 50 for i in back)
    page = report.build_report(fast, tmp_path / "scaled", time_scale=0.01)
    assert "--time-scale 0.01" not in page.read_text()
    with pytest.raises(InvalidArgument):
        analysis.rescale(rows, 0)


def test_replay_of_a_lost_delivery_and_a_partial_history() -> None:
    def row(ts: int, before: str, to: str, attempt: int, **kw: object) -> dict[str, object]:
        return {"ts_ms": ts, "from_state": before, "to_state": to, "attempt": attempt,
                "delay_ms": 0, "destination": "", "topic": "t", **kw}

    got = analysis.replay([
        row(0, "", "READY", 0), row(5, "READY", "INFLIGHT", 1),
        row(9, "INFLIGHT", "READY", 1), row(12, "READY", "INFLIGHT", 2),
        row(20, "INFLIGHT", "WAITING_RETRY", 2, delay_ms=1000, destination="t-RETRY"),
        row(1020, "WAITING_RETRY", "READY", 2), row(1030, "READY", "INFLIGHT", 3),
        row(1031, "INFLIGHT", "COMMITTED", 3),
    ])
    assert got.complete and got.disposition == "commit" and got.waits_ms == (1000,)
    assert [(a.attempt, a.delay_ms, a.at_ms, a.ready_ms, a.topic) for a in got.attempts] == [
        (1, 0, 0, 0, "t"), (2, 0, 7, 9, "t"), (3, 1000, 1025, 1020, "t-RETRY")]
    partial = analysis.replay([row(5, "READY", "INFLIGHT", 1)])
    assert not partial.complete and partial.disposition == ""


def test_report_refuses_unusable_out_and_unreadable_lakes(lake: Path, tmp_path: Path) -> None:
    """Bad paths and broken lakes end in one error line and exit status 2, never a traceback."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    for out in (a_file, a_file / "sub"):
        assert report.main(["--table", str(lake), "--out", str(out)]) == 2

    empty_log = tmp_path / "empty-log"
    (empty_log / "_delta_log").mkdir(parents=True)
    corrupt_log = tmp_path / "corrupt-log"
    shutil.copytree(lake, corrupt_log)
    next(iter(sorted((corrupt_log / "_delta_log").glob("*.json")))).write_text("garbage\n")
    corrupt_data = tmp_path / "corrupt-data"
    shutil.copytree(lake, corrupt_data)
    for part in corrupt_data.rglob("*.parquet"):
        part.write_bytes(b"junk")
    for broken in (empty_log, corrupt_log, corrupt_data):
        with pytest.raises(FailedPrecondition, match="cannot be read as a lake"):
            read_lake(broken)
        assert report.main(["--table", str(broken), "--out", str(tmp_path / "r")]) == 2


def test_report_that_fails_after_reading_the_lake_exits_cleanly(
    lake: Path, tmp_path: Path
) -> None:
    """`gateway report` exits 2 when its message is not in the lake, every time: reading a Delta
    table with pyarrow's threads made some of these runs abort at exit (status 134)."""
    code = (
        "import sys; from gateway.telemetry import report; "
        "sys.exit(report.main(sys.argv[1:]))"
    )
    argv = ["--table", str(lake), "--out", str(tmp_path / "r"), "--message", "nope"]
    codes = [
        subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, timeout=120, check=False
        ).returncode
        for _ in range(12)
    ]
    assert codes == [2] * 12


def _summary(page: str, name: str) -> str:
    found = re.search(rf"<th>{re.escape(name)}</th><td>([^<]*)</td>", page)
    assert found, name
    return html.unescape(found.group(1))


def test_report_for_one_group(lake: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """`gateway report --group G` without --message was ignored: the report covered every
    group. It reports on G alone, and its timeline is of G's busiest message."""
    out = tmp_path / "report"
    assert cli.main(["report", "--table", str(lake), "--out", str(out),
                     "--group", "billing"]) == 0
    page = (out / "index.html").read_text()
    rows = [r for r in read_lake(lake).to_pylist() if r["group"] == "billing"]
    assert 0 < len(rows) < read_lake(lake).num_rows
    assert _summary(page, "group") == "billing"
    assert _summary(page, "events") == str(len(rows))
    assert _summary(page, "groups") == "1"
    busiest = analysis.busiest_message(analysis.by_message(rows))
    assert busiest is not None and busiest[0] == "billing"
    assert html.escape(f"{busiest[1]} (billing)") in page

    capsys.readouterr()
    assert cli.main(["report", "--table", str(lake), "--out", str(out),
                     "--group", "nope"]) == 2
    err = capsys.readouterr().err
    assert "group 'nope' is not in the lake" in err and "'billing'" in err


def test_report_since_a_time_or_a_duration(lake: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`--since` reports on the messages first seen at or after a time, whole."""
    rows = read_lake(lake).to_pylist()
    start = min(int(r["ts_ms"]) for r in rows)  # 2026-01-01T00:00:00Z
    cut = start + 60_000
    first = {k: int(events[0]["ts_ms"]) for k, events in analysis.by_message(rows).items()}
    kept = {k for k, at in first.items() if at >= cut}
    assert 0 < len(kept) < len(first)
    expected_events = sum(1 for r in rows if (r["group"], r["message_id"]) in kept)
    argv = ["--table", str(lake), "--since"]
    for since, now_ms in (("2026-01-01T00:01:00Z", None), ("2026-01-01T01:01:00+01:00", None),
                          ("2026-01-01 00:01:00", None), ("10m", cut + 600_000)):
        out = tmp_path / f"r-{len(since)}"
        assert report.main([*argv, since, "--out", str(out)], now_ms=now_ms) == 0, since
        page = (out / "index.html").read_text()
        assert _summary(page, "messages") == str(len(kept)), since
        assert _summary(page, "events") == str(expected_events), since
        assert _summary(page, "messages first seen since") == "2026-01-01T00:01:00+00:00"
    early = min(first, key=first.__getitem__)  # published before the cut: not reported on
    assert report.main([*argv, "2026-01-01T00:01:00Z", "--out", str(tmp_path / "m"),
                        "--message", early[1]]) == 2
    assert f"message {early[1]!r} (group 'any') is not reported on" in capsys.readouterr().err
    for bad in ("yesterday", "10 minutes", "-5m", ""):
        assert report.main(["--table", str(lake), f"--since={bad}",
                            "--out", str(tmp_path / "bad")]) == 2, bad
