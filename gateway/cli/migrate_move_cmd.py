"""`gateway migrate rename` and `gateway migrate copy`: move a group's retries and dead letters
to another naming scheme's names on a running gateway, and copy messages between gateways and
brokers (`gateway.migrate`).

`add_subcommands(subparsers)` adds both to the `migrate` command's subparsers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TextIO

from gateway.admin_client import AdminClient
from gateway.cli import render
from gateway.cli.admin_cmd import EXIT_OK, connection_flags, run_admin, timeout_problem
from gateway.errors import GatewayError, MissingExtra
from gateway.migrate import copy as cp
from gateway.migrate.endpoint import (
    DestinationRefused,
    DestinationUnavailable,
    NotAllowed,
    PathOf,
    SourceKeepsCopies,
    SourceUnavailable,
)
from gateway.migrate.gateway_side import no_topic
from gateway.migrate.progress import Progress
from gateway.token_file import check_token, read_token_file

EXIT_LEFT = 7
"""rename: some messages were held by consumers and stayed at the old names."""

COPY_EXIT_FAILED = 1
COPY_EXIT_USAGE = 2
COPY_EXIT_DENIED = 4
COPY_EXIT_SOURCE = 5
COPY_EXIT_DESTINATION = 6
COPY_EXIT_REFUSED = 7
COPY_EXIT_KEEPS = 8
COPY_EXIT_INTERRUPTED = 130

RENAME_ABOUT = """Move a group's waiting retries and dead letters from the destinations of one
naming scheme (`%RETRY%billing`, say) to those of another (`orders-billing-RETRY`) on a
running gateway, so that consumers of the other product find them. Messages a consumer holds
stay where they are (exit status 7): run it again when they are settled. `--dry-run` counts."""

COPY_ABOUT = """Copy a group's messages (ready, waiting retries, dead letters) from a gateway or a
broker to another gateway or broker. Each message is stored once at the destination and then
removed at the source; a run stopped half-way is resumed by running it again
(docs/migration.md)."""

RENAME_EXITS = """exit statuses:
  0  done: nothing of the group is left at the old names
  1  the gateway failed the request
  2  bad usage, or a value the gateway refused (an unknown scheme, say), or push
     consumers of the group still use the old scheme
  4  not allowed: no or a wrong token, or not an admin
  5  the gateway cannot be reached or is not serving
  7  some messages were in flight with a consumer and stayed (with --dry-run: would
     stay): run it again later"""

COPY_EXITS = """URLs:
  gateway://HOST:PORT/TOPIC?group=G[&naming=S][&parts=ready,retry,dead-letter]
      a group on a running gateway (gateways:// with TLS); as a source a group the gateway
      does not know is refused unless new-group=true (a new group reads the topic from
      its first message); as a destination group may be left out when only ready
      messages arrive, and part=dead-letter stores every copy as a dead letter of the
      group
  and the schemes the installed products offer (see README, "Migration")

exit statuses:
  0  done: every message the source held was copied (or found copied) and removed there
  1  failed otherwise
  2  bad usage: a bad URL or flag (a naming= the gateway does not know, say), the
     source refused the request (no such topic, queue or group, consumers open), or the
     destination queue does not exist
  4  not allowed: a side refused the credentials
  5  the source cannot be reached (or went away); nothing unconfirmed was removed
  6  the destination cannot be reached; nothing unconfirmed was removed at the source
  7  the destination refused a copy; it and the messages after it stay at the source
  8  the source gateway cannot remove what it hands out (its back end is a broker):
     nothing was copied; copy from the broker directly
  130  interrupted; run it again to go on (nothing is copied twice)"""


def add_subcommands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `rename` and `copy` to the `migrate` command."""
    rename = sub.add_parser(
        "rename", help="move a group's waiting retries and dead letters to another naming "
        "scheme's destinations, on a running gateway",
        description=RENAME_ABOUT, epilog=RENAME_EXITS,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    rename.add_argument("--topic", required=True, help="the group's topic")
    rename.add_argument("--group", required=True, help="the consumer group")
    rename.add_argument("--from-scheme", dest="from_scheme", required=True,
                        help="the naming scheme they are under now (gateway plan lists them)")
    rename.add_argument("--to-scheme", dest="to_scheme", required=True,
                        help="the naming scheme to move them to")
    rename.add_argument("--dry-run", action="store_true", help="count; move nothing")
    connection_flags(rename)
    rename.set_defaults(run=lambda args: run_admin(_rename, args))

    copy = sub.add_parser(
        "copy", help="copy messages (ready, waiting retries, dead letters) from a gateway or "
        "broker to another, each once; the source keeps nothing that was copied",
        description=COPY_ABOUT, epilog=COPY_EXITS,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    copy.add_argument("--from", dest="source", required=True, metavar="URL",
                      help="where the messages are now (see URLs below)")
    copy.add_argument("--to", dest="destination", required=True, metavar="URL",
                      help="where they go (see URLs below)")
    copy.add_argument("--dry-run", action="store_true",
                      help="count what would be copied and check the destination where "
                           "that changes nothing there; copy nothing")
    copy.add_argument("--batch", type=int, default=cp.DEFAULT_BATCH,
                      help=f"messages per step (1..{cp.MAX_BATCH}, default {cp.DEFAULT_BATCH})")
    copy.add_argument("--from-token-file", dest="from_token_file", default="",
                      help="an admin token of a gateway source (default: $GATEWAY_FROM_TOKEN, "
                           "else $GATEWAY_TOKEN)")
    copy.add_argument("--to-token-file", dest="to_token_file", default="",
                      help="an admin token of a gateway destination (default: "
                           "$GATEWAY_TO_TOKEN, else $GATEWAY_TOKEN)")
    copy.add_argument("--tls-ca", dest="tls_ca", default="",
                      help="PEM roots for gateways:// sides")
    copy.add_argument("--timeout-s", dest="timeout_s", type=float, default=60.0,
                      help="give up on one call to a gateway, or a connect to a broker, after this "
                      "long (default 60)")
    copy.add_argument("--json", action="store_true", help="print the summary as JSON")
    copy.set_defaults(run=run_copy)


# ------------------------------------------------------------------------------ rename


async def _rename(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    retries = dead = left = 0
    while True:
        answer = await client.rename(args.topic, args.group, args.from_scheme, args.to_scheme,
                                     args.dry_run)
        retries += answer.retries
        dead += answer.dead_letters
        left = answer.left
        if args.dry_run or not answer.more:
            break
    result = {
        "topic": args.topic, "group": args.group, "from": args.from_scheme,
        "to": args.to_scheme, "dry_run": args.dry_run,
        "retry_from": answer.retry_from, "retry_to": answer.retry_to,
        "dead_letter_from": answer.dead_letter_from, "dead_letter_to": answer.dead_letter_to,
        "retries": retries, "dead_letters": dead, "left": left,
        "more": bool(args.dry_run and answer.more),
    }
    if args.json:
        render.emit_json(result, out)
    else:
        verb = "would move" if args.dry_run else "moved"
        rows = []
        if answer.retry_from:
            rows.append(("retries", f"{answer.retry_from} -> {answer.retry_to}", retries))
        if answer.dead_letter_from:
            rows.append(("dead letters", f"{answer.dead_letter_from} -> "
                         f"{answer.dead_letter_to}", dead))
        if not rows:
            out.write(f"{args.from_scheme} and {args.to_scheme} give group {args.group!r} of "
                      f"topic {args.topic!r} the same names: nothing to move\n")
        for part, names, count in rows:
            out.write(f"{verb} {count} {part}: {names}\n")
        if left:
            stay = "would stay" if args.dry_run else "stayed"
            out.write(f"{left} message(s) were in flight with a consumer and {stay} at the "
                      "old names: run it again once they are settled\n")
        if rows and not args.dry_run:
            view = await client.describe(args.topic, args.group)
            if view.naming == args.from_scheme:
                out.write(f"consumers of group {args.group!r} now subscribe with naming "
                          f"{args.to_scheme}; until one does, this gateway's views of the "
                          f"group (describe, retries, dlq) still show {args.from_scheme}'s "
                          "names\n")
    if not (retries or dead or left):
        topics = await client.topics()
        if args.topic not in topics:
            render.stderr(f"gateway: warning: {no_topic(args.topic, topics)}: nothing was "
                          "found to move")
    # A dry run predicts the real run's status: what is in flight now would stay (exit 7).
    return EXIT_LEFT if left else EXIT_OK


# ------------------------------------------------------------------------------ copy


def _token(path: str, *envs: str) -> str:
    if path:
        return read_token_file("token_file", path)
    for name in envs:
        if os.environ.get(name):
            return check_token(name, os.environ[name])
    return ""


def _products() -> dict[str, cp.SideFactory]:
    from gateway.product import installed

    found: dict[str, cp.SideFactory] = {}
    for product in installed():
        for scheme in product.migration_schemes:
            found[scheme] = product.migration_side
    return found


def _namings() -> list[str]:
    """The naming schemes the products installed here register (`Product.register`): named
    when a gateway URL's `naming=` is empty; the gateway judges a given one (its products and
    version may differ)."""
    from gateway.product import build_registry, installed

    return sorted(build_registry(installed()).schemes)


def _spellings() -> tuple[dict[str, int], dict[str, PathOf]]:
    """Each product scheme's default port and path spelling (`Product.migration_ports`,
    `migration_path`), for refusing a copy onto itself."""
    from gateway.product import installed

    ports: dict[str, int] = {}
    paths: dict[str, PathOf] = {}
    for product in installed():
        ports.update(product.migration_ports)
        paths.update(dict.fromkeys(product.migration_schemes, product.migration_path))
    return ports, paths


def run_copy(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """`gateway migrate copy`; its exit status (COPY_EXITS)."""
    stream = sys.stdout if out is None else out
    try:
        if problem := timeout_problem(args.timeout_s):
            raise GatewayError(problem)
        credentials = cp.Credentials(
            from_token=_token(args.from_token_file, "GATEWAY_FROM_TOKEN", "GATEWAY_TOKEN"),
            to_token=_token(args.to_token_file, "GATEWAY_TO_TOKEN", "GATEWAY_TOKEN"),
            ca_file=args.tls_ca, timeout_s=args.timeout_s)
        products = _products()
        cp.check_apart(args.source, args.destination, *_spellings())
        namings = _namings()
        source = cp.open_side(args.source, "source", credentials, products, namings)
        destination = cp.open_side(args.destination, "destination", credentials, products,
                                   namings)
    except (GatewayError, MissingExtra) as exc:
        render.stderr(f"gateway: error: {exc}")
        return COPY_EXIT_USAGE
    progress = Progress(sys.stderr)
    try:
        result = asyncio.run(cp.copy(source, destination,  # type: ignore[arg-type]
                                     dry_run=args.dry_run, batch=args.batch,
                                     progress=progress))
    except KeyboardInterrupt:
        render.stderr("\ngateway: interrupted: run the same command again to go on")
        return COPY_EXIT_INTERRUPTED
    except GatewayError as exc:
        if progress.terminal and progress.done:
            sys.stderr.write("\n")
        render.stderr(f"gateway: error: {exc.message}"
                      + (f" (after {progress.done} message(s) copied)" if progress.done else ""))
        return _copy_exit(exc)
    if args.json:
        render.emit_json(result.as_dict(), stream)
    else:
        stream.write(result.summary() + "\n")
    if result.found_none:
        # Some sources cannot tell a topic or queue that does not exist from an empty one.
        render.stderr(f"gateway: warning: 0 messages found at {result.source}: if that is not "
                      "expected, check the topic or queue and the group or subscription in "
                      "--from (a source that cannot tell a name that does not exist from an "
                      "empty one reads it as empty)")
    return EXIT_OK


def _copy_exit(exc: GatewayError) -> int:
    if isinstance(exc, SourceUnavailable):
        return COPY_EXIT_SOURCE
    if isinstance(exc, DestinationUnavailable):
        return COPY_EXIT_DESTINATION
    if isinstance(exc, DestinationRefused):
        return COPY_EXIT_REFUSED
    if isinstance(exc, NotAllowed):
        return COPY_EXIT_DENIED
    if isinstance(exc, SourceKeepsCopies):
        return COPY_EXIT_KEEPS
    if exc.code in ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND"):
        return COPY_EXIT_USAGE
    return COPY_EXIT_FAILED

