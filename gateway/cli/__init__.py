"""The `gateway` command: `plan`, `serve`, `report`, `export`, `maintain`, `migrate`, and the
admin commands (`topics`, `groups`, `describe`, `retries`, `purge`, `dlq`; see
`gateway.cli.admin_cmd`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence

from gateway.errors import GatewayError, MissingExtra

DISTRIBUTION = "retry-gateway"
TELEMETRY_MODULES = {
    "report": {"matplotlib": "matplotlib", "pyarrow": "pyarrow", "deltalake": "deltalake"},
    "export": {"pyspark": "pyspark", "pyarrow": "pyarrow", "deltalake": "deltalake"},
    "maintain": {"pyarrow": "pyarrow", "deltalake": "deltalake"},
}
"""What `gateway report` and `gateway export` import (module -> distribution): the telemetry
extra's libraries, which the base install leaves out (Spark alone is hundreds of MB)."""


def version() -> str:
    """The installed distribution's version (the package's own when run from a source tree)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version(DISTRIBUTION)
    except PackageNotFoundError:
        from gateway import __version__

        return __version__


def require_extra(command: str, extra: str, modules: Mapping[str, str]) -> None:
    """Raise MissingExtra (one line naming the extra) unless every module imports."""
    from gateway.product import importable

    missing = [dist for module, dist in modules.items() if not importable(module)]
    if missing:
        raise MissingExtra(f"`gateway {command}` needs the {extra} extra ({', '.join(missing)} "
                           f"not installed): pip install '{DISTRIBUTION}[{extra}]'")


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list[:1] in (["report"], ["export"], ["maintain"]):
            return _telemetry(args_list[0], args_list[1:])
        return _main(args_list)
    except GatewayError as exc:
        print(f"gateway: error: {exc.message}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _reader_gone()


EXIT_READER_GONE = 128 + 13
"""The status of a command whose output's reader went away (`gateway dlq list ... | head`):
a shell's status for a Unix tool killed by SIGPIPE (13)."""


def _reader_gone() -> int:
    """Stop quietly once stdout's reader has gone: what is still buffered goes nowhere, where
    each command ended with a BrokenPipeError traceback (and another at the exit's flush)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_READER_GONE


def _telemetry(command: str, argv: list[str]) -> int:
    """`report` and `export` parse their own arguments (see gateway.telemetry)."""
    require_extra(command, "telemetry", TELEMETRY_MODULES[command])
    if command == "report":
        from gateway.product import build_registry, installed
        from gateway.telemetry import report

        return int(report.main(argv, build_registry(installed()).retry_tables) or 0)
    from gateway.telemetry import export

    if command == "maintain":
        from gateway.telemetry import maintain

        return int(maintain.main(argv) or 0)
    return int(export.main(argv) or 0)


def parser() -> argparse.ArgumentParser:
    """The `gateway` command's parser, with every subcommand."""
    from gateway.cli import admin_cmd, migrate_cmd, plan_cmd, serve_cmd

    p = argparse.ArgumentParser(prog="gateway", description=__doc__)
    p.add_argument("--version", action="version", version=f"gateway ({DISTRIBUTION}) {version()}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True)
    plan_cmd.add_parser(sub)
    serve_cmd.add_parser(sub)
    _add_report(sub)
    admin_cmd.add_parsers(sub)
    migrate_cmd.add_parser(sub)
    return p


def _main(args_list: list[str]) -> int:
    # A command that reads its own words (`takes_extra`) gets them all as `argv`.
    p = parser()
    args, extra = p.parse_known_args(args_list)
    if extra and not getattr(args, "takes_extra", False):
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    args.argv = args_list
    code: int = args.run(args)
    return code


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Listed for --help; `main` hands their arguments to the telemetry modules untouched."""
    sub.add_parser("report", help="write an HTML report with PNG charts from the telemetry lake "
                   "(gateway report --table DIR --out DIR; needs the telemetry extra)")
    sub.add_parser("export", help="stream the telemetry spool into the lake with PySpark "
                   "(gateway export --spool DIR --table DIR --checkpoint DIR; needs the telemetry "
                   "extra)")
    sub.add_parser("maintain", help="compact the lake's small files and vacuum old ones "
                   "(gateway maintain --table DIR; needs the telemetry extra)")


if __name__ == "__main__":
    raise SystemExit(main())
