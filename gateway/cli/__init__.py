"""The `gateway` command: `plan`, `serve`, `report`, `export`, and the admin commands (`topics`,
`groups`, `describe`, `retries`, `purge`, `dlq`; see `gateway.cli.admin_cmd`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gateway.errors import GatewayError


def main(argv: Sequence[str] | None = None) -> int:
    from gateway.cli import admin_cmd, plan_cmd, serve_cmd

    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["report"]:
        from gateway.product import build_registry, installed
        from gateway.telemetry import report

        return int(report.main(args_list[1:], build_registry(installed()).retry_tables) or 0)
    if args_list[:1] == ["export"]:
        from gateway.telemetry import export

        return int(export.main(args_list[1:]) or 0)
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    plan_cmd.add_parser(sub)
    serve_cmd.add_parser(sub)
    _add_report(sub)
    admin_cmd.add_parsers(sub)
    _add_migrate(sub)
    args = parser.parse_args(args_list)
    try:
        code: int = args.run(args)
    except GatewayError as exc:
        print(f"gateway: error: {exc.message}", file=sys.stderr)
        return 2
    return code


def _add_migrate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`gateway migrate ...` (a minimal hook: `rename` and `copy` from `migrate_move_cmd`)."""
    from gateway.cli import migrate_move_cmd

    migrate = sub.add_parser("migrate", help="move retries, dead letters and backlogs between "
                             "naming schemes, gateways and brokers")
    migrate_move_cmd.add_subcommands(migrate.add_subparsers(dest="migrate_command",
                                                            required=True))


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Listed for --help; `main` hands their arguments to the telemetry modules untouched."""
    sub.add_parser("report", help="write an HTML report with PNG charts from the telemetry lake "
                   "(gateway report --table DIR --out DIR)")
    sub.add_parser("export", help="stream the telemetry spool into the lake with PySpark "
                   "(gateway export --spool DIR --table DIR --checkpoint DIR)")


if __name__ == "__main__":
    raise SystemExit(main())
