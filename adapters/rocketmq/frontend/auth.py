"""Verification of the RocketMQ 5 SDK's `MQv2-HMAC-SHA1` request signature.

The SDK signs the value of its `x-mq-date-time` header (`%Y%m%dT%H%M%SZ`) with HMAC-SHA1 keyed
by the secret and sends `authorization: MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=
x-mq-date-time, Signature=<hex>`. The Python SDK writes its *local* time with a `Z` suffix, so
the date is accepted when it is close to either UTC now or local now.
"""

from __future__ import annotations

import calendar
import hmac
import time
from collections.abc import Callable, Iterable, Mapping
from hashlib import sha1

from gateway.errors import Unauthenticated

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_HEADER = "x-mq-date-time"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"


def header_text(metadata: Iterable[tuple[str, str | bytes]], name: str) -> str | None:
    """The value of the first `name` header (lower-case) as text; None when there is none.

    Only the header asked for is decoded: a binary (`-bin`) entry the front end does not read,
    whatever its bytes, is never looked at. Raises `ValueError` when the header is not UTF-8."""
    for key, value in metadata:
        if key.lower() != name:
            continue
        if isinstance(value, str):
            return value
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"the {name} header is not UTF-8 text") from None
    return None


def _auth_header(metadata: Iterable[tuple[str, str | bytes]], name: str) -> str:
    """An authentication header as text ("" when absent); one that is not text is refused."""
    try:
        return header_text(metadata, name) or ""
    except ValueError as error:
        raise Unauthenticated(str(error)) from None


def sign(secret: str, date_time: str) -> str:
    """Hex HMAC-SHA1 of the date header value with the secret, as the SDK computes it."""
    return hmac.new(secret.encode("utf-8"), date_time.encode("utf-8"), sha1).hexdigest()


def parse_authorization(value: str) -> tuple[str, str, str]:
    """Split an authorization header into (access key, signed headers, signature)."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise Unauthenticated(
            f"authorization uses {algorithm!r}; only {ALGORITHM} signatures are accepted"
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, item = part.strip().partition("=")
        if sep:
            fields[name.strip()] = item.strip()
    credential = fields.get("Credential", "")
    access_key = credential.split("/", 1)[0]
    if not access_key or "Signature" not in fields:
        raise Unauthenticated("authorization header lacks Credential or Signature")
    return access_key, fields.get("SignedHeaders", ""), fields["Signature"]


class Authenticator:
    """Checks request metadata against configured credentials; does nothing without them."""

    def __init__(
        self,
        credentials: Mapping[str, str] | None,
        clock_skew_s: int,
        now_s: Callable[[], float] = time.time,
        utc_offset_s: Callable[[float], int] | None = None,
    ) -> None:
        self._credentials = dict(credentials) if credentials is not None else None
        self._skew_s = clock_skew_s
        self._now_s = now_s
        self._utc_offset_s = utc_offset_s or _local_utc_offset_s

    @property
    def enabled(self) -> bool:
        return self._credentials is not None

    def check(self, metadata: Iterable[tuple[str, str | bytes]]) -> str:
        """Return the access key of a correctly signed request; raise `Unauthenticated`."""
        if self._credentials is None:
            return ""
        metadata = tuple(metadata)
        authorization = _auth_header(metadata, "authorization")
        if not authorization:
            raise Unauthenticated("missing authorization header: credentials are required")
        access_key, signed_headers, signature = parse_authorization(authorization)
        secret = self._credentials.get(access_key)
        if secret is None:
            raise Unauthenticated(f"unknown access key {access_key!r}")
        if DATE_HEADER not in {h.strip().lower() for h in signed_headers.split(";")}:
            raise Unauthenticated(f"SignedHeaders must include {DATE_HEADER}")
        date_time = _auth_header(metadata, DATE_HEADER)
        self._check_date(date_time)
        if not hmac.compare_digest(sign(secret, date_time), signature.lower()):
            raise Unauthenticated(
                f"signature mismatch for access key {access_key!r}: wrong secret or altered header"
            )
        return access_key

    def _check_date(self, date_time: str) -> None:
        try:
            stamp = calendar.timegm(time.strptime(date_time, DATE_FORMAT))
        except ValueError:
            raise Unauthenticated(
                f"{DATE_HEADER}={date_time!r} is not a date of the form YYYYMMDDTHHMMSSZ"
            ) from None
        now = self._now_s()
        as_utc = abs(stamp - now)
        as_local = abs(stamp - self._utc_offset_s(now) - now)
        if min(as_utc, as_local) > self._skew_s:
            raise Unauthenticated(
                f"{DATE_HEADER}={date_time} is more than {self._skew_s} s away from the "
                "gateway's clock"
            )


def _local_utc_offset_s(now_s: float) -> int:
    return time.localtime(now_s).tm_gmtoff
