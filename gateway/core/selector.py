"""Message selectors: a condition on a message's properties (and, where a front end names it, its
tag) in the SQL92 subset messaging products filter with.

Grammar (keywords in any case):

* comparisons `= <> > >= < <=`; `[NOT] BETWEEN x AND y`; `[NOT] IN ('a', 'b')`;
  `IS [NOT] NULL`; `[NOT] CONTAINS 's'`, `[NOT] STARTSWITH 's'`, `[NOT] ENDSWITH 's'`;
* `AND`, `OR`, `NOT`, parentheses;
* constants: numbers (`123`, `-4`, `3.1415`, `1e3`), strings in single quotes (`'it''s'`),
  `NULL`, `TRUE`, `FALSE`; an identifier (letters, digits, `_`, `$`, not starting with a digit)
  names a property.

Property values are text: one compared with a number counts as that number when it is one
(`10` > 5), one compared with `TRUE`/`FALSE` when it is `true`/`false`. The logic has three
values, as SQL's: a property a message does not have is NULL, a comparison with NULL (or of a
text that is no number with a number) is unknown, `NOT unknown` is unknown, and a message is
selected only when the whole condition is true.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

Value = str | int | float | bool | None
Getter = Callable[[str, Mapping[str, str]], Value]
"""A compiled expression: (tag, properties) -> value."""

MAX_TEXT = 4096
"""Characters a selector may have."""
MAX_DEPTH = 64
"""Nesting of parentheses and NOT a selector may have."""
MAX_TERMS = 64
"""Conditions (comparisons, tests, values) a selector may have: each costs every message it
is asked about about a microsecond, on the loop every client shares."""

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<str>'(?:[^']|'')*')
    | (?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
    | (?P<op><>|>=|<=|[=<>(),+-])
    )""", re.VERBOSE | re.ASCII)
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE",
                      "CONTAINS", "STARTSWITH", "ENDSWITH"})
_TEXT_TESTS: dict[str, Callable[[str, str], bool]] = {
    "CONTAINS": lambda value, s: s in value,
    "STARTSWITH": lambda value, s: value.startswith(s),
    "ENDSWITH": lambda value, s: value.endswith(s),
}


class SelectorError(ValueError):
    """A selector that does not parse; the message says where and why."""


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """A compiled selector. `tag_name` is the identifier that names the message's tag (as a
    front end's protocol names it), "" for none (then every identifier names a property)."""

    text: str
    tag_name: str = ""
    _test: Getter = field(compare=False, repr=False, default=lambda tag, props: True)

    @staticmethod
    def compile(text: str, tag_name: str = "") -> MessageSelector:
        """The selector of `text`; SelectorError when it does not parse."""
        return _compiled(text, tag_name)

    def matches(self, tag: str, properties: Mapping[str, str]) -> bool:
        return self._test(tag, properties) is True


@lru_cache(maxsize=64)  # a pull consumer sends its selector with every receive
def _compiled(text: str, tag_name: str) -> MessageSelector:
    if len(text) > MAX_TEXT:
        raise SelectorError(f"at most {MAX_TEXT} characters")
    parser = _Parser(text, tag_name)
    inner = parser.condition(parser.position(), parser.expression(0))
    if parser.peek() is not None:
        raise parser.error("AND, OR or the end")
    return MessageSelector(text, tag_name, lambda tag, props: _truth(inner(tag, props)))


# ------------------------------------------------------------------------------ values
def _number(value: Value) -> int | float | None:
    kind = type(value)
    if kind is str:
        assert isinstance(value, str)
        if value.isascii() and value.isdigit() and len(value) < 4000:  # the common case
            return int(value)
        if not _NUMBER.fullmatch(value):
            return None
        try:
            return float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:  # more digits than int() converts: no number a selector can name
            return None
    if kind is int or kind is float:
        assert isinstance(value, int | float)
        return value
    return None


def _truth(value: Value) -> bool | None:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        low = value.lower()
        if low in ("true", "false"):
            return low == "true"
    return None


