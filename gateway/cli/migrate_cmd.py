"""`gateway migrate`: moving a consumer group from one product to another.

Each subcommand lives in a module of its own that offers `add_subcommands(subparsers)`;
registering one here is one import and one call in `add_parser`.
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "migrate", help="plan a move between products (and move what a group holds)",
        description="Move a consumer group from one product to another: see what changes, "
                    "then move what the group holds (docs/migration.md).",
    )
    subcommands = parser.add_subparsers(dest="migrate_command", required=True,
                                        metavar="SUBCOMMAND")
    from gateway.cli import migrate_move_cmd, migrate_plan_cmd

    migrate_plan_cmd.add_subcommands(subcommands)
    migrate_move_cmd.add_subcommands(subcommands)
