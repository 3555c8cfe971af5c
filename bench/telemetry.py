"""Telemetry benchmark: the cost of `Spool.record` and events/s from the spool into the lake.

    python -m bench.telemetry [--events 200000] [--format delta|parquet|both]

1. `Spool.record` per event, with the background writer running (what the engine pays), and the
   writer's own throughput (serialize + write + fsync segments).
2. The exporter with an availableNow trigger over every spooled event into a fresh table; Spark
   start-up is timed apart from the run.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession

from gateway.telemetry import export
from gateway.telemetry.events import TransitionEvent
from gateway.telemetry.lake import read_lake
from gateway.telemetry.simulate import lifecycles
from gateway.telemetry.spool import Spool


def bench_record(events: list[TransitionEvent], spool_dir: Path) -> Spool:
    """Record every event through a background-writer spool; print the per-event cost."""
    spool = Spool(spool_dir, max_buffered_events=len(events) + 1, segment_max_age_ms=1_000)
    per_call: list[float] = []
    chunk = 1_000
    start = time.perf_counter()
    for i in range(0, len(events), chunk):
        t0 = time.perf_counter_ns()
        for e in events[i : i + chunk]:
            spool.record(e)
        per_call.append((time.perf_counter_ns() - t0) / min(chunk, len(events) - i))
    recorded = time.perf_counter() - start
    spool.flush()
    drained = time.perf_counter() - start
    spool.close()
    segments = spool.segments()
    size = spool.total_bytes
    print(f"events                 {len(events):>12,}")
    print(f"Spool.record mean      {statistics.fmean(per_call):>12.0f} ns/event")
    print(f"Spool.record p50/p99   {_pct(per_call, 50):>6.0f} / {_pct(per_call, 99):.0f} ns/event")
    print(f"record loop            {len(events) / recorded:>12,.0f} events/s")
    print(f"spool written          {len(events) / drained:>12,.0f} events/s (record + write)")
    mb = size / 1e6
    print(f"segments               {len(segments):>12,} ({mb:.1f} MB, dropped {spool.dropped})")
    return spool


def _pct(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, len(ordered) * p // 100)]


def run_once(spark: SparkSession, spool_dir: Path, work: Path, fmt: export.Format) -> float:
    """One availableNow export of `spool_dir` into a fresh table; returns seconds taken."""
    table, checkpoint = work / "table", work / "checkpoint"
    t0 = time.perf_counter()
    query = export.start_export(
        spark, spool=str(spool_dir), table=str(table), checkpoint=str(checkpoint), fmt=fmt
    )
    query.awaitTermination()
    took = time.perf_counter() - t0
    if query.exception() is not None:
        raise SystemExit(f"export failed: {query.exception()}")
    return took


def bench_export(
    spark: SparkSession, spool_dir: Path, work: Path, fmt: export.Format, expected: int
) -> None:
    """Export the whole spool twice into fresh tables (cold JVM, then warm); print events/s."""
    for label in ("cold", "warm"):
        out = work / f"{fmt}-{label}"
        took = run_once(spark, spool_dir, out, fmt)
        rows = len(read_lake(out / "table"))
        status = "ok" if rows == expected else f"MISMATCH (expected {expected})"
        print(f"[{fmt}/{label}] availableNow {took:>7.1f} s for {rows:,} rows: {status}")
        print(f"[{fmt}/{label}] spool -> lake {rows / took:>7,.0f} events/s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--format", choices=("delta", "parquet", "both"), default="delta")
    p.add_argument("--keep", help="work directory to keep (default: a temporary one)")
    args = p.parse_args()

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-telemetry-"))
    try:
        events = list(itertools.islice(lifecycles(args.events), args.events))
        bench_record(events, work / "spool")
        formats: list[export.Format] = (
            ["delta", "parquet"] if args.format == "both" else [args.format]
        )
        t0 = time.perf_counter()
        spark = export.build_spark()
        print(f"spark start-up         {time.perf_counter() - t0:>12.1f} s")
        for fmt in formats:
            bench_export(spark, work / "spool", work, fmt, len(events))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
