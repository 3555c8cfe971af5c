"""`gateway plan`: print the retry timeline of a message that fails every attempt."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from gateway.core.backoff import format_ms
from gateway.core.plan import Plan, plan
from gateway.core.policy import RetryPolicy
from gateway.core.registry import Registry
from gateway.engine.delivering import OWN_MARK
from gateway.errors import InvalidArgument
from gateway.limits import MAX_DELAY_MS, check_name
from gateway.product import OptionFlag, build_registry, installed

DEFAULT_INVISIBLE_S = 30
_MS_RANGE = re.compile(r"([0-9]+)\.\.([0-9]+) ms")


def option_flags() -> tuple[OptionFlag, ...]:
    """`--max-retries` and every flag the installed products declare, each flag once."""
    flags: dict[str, OptionFlag] = {"--max-retries": OptionFlag(
        "--max-retries", "max_retries", "retries before the dead letter (default: the policy's)")}
    for product in installed():
        for flag in product.plan_flags:
            known = flags.setdefault(flag.flag, flag)
            if known.option != flag.option:
                raise TypeError(f"{product.name}: plan flag {flag.flag} sets {flag.option}, "
                                f"another product's sets {known.option}")
    return tuple(flags.values())


def _dest(flag: OptionFlag) -> str:
    return flag.flag.lstrip("-").replace("-", "_")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    registry = build_registry(installed())
    p = sub.add_parser("plan", help="print the retry timeline a policy gives a failing message")
    p.add_argument("--policy", required=True, help=", ".join(registry.policies))
    p.add_argument("--topic", default="topic",
                   help="topic the destinations are named after (default topic)")
    p.add_argument("--group", default="group",
                   help="consumer group / subscription (default group)")
    flags = add_policy_arguments(p, registry)
    add_timing_arguments(p)
    p.add_argument("--json", action="store_true",
                   help="one JSON object on stdout (default off: a table)")
    p.set_defaults(run=run, option_flags=flags)


def add_policy_arguments(
    p: argparse.ArgumentParser, registry: Registry
) -> tuple[OptionFlag, ...]:
    """The flags that choose a policy's options and what its consumer asks for on failure
    (`gateway plan`, and each side of `gateway migrate plan`); returns the product flags."""
    p.add_argument("--naming", default="", help="naming scheme (" + ", ".join(registry.schemes)
                   + "; default: the policy's)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="any policy option, repeatable (default: none)")
    flags = option_flags()
    for flag in flags:
        text = flag.help or f"the policy option {flag.option}"
        if flag.switch:
            p.add_argument(flag.flag, dest=_dest(flag), action="store_true",
                           help=f"{text} (default off)")
        else:
            default = "" if "default" in text else " (default: the policy's)"
            p.add_argument(flag.flag, dest=_dest(flag), help=text + default)
    p.add_argument("--invisible-s", type=int, default=None,
                   help="invisible duration per receive, for policies that have one "
                        f"(default {DEFAULT_INVISIBLE_S})")
    p.add_argument("--delay-ms", type=int, default=None,
                   help="delay asked for on every failure (default: none, the policy's back-off)")
    p.add_argument("--delay-s", type=int, default=None,
                   help="the same in seconds (default: none)")
    p.add_argument("--level", type=int, default=None,
                   help="delay level asked for on every failure (default: none)")
    return flags


def add_timing_arguments(p: argparse.ArgumentParser) -> None:
    """How long each attempt takes and how many attempts are listed."""
    p.add_argument("--processing-ms", type=int, default=0,
                   help="time each attempt takes to fail (default 0)")
    p.add_argument("--pickup-ms", type=int, default=0,
                   help="time a READY message waits before a consumer takes it (default 0)")
    p.add_argument("--limit", type=int, default=200,
                   help=f"attempts listed at most, 1..{MAX_LIMIT} (default 200)")


MAX_LIMIT = 10_000
"""The most attempts `--limit` lists (`gateway plan`, and per timeline `gateway migrate plan`):
a policy that retries without limit was listed up to any number asked, 10^11 rows running on
until killed."""


def policy_options(args: argparse.Namespace) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgument("option", item, "KEY=VALUE")
        if key.strip() in options:  # the last one won, without a word
            raise InvalidArgument("option", item, "each KEY once")
        options[key.strip()] = value.strip()
    given = set(options)
    flag: OptionFlag
    for flag in args.option_flags:
        value = getattr(args, _dest(flag))
        if (value if flag.switch else value is not None) and flag.option in given:
            raise InvalidArgument(flag.flag.lstrip("-"), value,
                                  f"not with --option {flag.option}=... (it sets the same "
                                  "option: give one)")
        if flag.switch:
            if value:
                options[flag.option] = "true"
        elif value is not None:
            options[flag.option] = str(value)
    return options


def _with_invisible_duration(registry: Registry) -> list[str]:
    """Policies whose receives ask for an invisible duration."""
    return [name for name in registry.policies
            if registry.policy(name).invisible_range_ms is not None]


def build(args: argparse.Namespace, registry: Registry | None = None) -> Plan:
    """The plan `args` ask for (`--policy` and the flags of `add_policy_arguments` and
    `add_timing_arguments`)."""
    check_name("topic", args.topic)
    check_name("group", args.group)
    if OWN_MARK in args.group:  # as a subscription refuses it: no such group can consume
        raise InvalidArgument("group", args.group, f"a name without {OWN_MARK!r}: "
                              f"group{OWN_MARK}consumer names a broadcast consumer's own group")
    registry = registry or build_registry(installed())
    policy = registry.policy(args.policy, policy_options(args), args.naming)
    try:
        return plan(
            policy,
            topic=args.topic,
            group=args.group,
            processing_ms=args.processing_ms,
            pickup_ms=args.pickup_ms,
            invisible_ms=invisible_ms(args, policy, registry),
            delay_ms=requested_delay_ms(args),
            delay_level=args.level,
            limit=args.limit,
        )
    except InvalidArgument as exc:
        if exc.field == "delay_ms" and args.delay_s is not None:  # named as it was given
            raise InvalidArgument("delay_s", args.delay_s, in_seconds(exc.allowed)) from None
        raise


def in_seconds(allowed: str) -> str:
    """A range in ms (`1000..864000000 ms`) said in whole seconds where it can be."""
    found = _MS_RANGE.fullmatch(allowed)
    if found is None or int(found[1]) % 1000 or int(found[2]) % 1000:
        return allowed
    return f"{int(found[1]) // 1000}..{int(found[2]) // 1000} s"


def requested_delay_ms(args: argparse.Namespace) -> int | None:
    """`--delay-ms` or `--delay-s` (not both), in ms."""
    if args.delay_ms is not None and args.delay_s is not None:
        raise InvalidArgument("delay_s", args.delay_s, "not together with --delay-ms")
    return int(args.delay_s) * 1000 if args.delay_s is not None else args.delay_ms


def invisible_ms(args: argparse.Namespace, policy: RetryPolicy, registry: Registry) -> int | None:
    """The invisible duration of each receive for policies that have one; checks the timing
    flags too."""
    chosen = None
    if policy.invisible_range_ms is not None:
        invisible_s = args.invisible_s if args.invisible_s is not None else DEFAULT_INVISIBLE_S
        chosen = invisible_s * 1000
        low, high = policy.invisible_range_ms
        if args.invisible_s is not None and not low <= chosen <= high:
            raise InvalidArgument("invisible_s", args.invisible_s,
                                  in_seconds(f"{low}..{high} ms"))
    elif args.invisible_s is not None:
        names = ", ".join(_with_invisible_duration(registry))
        raise InvalidArgument("invisible_s", args.invisible_s, f"only for {names}, "
                              f"not {policy.name}")
    for name in ("processing_ms", "pickup_ms"):
        if not 0 <= getattr(args, name) <= MAX_DELAY_MS:
            raise InvalidArgument(name, getattr(args, name), f"0..{MAX_DELAY_MS} ms (400 days)")
    if not 1 <= args.limit <= MAX_LIMIT:
        raise InvalidArgument("limit", args.limit, f"1..{MAX_LIMIT}")
    return chosen


def as_json(result: Plan) -> dict[str, Any]:
    policy = result.policy
    return {
        "policy": policy.name,
        "settings": dict(policy.settings),
        "max_retries": policy.max_retries,
        "naming": policy.naming.name,
        "attempts": [
            {
                "attempt": a.attempt,
                "delay_ms": a.delay_ms,
                "at_ms": a.at_ms,
                "ready_ms": a.ready_ms,
                "retries": a.retries,
                "topic": a.topic,
            }
            for a in result.attempts
        ],
        "truncated": result.truncated,
        "disposition": {
            "kind": result.disposition,
            "destination": result.destination,
            "after_attempts": result.total_attempts,
        },
    }


def as_table(result: Plan) -> str:
    policy = result.policy
    lines = [f"policy {policy.name} ({policy.backoff.describe()}; max retries "
             f"{'unlimited' if policy.max_retries is None else policy.max_retries})"]
    lines.append(f"{'attempt':>7}  {'wait':>8}  {'delivered at':>14}  {'retries':>7}  from")
    for a in result.attempts:
        lines.append(f"{a.attempt:>7}  {format_ms(a.delay_ms) if a.delay_ms else '-':>8}  "
                     f"{_clock(a.at_ms):>14}  {a.retries:>7}  {a.topic}")
    if result.truncated:
        lines.append(f"   ...  (first {len(result.attempts)} attempts shown)")
    if result.disposition == "dlq":
        lines.append(f"then: dead-lettered to {result.destination} after "
                     f"{result.total_attempts} deliveries")
    elif result.disposition == "discard":
        lines.append(f"then: discarded after {result.total_attempts} deliveries")
    else:
        lines.append("then: retried without limit")
    return "\n".join(lines)


def _clock(ms: int) -> str:
    seconds, millis = divmod(ms, 1000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{text}.{millis:03d}" if millis else text


def run(args: argparse.Namespace) -> int:
    result = build(args)
    if args.json:
        print(json.dumps(as_json(result)))
    else:
        print(as_table(result))
    return 0
