"""Read the telemetry lake back without Spark: a Delta table or a Spark Parquet sink directory.

A Delta table is read through `deltalake` (only committed files). A Parquet directory written by
Spark's file sink is read through its `_spark_metadata` log, so files of a batch that a crash left
half-written are never read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from gateway.errors import FailedPrecondition
from gateway.telemetry.events import PARTITION_COLUMNS, arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]


def rows_to_arrow(rows: Iterable[Mapping[str, Any]]) -> pa.Table:
    """Lake rows as an Arrow table; `event_date` is derived from `ts_ms` (UTC) when missing."""
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

    schema = arrow_schema()
    out: list[dict[str, Any]] = []
    for row in rows:
        full = dict(row)
        if full.get("event_date") is None:
            full["event_date"] = datetime.fromtimestamp(full["ts_ms"] / 1000, UTC).date()
        out.append(full)
    return pa.Table.from_pylist(out, schema=schema)


def lake_format(table: str | os.PathLike[str]) -> str:
    """`delta` or `parquet`, from what the directory holds; raises FileNotFoundError if neither."""
    root = Path(table)
    if (root / "_delta_log").is_dir():
        return "delta"
    if (root / "_spark_metadata").is_dir():
        return "parquet"
    raise FileNotFoundError(f"{root} is neither a Delta table nor a Spark Parquet sink")


def committed_parquet_files(table: str | os.PathLike[str]) -> list[str]:
    """Data files that committed batches of a Spark file sink added (per `_spark_metadata`)."""
    meta = Path(table) / "_spark_metadata"
    added: set[str] = set()
    deleted: set[str] = set()
    for entry in sorted(meta.iterdir()):
        name = entry.name
        if name.startswith(".") or not name.removesuffix(".compact").isdigit():
            continue
        lines = entry.read_text().splitlines()
        for line in lines[1:]:
            if not line.strip():
                continue
            record = json.loads(line)
            path = unquote(urlparse(record["path"]).path)
            (deleted if record.get("action") == "delete" else added).add(path)
    return sorted(added - deleted)


def read_lake(table: str | os.PathLike[str]) -> pa.Table:
    """Every committed row of the lake, with the columns of `events.arrow_schema()`.

    Raises FileNotFoundError when `table` is no lake, and FailedPrecondition naming the table
    when it is one that cannot be read (a corrupt log or data file, an unreadable file)."""
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

    fmt = lake_format(table)
    refused: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, pa.ArrowException)
    if fmt == "delta":
        from deltalake.exceptions import DeltaError

        refused += (DeltaError,)
    try:
        return _read(table, fmt)
    except refused as exc:
        raise unreadable(table, exc) from exc


def unreadable(table: str | os.PathLike[str], exc: BaseException) -> FailedPrecondition:
    """The error for a lake `table` that the reader refused with `exc` (its first line)."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return FailedPrecondition(f"{os.fspath(table)} cannot be read as a lake: {first}")


def _read(table: str | os.PathLike[str], fmt: str) -> pa.Table:
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
    import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]

    schema = arrow_schema()
    if fmt == "delta":
        from deltalake import DeltaTable

        # The files of the table's current version, read by pyarrow itself: reading through
        # deltalake's pyarrow dataset (its Python file system called from pyarrow's I/O
        # threads) made some runs abort at exit ("terminate called without an active
        # exception", status 134), a report that failed right after reading the most often.
        files = DeltaTable(str(table)).file_uris()
    else:
        files = committed_parquet_files(table)
    if not files:
        return schema.empty_table()
    part_schema = pa.schema([schema.field(name) for name in PARTITION_COLUMNS])
    dataset = ds.dataset(
        files,
        format="parquet",
        partitioning=ds.partitioning(part_schema, flavor="hive"),
        partition_base_dir=str(Path(table).resolve()),
    )
    return dataset.to_table().select(schema.names).cast(schema)
