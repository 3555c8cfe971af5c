"""Recovering Pulsar producers' last sequence ids a crash kept out of the dedup journal: the
journal's covered message id per topic (held back below stores under way), and the scan of the
messages stored after it (`dedup_recovery`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from adapters.pulsar.frontend.dedup_recovery import recover, settle
from adapters.pulsar.frontend.ids import DedupRegistry
from adapters.pulsar.frontend.journal import FILE_NAME, Journal
from adapters.pulsar.frontend.messages import PRODUCER, SEQUENCE
from adapters.pulsar.frontend.producers import unknown_outcome
from gateway.backend.base import OutMessage
from gateway.backend.memory import InMemoryBackend
from gateway.core.properties import ORIGIN_TOPIC
from gateway.errors import InvalidArgument, Unavailable


def pulsar_message(producer: str, sequence_id: int) -> OutMessage:
    return OutMessage(body=b"x", properties={PRODUCER: producer, SEQUENCE: str(sequence_id)})


class Topics:
    """The one engine call recovery makes, on the in-memory back end."""

    def __init__(self, backend: Any) -> None:
        self.backend, self.calls = backend, 0

    async def properties_after(
        self, topic: str, message_id: str, limit: int
    ) -> list[tuple[str, Mapping[str, str]]] | None:
        self.calls += 1
        result: list[tuple[str, Mapping[str, str]]] | None
        result = await self.backend.properties_after(topic, message_id, limit)
        return result


async def test_covered_id_is_held_back_below_a_store_under_way(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.load()
    journal.start()
    first = journal.begin("t")
    await journal.record("t", "a", 0, "01", journal.begin("t"))
    # `first` began before anything was recorded: a message of it may come before "01".
    assert journal.covered() == {}
    slow = journal.begin("t")
    await journal.record("t", "b", 5, "03", journal.begin("t"))
    assert journal.covered() == {}
    await journal.record("t", "c", 1, "02", first)
    assert journal.covered() == {"t": "01"}  # `slow` began once "01" was the newest
    journal.end(slow)
    await journal.record("t", "c", 2, "04", journal.begin("t"))
    assert journal.covered() == {"t": "04"}
    await journal.close()
    again = Journal(tmp_path)
    assert again.load() == {("t", "a"): 0, ("t", "b"): 5, ("t", "c"): 2}
    assert again.covered() == {"t": "04"}


async def test_old_lines_have_no_covered_id_and_are_still_read(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(b'["t", "p", 3]\n["u", "p", 1, "0a"]\n["u", "q", 2, 7]\n')
    journal = Journal(tmp_path)
    assert journal.load() == {("t", "p"): 3, ("u", "p"): 1, ("u", "q"): 2}
    assert journal.covered() == {"u": "0a"}


async def test_recovery_raises_marks_to_the_messages_stored_after_the_covered_id() -> None:
    backend = InMemoryBackend()
    await backend.open()
    ids = await backend.publish("t", [pulsar_message("p", n) for n in range(3)])
    await backend.publish("t", [
        pulsar_message("p", 3), pulsar_message("q", 9), pulsar_message("p", 4),
        OutMessage(body=b"not pulsar"),
        OutMessage(body=b"x", properties={PRODUCER: "r", SEQUENCE: "-1"}),
        OutMessage(body=b"x", properties={PRODUCER: "r", SEQUENCE: str(2**63)}),
        pulsar_message("old", 1),
        # A dead letter or retry copy the engine made (of another topic's message, say).
        OutMessage(body=b"x", properties={PRODUCER: "p", SEQUENCE: "99", ORIGIN_TOPIC: "o"}),
    ])
    marks = {("t", "p"): 2, ("t", "old"): 5}
    engine = cast(Any, Topics(backend))
    raised = await recover(engine, {"t": ids[-1]}, lambda t, n: marks.get((t, n), -1))
    # q's 9 is not the next id of any run (a producer's ids rise by one): not raised.
    assert raised == {("t", "p"): 4}
    # From an id no longer kept (or "": none covered yet), from the oldest kept message.
    raised = await recover(engine, {"t": "gone"}, lambda t, n: -1)
    assert raised == {("t", "p"): 4}
    assert await recover(engine, {"nothing": ""}, lambda t, n: -1) == {}
    await backend.close()


async def test_recovery_is_bounded_and_stops_where_the_back_end_cannot_read() -> None:
    backend = InMemoryBackend()
    await backend.open()
    await backend.publish("t", [pulsar_message("p", n) for n in range(2500)])
    engine = Topics(backend)
    raised = await recover(cast(Any, engine), {"t": ""}, lambda t, n: -1, max_scan=1500)
    assert raised == {("t", "p"): 1499}
    assert engine.calls == 2

    class Broker:
        calls = 0

        async def properties_after(self, topic: str, message_id: str, limit: int) -> None:
            self.calls += 1
            return None

    broker = Broker()
    assert await recover(cast(Any, broker), {"t": "", "u": ""}, lambda t, n: -1) == {}
    assert broker.calls == 1

    class Failing:
        async def properties_after(self, topic: str, message_id: str, limit: int) -> None:
            raise Unavailable("down")

    assert await recover(cast(Any, Failing()), {"t": ""}, lambda t, n: -1) == {}
    # The time budget counts for all topics: once spent, a topic gets one page.
    times = iter(range(0, 1000, 20))
    await backend.publish("u", [pulsar_message("p", n) for n in range(2500)])
    engine.calls = 0
    raised = await recover(cast(Any, engine), {"t": "", "u": ""}, lambda t, n: -1,
                           clock=lambda: float(next(times)))
    assert raised == {("t", "p"): 1999, ("u", "p"): 999}
    assert engine.calls == 3
    await backend.close()


async def test_adopted_marks_are_on_disk_and_in_the_registry(tmp_path: Path) -> None:
    registry = DedupRegistry(journal=Journal(tmp_path))
    registry.load()
    assert registry._journal is not None
    registry._journal.adopt({("t", "p"): 7})
    again = DedupRegistry(journal=Journal(tmp_path))
    again.load()
    assert again.last("t", "p") == 7


async def test_a_mark_is_raised_only_along_an_unbroken_run() -> None:
    """An id past a gap (another protocol's client publishing these property names, a
    forwarded message) would make the producer's next sends count as duplicates: lost."""
    backend = InMemoryBackend()
    await backend.open()
    await backend.publish("t", [pulsar_message("p", n) for n in (3, 4, 1000, 6)])
    engine = cast(Any, Topics(backend))
    assert await recover(engine, {"t": ""}, lambda t, n: 2) == {("t", "p"): 4}
    assert await recover(engine, {"t": ""}, lambda t, n: 5) == {("t", "p"): 6}
    await backend.close()


