"""The Spark exporter against a real local SparkSession: spool -> Delta / Parquet lake.

One SparkSession is shared by the telemetry tests (`spark` in conftest: it takes 10-25 s to
start). The crash test runs
the exporter as a subprocess, kills it with SIGKILL mid-run and restarts it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from gateway.telemetry import export
from gateway.telemetry.events import TransitionEvent
from gateway.telemetry.lake import read_lake
from gateway.telemetry.simulate import lifecycles
from gateway.telemetry.spool import Spool, segment_name

from .conftest import ManualClock

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def spool_events(
    directory: Path, events: list[TransitionEvent], per_segment: int
) -> list[dict[str, object]]:
    """Record `events` through a Spool and return the rows the lake must hold (seq stamped)."""
    clock = ManualClock()
    spool = Spool(directory, clock=clock.now_ms, background=False)
    for n, event in enumerate(events, start=1):
        spool.record(event)
        if n % per_segment == 0:
            spool.flush()
    spool.close()
    assert spool.dropped == 0
    rows = []
    for seq, event in enumerate(events, start=1):
        row = event.to_row(seq)
        row["event_date"] = datetime.fromtimestamp(event.ts_ms / 1000, UTC).date()
        rows.append(row)
    return rows


def by_id(rows: list[dict[str, object]]) -> dict[object, dict[str, object]]:
    return {r["event_id"]: r for r in rows}


def run_available_now(spark: SparkSession, tmp: Path, fmt: export.Format, **kw: object) -> None:
    query = export.start_export(
        spark,
        spool=str(tmp / "spool"),
        table=str(tmp / fmt),
        checkpoint=str(tmp / f"checkpoint-{fmt}"),
        fmt=fmt,
        **kw,  # type: ignore[arg-type]
    )
    query.awaitTermination()
    assert query.exception() is None


def test_delta_lake_holds_exactly_the_spooled_events_and_replay_is_skipped(
    spark: SparkSession, tmp_path: Path
) -> None:
    events = list(lifecycles(300, seed=1))
    expected = spool_events(tmp_path / "spool", events, per_segment=200)
    run_available_now(spark, tmp_path, "delta", max_files_per_trigger=3)

    table = tmp_path / "delta"
    got = read_lake(table).to_pylist()
    assert len(got) == len(expected)
    assert by_id(got) == by_id(expected)
    dt = DeltaTable(str(table))
    assert dt.metadata().partition_columns == ["event_date", "dialect"]
    version = dt.version()
    writer = export.writer_id_for(tmp_path / "checkpoint-delta")
    last_batch = dt.transaction_version(writer)
    assert last_batch is not None and last_batch >= 1  # several micro-batches
    meta = dt.history(1)[0]
    assert meta[export.META_WRITER] == writer
    assert meta[export.META_BATCH] == str(last_batch)

    # Forget that Spark committed the last batch: a restart replays it with the same batch id,
    # and the writer must see it in the table and skip it.
    commits = tmp_path / "checkpoint-delta" / "commits"
    (commits / str(last_batch)).unlink()
    (commits / f".{last_batch}.crc").unlink(missing_ok=True)
    run_available_now(spark, tmp_path, "delta", max_files_per_trigger=3)

    assert (commits / str(last_batch)).exists()  # the batch really ran again
    dt = DeltaTable(str(table))
    assert dt.version() == version
    assert len(read_lake(table)) == len(expected)


def test_batch_writer_appends_a_batch_id_at_most_once(spark: SparkSession, tmp_path: Path) -> None:
    events = list(lifecycles(20, seed=2))
    expected = spool_events(tmp_path / "spool", events, per_segment=1000)
    df = (
        spark.read.schema(export.spark_schema())
        .json(str(tmp_path / "spool"))
        .withColumn("event_date", export.event_date_column())
    )
    writer = export.DeltaBatchWriter(str(tmp_path / "t"), "writer-a")
    writer(df, 0)
    writer(df, 0)  # replayed
    assert len(read_lake(tmp_path / "t")) == len(expected)
    writer(df, 1)
    assert len(read_lake(tmp_path / "t")) == 2 * len(expected)
    other = export.DeltaBatchWriter(str(tmp_path / "t"), "writer-b")
    other(df, 0)  # another job's batch 0 is its own
    assert len(read_lake(tmp_path / "t")) == 3 * len(expected)
    writer(df, 1)
    assert len(read_lake(tmp_path / "t")) == 3 * len(expected)


def test_parquet_lake_is_partitioned_and_holds_exactly_the_events(
    spark: SparkSession, tmp_path: Path
) -> None:
    events = list(lifecycles(200, seed=3))
    expected = spool_events(tmp_path / "spool", events, per_segment=300)
    run_available_now(spark, tmp_path, "parquet", max_files_per_trigger=2)

    table = tmp_path / "parquet"
    assert by_id(read_lake(table).to_pylist()) == by_id(expected)
    assert len(read_lake(table)) == len(expected)
    dates = {p.name for p in table.glob("event_date=*")}
    assert dates == {f"event_date={r['event_date']}" for r in expected}
    dialects = {p.name for p in table.glob("event_date=*/dialect=*")}
    assert dialects == {f"dialect={r['dialect']}" for r in expected}


def test_sigkill_mid_run_then_restart_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    events = list(lifecycles(400, seed=4))
    expected = spool_events(tmp_path / "spool", events, per_segment=100)  # ~23 segments
    table = tmp_path / "delta"
    cmd = [
        sys.executable, "-m", "gateway.telemetry.export",
        "--spool", str(tmp_path / "spool"), "--table", str(table),
        "--checkpoint", str(tmp_path / "checkpoint"), "--available-now",
        "--master", "local[2]",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = (tmp_path / "run1.log").open("w")
    first = subprocess.Popen(
        [*cmd, "--max-files-per-trigger", "1"], cwd=REPO, env=env, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 180
        # Wait for a few committed batches of the first run, then kill it without warning.
        while time.monotonic() < deadline and first.poll() is None:
            if DeltaTable.is_deltatable(str(table)) and DeltaTable(str(table)).version() >= 3:
                break
            time.sleep(0.2)
        assert first.poll() is None, (tmp_path / "run1.log").read_text()[-3000:]
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    partial = len(read_lake(table))
    assert 0 < partial < len(expected)  # it really died mid-run

    second = subprocess.run(
        [*cmd, "--max-files-per-trigger", "16"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr[-3000:]
    got = read_lake(table).to_pylist()
    ids = [r["event_id"] for r in got]
    assert len(ids) == len(set(ids)), "duplicated rows after restart"
    assert by_id(got) == by_id(expected)
    # The summary counts what the second run appended (a replayed batch appends nothing).
    summary = json.loads(second.stdout)
    assert summary["rows"] == len(expected) - partial
    assert summary["events"] >= summary["rows"] and summary["batches"] >= 1
    assert all(line.startswith("{") for line in second.stderr.splitlines()), second.stderr


def test_export_on_a_cluster_master_logs_json_progress_and_a_summary(tmp_path: Path) -> None:
    """`--master local-cluster[1,1,1024]`: Spark's standalone master and worker, the spool read
    by an executor in a JVM of its own. Standard error holds JSON lines only (Spark quiet), one
    progress line per batch; standard output the summary."""
    events = list(lifecycles(150, seed=8))
    expected = spool_events(tmp_path / "spool", events, per_segment=200)
    table = tmp_path / "delta"
    run = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "export", "--spool", str(tmp_path / "spool"),
         "--table", str(table), "--checkpoint", str(tmp_path / "ckpt"), "--available-now",
         "--master", "local-cluster[1,1,1024]", "--max-files-per-trigger", "2"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert by_id(read_lake(table).to_pylist()) == by_id(expected)
    lines = [json.loads(line) for line in run.stderr.splitlines()]  # fails on a plain line
    assert not [e for e in lines if e["level"] not in ("info",)], lines
    assert {e.get("logger") for e in lines} == {"gateway.telemetry.export"}  # Spark quiet
    progress = [e for e in lines if str(e["event"]).startswith("export progress")]
    summary = json.loads(run.stdout)
    assert len(progress) == summary["batches"] >= 2
    assert summary["events"] == summary["rows"] == len(expected)
    assert progress[-1]["events"] == len(expected) and summary["seconds"] > 0
    assert summary["spool_created"] is False


def test_segments_far_older_than_the_newest_are_still_exported(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The file source skips files older than `maxFileAge` before the newest it has seen
    (Spark's default 7 days). An exporter that was down a week, and segments that reach the
    spool late with old times (copied in from a node that was down), still get exported."""
    day = 86_400
    now = time.time()
    events = list(lifecycles(30, seed=9))
    thirds = len(events) // 3

    def segment(spool: Path, part: list[TransitionEvent], age_days: float, first: int) -> None:
        spool.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(e.to_row(first + n)) for n, e in enumerate(part)]
        path = spool / segment_name(first, first + len(part) - 1)
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (now - age_days * day, now - age_days * day))

    def export_with(age: str | None, name: str) -> set[object]:
        spool = tmp_path / name / "spool"
        segment(spool, events[:thirds], 9, 1)  # seen before the exporter went down
        kw = {} if age is None else {"max_file_age": age}
        run_available_now(spark, tmp_path / name, "delta", **kw)
        # Down for 9 days: a new segment, and one written 20 days ago that arrives late.
        segment(spool, events[thirds:2 * thirds], 0, 1 + thirds)
        segment(spool, events[2 * thirds:], 20, 1 + 2 * thirds)
        run_available_now(spark, tmp_path / name, "delta", **kw)
        return {r["event_id"] for r in read_lake(tmp_path / name / "delta").to_pylist()}

    everything = {e.event_id for e in events}
    assert export_with(None, "ours") == everything
    # Spark's default would have lost the late segment: the test does test something.
    assert export_with("7d", "sparks") == everything - {e.event_id for e in events[2 * thirds:]}


