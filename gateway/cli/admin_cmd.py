"""The admin commands: `gateway topics`, `groups`, `describe`, `retries`, `purge` and `dlq ...`,
talking to a running gateway over its public admin API (`gateway.admin_client`).

Exit statuses (also in `gateway --help` and the README):

  0  done
  1  the gateway failed the request (an internal error, or an answer the command cannot use)
  2  bad usage, or a value the gateway refused (INVALID_ARGUMENT)
  3  not found: no such dead letter
  4  not allowed: no token or a wrong one (UNAUTHENTICATED), or not an admin (PERMISSION_DENIED)
  5  the gateway cannot be reached or is not serving (UNAVAILABLE, DEADLINE_EXCEEDED)
  6  not confirmed: answered no at the prompt, or no terminal to ask on and no --yes
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import grpc

from gateway.admin_client import DEFAULT_TIMEOUT_S, AdminClient, Target, connect
from gateway.cli import render
from gateway.errors import GatewayError
from gateway.preview import duration, iso_ms
from gateway.token_file import check_token, read_token_file

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_DENIED = 4
EXIT_UNAVAILABLE = 5
EXIT_NOT_CONFIRMED = 6

EXIT_STATUSES = """exit statuses of the admin commands:
  0  done
  1  the gateway failed the request
  2  bad usage, or a value the gateway refused (INVALID_ARGUMENT)
  3  not found (no such dead letter)
  4  not allowed: no or a wrong token, or not an admin
  5  the gateway cannot be reached or is not serving
  6  not confirmed (answered no, or no terminal and no --yes)"""

_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT: EXIT_USAGE,
    grpc.StatusCode.OUT_OF_RANGE: EXIT_USAGE,
    grpc.StatusCode.FAILED_PRECONDITION: EXIT_USAGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED: EXIT_USAGE,
    grpc.StatusCode.NOT_FOUND: EXIT_NOT_FOUND,
    grpc.StatusCode.UNAUTHENTICATED: EXIT_DENIED,
    grpc.StatusCode.PERMISSION_DENIED: EXIT_DENIED,
    grpc.StatusCode.UNAVAILABLE: EXIT_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: EXIT_UNAVAILABLE,
}


class NotConfirmed(Exception):
    """The person said no, or there was nobody to ask."""


Command = Callable[[AdminClient, argparse.Namespace, TextIO], Awaitable[int]]


def connection_flags(p: argparse.ArgumentParser) -> None:
    """--target, --token, TLS and --json: every admin command takes them."""
    g = p.add_argument_group("connection")
    g.add_argument("--target", default=None,
                   help="the gateway's HOST:PORT (default: $GATEWAY_TARGET or 127.0.0.1:50051)")
    g.add_argument("--token", default=None,
                   help="an admin's bearer token (default: $GATEWAY_TOKEN); prefer "
                        "--token-file, since arguments show in the process list")
    g.add_argument("--token-file", dest="token_file", default=None,
                   help="read the bearer token from this file")
    g.add_argument("--tls", action="store_true", help="connect with TLS (the system's roots)")
    g.add_argument("--tls-ca", dest="tls_ca", default="",
                   help="PEM roots to check the gateway's certificate with (implies --tls)")
    g.add_argument("--tls-cert", dest="tls_cert", default="",
                   help="PEM client certificate for a gateway that requires one (mTLS)")
    g.add_argument("--tls-key", dest="tls_key", default="", help="the client certificate's key")
    g.add_argument("--tls-server-name", dest="tls_server_name", default="",
                   help="the name on the gateway's certificate, if not the target's host")
    g.add_argument("--timeout-s", dest="timeout_s", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"give up on a call after this long (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from gateway.cli import dlq_cmd

    def command(name: str, help_text: str, run: Command, group: bool = True,
                ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=EXIT_STATUSES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if group:
            p.add_argument("topic")
            p.add_argument("group")
        connection_flags(p)
        p.set_defaults(run=lambda args: run_admin(run, args))
        return p

    command("topics", "list every topic the gateway holds", topics, group=False)
    listing = command("groups", "list the groups the gateway knows, with their counts (its "
                      "first 1000)", groups, group=False)
    listing.add_argument("--topic", default="", help="only this topic's groups")
    listing.add_argument("--group", default="", help="only groups of this name")
    command("describe", "a group's counts, policy, naming scheme and consumers", describe)
    command("retries", "a group's waiting retries by attempt number", retries)
    purge = command("purge", "drop a group's messages that wait for delivery (ready, delayed, "
                    "waiting retry); messages in flight and dead letters are kept", purge_group)
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    dlq_cmd.add_parser(sub)


def target_of(args: argparse.Namespace) -> tuple[Target, str]:
    address = args.target
    if address is None:  # an empty --target is refused, not taken for the default
        address = os.environ.get("GATEWAY_TARGET") or "127.0.0.1:50051"
    if not address.startswith("unix:"):
        host, _, port = address.rpartition(":")
        # gRPC takes the port modulo 65536: 99999 would reach port 34463; a target without a
        # host or a port was tried and answered UNAVAILABLE, as if the gateway were down.
        if not (host.strip() and port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise GatewayError(f"target {address!r}: HOST:PORT with a port in 1..65535")
    elif not address.removeprefix("unix:"):
        raise GatewayError(f"target {address!r}: HOST:PORT, or unix:PATH")
    if args.token is not None:
        token = check_token("token", args.token)
    else:
        token = check_token("GATEWAY_TOKEN", os.environ.get("GATEWAY_TOKEN", ""))
    if args.token_file:
        token = read_token_file("token_file", args.token_file)
    target = Target(address, tls=args.tls, ca_file=args.tls_ca, cert_file=args.tls_cert,
                    key_file=args.tls_key, server_name=args.tls_server_name)
    return target, token


MAX_TIMEOUT_S = 86_400.0
"""The longest --timeout-s: a day (gRPC ends a call with an infinite or huge deadline at once,
DEADLINE_EXCEEDED)."""


def timeout_problem(timeout_s: float) -> str:
    """Why `timeout_s` cannot be a call's timeout ("" when it can): nan, inf and values out of
    range are refused, not sent."""
    if not 0 < timeout_s <= MAX_TIMEOUT_S:  # False for nan too
        return f"timeout_s {timeout_s}: more than 0 and at most {MAX_TIMEOUT_S:g} (seconds)"
    return ""


def run_admin(run: Command, args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one admin command; its exit status (see the module docstring)."""
    stream = sys.stdout if out is None else out
    problem = timeout_problem(args.timeout_s)
    if problem:
        render.stderr(f"gateway: error: {problem}")
        return EXIT_USAGE
    try:
        target, token = target_of(args)
    except GatewayError as exc:
        render.stderr(f"gateway: error: {exc.message}")
        return EXIT_USAGE

    async def call() -> int:
        channel = connect(target)
        try:
            return await run(AdminClient(channel, token, args.timeout_s), args, stream)
        finally:
            await channel.close()

    try:
        return asyncio.run(call())
    except grpc.aio.AioRpcError as exc:
        code = exc.code()
        render.stderr(f"gateway: {code.name}: {exc.details() or 'no details'}"
                      + (f" ({target.address})" if code in (grpc.StatusCode.UNAVAILABLE,
                                                            grpc.StatusCode.DEADLINE_EXCEEDED)
                         else ""))
        return _CODES.get(code, EXIT_FAILED)
    except NotConfirmed as exc:
        render.stderr(f"gateway: {exc}")
        return EXIT_NOT_CONFIRMED
    except GatewayError as exc:
        render.stderr(f"gateway: error: {exc.message}")
        return EXIT_USAGE


