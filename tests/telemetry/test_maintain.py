"""`gateway maintain`: compaction and vacuum of the Delta lake, with deltalake (no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from gateway.cli import main as gateway_main
from gateway.telemetry import maintain
from gateway.telemetry.export import DeltaBatchWriter
from gateway.telemetry.lake import read_lake, rows_to_arrow
from gateway.telemetry.simulate import lifecycles

BATCHES = 12


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """A lake as an exporter leaves it: one small append per micro-batch."""
    path = tmp_path / "lake"
    rows = [e.to_row(seq) for seq, e in enumerate(lifecycles(240, seed=5), start=1)]
    writer = DeltaBatchWriter(str(path), "exporter")
    step = len(rows) // BATCHES
    for batch in range(BATCHES):
        end = len(rows) if batch == BATCHES - 1 else (batch + 1) * step
        part = rows[batch * step:end]
        writer.write_arrow(rows_to_arrow(part), batch)
    return path


def on_disk(table: Path) -> int:
    """Data files in storage (the Delta log's checkpoint is parquet too: not counted)."""
    return sum(1 for p in table.rglob("*.parquet") if "_delta_log" not in p.parts)


def test_compaction_and_vacuum_keep_every_row_and_the_exporters_record(table: Path) -> None:
    rows = sorted(r["event_id"] for r in read_lake(table).to_pylist())
    before = len(DeltaTable(str(table)).file_uris())
    assert before >= BATCHES  # at least one file per batch

    dry = maintain.maintain(str(table), dry_run=True, retention_hours=0)
    assert (dry.files_before, dry.files_after, dry.files_compacted) == (before, before, 0)
    assert on_disk(table) == before

    done = maintain.maintain(str(table), retention_hours=0)
    assert done.files_compacted == before and done.files_after < before
    assert done.files_after == done.files_written == len(DeltaTable(str(table)).file_uris())
    assert done.files_vacuumed == before  # the small files are gone from storage too
    assert on_disk(table) == done.files_after
    assert sorted(r["event_id"] for r in read_lake(table).to_pylist()) == rows
    # The exporter's record of its batches survives: a replayed batch is still skipped.
    assert DeltaBatchWriter(str(table), "exporter").committed_version() == BATCHES - 1

    # A default run keeps files versions of the last 7 days need: nothing more to delete.
    again = maintain.maintain(str(table))
    assert again.files_vacuumed == 0 and again.files_after == done.files_after


def test_the_command_prints_a_summary_and_refuses_bad_input(
    table: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gateway_main(["maintain", "--table", str(table), "--no-vacuum"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["files_compacted"] >= BATCHES and summary["files_vacuumed"] == 0
    assert gateway_main(["maintain", "--table", str(tmp_path / "nothing")]) == 2
    assert gateway_main(["maintain", "--table", str(table), "--retention-hours", "-1"]) == 2
    assert gateway_main(["maintain", "--table", str(table), "--target-size-mb", "0"]) == 2
    err = capsys.readouterr().err
    assert all(line.startswith("{") for line in err.splitlines()) and "retention_hours" in err


def test_a_file_or_a_corrupt_log_is_refused_in_one_line_before_any_change(
    table: Path, tmp_path: Path
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a table")
    assert maintain.main(["--table", str(a_file)]) == 2
    log = sorted((table / "_delta_log").glob("*.json"))[0]
    log.write_text("garbage\n")
    files = sorted(p.name for p in table.rglob("*") if p.is_file())
    assert maintain.main(["--table", str(table)]) == 2
    assert sorted(p.name for p in table.rglob("*") if p.is_file()) == files
