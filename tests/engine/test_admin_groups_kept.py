"""ListGroups (`GroupAdmin.groups`) names the groups whose position the back end keeps
(`Backend.groups`: a group that consumed before a restart, with no consumer since), so that
`migrate copy` can tell it from a misspelt group; a group's position in its own retry or
dead-letter destination is no group of that destination, while a group of a topic merely named
like another group's destination is one."""

from __future__ import annotations

from .harness import Harness


async def test_groups_the_back_end_keeps_are_listed(h: Harness) -> None:
    kept = [("orders", "billing"), ("%RETRY%billing", "billing"), ("%DLQ%billing", "billing"),
            ("orders-billing-RETRY", "billing"), ("audit-DLQ", "ops")]

    async def groups() -> list[tuple[str, str]]:
        return sorted(kept)

    h.backend.groups = groups  # type: ignore[method-assign]
    assert await h.engine.admin.groups() == [("audit-DLQ", "ops"), ("orders", "billing")]
