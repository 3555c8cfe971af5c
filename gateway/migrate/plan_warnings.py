"""Every behaviour of the source that the target cannot express, even with the suggestion.

Each warning has a stable `code` (documented in docs/migration.md) and a sentence with the
numbers. The checks read the policies (`RetryPolicy`), the timelines and the traits the
dialects declared; none names a product.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.backoff import TableBackoff, format_ms
from gateway.core.plan import Plan
from gateway.core.policy import RetryMode, RetryPolicy
from gateway.core.traits import RetriesOption
from gateway.migrate.plan_sides import Side
from gateway.migrate.plan_suggest import Suggestion


@dataclass(frozen=True, slots=True)
class PlanWarning:
    code: str
    """One of `CODES`."""
    message: str


CODES = (
    "broadcast", "ordered", "fixed_interval", "waits_differ", "immediate", "beyond_table",
    "deliveries", "end", "ack_timeout", "count_frozen", "count_resets",
)
"""Every warning code, in the order they are listed."""


def _waits(p: Plan) -> list[int]:
    return [a.delay_ms for a in p.attempts[1:]]


def _deliveries(p: Plan) -> str:
    return "no limit" if p.total_attempts is None else f"{p.total_attempts} deliveries"


def _end(p: Plan) -> str:
    if p.disposition == "dlq":
        return f"dead-letters to {p.destination}"
    if p.disposition == "discard":
        return "discards the message"
    return "retries without limit"


def _timeout(policy: RetryPolicy, described: str) -> str:
    if policy.delivery_timeout_ms is None:
        return f"{policy.name} has no delivery timeout" + (f" ({described})" if described else "")
    return (f"under {policy.name} a delivery not acknowledged within "
            f"{format_ms(policy.delivery_timeout_ms)} counts as a failure")


def warnings(source: Side, target: Side, s: Suggestion) -> tuple[PlanWarning, ...]:
    """See the module docstring; `s` is the closest target (`gateway.migrate.plan_suggest`)."""
    sp, tp = source.plan.policy, s.plan.policy
    found: dict[str, str] = {}
    if not sp.retries_enabled and tp.retries_enabled:
        found["broadcast"] = (
            f"{sp.name} runs in broadcasting mode: every consumer gets every message and a "
            f"failure is dropped, never retried; "
            + (f"{tp.name} has no broadcasting mode: give each consumer a group of its own, "
               "and its failures will be retried"
               if not target.traits.broadcast else
               f"run {tp.name} in broadcasting mode too (the broadcast option)"))
    elif sp.retries_enabled and not tp.retries_enabled:
        found["broadcast"] = f"{tp.name} runs in broadcasting mode: failures are dropped"
    if sp.blocks_queue and not tp.blocks_queue:
        other = target.traits.ordered_policy
        found["ordered"] = (
            f"{sp.name} keeps order: a failing message suspends its queue, and later messages "
            f"of its key wait until it succeeds or ends; {tp.name} delivers them meanwhile"
            + (f" (policy {other} keeps order)" if other and other != tp.name else ""))
    elif tp.blocks_queue and not sp.blocks_queue:
        found["ordered"] = (f"{tp.name} suspends a failing message's queue: later messages of "
                            f"its key wait, which {sp.name} does not do")
    _waits_warnings(source, s, found)
    if source.plan.total_attempts != s.plan.total_attempts:
        knob = target.traits.knob(RetriesOption)
        allowed = (f"{knob.label or knob.option} allows {knob.low}..{knob.high}"
                   if knob is not None else "its retry count is fixed")
        found["deliveries"] = (f"{sp.name} ends after {_deliveries(source.plan)}, {tp.name} "
                               f"after {_deliveries(s.plan)} ({allowed})")
    if source.plan.disposition != s.plan.disposition:
        found["end"] = f"{sp.name} {_end(source.plan)}; {tp.name} {_end(s.plan)}"
    both_push = sp.mode is RetryMode.BACKOFF and tp.mode is RetryMode.BACKOFF
    if both_push and sp.delivery_timeout_ms != tp.delivery_timeout_ms:
        found["ack_timeout"] = (f"{_timeout(sp, source.traits.delivery_timeout)}; "
                                f"{_timeout(tp, target.traits.delivery_timeout)}")
    if sp.counts_failures and not tp.counts_failures:
        found["count_frozen"] = (f"{tp.name} does not count failures with these options (its "
                                 "count stays 0, e.g. for this subscription type): the message "
                                 "is retried without end")
    if target.traits.count_resets and not source.traits.count_resets:
        found["count_resets"] = target.traits.count_resets
    return tuple(PlanWarning(code, found[code]) for code in CODES if code in found)


def _waits_warnings(source: Side, s: Suggestion, found: dict[str, str]) -> None:
    sp, tp = source.plan.policy, s.plan.policy
    ours, theirs = _waits(source.plan), _waits(s.plan)
    pairs = list(zip(ours, theirs, strict=False))
    differ = [(k, a, b) for k, (a, b) in enumerate(pairs, start=1) if a != b]
    if differ and len(set(ours)) > 1 and len(set(theirs)) == 1 and theirs[0] > 0:
        found["fixed_interval"] = (
            f"{sp.name} backs off along a table ({_table(ours)}); {tp.name} has one fixed "
            f"interval for every retry, {format_ms(theirs[0])} here"
            + (f", which changes the time to the end by {_signed(s.difference_ms)}"
               if s.difference_ms is not None else ""))
    elif differ and all(b == 0 for _, _, b in differ):
        found["immediate"] = (f"{tp.name} retries at once with these options (the wait asked "
                              "for is ignored, e.g. for this subscription type)")
    elif differ:
        k, a, b = max(differ, key=lambda d: abs(d[1] - d[2]))
        found["waits_differ"] = (f"{len(differ)} of {len(pairs)} retries wait differently; the "
                                 f"largest gap is at retry {k}: {format_ms(a)} under {sp.name}, "
                                 f"{format_ms(b)} under {tp.name}")
    backoff = sp.backoff
    if isinstance(backoff, TableBackoff) and len(ours) > len(backoff.table_ms):
        past = range(len(backoff.table_ms) + 1, len(ours) + 1)
        missing = [k for k in past if k > len(theirs)]
        other = sorted({theirs[k - 1] for k in past if k <= len(theirs)} - {backoff.beyond_ms})
        if missing or other:
            gaps = [f"waits {', '.join(format_ms(w) for w in other)} there"] if other else []
            if missing:
                gaps.append(f"makes no retry {missing[0]}..{missing[-1]}")
            found["beyond_table"] = (
                f"every retry of {sp.name} past the {len(backoff.table_ms)}th waits "
                f"{format_ms(backoff.beyond_ms)}; {tp.name} {' and '.join(gaps)}")


def _table(waits: list[int]) -> str:
    shown = [format_ms(w) for w in waits[:6]]
    return " ".join(shown) + (" ... " + format_ms(waits[-1]) if len(waits) > 6 else "")


def _signed(ms: int) -> str:
    sign = "+" if ms >= 0 else "-"
    return f"{sign}{_duration(abs(ms))}"


def _duration(ms: int) -> str:
    """4000 -> '4s'; 61000 -> '1m1s'; 3723000 -> '1h2m3s'."""
    if ms % 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{v}{u}" for v, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if v]
    return "".join(parts) or "0s"


__all__ = ["CODES", "PlanWarning", "warnings"]
