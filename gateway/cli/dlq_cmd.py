"""`gateway dlq list|show|resend|delete|purge TOPIC GROUP`: a group's dead letters."""

from __future__ import annotations

import argparse
import re
import time
from datetime import UTC, datetime
from typing import TextIO

import grpc

from gateway.admin_client import AdminClient
from gateway.cli import render
from gateway.cli.admin_cmd import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_STATUSES,
    Command,
    confirm,
    connection_flags,
    run_admin,
)
from gateway.core.properties import TIME_MAX_MS
from gateway.errors import InvalidArgument
from gateway.preview import duration, escaped, iso_ms, one_line, preview, unescaped
from gateway.v1 import admin_pb2 as pb

ID_HELP = ("a dead letter's id, or the id as `dlq list` prints it (a backslash as \\\\, a line "
           "break as \\n, other control characters as \\xHH, \\uHHHH): the id itself is "
           "looked for first, then the one printed so")
_AGO = re.compile(r"(\d+)\s*(s|m|min|h|d)")
_UNITS_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dlq = sub.add_parser("dlq", help="list, show, resend, delete or purge a group's dead letters")
    verbs = dlq.add_subparsers(dest="verb", required=True)

    def verb(name: str, help_text: str, run: Command) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=help_text, description=help_text, epilog=EXIT_STATUSES,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("topic")
        p.add_argument("group")
        connection_flags(p)
        p.set_defaults(run=lambda args: run_admin(run, args))
        return p

    p = verb("list", "a page of dead letters (oldest first), or every page with --all", list_)
    _filter_flags(p)
    p.add_argument("--limit", type=int, default=50, help="dead letters a page (1..1000, "
                                                         "default 50)")
    p.add_argument("--page-token", dest="page_token", default="",
                   help="the token a previous page printed, for the next page")
    p.add_argument("--all", action="store_true", help="follow every page")
    p = verb("show", "one dead letter: its body, properties, reason and timeline", show)
    p.add_argument("message_id", help=ID_HELP)
    p = verb("resend", "publish dead letters again to their original topic", resend)
    p.add_argument("message_ids", nargs="*", metavar="MESSAGE_ID", help=ID_HELP)
    p.add_argument("--all", action="store_true",
                   help="every dead letter of the group (that matches the filter flags)")
    _filter_flags(p)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p = verb("delete", "delete dead letters without resending them", delete)
    p.add_argument("message_ids", nargs="*", metavar="MESSAGE_ID", help=ID_HELP)
    _filter_flags(p)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p = verb("purge", "delete every dead letter of the group (that matches the filter flags)",
             purge)
    _filter_flags(p)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _filter_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("filter")
    g.add_argument("--reason", default="", help="reason contains this (any case)")
    g.add_argument("--text", default="",
                   help="the id, key, tag, a property or the body contains this (any case)")
    g.add_argument("--min-attempt", dest="min_attempt", type=int, default=0,
                   help="the dead letter's attempt count is at least this (default 0: no bound)")
    g.add_argument("--max-attempt", dest="max_attempt", type=int, default=0,
                   help="the dead letter's attempt count is at most this (default 0: no "
                        "bound)")
    g.add_argument("--since", default="",
                   help="dead-lettered at or after: ISO time (2024-05-01T10:00Z), ms since the "
                        "epoch, or an age (30m, 2h, 1d)")
    g.add_argument("--until", default="", help="dead-lettered before (same forms as --since)")


MAX_TIME_MS = TIME_MAX_MS
"""The latest instant a filter may name: the end of year 9999 UTC, as the gateway checks it;
more did not fit the request's int64 (a traceback)."""