def _equal(left: Value, right: Value) -> bool | None:
    if left is None or right is None:
        return None
    if isinstance(left, bool) or isinstance(right, bool):
        a, b = _truth(left), _truth(right)
        return None if a is None or b is None else a == b
    if isinstance(left, str) and isinstance(right, str):
        return left == right
    x, y = _number(left), _number(right)
    return None if x is None or y is None else x == y


_ORDER: dict[str, Callable[[float, float], bool]] = {
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
}


def _not(value: bool | None) -> bool | None:
    return None if value is None else not value


# ------------------------------------------------------------------------------ parsing
class _Parser:
    def __init__(self, text: str, tag_name: str) -> None:
        self.text = text
        self.tag_name = tag_name
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN.match(text, pos)
            if match is None or match.lastgroup is None:
                at = len(text) - len(text[pos:].lstrip())
                raise SelectorError(f"unexpected {text[at:at + 10]!r} at position {at + 1}")
            kind, value, start = match.lastgroup, match.group(match.lastgroup), match.start(
                match.lastgroup)
            if kind == "id" and value.upper() in KEYWORDS:
                kind, value = "kw", value.upper()
            self.tokens.append((kind, value, start))
            pos = match.end()
        self.at = 0
        self.terms = 0

    def position(self) -> int:
        token = self.peek()
        return -1 if token is None else token[2]

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take_kw(self, *words: str) -> str | None:
        token = self.peek()
        if token is not None and token[0] in ("kw", "op") and token[1] in words:
            self.at += 1
            return token[1]
        return None

    def error(self, wanted: str) -> SelectorError:
        token = self.peek()
        if token is None:
            return SelectorError(f"{wanted} expected at the end")
        return SelectorError(f"{wanted} expected at position {token[2] + 1}, not {token[1]!r}")

    def expect(self, word: str) -> None:
        if self.take_kw(word) is None:
            raise self.error(repr(word))

    def condition(self, at: int, getter: Getter) -> Getter:
        """`getter`, which stands where a condition must (the whole selector, an operand of
        AND, OR or NOT): a number, a text or NULL there would select nothing, ever. A property
        alone is a condition (true when its value is `true`), as TRUE and FALSE are."""
        if hasattr(getter, _VALUE):
            where = f"at position {at + 1}" if at >= 0 else "at the end"
            raise SelectorError(f"a condition expected {where}, not a value (a number, a text "
                                "or NULL is never true)")
        return getter

    def expression(self, depth: int) -> Getter:
        if depth > MAX_DEPTH:
            raise SelectorError(f"nested more than {MAX_DEPTH} deep")
        at = self.position()
        left = self.conjunction(depth)
        while self.take_kw("OR"):
            left = self.condition(at, left)
            at = self.position()
            left = _or(left, self.condition(at, self.conjunction(depth)))
        return left

    def conjunction(self, depth: int) -> Getter:
        at = self.position()
        left = self.negation(depth)
        while self.take_kw("AND"):
            left = self.condition(at, left)
            at = self.position()
            left = _and(left, self.condition(at, self.negation(depth)))
        return left

    def negation(self, depth: int) -> Getter:
        if self.take_kw("NOT"):
            if depth >= MAX_DEPTH:
                raise SelectorError(f"nested more than {MAX_DEPTH} deep")
            at = self.position()
            inner = self.condition(at, self.negation(depth + 1))
            return lambda tag, props: _not(_truth(inner(tag, props)))
        return self.predicate(depth)

    def count(self, terms: int = 1) -> None:
        self.terms += terms
        if self.terms > MAX_TERMS:
            raise SelectorError(f"at most {MAX_TERMS} conditions")

    def predicate(self, depth: int) -> Getter:
        self.count(0 if self.peek() == ("op", "(", self.position()) else 1)  # not a group
        left = self.operand(depth)
        op = self.take_kw("=", "<>", ">", ">=", "<", "<=")
        if op is not None:
            return _compare(op, left, self.operand(depth))
        if self.take_kw("IS"):
            negated = self.take_kw("NOT") is not None
            self.expect("NULL")
            return lambda tag, props: (left(tag, props) is None) != negated
        negated = self.take_kw("NOT") is not None
        if self.take_kw("BETWEEN"):
            self.count()  # two comparisons
            low = self.operand(depth)
            self.expect("AND")
            high = self.operand(depth)
            between = _and(_compare(">=", left, low), _compare("<=", left, high))
            return (lambda tag, props: _not(_truth(between(tag, props)))) if negated else between
        if self.take_kw("IN"):
            return self.member(left, negated)
        test = self.take_kw(*_TEXT_TESTS)
        if test is not None:
            return _text_test(_TEXT_TESTS[test], left, self.string(), negated)
        if negated:
            raise self.error("BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH")
        return left

    def member(self, left: Getter, negated: bool) -> Getter:
        self.expect("(")
        values = {self.string()}
        while self.take_kw(","):
            values.add(self.string())
        self.expect(")")
        chosen = frozenset(values)

        def test(tag: str, props: Mapping[str, str]) -> bool | None:
            value = left(tag, props)
            if not isinstance(value, str):
                return None
            return (value in chosen) != negated
        return test

    def string(self) -> str:
        token = self.peek()
        if token is None or token[0] != "str":
            raise self.error("a string in single quotes")
        self.at += 1
        return token[1][1:-1].replace("''", "'")

    def operand(self, depth: int) -> Getter:
        token = self.peek()
        if token is None:
            raise self.error("a value")
        kind, value, _ = token
        self.at += 1
        if kind == "op" and value == "(":
            inner = self.expression(depth + 1)
            self.expect(")")
            return inner
        if kind == "op" and value in "+-":
            number = self.peek()
            if number is None or number[0] != "num":
                raise self.error("a number")
            self.at += 1
            return _value(_number(value + number[1]))
        if kind == "num":
            return _value(_number(value))
        if kind == "str":
            return _value(value[1:-1].replace("''", "'"))
        if kind == "kw" and value == "NULL":
            return _value(None)
        if kind == "kw" and value in ("TRUE", "FALSE"):
            return _constant(value == "TRUE")
        if kind == "id":
            if value == self.tag_name:
                return lambda tag, props: tag or None
            return lambda tag, props: props.get(value)
        self.at -= 1
        raise self.error("a value")


