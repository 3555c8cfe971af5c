"""Reading a bearer token from a file (`--token-file`, `--from-token-file`, `--to-token-file`,
a Pulsar URL's `token-file=`): one line of printable ASCII, read with a bound.

A path to the wrong file (a log, a binary, `/dev/zero`) is refused by name: it used to be read
whole (`/dev/zero` until the machine ran out of memory) or fail with a UnicodeDecodeError
traceback, and an empty file sent no token at all. `serve`'s TOML files (`--tokens-file`,
`--config`) are read with a bound too (`read_toml`).
"""

from __future__ import annotations

import tomllib
from typing import Any

from gateway.errors import InvalidArgument

MAX_TOKEN_FILE_BYTES = 64 * 1024
"""The largest token file read (a bearer token is a line; a JWT a few KiB)."""


def read_bounded(field: str, path: str, limit: int, what: str, kind: str = "file") -> bytes:
    """The bytes of the file at `path`, at most `limit` of them (a bigger one is refused, not
    read whole); `InvalidArgument` naming `field`, `kind` and `what` it should hold."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise InvalidArgument(field, path, f"a readable {kind} ({exc.strerror})") from None
    if len(data) > limit:
        raise InvalidArgument(field, path, f"a {kind} of at most {limit} bytes{what}")
    return data


MAX_TOML_BYTES = 16 << 20
"""The largest settings file `serve` reads (`--tokens-file`, `--config`): tens of thousands of
principals fit; `/dev/zero` was read until the kernel killed the gateway for its memory."""


def read_toml(field: str, path: str, kind: str) -> dict[str, Any]:
    """The TOML document at `path`, read with a bound; `InvalidArgument` naming `field` for a
    file that cannot be read, is too large, is not UTF-8 or not TOML (`kind`: the file's kind
    as the errors call it, e.g. "file" or "TOML file")."""
    data = read_bounded(field, path, MAX_TOML_BYTES, "", kind=kind)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidArgument(field, path, f"a UTF-8 TOML file (byte {exc.start} is not "
                                           "UTF-8)") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(field, path, f"valid TOML ({exc})") from None


def read_token_file(field: str, path: str) -> str:
    """The token in `path`, without surrounding whitespace; `InvalidArgument` naming `field`."""
    data = read_bounded(field, path, MAX_TOKEN_FILE_BYTES, " holding a bearer token")
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise InvalidArgument(field, path, f"a bearer token in ASCII (byte {exc.start} is "
                                           "not)") from None
    if not token:
        raise InvalidArgument(field, path, "a file holding a bearer token (it is empty)")
    if not printable_ascii(token):
        raise InvalidArgument(field, path, "one line of printable ASCII (a bearer token)")
    return token


def printable_ascii(token: str) -> bool:
    """Whether a token can travel in a gRPC metadata value (`authorization: Bearer ...`)."""
    return all(" " <= c <= "~" for c in token)


def check_token(field: str, token: str) -> str:
    """A token given as an argument or an environment variable ("" = none): one that gRPC
    could not send (a line break, a non-ASCII character) is refused by name, where it failed
    the first call with a traceback from gRPC's C core."""
    if not printable_ascii(token):
        raise InvalidArgument(field, "***", "one line of printable ASCII (a bearer token)")
    return token


def check_secret(field: str, value: str) -> None:
    """A token, password or key a setting holds (a tokens file's `token`, `[pulsar] token`, a
    RocketMQ key; "" = none): printable ASCII without a blank at either end, what an
    `authorization` header (gRPC metadata, HTTP) and Pulsar's token auth carry unchanged. A
    control character forged header lines; a blank at an end is lost by the header. Never
    echoed."""
    if not printable_ascii(value) or value != value.strip():
        raise InvalidArgument(field, "***", "printable ASCII (0x20..0x7E) without a blank at "
                                            "either end")
