"""`migrate rename`: which of a group's messages move from one naming scheme's retry and
dead-letter destinations to another's, and what their copies look like.

Pure: the engine's admin verb (`gateway.engine.admin_move`) reads the messages, asks here what
to move, and has the back end move them (`Backend.move`: one transaction on the embedded store).
A copy keeps the message id, body, key, tag, due time (`deliver_at_ms`), attempt and retry
counts and properties; property values that spell an old destination's name are rewritten to the
new one (a retry letter's `RETRY_TOPIC`, say), and the origin topic is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.backend.base import OutMessage, StoredMessage
from gateway.core.naming import NamingScheme
from gateway.core.properties import ORIGIN_GROUP, ORIGIN_TOPIC

MAX_RENAME = 100_000
"""Messages one rename call moves at most (in one transaction); a caller runs it again for
the rest (`RenameResult.more`)."""
RETRIES = "retries"
DEAD_LETTERS = "dead letters"


@dataclass(frozen=True, slots=True)
class Names:
    """One part of a rename: a destination under the old scheme and under the new one."""

    part: str
    """`retries` or `dead letters`."""
    old: str
    new: str
    topic_specific: bool
    """The old name holds one topic's messages only (its template names the topic)."""


@dataclass(frozen=True, slots=True)
class RenameResult:
    """What a rename moved (or, dry, would move)."""

    retry_from: str
    retry_to: str
    dead_letter_from: str
    dead_letter_to: str
    retries: int
    """Waiting retries moved (or to move)."""
    dead_letters: int
    left: int
    """Messages that stayed at the old names: handed out to a consumer at the time (they are
    settled under the old names; run the rename again afterwards)."""
    more: bool
    """More than `MAX_RENAME` were found: run it again for the rest."""
    dry_run: bool


def parts(topic: str, group: str, old: NamingScheme, new: NamingScheme) -> list[Names]:
    """The destinations to move: retries, then dead letters; a destination whose name does not
    change, or that is the topic itself, is left out."""
    found: list[Names] = []
    pairs = (
        (RETRIES, old.retry_topic(topic, group), new.retry_topic(topic, group),
         old.retry_template),
        (DEAD_LETTERS, old.dead_letter_topic(topic, group), new.dead_letter_topic(topic, group),
         old.dead_letter_template),
    )
    for part, before, after, template in pairs:
        if before == after or topic in (before, after):
            continue
        found.append(Names(part, before, after, "{topic}" in template))
    return found


def belongs(message: StoredMessage, topic: str, group: str, names: Names) -> bool:
    """Whether a message at the old name is the group's of the topic: a name shared by
    several topics (`{group}-RETRY`) holds copies that record their origin topic, and one
    shared by several groups (`{topic}.dlq`) copies that record their group."""
    if message.properties.get(ORIGIN_GROUP, group) != group:
        return False
    origin = message.properties.get(ORIGIN_TOPIC)
    if origin is None:
        return names.topic_specific
    return origin == topic


def renamed(properties: Mapping[str, str], names: Mapping[str, str]) -> dict[str, str]:
    """`properties` with every value that is an old destination name replaced by its new one."""
    return {k: names.get(v, v) for k, v in properties.items()}


def copy_of(message: StoredMessage, names: Mapping[str, str], topic: str,
            group: str) -> OutMessage:
    """The message as it is appended at its new name: everything kept but renamed values, and
    it records its topic and group (`belongs` found it theirs). A message at a name that holds
    both (`{topic}-{group}-DLQ`) may record neither (a Pulsar client's dead-letter policy
    produces it there itself); moved as it was to a name shared by groups (`{topic}.dlq`) it
    counted as every group's dead letter there, so another group listed, resent and purged it."""
    properties = renamed(message.properties, names)
    properties.setdefault(ORIGIN_TOPIC, topic)
    properties[ORIGIN_GROUP] = group
    return OutMessage(
        body=message.body,
        properties=properties,
        key=message.key,
        tag=message.tag,
        deliver_at_ms=message.deliver_at_ms,
        message_id=message.message_id,
        attempt=message.attempt,
        retries=message.retries,
    )
