"""`gateway maintain`: keep the Delta lake small and fast to read, with `deltalake` (no Spark).

The exporter appends one small file per partition and micro-batch; a lake fed for months holds
many thousands. Maintenance does, in order:

* compaction: small files of each partition rewritten into files of about `--target-size-mb`
  (the rows and the exporter's batch records stay; readers see the same table);
* a checkpoint of the Delta log, and its expired log entries removed;
* vacuum: data files no version younger than `--retention-hours` needs are deleted (Delta's own
  default is 168 h, 7 days; a shorter retention is allowed, with a warning, since a reader or a
  writer still working on an older version then fails).

It may run while the exporter runs: a commit that meets a concurrent one fails cleanly (exit 1,
nothing changed) and the next run does the work. Prints a JSON summary on standard output.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.errors import FailedPrecondition, InvalidArgument
from gateway.telemetry.lake import unreadable

log = logging.getLogger(__name__)

DELTA_RETENTION_HOURS = 168
"""Delta's default: files a version of the last 7 days needs are kept."""
DEFAULT_TARGET_MB = 128


@dataclass(frozen=True, slots=True)
class Maintenance:
    """What a run did."""

    files_before: int
    files_after: int
    files_compacted: int
    """Small files rewritten (removed from the table)."""
    files_written: int
    """Files written in their place."""
    files_vacuumed: int
    """Data files deleted from storage (or that would be, in a dry run)."""
    version: int

    def as_dict(self) -> dict[str, Any]:
        return {"files_before": self.files_before, "files_after": self.files_after,
                "files_compacted": self.files_compacted, "files_written": self.files_written,
                "files_vacuumed": self.files_vacuumed, "version": self.version}


def maintain(
    table: str,
    *,
    compact: bool = True,
    vacuum: bool = True,
    target_size_mb: int = DEFAULT_TARGET_MB,
    retention_hours: int = DELTA_RETENTION_HOURS,
    dry_run: bool = False,
) -> Maintenance:
    """Compact, checkpoint and vacuum the Delta table at `table` (see the module doc)."""
    from deltalake import DeltaTable

    if target_size_mb < 1:
        raise InvalidArgument("target_size_mb", target_size_mb, "1 or more MiB")
    if retention_hours < 0:
        raise InvalidArgument("retention_hours", retention_hours, "0 or more hours")
    from deltalake.exceptions import DeltaError

    try:
        is_table = DeltaTable.is_deltatable(table)
    except OSError:  # a file where the table should be
        is_table = False
    if not is_table:
        raise InvalidArgument("table", table, "a Delta table (gateway export's default format)")
    try:
        dt = DeltaTable(table)
    except (DeltaError, OSError) as exc:  # a corrupt log: nothing changed yet
        raise unreadable(table, exc) from exc
    before = len(dt.file_uris())
    removed = added = 0
    if compact and not dry_run:
        metrics = dt.optimize.compact(target_size=target_size_mb << 20)
        removed, added = int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])
        log.info("compacted %d files into %d", removed, added,
                 extra={"files_compacted": removed, "files_written": added})
        dt = DeltaTable(table)
        dt.create_checkpoint()
        dt.cleanup_metadata()
    vacuumed: list[str] = []
    if vacuum:
        enforce = retention_hours >= DELTA_RETENTION_HOURS
        if not enforce:
            log.warning("vacuum with a retention of %d h, under Delta's %d h: a reader or writer "
                        "still on an older version fails", retention_hours,
                        DELTA_RETENTION_HOURS)
        vacuumed = dt.vacuum(retention_hours=retention_hours, dry_run=dry_run,
                             enforce_retention_duration=enforce)
        log.info("vacuum: %d files %s", len(vacuumed),
                 "would be deleted" if dry_run else "deleted",
                 extra={"files_vacuumed": len(vacuumed), "dry_run": dry_run})
    dt = DeltaTable(table)
    return Maintenance(before, len(dt.file_uris()), removed, added, len(vacuumed), dt.version())


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gateway maintain",
        description="Compact the telemetry lake's small files and vacuum files no longer "
                    "needed (Delta tables, with deltalake). Prints a JSON summary.",
    )
    p.add_argument("--table", required=True, help="the Delta table gateway export writes")
    p.add_argument("--target-size-mb", type=int, default=DEFAULT_TARGET_MB,
                   help=f"size of compacted files (default {DEFAULT_TARGET_MB} MiB)")
    p.add_argument("--retention-hours", type=int, default=DELTA_RETENTION_HOURS,
                   help=f"keep the files versions of the last N hours need "
                        f"(default {DELTA_RETENTION_HOURS})")
    p.add_argument("--no-compact", dest="compact", action="store_false",
                   help="leave small files as they are (default: compact them)")
    p.add_argument("--no-vacuum", dest="vacuum", action="store_false",
                   help="delete no files (default: vacuum what the retention allows)")
    p.add_argument("--dry-run", action="store_true",
                   help="change nothing; count the files vacuum would delete (default: off)")
    p.add_argument("--log-level", default=None,
                   help="debug, info (default), warning or error; also GATEWAY_LOG_LEVEL")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the process exit code."""
    from gateway import logs

    args = _parse(argv)
    logs.configure(logs.level_from(args.log_level))
    started = time.monotonic()
    try:
        done = maintain(args.table, compact=args.compact, vacuum=args.vacuum,
                        target_size_mb=args.target_size_mb,
                        retention_hours=args.retention_hours, dry_run=args.dry_run)
    except (InvalidArgument, FailedPrecondition) as exc:
        log.error("gateway maintain: %s", exc.message)
        return 2
    except Exception as exc:  # a commit conflict, storage trouble: nothing half-done
        log.exception("gateway maintain failed: %s", exc)
        return 1
    print(json.dumps({**done.as_dict(), "seconds": round(time.monotonic() - started, 3)}),
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