def confirm(args: argparse.Namespace, question: str) -> None:
    """Ask `question` on the terminal unless --yes; `NotConfirmed` unless the answer is yes."""
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise NotConfirmed(f"not confirmed: {question} (no terminal to ask on: pass --yes)")
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise NotConfirmed("not confirmed: nothing was changed")


# ------------------------------------------------------------------------------ commands


async def topics(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    names = await client.topics()
    if args.json:
        render.emit_json({"topics": names}, out)
    else:
        render.table([[n] for n in names], ["TOPIC"], out)
    return EXIT_OK


async def groups(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    response = await client.groups(args.topic, args.group)
    if args.json:
        render.emit_json(render.to_dict(response), out)
        return EXIT_OK
    rows = [[g.topic, g.group, g.view.policy or "-", g.view.naming, g.view.ready,
             g.view.inflight, g.view.waiting_retry, g.view.dead_letters, len(g.view.consumers)]
            for g in response.groups]
    render.table(rows, ["TOPIC", "GROUP", "POLICY", "NAMING", "READY", "INFLIGHT", "WAITING",
                        "DEAD", "CONSUMERS"], out)
    if response.truncated:
        render.stderr("(only the first 1000 groups)")
    return EXIT_OK


async def describe(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    view = await client.describe(args.topic, args.group)
    if args.json:
        render.emit_json(render.to_dict(view), out)
        return EXIT_OK
    t = view.totals
    render.pairs([
        ("topic", args.topic), ("group", args.group),
        ("policy", view.policy or "- (no subscription runs now)"),
        ("max retries", "unlimited" if view.max_retries < 0 else view.max_retries),
        ("naming", view.naming), ("retry topic", view.retry_topic or "-"),
        ("dead-letter topic", view.dead_letter_topic or "- (discarded)"),
        ("ready", view.ready), ("delayed", view.delayed), ("in flight", view.inflight),
        ("waiting retry", view.waiting_retry), ("dead letters", view.dead_letters),
        ("oldest ready", iso_ms(view.oldest_ready_ms) or "-"),
        ("next retry", iso_ms(view.next_retry_ms) or "-"),
        ("consumers", ", ".join(f"{c.consumer_id} ({c.unsettled} unsettled)"
                                for c in view.consumers) or "-"),
        ("since start", f"{t.delivered} delivered, {t.committed} acked, {t.retried} retried, "
                        f"{t.dead_lettered} dead-lettered, {t.discarded} discarded"),
    ], out)
    return EXIT_OK


async def retries(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    waiting = await client.waiting_retries(args.topic, args.group)
    if args.json:
        render.emit_json(render.to_dict(waiting), out)
        return EXIT_OK
    now = _now_ms()
    rows = [[b.attempt, b.count, iso_ms(b.next_due_ms) or "-", _in(b.next_due_ms, now)]
            for b in waiting.by_attempt]
    render.table(rows, ["ATTEMPT", "WAITING", "NEXT DUE", "IN"], out)
    out.write(f"\n{waiting.total} waiting"
              + (f", next due {iso_ms(waiting.next_due_ms)}" if waiting.next_due_ms else "")
              + ("" if waiting.complete else " (counted the first 100000)") + "\n")
    return EXIT_OK


async def purge_group(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    view = await client.describe(args.topic, args.group)
    waiting = view.ready + view.delayed + view.waiting_retry
    confirm(args, f"Drop {waiting} waiting message(s) of group {args.group!r} on topic "
                  f"{args.topic!r} (messages in flight and dead letters are kept)?")
    purged = await client.purge(args.topic, args.group)
    _done(args, out, {"purged": purged}, f"purged {purged} message(s)")
    return EXIT_OK


def _done(args: argparse.Namespace, out: TextIO, result: dict[str, Any], text: str) -> None:
    if args.json:
        render.emit_json(result, out)
    else:
        out.write(text + "\n")


def _now_ms() -> int:
    import time

    return time.time_ns() // 1_000_000


def _in(due_ms: int, now_ms: int) -> str:
    if not due_ms:
        return "-"
    return "now" if due_ms <= now_ms else duration(due_ms - now_ms)