def parse_time(field: str, text: str, now_ms: int | None = None) -> int:
    """ISO 8601 (UTC unless it says otherwise), epoch ms, or an age such as `2h`; 0 for ""."""
    text = text.strip()
    if not text:
        return 0
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if text.isascii() and text.isdigit():
        if int(text) > MAX_TIME_MS:
            raise InvalidArgument(field, text, f"ms since the epoch up to {MAX_TIME_MS} "
                                               "(the end of year 9999)")
        # 0 is "no bound" in a filter: `--until 0` dropped the bound (and `dlq delete` with it
        # deleted every match of the other flags); the epoch's first ms bounds it as the ISO
        # form of the same instant does.
        return max(1, int(text))
    m = _AGO.fullmatch(text)
    if m:
        return max(1, now - int(m.group(1)) * _UNITS_S[m.group(2)] * 1000)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(field, text, "an ISO time (2024-05-01T10:00Z), ms since the "
                                           "epoch, or an age (30m, 2h, 1d)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    ms = int(moment.timestamp() * 1000)
    if ms > MAX_TIME_MS:
        raise InvalidArgument(field, text, "a time up to the end of year 9999 UTC")
    return max(1, ms)


MAX_ATTEMPT = 2**32 - 1
"""The largest attempt bound the filter holds (a uint32)."""


def filter_of(args: argparse.Namespace) -> pb.DeadLetterFilter | None:
    for name in ("min_attempt", "max_attempt"):
        if not 0 <= getattr(args, name) <= MAX_ATTEMPT:
            raise InvalidArgument(name, getattr(args, name), f"0 (no bound) .. {MAX_ATTEMPT}")
    where = pb.DeadLetterFilter(
        reason=args.reason, text=args.text, min_attempt=args.min_attempt,
        max_attempt=args.max_attempt, since_ms=parse_time("since", args.since),
        until_ms=parse_time("until", args.until),
    )
    return None if where == pb.DeadLetterFilter() else where


def _describe_filter(where: pb.DeadLetterFilter | None) -> str:
    if where is None:
        return ""
    parts = []
    if where.reason:
        parts.append(f"reason contains {where.reason!r}")
    if where.text:
        parts.append(f"text contains {where.text!r}")
    if where.min_attempt:
        parts.append(f"attempt >= {where.min_attempt}")
    if where.max_attempt:
        parts.append(f"attempt <= {where.max_attempt}")
    if where.since_ms:
        parts.append(f"since {iso_ms(where.since_ms)}")
    if where.until_ms:
        parts.append(f"before {iso_ms(where.until_ms)}")
    return " that match " + ", ".join(parts)


async def list_(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    if not 1 <= args.limit <= 1000:
        raise InvalidArgument("limit", args.limit, "1..1000")
    where = filter_of(args)
    token = args.page_token
    found: list[pb.DeadLetterMessage] = []
    while True:
        page = await client.dead_letters(args.topic, args.group, limit=args.limit,
                                         page_token=token, where=where)
        found.extend(page.dead_letters)
        token = page.next_page_token
        if not args.all or not token:
            break
    if args.json:
        render.emit_json({"dead_letters": [render.to_dict(d) for d in found],
                          "next_page_token": token}, out)
        return EXIT_OK
    rows = [[escaped(d.message_id), d.attempt, iso_ms(d.dead_lettered_ms) or "-", d.reason or "-",
             _body_line(d.body)] for d in found]
    render.table(rows, ["MESSAGE ID", "ATTEMPT", "DEAD-LETTERED", "REASON", "BODY"], out)
    if token:
        render.stderr(f"more: --page-token {token}")
    return EXIT_OK


def _body_line(body: bytes) -> str:
    shown = preview(body)
    if shown.kind == "binary":
        return f"<{shown.size} bytes of binary>"
    return one_line(" ".join(body[:400].decode("utf-8", "replace").split()), 40)


async def _letter(client: AdminClient, topic: str, group: str, given: str, *,
                  required: bool = False) -> tuple[str, pb.DeadLetterMessage | None]:
    """The dead letter `given` names, and its id: the one with id `given`, else the one `dlq
    list` prints as `given` (escaped); None (and `given`) when neither is a dead letter, or
    with `required` the NOT_FOUND of `given` itself."""
    missing: grpc.aio.AioRpcError | None = None
    for message_id in dict.fromkeys((given, unescaped(given) or given)):
        try:
            return message_id, await client.dead_letter(topic, group, message_id)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            missing = missing or exc
    if required and missing is not None:
        raise missing
    return given, None


async def _ids(client: AdminClient, topic: str, group: str, given: list[str]) -> list[str]:
    """Each id as `_letter` finds it (one look-up for each id with a backslash only)."""
    found = []
    for message_id in given:
        if unescaped(message_id) is not None:
            message_id, _ = await _letter(client, topic, group, message_id)
        found.append(message_id)
    return found


def _text(field: str, value: str) -> str:
    """A command-line id that UTF-8 can carry (bytes that are not UTF-8 arrive as lone
    surrogates, which the request could not encode: a traceback)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(field, value, "UTF-8 text") from None
    return value


async def show(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    _text("message_id", args.message_id)
    message_id, letter = await _letter(client, args.topic, args.group, args.message_id,
                                       required=True)
    assert letter is not None
    timeline = await client.timeline(args.topic, args.group, message_id)
    if args.json:
        render.emit_json({"dead_letter": render.to_dict(letter),
                          "timeline": render.to_dict(timeline)}, out)
        return EXIT_OK
    render.pairs([
        ("message id", escaped(letter.message_id)), ("original topic", letter.original_topic),
        ("attempt", letter.attempt), ("reason", letter.reason or "-"),
        ("dead-lettered", iso_ms(letter.dead_lettered_ms) or "-"),
        ("key", escaped(letter.key) or "-"), ("tag", escaped(letter.tag) or "-"),
    ], out)
    shown = preview(letter.body)
    out.write(f"\nbody ({shown.kind}, {shown.size} bytes"
              + (f", first {shown.shown} shown" if shown.truncated else "") + "):\n")
    out.write("".join(c if c.isprintable() or c == "\n" else "?" for c in shown.text) + "\n")
    if letter.properties:
        out.write("\nproperties:\n")
        render.table(sorted(letter.properties.items()), ["NAME", "VALUE"], out)
    out.write(f"\ntimeline (from {timeline.source or 'nowhere: unknown message'}"
              + ("" if timeline.complete else "; transitions may be missing") + "):\n")
    rows = []
    for e in timeline.events:
        what = f"{e.from_state or '-'} -> {e.to_state}"
        extra = [f"wait {duration(e.delay_ms)}" if e.delay_ms else "", e.reason,
                 f"to {e.destination}" if e.destination else ""]
        rows.append([iso_ms(e.ts_ms), e.attempt, what, "; ".join(x for x in extra if x)])
    render.table(rows, ["TIME", "ATTEMPT", "TRANSITION", "DETAILS"], out)
    return EXIT_OK


def _which(args: argparse.Namespace, verb: str) -> tuple[list[str], pb.DeadLetterFilter | None]:
    """The ids and filter a verb acts on; neither is refused before anything is asked (`delete`
    has no --all: `purge` deletes every dead letter)."""
    where = filter_of(args)
    ids = [_text(f"message_ids[{i}]", m)
           for i, m in enumerate(getattr(args, "message_ids", []))]
    if ids and getattr(args, "all", False):
        raise InvalidArgument("all", "--all", "either message ids or --all, not both")
    if not ids and where is None and not getattr(args, "all", False):
        hint = "or --all" if hasattr(args, "all") else "(`gateway dlq purge` deletes every one)"
        raise InvalidArgument("message_ids", "", f"message ids to {verb}, filter flags {hint}")
    return ids, where


async def resend(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    ids, where = _which(args, "resend")
    ids = await _ids(client, args.topic, args.group, ids)
    what = f"{len(ids)} dead letter(s)" if ids else "every dead letter"
    confirm(args, f"Resend {what}{_describe_filter(where)} of group {args.group!r} on topic "
                  f"{args.topic!r} to the original topic?")
    count = await client.resend(args.topic, args.group, ids, where)
    return _report(args, out, "resent", count, len(ids))


async def delete(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    ids, where = _which(args, "delete")
    ids = await _ids(client, args.topic, args.group, ids)
    what = f"{len(ids)} dead letter(s)" if ids else "every dead letter"
    confirm(args, f"Delete {what}{_describe_filter(where)} of group {args.group!r} on topic "
                  f"{args.topic!r}? They cannot be resent afterwards.")
    count = await client.delete(args.topic, args.group, ids, where)
    return _report(args, out, "deleted", count, len(ids))


async def purge(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    where = filter_of(args)
    view = await client.describe(args.topic, args.group)
    what = (f"all {view.dead_letters} dead letter(s)" if where is None
            else "the dead letters" + _describe_filter(where))
    confirm(args, f"Delete {what} of group {args.group!r} on topic {args.topic!r}? They "
                  "cannot be resent afterwards.")
    count = await client.delete(args.topic, args.group, [], where, everything=True)
    return _report(args, out, "deleted", count, 0)


def _report(args: argparse.Namespace, out: TextIO, verb: str, count: int, asked: int) -> int:
    if args.json:
        render.emit_json({verb: count}, out)
    else:
        out.write(f"{verb} {count} dead letter(s)\n")
    if asked and count == 0:
        render.stderr("gateway: none of the given ids is a dead letter of the group")
        return EXIT_NOT_FOUND
    return EXIT_OK
