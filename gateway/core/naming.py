"""Naming schemes: where a group's retries and dead letters of a topic go."""

from __future__ import annotations

import functools
import string
from dataclasses import dataclass

from gateway.errors import InvalidArgument

PLACEHOLDERS = frozenset({"topic", "group", "ns"})
"""`{ns}` is the namespace prefix of a qualified topic (`persistent://t/ns/`), else empty."""


def check_template(field: str, template: str) -> str:
    """Validate a `{topic}`/`{group}` template; return it unchanged."""
    if not template:
        raise InvalidArgument(field, template, "a non-empty template using {topic} and/or {group}")
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise InvalidArgument(field, template, f"a valid template ({exc})") from exc
    unknown = names - PLACEHOLDERS
    if unknown:
        raise InvalidArgument(field, template, "placeholders {topic}, {group} and {ns} only")
    return template


def namespace_of(topic: str) -> str:
    """`persistent://t/ns/orders` -> `persistent://t/ns/`; `orders` -> ``."""
    if "://" not in topic:
        return ""
    return topic[: topic.rfind("/") + 1]


@functools.lru_cache(maxsize=4096)
def _format(template: str, topic: str, group: str) -> str:
    """A destination name (remembered: a retry names its destination on every failure)."""
    return template.format(topic=topic, group=group, ns=namespace_of(topic))


@dataclass(frozen=True, slots=True)
class NamingScheme:
    """Retry and dead-letter destination templates with `{topic}` and `{group}` placeholders.

    `extras` holds further named templates a dialect needs (e.g. a dead-letter exchange)."""

    name: str
    retry_template: str
    dead_letter_template: str
    extras: tuple[tuple[str, str], ...] = ()

    def retry_topic(self, topic: str, group: str) -> str:
        return _format(self.retry_template, topic, group)

    def dead_letter_topic(self, topic: str, group: str) -> str:
        return _format(self.dead_letter_template, topic, group)

    def extra(self, key: str, topic: str, group: str) -> str:
        for name, template in self.extras:
            if name == key:
                return _format(template, topic, group)
        raise KeyError(key)


def custom_scheme(retry: str, dead_letter: str, name: str = "custom") -> NamingScheme:
    """A scheme from user templates, e.g. retry `{topic}.{group}.retry`."""
    return NamingScheme(
        name,
        check_template("naming.retry", retry),
        check_template("naming.dead_letter", dead_letter),
    )
