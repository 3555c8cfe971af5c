"""`gateway migrate plan --from POLICY [options] --to POLICY [options]`: what changes.

Each side takes the flags of `gateway plan` that choose a policy's options (`--naming`,
`--option KEY=VALUE`, `--max-retries`, the products' flags such as `--retry-interval-s`, and
what the consumer asks for on failure: `--delay-s`, `--level`, `--invisible-s`): those after
`--from` belong to the source, those after `--to` to the target. `--topic`, `--group`, the
timing flags and `--json` may stand anywhere. The JSON layout is documented in
docs/migration.md ("gateway migrate plan --json").
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from gateway.cli import plan_cmd
from gateway.cli.migrate_plan_text import as_table
from gateway.core.plan import Plan, PlannedAttempt
from gateway.core.policy import Placement, RetryRequest
from gateway.core.registry import Registry
from gateway.errors import InvalidArgument
from gateway.migrate.plan import MigrationPlan, Side, Timing, compare
from gateway.product import build_registry, installed

FORMAT = "gateway.migrate.plan/1"
"""The JSON layout's name and version; a change that breaks readers changes the version."""
SIDES = {"--from": "from", "--to": "to"}
MAX_LIMIT = plan_cmd.MAX_LIMIT
"""Most deliveries listed per timeline (each side is planned several times for the
suggestion)."""


