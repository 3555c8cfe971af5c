"""Message selectors (`gateway.core.selector`): the SQL92 subset's grammar, its three-valued
logic over text properties, and what it refuses (with where and why), fuzzed."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.selector import (
    MAX_DEPTH,
    MAX_TERMS,
    MAX_TEXT,
    MessageSelector,
    SelectorError,
)

CASES = [
    ("a > 5 AND b = 'abc'", {"a": "10", "b": "abc"}, True),
    ("a > 5 AND b = 'abc'", {"a": "1", "b": "abc"}, False),
    ("a >= 10 and a <= 10", {"a": "10"}, True),
    ("a < 2.5", {"a": "2.4999"}, True),
    ("a = 10", {"a": "10.0"}, True),  # as numbers
    ("a = '10'", {"a": "10.0"}, False),  # as text
    ("a > -1.5e0", {"a": "-1"}, True),
    ("a BETWEEN 0 AND 3", {"a": "3"}, True),
    ("a NOT BETWEEN 0 AND 3", {"a": "3"}, False),
    ("a NOT BETWEEN 0 AND 3", {}, False),  # unknown
    ("NOT (a > 5)", {}, False),  # NOT unknown is unknown
    ("NOT a > 5", {"a": "4"}, True),
    ("a IS NULL", {}, True),
    ("a IS NOT NULL", {"a": ""}, True),
    ("b IN ('x', 'y')", {"b": "y"}, True),
    ("b NOT IN ('x', 'y')", {"b": "z"}, True),
    ("b NOT IN ('x', 'y')", {}, False),
    ("c = TRUE", {"c": "true"}, True),
    ("c = false", {"c": "FALSE"}, True),
    ("c", {"c": "TRUE"}, True),
    ("c", {"c": "yes"}, False),
    ("a > 5 OR b = 'q'", {"b": "q"}, True),  # unknown OR true
    ("a > 5 OR b = 'q'", {"b": "r"}, False),
    ("a > 5 AND b = 'q'", {"a": "1"}, False),  # false AND unknown
    ("b CONTAINS 'bc'", {"b": "abcd"}, True),
    ("b STARTSWITH 'ab' AND b ENDSWITH 'cd'", {"b": "abcd"}, True),
    ("b NOT STARTSWITH 'ab'", {"b": "abcd"}, False),
    ("s = 'it''s'", {"s": "it's"}, True),
    ("a > 5", {"a": "1" * 5000}, False),  # more digits than a number converts: not one
    ("a > 5", {"a": "1_000"}, False),  # no number in SQL's sense
    ("a > 5", {"a": " 6"}, False),
    ("a <> 5", {"a": "x"}, False),
    ("a <> 5", {"a": "6"}, True),
    ("a > 5 and not b = 'x' or c is null", {"a": "6", "b": "y", "c": "1"}, True),
    ("TRUE", {}, True),
    ("a", {"a": "true"}, True),  # a property alone: true when it says true
    ("a", {"a": "1"}, False),
    ("NOT (a)", {"a": "false"}, True),
    ("(5) > 3", {}, True),  # a value in parentheses, compared
    ("a > 'x'", {"a": "7"}, False),  # no number to compare with
    ("a > b", {"a": "7", "b": "6.5"}, True),  # two properties
    ("a < 8", {"a": "\u0663"}, False),  # an Arabic-Indic digit is no number in SQL's sense
]


@pytest.mark.parametrize(("text", "props", "selected"), CASES)
def test_a_selector_selects_as_sql_would(text: str, props: dict[str, str],
                                         selected: bool) -> None:
    assert MessageSelector.compile(text).matches("", props) is selected


def test_the_tag_is_named_only_by_the_name_given() -> None:
    tagged = MessageSelector.compile("TAGS IN ('x', 'y')", "TAGS")
    assert tagged.matches("x", {}) and not tagged.matches("z", {})
    assert not tagged.matches("", {})  # no tag: NULL
    assert not MessageSelector.compile("TAGS = 'x'").matches("x", {})  # a property here
    assert MessageSelector.compile("TAGS = 'x'").matches("", {"TAGS": "x"})


def test_selectors_compare_by_text_and_tag_name() -> None:
    assert MessageSelector.compile("a = 1", "T") == MessageSelector.compile("a = 1", "T")
    assert MessageSelector.compile("a = 1", "T") != MessageSelector.compile("a = 1")


@pytest.mark.parametrize(("text", "why"), [
    ("", "a value expected at the end"),
    ("a >", "a value expected at the end"),
    ("a > 5 b", "AND, OR or the end expected at position 7, not 'b'"),
    ("(a = 1", "')' expected at the end"),
    ("a IN ()", "a string in single quotes expected at position 7"),
    ("a IN (1)", "a string in single quotes expected at position 7"),
    ("'x", "unexpected"),
    ("a ! 5", "unexpected '! 5' at position 3"),
    ("a NOT 5", "BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH expected"),
    ("a BETWEEN 1", "'AND' expected at the end"),
    ("a CONTAINS 5", "a string in single quotes expected"),
    ("(" * (MAX_DEPTH + 2) + "a = 1" + ")" * (MAX_DEPTH + 2), f"nested more than {MAX_DEPTH}"),
    ("NOT " * (MAX_DEPTH + 2) + "a = 1", f"nested more than {MAX_DEPTH}"),
    ("a" * (MAX_TEXT + 1), f"at most {MAX_TEXT} characters"),
    ("a = 1\x00", "unexpected"),
    # Where a condition must stand, a constant value would never select anything.
    ("NULL", "a condition expected at position 1, not a value"),
    ("5", "a condition expected at position 1"),
    ("'abc'", "a condition expected at position 1"),
    ("-3", "a condition expected at position 1"),
    ("(5)", "a condition expected at position 1"),
    ("NOT 5", "a condition expected at position 5"),
    ("a AND 5", "a condition expected at position 7"),
    ("5 OR a", "a condition expected at position 1"),
    ("a = 1 OR ('x')", "a condition expected at position 10"),
    (" OR ".join(f"a = {i}" for i in range(MAX_TERMS + 1)), f"at most {MAX_TERMS} conditions"),
    (" OR ".join(f"a BETWEEN {i} AND 9" for i in range(MAX_TERMS // 2 + 1)), "conditions"),
])

def test_a_selector_that_does_not_parse_says_where_and_why(text: str, why: str) -> None:
    with pytest.raises(SelectorError) as raised:
        MessageSelector.compile(text)
    assert why in str(raised.value)


def test_parentheses_are_no_conditions() -> None:
    text = " OR ".join(f"((a = {i}))" for i in range(MAX_TERMS))
    assert MessageSelector.compile(text).matches("", {"a": str(MAX_TERMS - 1)})


WORDS = st.sampled_from(["a", "b", "TAGS", "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL",
                         "TRUE", "FALSE", "CONTAINS", "(", ")", ",", "=", "<>", ">", ">=", "<",
                         "<=", "-", "+", "'x'", "''", "1", "2.5", "1e400", "9" * 50, "'", "!"])


@settings(max_examples=400, deadline=None)
@given(st.lists(WORDS, max_size=30), st.dictionaries(st.sampled_from(["a", "b", "TAGS"]),
                                                     st.text(max_size=8)), st.text(max_size=5))
def test_any_token_soup_parses_or_is_refused_and_never_fails_when_run(
    words: list[str], props: dict[str, str], tag: str,
) -> None:
    try:
        selector = MessageSelector.compile(" ".join(words), "TAGS")
    except SelectorError:
        return
    assert selector.matches(tag, props) in (True, False)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_parses_or_is_refused(text: str) -> None:
    with contextlib.suppress(SelectorError):
        MessageSelector.compile(text)
