"""The PySpark job that streams spool segments into the data lake.

Spark's file source reads the spool directory (JSON lines, explicit schema, a bounded number of
files per micro-batch) and checkpoints which files it has taken. Two sinks:

* `delta` (default): each micro-batch is appended with the `deltalake` package inside
  `foreachBatch`. The commit carries a Delta transaction action (app id = this job's writer id,
  version = the batch id) and the same pair as commit metadata. Before writing, the batch id is
  compared with the table's recorded version for the writer id, so a batch replayed after a crash
  is skipped and no reader ever sees a row twice.
* `parquet`: Spark's own file sink, partitioned by `event_date` and `dialect`; its `_spark_metadata`
  log says which files belong to committed batches (`gateway.telemetry.lake` reads it).

Run `gateway export --spool DIR --table DIR --checkpoint DIR` (or `python -m
gateway.telemetry.export ...`): JSON log lines on standard error, one progress line per
micro-batch, and a JSON summary (events, batches, rows, seconds, spool_created) on standard
output. A local spool directory that does not exist yet is made (the exporter may start before its
gateway), with a warning.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Literal

from gateway.errors import InvalidArgument
from gateway.telemetry import sparklog
from gateway.telemetry.events import PARTITION_COLUMNS, arrow_schema, spark_schema

__all__ = [
    "DeltaBatchWriter",
    "build_spark",
    "event_date_column",
    "main",
    "prepare_spool",
    "spark_schema",
    "start_export",
]

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

Format = Literal["delta", "parquet"]
URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
"""A spool given as a URI (`hdfs://`, `s3a://`, `file://`): Spark's to read, not a local path."""
MAX_FILE_AGE = "30d"
"""How much older than the newest segment seen a segment may be and still be read. Spark's file
source ignores older files after its first batch (default 7 days): segments that reach the
spool late (restored, copied in from a node that was down) would never reach the lake. Spark
remembers every file seen within this age, so it is not unbounded."""
FILE_AGE_RE = re.compile(r"[0-9]+(us|ms|s|m|min|h|d)?")
"""What Spark's `maxFileAge` takes (JavaUtils.timeStringAsMs; no unit: milliseconds)."""
WRITER_ID_FILE = "gateway-writer-id"
META_WRITER = "gateway.writer_id"
META_BATCH = "gateway.batch_id"


def build_spark(
    master: str = "local[*]",
    app_name: str = "gateway-telemetry-export",
    *,
    level: str = "info",
    conf: Mapping[str, str] | None = None,
    log_dir: str | None = None,
) -> SparkSession:
    """Start (or join) the Spark session the exporter runs in: local by default, or on the
    cluster `master` names (`spark://host:7077`, `k8s://...`, `yarn`). Spark's own log lines
    are JSON at `sparklog.jvm_level(level)`; `conf` adds Spark settings."""
    if is_local(master):
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.files.ignoreMissingFiles", "true")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.extraJavaOptions", sparklog.java_options(level, log_dir))
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(sparklog.jvm_level(level))
    return spark


def is_local(master: str) -> bool:
    """True for Spark's local masters (`local`, `local[4]`, `local[*]`, `local-cluster[...]`):
    driver and executors on this host, bound to loopback."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def writer_id_for(checkpoint: str | os.PathLike[str]) -> str:
    """The stable id of the job that owns `checkpoint` (created on first use)."""
    path = Path(checkpoint) / WRITER_ID_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        wid = f"gateway-telemetry-{uuid.uuid4().hex}"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(wid)
        os.replace(tmp, path)
        return wid


@dataclass(slots=True)
class ExportStats:
    """What one run of the exporter did (its summary)."""

    events: int = 0
    """Events read from the spool."""
    batches: int = 0
    """Micro-batches that read events."""
    rows: int = 0
    """Rows appended to the lake (a batch replayed after a crash appends none)."""
    seen: set[int] = field(default_factory=set)
    """Batch ids counted so far."""
    spool_created: bool = False
    """The spool directory did not exist: this run made it (empty)."""

    def as_dict(self, seconds: float) -> dict[str, object]:
        return {"events": self.events, "batches": self.batches, "rows": self.rows,
                "seconds": round(seconds, 3), "spool_created": self.spool_created}


@dataclass(frozen=True, slots=True)
class DeltaBatchWriter:
    """`foreachBatch` function: appends one micro-batch to a Delta table at most once."""

    table: str
    writer_id: str
    stats: ExportStats | None = None
    """Counts the rows appended, when given."""

    def committed_version(self) -> int | None:
        """The last batch id this writer committed to the table, or None."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.table):
            return None
        return DeltaTable(self.table).transaction_version(self.writer_id)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        done = self.committed_version()
        if done is not None and batch_id <= done:
            log.info(
                "batch %d already in %s (writer %s); skipped", batch_id, self.table, self.writer_id
            )
            return
        data = df.toArrow()
        if data.num_rows == 0:
            return
        self.write_arrow(data, batch_id)
        if self.stats is not None:
            self.stats.rows += data.num_rows

    def write_arrow(self, data: pa.Table, batch_id: int) -> None:
        """Append an Arrow table of lake rows, recording `batch_id` for this writer."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        schema = arrow_schema()
        rows = data.select(schema.names).cast(schema)
        write_deltalake(
            self.table,
            rows,
            mode="append",
            partition_by=list(PARTITION_COLUMNS),
            commit_properties=CommitProperties(
                custom_metadata={META_WRITER: self.writer_id, META_BATCH: str(batch_id)},
                app_transactions=[Transaction(app_id=self.writer_id, version=batch_id)],
            ),
        )
        log.info("batch %d: %d events appended to %s", batch_id, rows.num_rows, self.table)


def event_date_column() -> Column:
    """The UTC date of `ts_ms` (the session time zone is UTC): the lake's date partition."""
    from pyspark.sql import functions as F

    return F.to_date(F.timestamp_millis(F.col("ts_ms")))


