"""Transitions of each group's messages since the gateway started, for the admin API.

An engine observer that only counts (`count_transition`, so the engine builds no `Transition`
for it): by (topic, group), how many messages went to each state. Admin tools read the totals
and compute rates from two readings, as they would from any counter.
"""

from __future__ import annotations

from gateway.engine.observe import Transition

COUNTED = ("INFLIGHT", "COMMITTED", "WAITING_RETRY", "DEAD_LETTERED", "DISCARDED")
"""The states counted, in the order `totals` gives them."""
MAX_GROUPS = 100_000
"""Groups counted; transitions of further groups are left out (a bound on memory)."""


class GroupTotals:
    """Counts transitions by (topic, group) and target state."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], dict[str, int]] = {}

    def on_transition(self, t: Transition) -> None:
        self.count_transition(t.to_state, t.topic, t.group, t.policy, t.attempt)

    def count_transition(
        self, to_state: str, topic: str, group: str, policy: str, attempt: int, n: int = 1
    ) -> None:
        key = (topic, group)
        counts = self._counts.get(key)
        if counts is None:
            if len(self._counts) >= MAX_GROUPS:
                return
            counts = self._counts[key] = {}
        counts[to_state] = counts.get(to_state, 0) + n

    def forget_group(self, topic: str, group: str) -> None:
        """The engine dropped the group: it is no longer counted, nor listed."""
        self._counts.pop((topic, group), None)

    def groups(self) -> list[tuple[str, str]]:
        """Every (topic, group) counted."""
        return list(self._counts)

    def totals(self, topic: str, group: str) -> dict[str, int]:
        """Transitions of the group's messages by target state (every state in COUNTED)."""
        counts = self._counts.get((topic, group), {})
        return {state: counts.get(state, 0) for state in COUNTED}
