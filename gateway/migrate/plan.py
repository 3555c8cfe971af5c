"""`gateway migrate plan`: two policies' timelines side by side, and the closest target.

`compare` takes the two timelines `gateway plan` gives (one per side, with the same timing),
finds the target options and consumer requests that come closest to the source
(`gateway.migrate.plan_suggest`), and lists every behaviour of the source the target cannot
express (`gateway.migrate.plan_warnings`).

Pure: it drives the state machine through `gateway.core.plan`; no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.plan import Plan, PlannedAttempt
from gateway.core.registry import Registry
from gateway.migrate.plan_sides import Side, Timing
from gateway.migrate.plan_suggest import Suggestion, suggest
from gateway.migrate.plan_warnings import PlanWarning, warnings

__all__ = ["MigrationPlan", "PlanWarning", "Row", "Side", "Suggestion", "Timing", "compare"]


@dataclass(frozen=True, slots=True)
class Row:
    """Delivery n under each side (None where that side has ended before it)."""

    delivery: int
    source: PlannedAttempt | None
    target: PlannedAttempt | None
    suggested: PlannedAttempt | None


@dataclass(frozen=True, slots=True)
class MigrationPlan:
    topic: str
    group: str
    source: Side
    target: Side
    rows: tuple[Row, ...]
    suggestion: Suggestion
    warnings: tuple[PlanWarning, ...]

    @property
    def difference_ms(self) -> int | None:
        """Target's time to its end minus the source's, as given (None when either has no
        end within the listed attempts)."""
        return _difference(self.source.plan, self.target.plan)


def _difference(source: Plan, target: Plan) -> int | None:
    if source.ended_ms is None or target.ended_ms is None:
        return None
    return target.ended_ms - source.ended_ms


def rows(source: Plan, target: Plan, suggested: Plan) -> tuple[Row, ...]:
    """The deliveries of the three timelines side by side."""
    count = max(len(source.attempts), len(target.attempts), len(suggested.attempts))

    def nth(p: Plan, i: int) -> PlannedAttempt | None:
        return p.attempts[i] if i < len(p.attempts) else None

    return tuple(Row(i + 1, nth(source, i), nth(target, i), nth(suggested, i))
                 for i in range(count))


def compare(
    registry: Registry, source: Side, target: Side, timing: Timing, topic: str, group: str
) -> MigrationPlan:
    """Compare the sides and suggest the closest target (see the module docstring)."""
    suggestion = suggest(registry, source, target, timing, topic, group)
    found = warnings(source, target, suggestion)
    return MigrationPlan(topic, group, source, target,
                         rows(source.plan, target.plan, suggestion.plan), suggestion, found)
