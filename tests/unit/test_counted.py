"""`Counted`: names the back end holds, against a limit on new ones (`--max-topics`,
`--max-stored-groups`). At the limit the back end is read again at most once a second, so a
client sending new names there costs a set lookup each, not a listing of every name."""

from __future__ import annotations

from gateway.engine.counted import RECOUNT_S, Counted


class Back:
    def __init__(self, *names: str) -> None:
        self.names = set(names)
        self.reads = 0

    async def read(self) -> list[str]:
        self.reads += 1
        return sorted(self.names)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_known_names_pass_and_new_ones_stop_at_the_limit() -> None:
    back, clock = Back("a", "b"), Clock()
    count = Counted(3, back.read, clock)
    assert await count.admit("a") and back.reads == 1  # read at the first name
    assert await count.admit("c")
    back.names.add("c")  # made
    assert await count.admit("a") and await count.admit("c") and back.reads == 1
    assert not await count.admit("d")  # at the limit, the second of the last read: not read
    assert back.reads == 1
    clock.now += RECOUNT_S
    assert not await count.admit("d")  # read again: still 3
    assert back.reads == 2


async def test_at_the_limit_the_back_end_is_read_at_most_once_a_second() -> None:
    back, clock = Back("a", "b", "c"), Clock()
    count = Counted(3, back.read, clock)
    for i in range(1000):
        assert not await count.admit(f"new-{i}")
    assert back.reads == 1
    back.names.discard("b")  # a topic deleted meanwhile leaves the count at the next read
    clock.now += RECOUNT_S
    assert await count.admit("d")
    assert back.reads == 2
    assert await count.admit("a") and await count.admit("c")


async def test_a_name_made_behind_its_back_passes_at_the_next_read() -> None:
    back, clock = Back("a", "b", "c"), Clock()
    count = Counted(3, back.read, clock)
    assert not await count.admit("x")
    back.names.add("dlq")  # made by the engine's own copies, not through `admit`
    assert not await count.admit("dlq")  # within the second after a read
    clock.now += RECOUNT_S
    assert await count.admit("dlq")