def test_processing_time_trigger_keeps_picking_up_new_segments(
    spark: SparkSession, tmp_path: Path
) -> None:
    clock = ManualClock()
    spool = Spool(tmp_path / "spool", clock=clock.now_ms, background=False)
    events = list(lifecycles(60, seed=6))
    for e in events[:100]:
        spool.record(e)
    spool.flush()
    table = tmp_path / "delta"
    query = export.start_export(
        spark,
        spool=str(tmp_path / "spool"),
        table=str(table),
        checkpoint=str(tmp_path / "checkpoint"),
        processing_time="1 second",
    )
    try:

        def rows_now() -> int:
            return len(read_lake(table)) if DeltaTable.is_deltatable(str(table)) else 0

        def wait_for_rows(n: int) -> None:
            deadline = time.monotonic() + 120
            while rows_now() < n and time.monotonic() < deadline and query.isActive:
                time.sleep(0.2)

        wait_for_rows(100)
        assert rows_now() == 100
        for e in events[100:]:
            spool.record(e)
        spool.close()  # a new segment appears while the query runs
        wait_for_rows(len(events))
        assert query.isActive
    finally:
        query.stop()
    got = read_lake(table).to_pylist()
    assert sorted(r["seq"] for r in got) == list(range(1, len(events) + 1))


