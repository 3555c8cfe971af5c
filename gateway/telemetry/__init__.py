"""Retry telemetry: transition events -> spool (events, spool) -> PySpark export into a Delta or
Parquet lake (export, lake) -> HTML report with charts (analysis, charts, report)."""