def add_subcommands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plan", help="compare two policies' retry timelines and suggest the closest target",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--from", dest="source", required=True, metavar="POLICY",
                   help="the policy the group runs under now, then its options")
    p.add_argument("--to", dest="target", required=True, metavar="POLICY",
                   help="the policy it moves to, then its options")
    _add_common(p)
    p.set_defaults(run=run, takes_extra=True)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", default="topic",
                   help="the topic, for the destination names (default: topic)")
    p.add_argument("--group", default="group",
                   help="consumer group / subscription (default: group)")
    plan_cmd.add_timing_arguments(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def split(words: Sequence[str]) -> tuple[list[str], dict[str, tuple[str, list[str]]]]:
    """(words before either side, {"from"|"to": (policy, its words)})."""
    common: list[str] = []
    sides: dict[str, tuple[str, list[str]]] = {}
    current = common
    i = 0
    while i < len(words):
        flag, eq, value = words[i].partition("=")
        if flag not in SIDES:
            current.append(words[i])
            i += 1
            continue
        if not eq:
            if i + 1 >= len(words):
                raise InvalidArgument(SIDES[flag], "", "a policy name after " + flag)
            value = words[i + 1]
        i += 1 if eq else 2
        side = SIDES[flag]
        if side in sides:
            raise InvalidArgument(side, value, f"{flag} once")
        current = []
        sides[side] = (value, current)
    for side, flag in (("from", "--from"), ("to", "--to")):
        if side not in sides:
            raise InvalidArgument(side, "", f"{flag} POLICY is required")
    return common, sides


def parse(words: Sequence[str], registry: Registry) -> tuple[argparse.Namespace, dict[
        str, argparse.Namespace]]:
    """The common flags, and each side's flags with its policy."""
    common_words, sides = split(words)
    common_parser = argparse.ArgumentParser(prog="gateway migrate plan", allow_abbrev=False,
                                            add_help=False)
    _add_common(common_parser)
    common = argparse.Namespace()
    rest: dict[str, list[str]] = {}
    _, extra = common_parser.parse_known_args(common_words, common)
    if extra:
        common_parser.error(f"unrecognized arguments before --from/--to: {' '.join(extra)}")
    for side, (_, side_words) in sides.items():
        _, rest[side] = common_parser.parse_known_args(side_words, common)
    if not 1 <= common.limit <= MAX_LIMIT:
        raise InvalidArgument("limit", common.limit, f"1..{MAX_LIMIT}")
    parsed: dict[str, argparse.Namespace] = {}
    for side, (policy, _) in sides.items():
        side_parser = argparse.ArgumentParser(prog=f"gateway migrate plan --{side} {policy}",
                                              allow_abbrev=False, add_help=False)
        flags = plan_cmd.add_policy_arguments(side_parser, registry)
        ns = side_parser.parse_args(rest[side])
        ns.option_flags = flags
        for key, value in vars(common).items():
            setattr(ns, key, value)
        ns.policy = policy
        parsed[side] = ns
    return common, parsed


def build(words: Sequence[str], registry: Registry | None = None) -> MigrationPlan:
    registry = registry or build_registry(installed())
    common, parsed = parse(words, registry)
    built = {side: _side(side, ns, registry) for side, ns in parsed.items()}
    timing = Timing(common.processing_ms, common.pickup_ms, common.limit)
    return compare(registry, built["from"], built["to"], timing, common.topic, common.group)


def _side(side: str, ns: argparse.Namespace, registry: Registry) -> Side:
    try:
        plan = plan_cmd.build(ns, registry)
        policy = plan.policy
        return Side(
            plan=plan,
            options=plan_cmd.policy_options(ns),
            naming=ns.naming,
            invisible_ms=plan_cmd.invisible_ms(ns, policy, registry),
            traits=registry.traits_of(policy.name),
            request=RetryRequest(plan_cmd.requested_delay_ms(ns), ns.level),
        )
    except InvalidArgument as exc:
        raise InvalidArgument(f"{side}.{exc.field}", exc.value, exc.allowed) from None


def run(args: argparse.Namespace) -> int:
    words = list(args.argv)
    start = words.index("plan") + 1 if "plan" in words else len(words)
    registry = build_registry(installed())
    result = build(words[start:], registry)
    if args.json:
        print(json.dumps(as_json(result, registry)))
    else:
        print(as_table(result, registry.schemes))
    return 0


# ------------------------------------------------------------------------------- JSON
def _attempt(a: PlannedAttempt | None) -> dict[str, Any] | None:
    if a is None:
        return None
    return {"wait_ms": a.delay_ms, "at_ms": a.at_ms, "retries": a.retries, "from": a.topic}


def _end(p: Plan) -> dict[str, Any]:
    return {"kind": p.disposition, "destination": p.destination}


def _side_json(side: Side, topic: str, group: str) -> dict[str, Any]:
    policy = side.plan.policy
    scheme = policy.naming
    traits = side.traits
    return {
        "policy": policy.name,
        "dialect": policy.dialect,
        "options": dict(side.options),
        "naming": scheme.name,
        "max_retries": policy.max_retries,
        "deliveries": side.plan.total_attempts,
        "time_to_end_ms": side.plan.ended_ms,
        "end": _end(side.plan),
        "retries": "copy" if policy.placement is Placement.COPY else "in_place",
        "destinations": {
            "retry": scheme.retry_topic(topic, group),
            "dead_letter": scheme.dead_letter_topic(topic, group),
        },
        "attempt_count": [
            {"name": c.name, "kind": c.kind, "first": c.first, "note": c.note}
            for c in traits.count
        ],
        "retry_properties": list(traits.retry_properties),
        "dead_letter_properties": list(traits.dead_letter_properties),
        "plan": plan_cmd.as_json(side.plan),
    }


def as_json(result: MigrationPlan, registry: Registry) -> dict[str, Any]:
    """The documented layout (docs/migration.md)."""
    s = result.suggestion
    topic, group = result.topic, result.group
    return {
        "format": FORMAT,
        "topic": topic,
        "group": group,
        "source": _side_json(result.source, topic, group),
        "target": _side_json(result.target, topic, group),
        "timeline": [
            {"delivery": r.delivery, "source": _attempt(r.source),
             "target": _attempt(r.target), "suggested": _attempt(r.suggested)}
            for r in result.rows
        ],
        "difference_ms": result.difference_ms,
        "suggestion": {
            "exact": s.exact,
            "options": s.options,
            "requests": [{"delay_ms": q.delay_ms, "delay_level": q.delay_level}
                         for q in s.requests],
            "how": list(s.how),
            "deliveries": s.plan.total_attempts,
            "time_to_end_ms": s.plan.ended_ms,
            "difference_ms": s.difference_ms,
            "waits_matched": s.waits_matched,
            "waits_compared": s.waits_compared,
            "end": _end(s.plan),
            "plan": plan_cmd.as_json(s.plan),
        },
        "warnings": [{"code": w.code, "message": w.message} for w in result.warnings],
        "schemes": {
            name: {"retry": scheme.retry_topic(topic, group),
                   "dead_letter": scheme.dead_letter_topic(topic, group)}
            for name, scheme in sorted(registry.schemes.items())
        },
    }