def start_export(
    spark: SparkSession,
    *,
    spool: str,
    table: str,
    checkpoint: str,
    fmt: Format = "delta",
    processing_time: str | None = None,
    max_files_per_trigger: int = 64,
    max_file_age: str = MAX_FILE_AGE,
    stats: ExportStats | None = None,
) -> StreamingQuery:
    """Start the streaming query; `processing_time` None means an availableNow (catch-up) run.
    `max_file_age`: segments this much older than the newest one seen are still read (Spark's
    default, 7 days, would skip them)."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.schema(spark_schema())
        .option("maxFilesPerTrigger", max_files_per_trigger)
        .option("maxFileAge", max_file_age)
        .option("pathGlobFilter", "events-*.jsonl")
        .option("mode", "DROPMALFORMED")
        .json(spool)
        .where(F.col("event_id").isNotNull() & F.col("ts_ms").isNotNull())
        .withColumn("event_date", event_date_column())
    )
    if fmt == "delta":
        writer = DeltaBatchWriter(table, writer_id_for(checkpoint), stats)
        stream = events.writeStream.foreachBatch(writer)
    elif fmt == "parquet":
        stream = (
            events.writeStream.format("parquet")
            .partitionBy(*PARTITION_COLUMNS)
            .option("path", table)
        )
    else:
        raise ValueError(f"unknown lake format {fmt!r}")
    stream = stream.option("checkpointLocation", checkpoint).queryName("gateway_telemetry_export")
    if processing_time is None:
        stream = stream.trigger(availableNow=True)
    else:
        from pyspark.errors import IllegalArgumentException

        try:
            stream = stream.trigger(processingTime=processing_time)
        except IllegalArgumentException as exc:
            raise InvalidArgument("processing_time", processing_time,
                                  'an interval Spark reads, e.g. "10 seconds"') from exc
    return stream.start()


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gateway export",
        description="Stream spooled retry transition events into a Delta or Parquet data lake. "
                    "Logs JSON lines on standard error (a progress line per batch) and prints "
                    "a JSON summary on standard output.",
    )
    p.add_argument("--spool", required=True, help="spool directory (segment files)")
    p.add_argument("--table", required=True, help="lake table directory")
    p.add_argument("--checkpoint", required=True, help="streaming checkpoint directory")
    p.add_argument("--format", choices=("delta", "parquet"), default="delta",
                   help="table format of the lake (default delta)")
    trig = p.add_mutually_exclusive_group()
    trig.add_argument("--available-now", action="store_true", help="catch up, then stop (default)")
    trig.add_argument("--processing-time", metavar="INTERVAL",
                      help='keep running, one micro-batch per INTERVAL, e.g. "10 seconds" '
                           "(default: off, --available-now)")
    p.add_argument("--master", default="local[*]",
                   help="Spark master URL (default local[*]: every core of this machine; or "
                        "spark://HOST:7077, k8s://..., yarn)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting, repeatable (e.g. spark.driver.host=10.0.0.5; "
                        "default: none)")
    p.add_argument("--max-files-per-trigger", type=int, default=64,
                   help="spool segment files read per micro-batch, at least 1 (default 64)")
    p.add_argument("--max-file-age", default=MAX_FILE_AGE,
                   help=f"read segments up to this much older than the newest seen "
                        f"(default {MAX_FILE_AGE}; Spark's own default of 7d skips older ones)")
    p.add_argument("--log-level", default=None,
                   help="debug, info (default), warning or error; also GATEWAY_LOG_LEVEL")
    args = p.parse_args(argv)
    if args.max_files_per_trigger < 1:
        p.error("--max-files-per-trigger must be >= 1")
    if not FILE_AGE_RE.fullmatch(args.max_file_age.strip().lower()):
        p.error(f"--max-file-age {args.max_file_age!r}: a whole number and a unit, one of "
                "us, ms, s, m, min, h, d (e.g. 30d)")
    conf: dict[str, str] = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            p.error(f"--conf {item!r}: KEY=VALUE expected")
        conf[key.strip()] = value.strip()
    args.conf = conf
    return args


def report_progress(query: StreamingQuery, stats: ExportStats, started: float) -> None:
    """One progress line for each micro-batch that read events and was not told yet."""
    for p in query.recentProgress:
        batch, rows = int(p["batchId"]), int(p["numInputRows"])
        if rows <= 0 or batch in stats.seen:
            continue
        stats.seen.add(batch)
        stats.batches += 1
        stats.events += rows
        seconds = round(time.monotonic() - started, 3)
        log.info("export progress: batch %d, %d events (%d in %d batches, %.1f s)", batch, rows,
                 stats.events, stats.batches, seconds,
                 extra={"batch": batch, "batch_events": rows, "events": stats.events,
                        "batches": stats.batches, "seconds": seconds})


def prepare_spool(spool: str) -> bool:
    """Make the local spool directory `spool` when it does not exist (an exporter may start
    before its gateway); True when it was made. A URI is left alone (Spark reads it): it was
    made as a local directory named like it (`hdfs:/...`). OSError when it cannot be made."""
    if URI_RE.match(spool):
        return False
    path = Path(spool)
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        if path.is_dir():
            return False
        raise
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the process exit code."""
    from gateway import logs

    args = _parse(argv)
    level = logs.level_from(args.log_level)
    logs.configure(level)
    try:
        created = prepare_spool(args.spool)
    except OSError as exc:
        log.error("gateway export: --spool %s: not a directory that can be made (%s)",
                  args.spool, exc.strerror)
        return 2
    if created:
        log.warning("gateway export: --spool %s did not exist: made it, empty (is it the "
                    "gateway's DATA_DIR/telemetry?)", args.spool,
                    extra={"spool": args.spool, "spool_created": True})
    started = time.monotonic()
    stats = ExportStats(spool_created=created)
    with tempfile.TemporaryDirectory(prefix="gateway-export-") as log_dir, \
            sparklog.stderr_as_json(level):
        spark = build_spark(args.master, level=level, conf=args.conf, log_dir=log_dir)
        try:
            return _run(spark, args, stats, started)
        except InvalidArgument as exc:
            log.error("gateway export: %s", exc.message)
            return 2
        finally:
            spark.stop()


