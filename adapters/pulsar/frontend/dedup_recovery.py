"""Producer sequence ids a crash kept out of the dedup journal, recovered from the stored
messages (as a broker recovers them from its log).

The journal (`journal`) is fsynced after each store and before its receipts, so a `kill -9` in
between leaves the last few milliseconds of stores unrecorded. Every message the front end
stores carries its producer's name and sequence id (`messages.PRODUCER`, `messages.SEQUENCE`),
and the journal records, per topic, a message id up to which every stored message is covered.
On start, the messages of each such topic after that id are read
(`EnginePort.properties_after`, at most `MAX_SCAN` of them per topic and `TIME_BUDGET_S` in all;
logged when cut) and each (topic, producer) mark is raised to the highest sequence id they
carry, so a producer's resend is answered, not stored again. Back ends that cannot read a topic
that way (brokers: None), topics the journal has no covered id for (lines written before it had
one) and a read that fails keep the journal's ids as they are (a resend is stored again: at
least once, as before).

A mark is raised only along an unbroken run of sequence ids from the journal's (the next one,
the one after, ...): a client's ids rise by one per message, so what a crash kept out of the
journal is such a run. A stray id found further on (a message a client of another protocol
published, or forwarded, with these property names; an application's own ids with gaps) never
raises a mark past a gap, so it cannot make a producer's later sends count as duplicates (lost);
at worst such a resend is stored again, as before. Copies the engine made (retries, dead
letters) do not count.

The same scan runs while the gateway runs (`settle`), for a topic where a store's outcome is
unknown (`DedupRegistry.doubt`): the embedded store's writer lost mid-commit fails the send,
though the writer may have committed it before it ended; the store heals by itself and the
client resends. The scan starts after the newest message id recorded when that store began, and
only once the store reads again (after the heal, when the old writer has ended); until then the
topic's sends are refused, so nothing that may be a duplicate is stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import structlog

from adapters.pulsar.frontend.ids import DedupRegistry
from adapters.pulsar.frontend.journal import MAX_SEQUENCE_ID, Pair
from adapters.pulsar.frontend.messages import PRODUCER, SEQUENCE
from gateway.core.properties import is_reserved
from gateway.engine.port import EnginePort
from gateway.errors import GatewayError, Unavailable

log = structlog.get_logger(__name__)

MAX_SCAN = 100_000
"""Most messages read per topic (the window is a few milliseconds of stores)."""
TIME_BUDGET_S = 30.0
"""Longest time spent reading, all topics together (it delays the listener's start)."""
PAGE = 1000
"""Messages read per call."""


async def recover(
    engine: EnginePort,
    covered: Mapping[str, str],
    last: Callable[[str, str], int],
    *,
    max_scan: int = MAX_SCAN,
    clock: Callable[[], float] = time.monotonic,
    strict: bool = False,
) -> dict[Pair, int]:
    """The (topic, producer) ids to raise: per topic of `covered`, the end of the unbroken run
    of sequence ids just above `last(topic, name)` that the producer's messages after the
    covered id carry. `strict`: a read that fails raises (else the topic is skipped)."""
    found_ids: dict[Pair, set[int]] = {}
    started = clock()
    for topic, after in sorted(covered.items()):
        seen = 0
        while seen < max_scan:
            want = min(PAGE, max_scan - seen)
            try:
                page = await engine.properties_after(topic, after, want)
            except Exception as exc:  # the journal's ids stay: at least once, as before
                if strict:
                    raise
                text = exc.message if isinstance(exc, GatewayError) else repr(exc)
                log.warning("pulsar dedup recovery cannot read the topic", topic=topic,
                            error=text)
                break
            if page is None:  # the back end cannot: the journal's ids stay
                return {}
            for _, properties in page:
                found = _sequence(properties)
                if found is None:
                    continue
                pair, sequence_id = (topic, found[0]), found[1]
                if sequence_id > last(*pair):
                    found_ids.setdefault(pair, set()).add(sequence_id)
            seen += len(page)
            if len(page) < want:  # the topic's end
                break
            after = page[-1][0]
            if clock() - started > TIME_BUDGET_S:
                log.warning("pulsar dedup recovery cut by its time budget", topic=topic,
                            read=seen)
                break
        else:
            log.warning("pulsar dedup recovery cut: a resend of later messages may be stored "
                        "again", topic=topic, read=seen)
    raised = _runs(found_ids, last)
    for (topic, name), sequence_id in sorted(raised.items()):
        log.info("pulsar dedup id recovered from stored messages", topic=topic, producer=name,
                 sequence_id=sequence_id)
    return raised


def _runs(found: Mapping[Pair, set[int]], last: Callable[[str, str], int]) -> dict[Pair, int]:
    """Per pair, the end of the unbroken run of found ids just above the journal's (none when
    the next id is not among them)."""
    raised: dict[Pair, int] = {}
    for pair, ids in found.items():
        end = last(*pair)
        while end + 1 in ids:
            end += 1
        if end > last(*pair):
            raised[pair] = end
    return raised


def _sequence(properties: Mapping[str, str]) -> tuple[str, int] | None:
    """(producer name, sequence id) a stored message carries, None when it carries none or is
    a copy the engine made (a retry or dead letter: it carries reserved properties)."""
    name, text = properties.get(PRODUCER), properties.get(SEQUENCE)
    if not name or text is None or not text.isascii() or not text.isdigit():
        return None
    if any(is_reserved(key) for key in properties):
        return None
    sequence_id = int(text)
    return (name, sequence_id) if sequence_id <= MAX_SEQUENCE_ID else None


async def settle(engine: EnginePort, dedup: DedupRegistry, topic: str) -> None:
    """Account for the stores of `topic` in doubt (`DedupRegistry.doubt`): raise each
    producer's id along the run its messages stored since then carry, before the topic's next
    store is deduplicated. A read the back end cannot serve now (Unavailable: the store still
    heals) raises, and the doubt stays: the caller refuses what it was to store, and the client
    sends it again. Any other failure ends the doubt (logged: a resend of those ids may be
    stored again, at least once as before) rather than hold the topic's sends for ever."""
    async with dedup.settling(topic):
        doubts = dedup.doubts(topic)
        if not doubts:
            return
        try:
            raised = await recover(engine, {topic: min(doubts.values())}, dedup.last,
                                   strict=True)
        except Unavailable:
            raise
        except Exception as exc:
            text = exc.message if isinstance(exc, GatewayError) else repr(exc)
            log.error("pulsar dedup recovery cannot read the topic: a resend may be stored "
                      "again", topic=topic, error=text)
            raised = {}
        for (_, name), sequence_id in sorted(raised.items()):
            try:
                await dedup.persist(topic, name, sequence_id)
            except OSError as exc:  # remembered all the same, as after a store
                log.error("pulsar dedup state not persisted", topic=topic, error=str(exc))
        dedup.settled(topic, doubts)