def test_gateway_transitions_land_in_the_delta_table(spark: SparkSession, tmp_path: Path) -> None:
    """A gateway with a failing consumer, then an availableNow export: the table holds exactly
    the transitions the engine made."""
    import asyncio

    from gateway.client import GatewayClient
    from gateway.engine.observe import Transition
    from gateway.server.app import running_gateway
    from gateway.telemetry import lake

    made: list[Transition] = []

    class Recorder:
        def on_transition(self, transition: Transition) -> None:
            made.append(transition)

    async def run_gateway() -> None:
        async with running_gateway(tmp_path / "gw", time_scale=0.01, telemetry=True,
                                   observers=[Recorder()]) as app, \
                GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
            await client.publish("orders", [b"ok", b"poison"])
            async with client.consume("orders", "billing", policy="rocketmq",
                                      options={"max_retries": "3"}) as stream:
                for _ in range(5):
                    msg = await stream.next(5)
                    assert msg is not None
                    if msg.body == b"ok":
                        assert (await msg.ack()).ok
                    else:
                        assert (await msg.fail()).ok
                assert await stream.next(0.3) is None

    asyncio.run(run_gateway())
    spool = tmp_path / "gw" / "telemetry"
    query = export.start_export(spark, spool=str(spool), table=str(tmp_path / "lake"),
                                checkpoint=str(tmp_path / "ckpt"), fmt="delta")
    query.awaitTermination()
    assert query.exception() is None
    rows = lake.read_lake(tmp_path / "lake").to_pylist()
    got = sorted((r["message_id"], r["attempt"], r["from_state"], r["to_state"], r["delay_ms"],
                  r["destination"], r["group"]) for r in rows)
    want = sorted((t.message_id, t.attempt, t.from_state, t.to_state, t.delay_ms,
                   t.destination, t.group) for t in made)
    assert got == want
    assert len(rows) == len({r["event_id"] for r in rows})
    kinds = [r["to_state"] for r in rows]
    assert kinds.count("COMMITTED") == 1 and kinds.count("DEAD_LETTERED") == 1
    assert kinds.count("WAITING_RETRY") == 3 and kinds.count("INFLIGHT") == 5


