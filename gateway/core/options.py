"""Typed reading of string options (`max_retries=16`) with loud validation."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from gateway.errors import InvalidArgument

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})
_INTEGER = re.compile(r"[+-]?[0-9]+")
"""How an integer option is written: ASCII digits (Python's int() also reads `1_000` and other
scripts' digits, which no other product takes)."""


class OptionReader:
    """Reads options once; `finish()` rejects keys nobody asked for."""

    def __init__(self, owner: str, options: Mapping[str, str]) -> None:
        self.owner = owner
        self.options = dict(options)
        self.seen: set[str] = set()
        self.values: dict[str, str] = {}

    def _raw(self, key: str) -> str | None:
        self.seen.add(key)
        value = self.options.get(key)
        return None if value is None else str(value).strip()

    def integer(self, key: str, default: int, low: int, high: int, unit: str = "") -> int:
        raw = self._raw(key)
        suffix = f" {unit}" if unit else ""
        if raw is None:
            value = default
        else:
            if _INTEGER.fullmatch(raw) is None:
                raise InvalidArgument(key, raw, f"an integer in {low}..{high}{suffix}")
            value = int(raw)
            if not low <= value <= high:
                raise InvalidArgument(key, value, f"{low}..{high}{suffix}")
        self.values[key] = str(value)
        return value

    def optional_integer(self, key: str, low: int, high: int, unit: str = "") -> int | None:
        if self.options.get(key) is None:
            self.seen.add(key)
            return None
        return self.integer(key, low, low, high, unit)

    def boolean(self, key: str, default: bool) -> bool:
        raw = self._raw(key)
        if raw is None:
            value = default
        elif raw.lower() in TRUE:
            value = True
        elif raw.lower() in FALSE:
            value = False
        else:
            raise InvalidArgument(key, raw, "true or false")
        self.values[key] = str(value).lower()
        return value

    def choice(self, key: str, default: str, choices: Iterable[str]) -> str:
        allowed = tuple(choices)
        raw = self._raw(key)
        value = default if raw is None else raw.lower()
        if value not in allowed:
            raise InvalidArgument(key, raw, "one of " + ", ".join(allowed))
        self.values[key] = value
        return value

    def text(self, key: str, default: str = "") -> str:
        raw = self._raw(key)
        value = default if raw is None else raw
        if value:
            self.values[key] = value
        return value

    def forbid(self, key: str, why: str) -> None:
        if key in self.options:
            raise InvalidArgument(key, self.options[key], why)
        self.seen.add(key)

    def finish(self) -> tuple[tuple[str, str], ...]:
        unknown = sorted(set(self.options) - self.seen)
        if unknown:
            known = ", ".join(sorted(self.seen)) or "none"
            raise InvalidArgument(
                "policy_options", unknown[0], f"options of policy {self.owner}: {known}"
            )
        return tuple(sorted(self.values.items()))
