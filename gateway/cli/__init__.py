"""The `gateway` command: `plan`, `serve`, `report`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gateway.errors import GatewayError


def main(argv: Sequence[str] | None = None) -> int:
    from gateway.cli import plan_cmd, serve_cmd

    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    plan_cmd.add_parser(sub)
    serve_cmd.add_parser(sub)
    _add_report(sub)
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except GatewayError as exc:
        print(f"gateway: error: {exc.message}", file=sys.stderr)
        return 2
    return code


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser(
        "report", help="write an HTML report with charts from the telemetry lake", add_help=False
    )
    report.add_argument("rest", nargs=argparse.REMAINDER)

    def run(args: argparse.Namespace) -> int:
        from gateway.telemetry import report as report_module

        return int(report_module.main(list(args.rest)) or 0)

    report.set_defaults(run=run)


if __name__ == "__main__":
    raise SystemExit(main())