def test_bad_arguments_end_in_one_line_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    base = ["--table", str(tmp_path / "t"), "--checkpoint", str(tmp_path / "c")]
    assert export.main(["--spool", str(a_file), *base]) == 2
    for age in ("xyz", "10 days", "-1d", "1.5h"):
        with pytest.raises(SystemExit) as exited:
            export.main(["--spool", str(tmp_path / "s"), *base, "--max-file-age", age])
        assert exited.value.code == 2
        assert "--max-file-age" in capsys.readouterr().err
    args = ["--spool", "s", *base]
    for age in ("30d", "12h", "90m", "5min", "100", "250us", "7D"):
        assert export._parse([*args, "--max-file-age", age]).max_file_age == age


def test_a_failing_export_query_or_trigger_ends_in_json_lines_not_a_traceback(
    tmp_path: Path,
) -> None:
    """A query that fails while it runs (here: the table path is a file) exits 1 with the error
    in its summary, and an interval Spark cannot read exits 2; stderr stays JSON lines."""
    spool_events(tmp_path / "spool", list(lifecycles(5, seed=3)), per_segment=100)
    (tmp_path / "a-file").write_text("not a table")
    cmd = [
        sys.executable, "-m", "gateway.telemetry.export", "--spool", str(tmp_path / "spool"),
        "--checkpoint", str(tmp_path / "checkpoint"), "--master", "local[1]",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    failed = subprocess.run([*cmd, "--table", str(tmp_path / "a-file")], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert json.loads(failed.stdout)["error"]
    assert all(line.startswith("{") for line in failed.stderr.splitlines()), failed.stderr[-3000:]

    bad_cmd = [*cmd, "--table", str(tmp_path / "t"), "--processing-time", "banana"]
    bad = subprocess.run(bad_cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2, bad.stderr[-3000:]
    assert all(line.startswith("{") for line in bad.stderr.splitlines()), bad.stderr[-3000:]
    assert "processing_time='banana'" in bad.stderr


def test_a_spool_that_does_not_exist_is_made_with_a_warning(tmp_path: Path) -> None:
    """`gateway export --spool MISSING` made the directory and said nothing: a typo in the path
    looked like an idle gateway (0 events). It is still made (an exporter may start before its
    gateway), with a warning on standard error and `spool_created` in the summary."""
    spool = tmp_path / "not-yet" / "telemetry"
    run = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "export", "--spool", str(spool),
         "--table", str(tmp_path / "delta"), "--checkpoint", str(tmp_path / "ckpt"),
         "--available-now", "--master", "local[1]"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert spool.is_dir() and not list(spool.iterdir())
    summary = json.loads(run.stdout)
    assert summary["events"] == 0 and summary["spool_created"] is True
    lines = [json.loads(line) for line in run.stderr.splitlines()]
    warned = [e for e in lines if e["level"] == "warning"]
    assert len(warned) == 1, lines
    assert str(spool) in warned[0]["event"] and "did not exist" in warned[0]["event"]


def test_prepare_spool_makes_only_a_missing_local_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert export.prepare_spool(str(tmp_path / "a" / "b")) is True
    assert (tmp_path / "a" / "b").is_dir()
    assert export.prepare_spool(str(tmp_path / "a" / "b")) is False
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(OSError):
        export.prepare_spool(str(tmp_path / "a-file"))
    # A URI is Spark's to read: it was made as a local directory named like it.
    for uri in ("hdfs://namenode:8020/spool", "s3a://bucket/spool", "file:///nowhere/spool"):
        assert export.prepare_spool(uri) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "a-file"]
