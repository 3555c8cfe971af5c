"""Which names are retry or dead-letter destinations, and of which topic and group.

A naming scheme turns (topic, group) into a destination name; `Destinations` runs it backwards:
`owners("orders-billing-DLQ")` lists every (topic, group) whose destination, under some scheme,
is that name. A template that names no topic (`%DLQ%{group}`, `{ns}{group}-RETRY`) gives a topic
of None; one that names no group (`{topic}.dlq`) gives a group of None. A name may have several
owners (`a-b-c-DLQ` is the `{topic}-{group}-DLQ` name of (a, b-c) and of (a-b, c), and the
`{group}-DLQ` name of group a-b-c); access control treats it as a principal's own when any owner is.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gateway.core.naming import NamingScheme

MAX_NAME_CHARS = 512
"""Longest topic or group name the engine accepts (`gateway.engine.engine.MAX_TOPIC_CHARS`)."""
CACHE_SIZE = 4096
"""Names whose owners are remembered (the cache starts over when full)."""

Owner = tuple[str | None, str | None]
"""(topic, group) of a destination; None where the name does not carry it."""
_Token = tuple[bool, str]
"""(is a placeholder, its name or the literal text)."""


@dataclass(frozen=True, slots=True)
class _Template:
    tokens: tuple[_Token, ...]

    @classmethod
    def parse(cls, template: str) -> _Template | None:
        """None for a template with no literal text: it would claim every name."""
        tokens: list[_Token] = []
        for literal, name, _, _ in string.Formatter().parse(template):
            if literal:
                tokens.append((False, literal))
            if name is not None:
                tokens.append((True, name))
        if all(placeholder for placeholder, _ in tokens):
            return None
        return cls(tuple(tokens))

    def owners(self, name: str) -> Iterator[Owner]:
        for bound in _match(self.tokens, 0, name, 0, {}):
            yield bound.get("topic"), bound.get("group")


def _match(
    tokens: tuple[_Token, ...], i: int, name: str, pos: int, bound: dict[str, str]
) -> Iterator[dict[str, str]]:
    """Every binding of the placeholders from token `i` on that spells `name[pos:]`."""
    if i == len(tokens):
        if pos == len(name):
            yield dict(bound)
        return
    placeholder, text = tokens[i]
    if not placeholder:
        if name.startswith(text, pos):
            yield from _match(tokens, i + 1, name, pos + len(text), bound)
        return
    if text in bound:
        if name.startswith(bound[text], pos):
            yield from _match(tokens, i + 1, name, pos + len(bound[text]), bound)
        return
    for end in _ends(tokens, i, text, name, pos):
        bound[text] = name[pos:end]
        yield from _match(tokens, i + 1, name, end, bound)
        del bound[text]


def _ends(tokens: tuple[_Token, ...], i: int, placeholder: str, name: str, pos: int) -> list[int]:
    """Where the value of placeholder `i` may end: `{ns}` is empty or ends with a slash; other
    values are non-empty and end where the next literal starts (or at the end)."""
    if placeholder == "ns":
        return [pos] + [k + 1 for k in range(pos, len(name)) if name[k] == "/"]
    if i + 1 == len(tokens):
        return [len(name)] if len(name) > pos else []
    following, text = tokens[i + 1]
    if following:
        return list(range(pos + 1, len(name)))
    ends: list[int] = []
    k = name.find(text, pos + 1)
    while k != -1:
        ends.append(k)
        k = name.find(text, k + 1)
    return ends


class Destinations:
    """Recognises the retry and dead-letter destinations of every given naming scheme."""

    def __init__(self, schemes: Iterable[NamingScheme]) -> None:
        templates: list[_Template] = []
        for scheme in schemes:
            for template in (scheme.retry_template, scheme.dead_letter_template):
                parsed = _Template.parse(template)
                if parsed is not None and parsed not in templates:
                    templates.append(parsed)
        self._templates = tuple(templates)
        self._cache: dict[str, tuple[Owner, ...]] = {}

    def owners(self, name: str) -> tuple[Owner, ...]:
        """Every (topic, group) that has `name` as its retry or dead-letter destination; empty
        when `name` is no such destination (names over MAX_NAME_CHARS are never examined)."""
        known = self._cache.get(name)
        if known is not None:
            return known
        found: list[Owner] = []
        if len(name) <= MAX_NAME_CHARS:
            for template in self._templates:
                for owner in template.owners(name):
                    if owner not in found:
                        found.append(owner)
        result = tuple(found)
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        self._cache[name] = result
        return result

    def reserved(self, name: str) -> bool:
        """True when `name` is some topic and group's retry or dead-letter destination."""
        return bool(self.owners(name))
