"""`gateway serve`: run the gateway (filled in with the server)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the gateway")
    p.set_defaults(run=lambda args: 1)
