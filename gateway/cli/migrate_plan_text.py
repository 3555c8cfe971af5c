"""`gateway migrate plan` for people: the timelines side by side, then what differs."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.core.backoff import format_ms
from gateway.core.naming import NamingScheme
from gateway.core.plan import Plan, PlannedAttempt
from gateway.core.policy import Placement
from gateway.migrate.plan import MigrationPlan, Side


def _clock(ms: int | None) -> str:
    if ms is None:
        return "-"
    seconds, millis = divmod(ms, 1000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{text}.{millis:03d}" if millis else text


def _cells(a: PlannedAttempt | None) -> tuple[str, str]:
    if a is None:
        return "", ""
    return (format_ms(a.delay_ms) if a.delay_ms else "-"), _clock(a.at_ms)


def _end(p: Plan) -> str:
    if p.disposition == "dlq":
        return f"dead letter {p.destination}"
    if p.disposition == "discard":
        return "discarded"
    return "no end (retried without limit)"


def _deliveries(p: Plan) -> str:
    return "unlimited" if p.total_attempts is None else str(p.total_attempts)


def _describe(label: str, side: Side, topic: str, group: str) -> list[str]:
    policy = side.plan.policy
    scheme = policy.naming
    where = (f"retry copies on {scheme.retry_topic(topic, group)}"
             if policy.placement is Placement.COPY else "retries stay in the topic")
    counts = "; ".join(f"{c.name} ({c.kind}, {c.first} on the first delivery"
                       + (f"; {c.note})" if c.note else ")") for c in side.traits.count)
    lines = [
        f"{label}: {policy.name} ({policy.backoff.describe()}; max retries "
        f"{'unlimited' if policy.max_retries is None else policy.max_retries})",
        f"  naming {scheme.name}: {where}; dead letters on "
        f"{scheme.dead_letter_topic(topic, group)}",
        f"  attempt count: {counts or 'not shown'}",
    ]
    if side.traits.retry_properties:
        lines.append(f"  retry copy properties: {', '.join(side.traits.retry_properties)}")
    if side.traits.dead_letter_properties:
        lines.append(f"  dead letter properties: {', '.join(side.traits.dead_letter_properties)}")
    return lines


def as_table(result: MigrationPlan, schemes: Mapping[str, NamingScheme]) -> str:
    source, target, s = result.source, result.target, result.suggestion
    topic, group = result.topic, result.group
    lines = [*_describe("from", source, topic, group), *_describe("to", target, topic, group)]
    lines.append("names under each naming scheme:")
    width = max((len(name) for name in schemes), default=0)
    lines.extend(f"  {name:<{width}}  retries {scheme.retry_topic(topic, group)}, dead letters "
                 f"{scheme.dead_letter_topic(topic, group)}"
                 for name, scheme in sorted(schemes.items()))
    lines.append("")
    lines.append(f"{'':>8}  {'from':^21}  {'to (as given)':^21}  {'to (suggested)':^21}")
    lines.append(f"{'delivery':>8}  " + "  ".join(f"{'wait':>8} {'elapsed':>12}"
                                                   for _ in range(3)))
    for row in result.rows:
        cells = [_cells(row.source), _cells(row.target), _cells(row.suggested)]
        lines.append(f"{row.delivery:>8}  " + "  ".join(f"{w:>8} {t:>12}" for w, t in cells))
    if any(p.truncated for p in (source.plan, target.plan, s.plan)):
        lines.append(f"{'...':>8}  (first {len(result.rows)} deliveries shown)")
    lines.append("")
    for label, p in (("from", source.plan), ("to", target.plan), ("suggested", s.plan)):
        lines.append(f"{label:>9}: {_deliveries(p)} deliveries, end at {_clock(p.ended_ms)}: "
                     f"{_end(p)}")
    if result.difference_ms is not None:
        lines.append(f"time to the end, to minus from: {_signed(result.difference_ms)}")
    lines.append("")
    if s.exact:
        lines.append("suggestion: an exact match")
    else:
        closeness = f"{s.waits_matched} of {s.waits_compared} waits the same"
        if s.difference_ms is not None:
            closeness += f", time to the end {_signed(s.difference_ms)}"
        lines.append(f"suggestion: the closest the target comes ({closeness})")
    lines.extend(f"  - {line}" for line in s.how or ("keep the target's options as given",))
    if result.warnings:
        lines.append("")
        lines.append("warnings (what the target cannot express):")
        lines.extend(f"  [{w.code}] {w.message}" for w in result.warnings)
    return "\n".join(lines)


def _signed(ms: int) -> str:
    return ("+" if ms >= 0 else "-") + _clock(abs(ms))
