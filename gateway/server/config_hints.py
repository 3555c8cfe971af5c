"""What a config file's unknown section or key most likely meant (`did you mean ...?`), so that
a typo is one line with the fix in it rather than a list of every key to read through."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

CUTOFF = 0.6
"""How alike a known name must be to be suggested (difflib's ratio)."""


def key_hint(section: str, key: str, toml: Mapping[str, Mapping[str, str]]) -> str:
    """`did you mean ...? ` for `key` of `[section]` (a known one there spelt alike, or the same
    key in the section it belongs to), or "" when nothing comes close."""
    elsewhere = [s for s, known in toml.items() if s != section and key in known]
    if elsewhere:
        return f"did you mean [{elsewhere[0]}] {key}? "
    close = difflib.get_close_matches(key, sorted(toml.get(section, {})), n=1, cutoff=CUTOFF)
    return f"did you mean {close[0]}? " if close else ""


def section_hint(name: str, toml: Mapping[str, Mapping[str, str]]) -> str:
    """`did you mean ...? ` for an unknown top-level name: a section spelt alike, or the
    section a key written outside any section belongs to; "" when nothing comes close."""
    close = difflib.get_close_matches(name, list(toml), n=1, cutoff=CUTOFF)
    if close:
        return f"did you mean [{close[0]}]? "
    owners = [s for s, known in toml.items() if name in known]
    if owners:
        return f"did you mean {name} under [{owners[0]}]? "
    return ""
