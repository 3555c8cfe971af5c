"""The principals of the tokens file (see `gateway.server.auth` for its layout): each entry
checked, named by the key it sets, before the gateway starts."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.errors import InvalidArgument
from gateway.limits import check_name
from gateway.token_file import check_secret, read_toml


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    token_sha256: str
    publish: tuple[str, ...] = ()
    consume: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    admin: bool = False
    extras: tuple[tuple[str, str], ...] = ()
    """(key, value) of the fields products declare (`Product.principal_fields`) that the
    principal's entry sets."""

    def extra(self, key: str) -> str:
        """A product's field of this principal; "" when its entry does not set it."""
        for name, value in self.extras:
            if name == key:
                return value
        return ""


_KEYS = ("name", "token", "token_sha256", "publish", "consume", "groups", "admin")
"""The keys a `[[principal]]` takes, besides those products declare."""


def token_digest(token: str) -> str:
    """The SHA-256 hex digest a token is known by."""
    return hashlib.sha256(token.encode()).hexdigest()


def _patterns(entry: dict[str, Any], key: str, name: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidArgument(f"principal[{name}].{key}", value, "a list of non-empty patterns")
    return tuple(value)


def load_principals(
    path: str | Path, permissions: Iterable[dict[str, Any]] = (), extra_fields: Iterable[str] = ()
) -> list[Principal]:
    """Principals from the tokens file, with permissions from config merged in by name;
    `extra_fields` are the keys products declare (kept as strings in `Principal.extras`)."""
    extra_fields = tuple(extra_fields)
    doc = read_toml("tokens_file", str(path), "file")
    entries = doc.get("principal", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InvalidArgument("tokens_file", str(path), "[[principal]] tables")
    for key in doc:  # `[[principals]]` next to `[[principal]]` was ignored silently
        if key != "principal":
            raise InvalidArgument("tokens_file", str(path), f"[[principal]] tables only (not "
                                  f"{key!r})")
    permissions = list(permissions)
    extra = {str(p.get("name", "")): p for p in permissions}
    names = {str(e.get("name", "")) for e in entries}
    for i, p in enumerate(permissions):
        # Permissions for a name the tokens file does not hold were dropped without a word.
        if str(p.get("name", "")) not in names:
            raise InvalidArgument(f"auth.principals[{i}].name", p.get("name", ""),
                                  "the name of a [[principal]] in the tokens file")
    known = (*_KEYS, *extra_fields)
    out: list[Principal] = []
    named: dict[str, int] = {}
    tokened: dict[str, str] = {}
    for i, raw in enumerate(entries):
        entry = {**extra.get(str(raw.get("name", "")), {}), **raw}
        name = entry.get("name", "")
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"principal[{i}].name", name, "a non-empty string")
        check_name(f"principal[{i}].name", name)  # it goes into log lines and refusals
        for key in entry:
            if key not in known:  # a misspelt key (`admn`, `publsh`) was ignored silently
                raise InvalidArgument(f"principal[{name}].{key}", "***",
                                      "keys " + ", ".join(known))
        token = entry.get("token")
        digest = entry.get("token_sha256")
        if bool(token) == bool(digest):
            raise InvalidArgument(f"principal[{name}].token", "***", "exactly one of token, "
                                  "token_sha256")
        if token and not isinstance(token, str):
            raise InvalidArgument(f"principal[{name}].token", "***", "a string")
        if token:
            check_secret(f"principal[{name}].token", token)
        if digest and not (isinstance(digest, str) and len(digest) == 64
                           and all(c in "0123456789abcdefABCDEF" for c in digest)):
            raise InvalidArgument(f"principal[{name}].token_sha256", "***",
                                  "64 hexadecimal digits (the SHA-256 of the token)")
        for key in extra_fields:  # `secret = ["s"]` was the text "['s']", `true` "True"
            if key in entry and not isinstance(entry[key], str):
                raise InvalidArgument(f"principal[{name}].{key}", "***", "a string")
        admin = entry.get("admin", False)
        if not isinstance(admin, bool):  # `admin = "false"` granted admin (bool("false"))
            raise InvalidArgument(f"principal[{name}].admin", admin, "true or false")
        # A name or token given twice was the last one's, silently: the other principal lost
        # its permissions (or its token took the other's).
        if named.setdefault(name, i) != i:
            raise InvalidArgument(f"principal[{i}].name", name, "a name no other principal has")
        token_sha256 = str(digest).lower() if digest else token_digest(str(token))
        if tokened.setdefault(token_sha256, name) != name:
            raise InvalidArgument(f"principal[{name}].token", "***", "a token no other "
                                  f"principal has (principal {tokened[token_sha256]} has it)")
        out.append(Principal(
            name=name,
            token_sha256=token_sha256,
            publish=_patterns(entry, "publish", name),
            consume=_patterns(entry, "consume", name),
            groups=_patterns(entry, "groups", name),
            admin=admin,
            extras=tuple((key, str(entry[key])) for key in extra_fields if key in entry),
        ))
    if not out:
        raise InvalidArgument("tokens_file", str(path), "at least one [[principal]]")
    return out
