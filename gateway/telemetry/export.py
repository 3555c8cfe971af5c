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

Run `python -m gateway.telemetry.export --spool DIR --table DIR --checkpoint DIR`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Literal

from gateway.telemetry.events import PARTITION_COLUMNS, arrow_schema, spark_schema

__all__ = [
    "DeltaBatchWriter",
    "build_spark",
    "event_date_column",
    "main",
    "spark_schema",
    "start_export",
]

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

Format = Literal["delta", "parquet"]
WRITER_ID_FILE = "gateway-writer-id"
META_WRITER = "gateway.writer_id"
META_BATCH = "gateway.batch_id"


def build_spark(
    master: str = "local[*]", app_name: str = "gateway-telemetry-export"
) -> SparkSession:
    """Start (or join) the local Spark session the exporter runs in."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.files.ignoreMissingFiles", "true")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


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


@dataclass(frozen=True, slots=True)
class DeltaBatchWriter:
    """`foreachBatch` function: appends one micro-batch to a Delta table at most once."""

    table: str
    writer_id: str

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
) -> StreamingQuery:
    """Start the streaming query; `processing_time` None means an availableNow (catch-up) run."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.schema(spark_schema())
        .option("maxFilesPerTrigger", max_files_per_trigger)
        .option("pathGlobFilter", "events-*.jsonl")
        .option("mode", "DROPMALFORMED")
        .json(spool)
        .where(F.col("event_id").isNotNull() & F.col("ts_ms").isNotNull())
        .withColumn("event_date", event_date_column())
    )
    if fmt == "delta":
        writer = DeltaBatchWriter(table, writer_id_for(checkpoint))
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
        stream = stream.trigger(processingTime=processing_time)
    return stream.start()


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gateway export",
        description="Stream spooled retry transition events into a Delta or Parquet data lake.",
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
                   help="Spark master URL (default local[*]: every core of this machine)")
    p.add_argument("--max-files-per-trigger", type=int, default=64,
                   help="spool segment files read per micro-batch, at least 1 (default 64)")
    args = p.parse_args(argv)
    if args.max_files_per_trigger < 1:
        p.error("--max-files-per-trigger must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the process exit code."""
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    Path(args.spool).mkdir(parents=True, exist_ok=True)
    spark = build_spark(args.master)
    query = start_export(
        spark,
        spool=args.spool,
        table=args.table,
        checkpoint=args.checkpoint,
        fmt=args.format,
        processing_time=args.processing_time,
        max_files_per_trigger=args.max_files_per_trigger,
    )
    stopping: list[int] = []

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        while query.isActive and not stopping:
            query.awaitTermination(1)
        if stopping:
            log.info("signal %d: stopping the export query", stopping[0])
            query.stop()
        err = query.exception()
        if err is not None:
            log.error("export query failed: %s", err)
            return 1
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
