"""Topic matching (adapters/amqp/frontend/routing.py) as RabbitMQ matches: `*` one word, `#`
zero or more, the empty key no words; checked against a plain recursive reference on every
small pattern and key, and fast on long wildcard patterns (it once cost a table of pattern
words times routing-key words per binding, and a publish through thousands of them stalled
every client: tests/e2e/test_amqp_frontend_topic_stall.py)."""

from __future__ import annotations

import itertools

import pytest

from adapters.amqp.frontend.routing import topic_matches


def reference(pattern: list[str], words: list[str]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(reference(rest, words[i:]) for i in range(len(words) + 1))
    return bool(words) and head in ("*", words[0]) and reference(rest, words[1:])


def split(key: str) -> list[str]:
    return key.split(".") if key else []


@pytest.mark.parametrize(("pattern", "key", "expected"), [
    ("#", "", True), ("*", "", False), ("", "", True), ("", "a", False),
    ("a.*", "a.b", True), ("a.*", "a", False), ("a.#", "a", True), ("#.a", "a", True),
    ("a.#.b", "a.x.y.b", True), ("a.#.b", "a.b", True), ("*.#.*", "a", False),
    ("#.#", "a.b", True), ("*.*.#", "a.b", True), ("a..b", "a..b", True), ("a..b", "a.b", False),
    ("#.a.#", "b.c", False), ("#.*", "", False), ("a.b", "a.b.c", False),
])
def test_rabbitmq_examples(pattern: str, key: str, expected: bool) -> None:
    assert topic_matches(pattern, key) is expected


def test_same_as_the_reference_on_every_small_pattern_and_key() -> None:
    words = ["a", "b", "*", "#", ""]
    keys = {".".join(k) for n in range(5) for k in itertools.product(["a", "b", ""], repeat=n)}
    for n in range(5):
        for parts in itertools.product(words, repeat=n):
            pattern = ".".join(parts)
            for key in keys:
                assert topic_matches(pattern, key) is reference(split(pattern), split(key)), (
                    pattern, key)

