"""`Counted`: names the back end holds, against a limit on new ones (`--max-topics`,
`--max-stored-groups`) and each principal's share of it. At a limit the back end is read again
at most once a second, so a client sending new names there costs a set lookup each, not a
listing of every name."""

from __future__ import annotations

from gateway.engine.counted import RECOUNT_S, SETTLE_S, Counted


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
    assert await count.admit("a") is None and back.reads == 1  # read at the first name
    assert await count.admit("c") is None
    back.names.add("c")  # made
    assert await count.admit("a") is None and await count.admit("c") is None
    assert back.reads == 1
    assert await count.admit("d") == "limit"  # at the limit, within a second of the read
    assert back.reads == 1
    clock.now += RECOUNT_S
    assert await count.admit("d") == "limit"  # read again: still 3
    assert back.reads == 2


async def test_at_the_limit_the_back_end_is_read_at_most_once_a_second() -> None:
    back, clock = Back("a", "b", "c"), Clock()
    count = Counted(3, back.read, clock)
    for i in range(1000):
        assert await count.admit(f"new-{i}") == "limit"
    assert back.reads == 1
    back.names.discard("b")  # a topic deleted meanwhile leaves the count at the next read
    clock.now += RECOUNT_S
    assert await count.admit("d") is None
    assert back.reads == 2
    assert await count.admit("a") is None and await count.admit("c") is None


async def test_a_name_made_behind_its_back_passes_at_the_next_read() -> None:
    back, clock = Back("a", "b", "c"), Clock()
    count = Counted(3, back.read, clock)
    assert await count.admit("x") == "limit"
    back.names.add("dlq")  # made by the engine's own copies, not through `admit`
    assert await count.admit("dlq") == "limit"  # within the second after a read
    clock.now += RECOUNT_S
    assert await count.admit("dlq") is None


async def test_a_principal_stops_at_its_share_and_the_others_go_on() -> None:
    back, clock = Back("old-1", "old-2"), Clock()
    count = Counted(10, back.read, clock, share=3)
    for name in ("a1", "a2", "a3"):
        assert await count.admit(name, "alice") is None
    assert await count.admit("a4", "alice") == "share"
    assert await count.admit("old-1", "alice") is None  # a name held: as ever
    assert await count.admit("a1", "bob") is None  # alice's name, used by bob: costs nothing
    for name in ("b1", "b2", "b3"):
        assert await count.admit(name, "bob") is None
    assert await count.admit("b4", "bob") == "share"
    # The names the back end held before the start (made before a restart) are no one's.
    assert await count.admit("x", None) is None  # the gateway's own: the whole limit only
    assert await count.admit("y", None) is None
    assert await count.admit("z", "carol") == "limit"  # 2 + 3 + 3 + 2: the limit is reached


async def test_a_share_frees_when_its_names_are_removed_at_the_next_read() -> None:
    back, clock = Back(), Clock()
    count = Counted(10, back.read, clock, share=2)
    for name in ("a1", "a2"):
        assert await count.admit(name, "alice") is None
        back.names.add(name)
    assert await count.admit("a3", "alice") == "share"
    reads = back.reads
    for i in range(100):  # within the second: no listing each
        assert await count.admit(f"a-{i}", "alice") == "share"
    assert back.reads == reads
    back.names.discard("a1")  # deleted
    clock.now += SETTLE_S
    assert await count.admit("a3", "alice") is None
    assert await count.admit("a4", "alice") == "share"


async def test_names_under_way_at_a_read_stay_in_their_share() -> None:
    """A name taken but not in the back end yet when it is read (its publish still waiting)
    keeps counting: dropping it would let a principal pass its share at every read."""
    back, clock = Back(), Clock()
    count = Counted(100, back.read, clock, share=3)
    for name in ("a1", "a2", "a3"):  # none stored yet
        assert await count.admit(name, "alice") is None
    for round_ in range(5):
        clock.now += RECOUNT_S
        assert await count.admit(f"more-{round_}", "alice") == "share"  # read: none listed
    assert await count.admit("a2", "alice") is None  # her own, still under way: as ever
    clock.now += SETTLE_S  # never made: their publishes failed
    assert await count.admit("a4", "alice") is None


async def test_without_a_share_no_principal_is_tracked() -> None:
    back, clock = Back(), Clock()
    count = Counted(3, back.read, clock, share=3)  # a share of the whole: none of its own
    for name in ("a", "b", "c"):
        assert await count.admit(name, "alice") is None
    assert await count.admit("d", "alice") == "limit"
    assert not count._made  # nothing kept per principal


async def test_names_under_way_at_a_read_stay_counted_against_the_limit() -> None:
    """Clients that keep many new names under way (their publishes waiting their turn) passed
    the limit at every read, which listed none of them: 200 publishers on new names took 499
    topics under a limit of 300."""
    back, clock = Back(), Clock()
    count = Counted(3, back.read, clock)
    for name in ("a", "b", "c"):  # taken, none stored yet
        assert await count.admit(name) is None
    for round_ in range(5):
        clock.now += RECOUNT_S
        assert await count.admit(f"more-{round_}") == "limit"  # read: none listed, still 3
    back.names.update({"a", "b"})  # stored; "c" never was (its publish failed)
    clock.now += SETTLE_S
    assert await count.admit("d") is None
    assert await count.admit("e") == "limit"
