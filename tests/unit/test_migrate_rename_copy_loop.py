"""The copy loop of `gateway migrate copy` with sides in memory (beside the real ones of
tests/e2e/test_migrate_*.py): nothing is acknowledged before the destination stored it, a
failure leaves the rest at the source; URLs; the progress bar."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pytest

from gateway.backend.base import OutMessage
from gateway.errors import InvalidArgument
from gateway.migrate import copy as cp
from gateway.migrate.endpoint import (
    READY,
    RETRY,
    DestinationRefused,
    Item,
    Stored,
    parse_url,
)
from gateway.migrate.progress import Progress


class ListSource:
    def __init__(self, count: int) -> None:
        self.waiting = [Item(f"k{i}", READY if i % 3 else RETRY, OutMessage(f"m{i}".encode()),
                             i, 2) for i in range(count)]
        self.out: list[Item] = []
        self.acked: list[Item] = []
        self.events: list[str] = []
        self.closed = False

    name = "list"
    ledger = "list-ledger"
    earlier_ledgers: tuple[str, ...] = ()
    destinations = ("", "")

    async def open(self) -> None:
        pass

    async def count(self, exact: bool) -> dict[str, int] | None:
        found: dict[str, int] = {}
        for item in self.waiting:
            found[item.part] = found.get(item.part, 0) + 1
        return found

    async def take(self, max_items: int) -> list[Item]:
        taken, self.waiting = self.waiting[:max_items], self.waiting[max_items:]
        self.out += taken
        return taken

    async def ack(self, items: Sequence[Item]) -> None:
        self.events.append(f"ack {len(items)}")
        self.acked += items

    async def close(self) -> None:
        self.closed = True


class DictDestination:
    def __init__(self, source: ListSource, refuse_at: str = "") -> None:
        self.stored: dict[tuple[str, str], bytes] = {}
        self.source = source
        self.refuse_at = refuse_at

    name = "dict"
    part = ""

    async def open(self) -> None:
        pass

    async def check(self) -> str:
        return ""

    async def put(self, ledger: str, items: Sequence[Item],
                  source_destinations: tuple[str, str], earlier: Sequence[str] = ()) -> Stored:
        new = 0
        for item in items:
            if item.key == self.refuse_at:
                raise DestinationRefused("too large")
            if (ledger, item.key) not in self.stored:
                self.stored[(ledger, item.key)] = item.message.body
                new += 1
        self.source.events.append(f"put {len(items)}")
        return Stored(new, len(items) - new)

    async def close(self) -> None:
        pass


async def test_every_batch_is_stored_before_it_is_acknowledged() -> None:
    source = ListSource(25)
    destination = DictDestination(source)
    result = await cp.copy(source, destination, batch=10)  # type: ignore[arg-type]
    assert (result.taken, result.stored, result.skipped) == (25, 25, 0)
    assert result.by_part == {RETRY: 9, READY: 16}
    assert source.events == ["put 10", "ack 10", "put 10", "ack 10", "put 5", "ack 5"]
    assert source.closed
    assert "copied 25 message(s)" in result.summary()


async def test_a_refused_copy_stops_before_its_batch_is_acknowledged() -> None:
    source = ListSource(25)
    destination = DictDestination(source, refuse_at="k13")
    with pytest.raises(DestinationRefused):
        await cp.copy(source, destination, batch=10)  # type: ignore[arg-type]
    assert [i.key for i in source.acked] == [f"k{i}" for i in range(10)]
    assert source.closed  # what was taken and not acknowledged goes back to the source


async def test_a_second_run_stores_nothing_twice() -> None:
    first = ListSource(12)
    destination = DictDestination(first)
    await cp.copy(first, destination, batch=5)  # type: ignore[arg-type]
    again = ListSource(12)  # as if nothing had been acknowledged
    destination.source = again
    result = await cp.copy(again, destination, batch=5)  # type: ignore[arg-type]
    assert (result.stored, result.skipped) == (0, 12)
    assert len(destination.stored) == 12


async def test_dry_run_counts_and_changes_nothing() -> None:
    source = ListSource(7)
    result = await cp.copy(source, DictDestination(source), dry_run=True)  # type: ignore[arg-type]
    assert result.by_part == {RETRY: 3, READY: 4}
    assert source.out == [] and source.acked == []
    with pytest.raises(InvalidArgument):
        await cp.copy(source, DictDestination(source), batch=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("text, allowed", [
    ("orders", "a URL such as"),
    ("gateway://:50051/x", "a URL with a host"),
    ("gateway://h:port/x", "a well-formed URL"),
    ("gateway://h:1/x?group=a&group=b", "option group once"),
])
def test_bad_urls_are_refused(text: str, allowed: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_url("from", text)
    assert allowed in caught.value.message


def test_a_url_shown_has_no_password() -> None:
    url = parse_url("from", "amqp://guest:secret@Rabbit:5672/%2F?queue=q")
    assert url.shown == "amqp://guest@rabbit:5672/%2F?queue=q"
    assert (url.scheme, url.option("queue"), url.path) == ("amqp", "q", "/")
    topic = parse_url("to", "gateway://h:1/persistent://t/ns/orders?group=g")
    assert topic.path == "persistent://t/ns/orders"


def test_unknown_schemes_and_options_are_named() -> None:
    with pytest.raises(InvalidArgument) as caught:
        cp.open_side("ftp://h/x", "source", cp.Credentials(), {})
    assert "gateway, gateways" in caught.value.message
    with pytest.raises(InvalidArgument) as caught:
        cp.open_side("gateway://h:1/t?group=g&colour=red", "source", cp.Credentials(), {})
    assert "colour" in caught.value.message


def test_progress_draws_on_a_terminal_only() -> None:
    out = io.StringIO()
    bar = Progress(out, terminal=True)
    bar.start(200)
    bar.advance(50, 5000)
    line = bar.line()
    assert line.startswith("[#######") and "50/200" in line and " 25%" in line
    assert "msg/s" in line and "ETA" in line
    bar.finish()
    assert out.getvalue().endswith("\n") and "\r" in out.getvalue()
    quiet = io.StringIO()
    plain = Progress(quiet, terminal=False)
    plain.start(None)
    plain.advance(5, 10)
    plain.finish()
    assert quiet.getvalue() == ""
    assert "5 copied" in plain.line()


@pytest.mark.parametrize("source, destination, same", [
    ("gateway://h:1/orders?group=a", "gateway://H:1/orders?group=b", True),
    ("gateway://localhost:1/orders?group=a", "gateways://127.0.0.1:1/orders", True),
    ("gateway://h:1/orders?group=a", "gateway://h:1/other?group=a", False),
    ("gateway://h:1/orders?group=a", "gateway://h:2/orders?group=a", False),
    ("amqp://u:p@h:5672/?queue=q", "amqps://v@h:5672/?queue=q", True),
    ("amqp://u:p@h:5672/?queue=q", "amqp://u:p@h:5672/?queue=r", False),
    ("amqp://u:p@h:5672/?queue=q", "amqp://u:p@h:5672/other?queue=q", False),
])
def test_a_place_is_not_copied_onto_itself(source: str, destination: str, same: bool) -> None:
    if same:
        with pytest.raises(InvalidArgument) as caught:
            cp.check_apart(source, destination)
        assert "onto itself" in caught.value.message
    else:
        cp.check_apart(source, destination)


class UncountedSource(ListSource):
    async def count(self, exact: bool) -> dict[str, int] | None:
        return None  # a Pulsar subscription's backlog: not known without taking it


async def test_a_dry_run_of_a_source_that_cannot_count_says_so() -> None:
    """It said "nothing to copy" (and would warn that 0 messages were found)."""
    source = UncountedSource(5)
    result = await cp.copy(source, DictDestination(source), dry_run=True)
    assert not result.counted and not result.found_none
    assert "cannot count" in result.summary() and "nothing" not in result.summary()
    assert result.as_dict()["counted"] is False
    empty = ListSource(0)
    assert (await cp.copy(empty, DictDestination(empty), dry_run=True)).found_none