def _run(spark: SparkSession, args: argparse.Namespace, stats: ExportStats,
         started: float) -> int:
    from pyspark.errors import StreamingQueryException
    if args.format == "parquet":
        stats.rows = -1  # counted from the events read (Spark's sink writes each one)
    query = start_export(
        spark,
        spool=args.spool,
        table=args.table,
        checkpoint=args.checkpoint,
        fmt=args.format,
        processing_time=args.processing_time,
        max_files_per_trigger=args.max_files_per_trigger,
        max_file_age=args.max_file_age,
        stats=stats,
    )
    stopping: list[int] = []

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while query.isActive and not stopping:
        try:
            query.awaitTermination(1)
        except StreamingQueryException:
            break  # told below, from query.exception(), as one line and a summary
        report_progress(query, stats, started)
    if stopping:
        log.info("signal %d: stopping the export query", stopping[0])
        query.stop()
    report_progress(query, stats, started)
    if stats.rows < 0:
        stats.rows = stats.events
    err = query.exception()
    summary = stats.as_dict(time.monotonic() - started)
    if err is not None:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        log.error("export query failed: %s", first, extra={"detail": str(err)})
        print(json.dumps({**summary, "error": first}), flush=True)
        return 1
    log.info("export finished: %d events in %d batches, %d rows appended, %.1f s",
             stats.events, stats.batches, stats.rows, summary["seconds"], extra=summary)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
