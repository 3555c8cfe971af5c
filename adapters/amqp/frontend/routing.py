"""How an exchange matches a message to its bindings (pure).

* direct: the routing key equals the binding key;
* fanout: every binding;
* topic: the binding key's words (split at `.`) match the routing key's, `*` standing for exactly
  one word and `#` for zero or more; the empty key has no words (as RabbitMQ splits it), so `*`
  does not match it;
* headers: the binding's arguments against the message's headers, `x-match` = `all` (the
  default) or `any`, and `all-with-x` / `any-with-x` that also compare the `x-` arguments; an
  argument without a value (void) matches any value of that header.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

DIRECT = "direct"
FANOUT = "fanout"
TOPIC = "topic"
HEADERS = "headers"
TYPES = (DIRECT, FANOUT, TOPIC, HEADERS)
X_MATCH = "x-match"
ROUTE_TURN = 2_000
"""Bindings a batch of messages (published, or dead letters) may be matched against before the
event loop serves others (tens of milliseconds at most for long topic wildcards: a batch of a
thousand messages through an exchange of thousands of bindings held every client for
seconds)."""
MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")


@functools.lru_cache(maxsize=4096)
def _words(key: str) -> tuple[str, ...]:
    return tuple(key.split(".")) if key else ()


@functools.lru_cache(maxsize=4096)
def _pattern(key: str) -> tuple[str, ...]:
    """A binding key's words, each run of `#` as one (`#.#` matches what `#` matches)."""
    out: list[str] = []
    for word in _words(key):
        if word != "#" or not out or out[-1] != "#":
            out.append(word)
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _positions(routing_key: str) -> tuple[int, dict[str, int]]:
    """A routing key's word count and, per word, the bit set of the positions it holds (bit j:
    word j); "*" holds every position."""
    words = _words(routing_key)
    masks: dict[str, int] = {}
    for j, word in enumerate(words):
        masks[word] = masks.get(word, 0) | 1 << j
    masks["*"] = (1 << len(words)) - 1
    return len(words), masks


def topic_matches(pattern: str, routing_key: str) -> bool:
    """Whether a topic binding key matches a routing key."""
    if pattern == "#":
        return True
    return _match(_pattern(pattern), routing_key)


def _match(pattern: tuple[str, ...], routing_key: str) -> bool:
    # Bit j of `reachable`: the pattern so far can consume exactly the first j words. A few
    # integer operations per pattern word, whatever the routing key's length: a publish
    # through an exchange of many long `#` bindings costs microseconds per binding, never a
    # table of pattern words times routing-key words each (which stalled every client).
    count, masks = _positions(routing_key)
    reachable = 1
    everything = (1 << (count + 1)) - 1
    for token in pattern:
        if token == "#":
            lowest = reachable & -reachable
            reachable = everything & ~(lowest - 1)
        else:
            reachable = (reachable & masks.get(token, 0)) << 1
            if not reachable:
                return False
    return bool(reachable >> count & 1)


def headers_match(arguments: Mapping[str, object], headers: Mapping[str, object]) -> bool:
    """Whether a headers binding (its arguments) matches a message's headers."""
    mode = arguments.get(X_MATCH, "all")
    if isinstance(mode, bytes):
        mode = mode.decode("utf-8", "replace")
    with_x = mode in ("all-with-x", "any-with-x")
    wanted = [(k, v) for k, v in arguments.items()
              if k != X_MATCH and (with_x or not k.startswith("x-"))]
    if mode in ("any", "any-with-x"):
        return any(_one(k, v, headers) for k, v in wanted)
    return all(_one(k, v, headers) for k, v in wanted)


def _one(name: str, value: object, headers: Mapping[str, object]) -> bool:
    if name not in headers:
        return False
    return value is None or _same(value, headers[name])


def _same(a: object, b: object) -> bool:
    if isinstance(a, bytes) and isinstance(b, str):
        return a == b.encode()
    if isinstance(a, str) and isinstance(b, bytes):
        return a.encode() == b
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def binding_matches(kind: str, binding_key: str, arguments: Mapping[str, object],
                    routing_key: str, headers: Mapping[str, object]) -> bool:
    """Whether a binding of an exchange of `kind` takes a message."""
    if kind == DIRECT:
        return binding_key == routing_key
    if kind == FANOUT:
        return True
    if kind == TOPIC:
        return topic_matches(binding_key, routing_key)
    return headers_match(arguments, headers)