_CONSTANT = "selector_constant"
_VALUE = "selector_value"
"""Marks a constant that is no condition: a number, a text, NULL."""


def _constant(value: Value) -> Getter:
    def get(tag: str, props: Mapping[str, str]) -> Value:
        return value
    setattr(get, _CONSTANT, value)  # read back by `_compare`
    return get


def _value(value: Value) -> Getter:
    get = _constant(value)
    setattr(get, _VALUE, True)  # read back by `_Parser.condition`
    return get


def _or(left: Getter, right: Getter) -> Getter:
    def test(tag: str, props: Mapping[str, str]) -> bool | None:
        a = _truth(left(tag, props))
        if a is True:
            return True
        b = _truth(right(tag, props))
        return True if b is True else (None if None in (a, b) else False)
    return test


def _and(left: Getter, right: Getter) -> Getter:
    def test(tag: str, props: Mapping[str, str]) -> bool | None:
        a = _truth(left(tag, props))
        if a is False:
            return False
        b = _truth(right(tag, props))
        return False if b is False else (None if None in (a, b) else True)
    return test


def _compare(op: str, left: Getter, right: Getter) -> Getter:
    if op in ("=", "<>"):
        negated = op == "<>"
        return lambda tag, props: (
            None if (same := _equal(left(tag, props), right(tag, props))) is None
            else same != negated)
    order = _ORDER[op]
    if hasattr(right, _CONSTANT):  # `a > 5`: the constant's number once, not per message
        bound = _number(getattr(right, _CONSTANT))
        if bound is None:
            return _constant(None)

        def against(tag: str, props: Mapping[str, str]) -> bool | None:
            a = _number(left(tag, props))
            return None if a is None else order(a, bound)
        return against

    def test(tag: str, props: Mapping[str, str]) -> bool | None:
        a, b = _number(left(tag, props)), _number(right(tag, props))
        return None if a is None or b is None else order(a, b)
    return test


def _text_test(check: Callable[[str, str], bool], left: Getter, text: str,
               negated: bool) -> Getter:
    def test(tag: str, props: Mapping[str, str]) -> bool | None:
        value = left(tag, props)
        return (check(value, text) != negated) if isinstance(value, str) else None
    return test