async def test_a_store_in_doubt_holds_the_covered_id_back_until_settled(tmp_path: Path) -> None:
    """A store whose outcome is unknown (its writer lost after the commit) keeps its journal
    token open: were the gateway killed before the topic is settled, the scan at the next start
    still covers its messages."""
    backend = InMemoryBackend()
    await backend.open()
    engine = Topics(backend)
    registry = DedupRegistry(journal=Journal(tmp_path))
    registry.load()
    assert registry._journal is not None
    registry._journal.start()
    first = await backend.publish("t", [pulsar_message("p", 0)])
    token = registry.begin("t")
    await registry.persist("t", "p", 0, first[-1], token)
    registry.end(token)
    token = registry.begin("t")
    await backend.publish("t", [pulsar_message("p", 1), pulsar_message("p", 2)])
    registry.doubt("t", token)  # the publish failed: were they stored?
    registry.end(token)
    later = await backend.publish("t", [pulsar_message("q", 0)])
    other = registry.begin("t")
    await registry.persist("t", "q", 0, later[-1], other)
    registry.end(other)
    assert registry._journal.covered() == {"t": first[-1]}
    assert registry.in_doubt("t") and registry.last("t", "p") == 0
    await settle(cast(Any, engine), registry, "t")
    assert not registry.in_doubt("t") and registry.last("t", "p") == 2
    assert engine.calls == 1
    await registry._journal.close()
    again = DedupRegistry(journal=Journal(tmp_path))
    again.load()
    assert again.last("t", "p") == 2
    await backend.close()


async def test_settling_waits_for_a_readable_store_and_refusals_raise_no_doubt() -> None:
    class Healing:
        down = True

        async def properties_after(self, topic: str, message_id: str, limit: int) -> None:
            if self.down:
                raise Unavailable("embedded store is recovering")
            return None  # a broker: nothing to read, the doubt ends (at least once)

    engine, registry = Healing(), DedupRegistry()
    registry.doubt("t", registry.begin("t"))
    with pytest.raises(Unavailable):
        await settle(cast(Any, engine), registry, "t")
    assert registry.in_doubt("t")
    engine.down = False
    await settle(cast(Any, engine), registry, "t")
    assert not registry.in_doubt("t")

    class Broken:
        async def properties_after(self, topic: str, message_id: str, limit: int) -> None:
            raise RuntimeError("a bug")

    registry.doubt("t", registry.begin("t"))
    await settle(cast(Any, Broken()), registry, "t")  # logged; the topic is not held for ever
    assert not registry.in_doubt("t")
    assert unknown_outcome(Unavailable("writer lost")) and unknown_outcome(OSError("?"))
    assert not unknown_outcome(InvalidArgument("topic", "", "a name"))
