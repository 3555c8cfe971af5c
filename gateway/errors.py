"""The one exception tree of the gateway.

Every layer raises these; the server maps them to gRPC status codes in one place
(`gateway.server.errors`). Each error carries the fields a caller needs to fix the request.
"""

from __future__ import annotations

ECHO_CHARS = 200
"""Longest echo of a caller's value in an error message; longer ones are cut (with their
length), so an error stays far below a client's metadata limit whatever the input."""
MESSAGE_CHARS = 1024
"""Longest error message, whatever it holds."""
ERROR_DOMAIN = "retry-gateway"
"""The domain of every error reason the gateway gives (`GatewayError.reason`)."""


def masked(url: str) -> str:
    """`url` with the password between `:` and `@` replaced by ***: how an error or a log
    line shows a URL a caller or an operator gave (one that could not be read too)."""
    head, at, tail = url.rpartition("@")
    if not at:
        return url
    scheme, sep, credentials = head.partition("://")
    user, colon, _ = credentials.partition(":")
    return f"{scheme}{sep}{user}{':***' if colon else ''}@{tail}"


def shorten(value: object, limit: int = ECHO_CHARS) -> str:
    """`repr(value)`, cut to about `limit` characters; a cut one says how long the value was."""
    length = ""
    if isinstance(value, str | bytes) and len(value) > limit:
        length = f" ({len(value)} {'bytes' if isinstance(value, bytes) else 'characters'})"
        value = value[:limit]
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python converts to text
        text = f"<{type(value).__name__} too long to show>"
    if len(text) > limit:
        text = text[:limit]
        length = length or " (cut)"
    return f"{text}...{length}" if length else text


def cut(text: str, limit: int = ECHO_CHARS) -> str:
    """`text` itself, cut to `limit` characters."""
    return text if len(text) <= limit else f"{text[:limit]}..."


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""

    code = "INTERNAL"
    reason = "INTERNAL"
    """A stable name for what went wrong (UPPER_SNAKE_CASE, never reworded): gRPC callers read
    it in the status's `google.rpc.ErrorInfo` (domain `ERROR_DOMAIN`); the README lists every
    reason."""

    def __init__(self, message: str) -> None:
        message = cut(message, MESSAGE_CHARS)
        super().__init__(message)
        self.message = message


class InvalidArgument(GatewayError):
    """A request or configuration value is missing, unknown or out of range."""

    code = "INVALID_ARGUMENT"
    reason = "INVALID_ARGUMENT"

    def __init__(self, field: str, value: object, allowed: str) -> None:
        super().__init__(f"{cut(field)}={shorten(value)} is not allowed: "
                         f"{cut(allowed, 4 * ECHO_CHARS)}")
        self.field = field
        self.value = value
        self.allowed = allowed


class Undecodable(InvalidArgument):
    """A request's bytes are not a message of the method's type. On a stream it is raised by
    the request iterator, so the handler ends the stream with it after what it owes (the
    answers to the requests before it)."""

    reason = "UNDECODABLE_REQUEST"
    ALLOWED = "a valid protobuf message of the method's type"

    def __init__(self, detail: str) -> None:
        super().__init__("request", detail, self.ALLOWED)
        self.message = cut(f"request: not {self.ALLOWED} ({detail})", MESSAGE_CHARS)
        self.args = (self.message,)


class IllegalTransition(GatewayError):
    """An event that the retry state machine does not allow in the record's state."""

    code = "FAILED_PRECONDITION"
    reason = "ILLEGAL_TRANSITION"

    def __init__(self, state: str, event: str, why: str = "") -> None:
        text = f"event {event} is not allowed in state {state}"
        super().__init__(f"{text}: {why}" if why else text)
        self.state = state
        self.event = event


class StaleReceipt(GatewayError):
    """A receipt handle that is unknown, already settled, or from an earlier delivery."""

    code = "FAILED_PRECONDITION"
    reason = "STALE_RECEIPT"

    def __init__(self, receipt: str, why: str = "unknown, expired or already settled") -> None:
        super().__init__(f"receipt handle {shorten(receipt)} is {why}")
        self.receipt = receipt


class FailedPrecondition(GatewayError):
    """The request is well formed but not allowed in the current state (of a stream, say)."""

    code = "FAILED_PRECONDITION"
    reason = "FAILED_PRECONDITION"


class NotFound(GatewayError):
    code = "NOT_FOUND"
    reason = "NOT_FOUND"


class AlreadyExists(GatewayError):
    code = "ALREADY_EXISTS"
    reason = "ALREADY_EXISTS"


class MessageTooLarge(GatewayError):
    code = "RESOURCE_EXHAUSTED"
    reason = "MESSAGE_TOO_LARGE"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message of {size} bytes exceeds the maximum size of {limit} bytes")
        self.size = size
        self.limit = limit


class TooManyCalls(GatewayError):
    """A limit on calls open at once (not a message's size)."""

    code = "RESOURCE_EXHAUSTED"
    reason = "TOO_MANY_CALLS"


class TooManyTopics(GatewayError):
    """The back end holds `--max-topics` topics: a new one is not created on first use."""

    code = "RESOURCE_EXHAUSTED"
    reason = "TOO_MANY_TOPICS"

    def __init__(self, limit: int) -> None:
        super().__init__(f"the gateway holds its maximum of {limit} topics (max_topics, "
                         "--max-topics), retry and dead-letter destinations included: a new "
                         "topic is refused; use an existing one")
        self.limit = limit


def _who(owner: str) -> str:
    """A principal as an error names it."""
    return f"principal {owner[:200]!r}" if owner else "the anonymous principal"


class TooManyOwnTopics(TooManyTopics):
    """One principal made as many new topics as each may (`--max-topics-per-principal`): a new
    one of its own is refused; other principals' are not."""

    def __init__(self, limit: int, owner: str) -> None:
        GatewayError.__init__(
            self, f"{_who(owner)} made its maximum of {limit} new topics "
            "(max_topics_per_principal, --max-topics-per-principal; counted since the gateway "
            "started): a new topic of its own is refused; use an existing one")
        self.limit = limit


class TooManyGroups(GatewayError):
    """The engine runs as many groups as it may (`--max-groups`): a new one is refused."""

    code = "RESOURCE_EXHAUSTED"
    reason = "TOO_MANY_GROUPS"

    def __init__(self, limit: int) -> None:
        super().__init__(f"the gateway runs its maximum of {limit} groups (max_groups, "
                         f"--max-groups), each in use (a consumer, a receive or unsettled "
                         "deliveries): a new group is refused; use an existing one, or drop "
                         "(unsubscribe, delete) groups no longer used")
        self.limit = limit


class TooManyStoredGroups(TooManyGroups):
    """The back end keeps `--max-stored-groups` groups: a new group name is refused."""

    def __init__(self, limit: int) -> None:
        GatewayError.__init__(
            self, f"the gateway keeps its maximum of {limit} groups (max_stored_groups, "
            "--max-stored-groups), retry and dead-letter destinations' included: a new group "
            "is refused; use an existing one, or drop groups no longer used")
        self.limit = limit


class TooManyOwnStoredGroups(TooManyStoredGroups):
    """One principal made as many new groups as each may (`--max-stored-groups-per-principal`):
    a new one of its own is refused; other principals' are not."""

    def __init__(self, limit: int, owner: str) -> None:
        GatewayError.__init__(
            self, f"{_who(owner)} made its maximum of {limit} new groups "
            "(max_stored_groups_per_principal, --max-stored-groups-per-principal; counted since "
            "the gateway started): a new group of its own is refused; use an existing one, or "
            "drop groups no longer used")
        self.limit = limit


class TooManyOwnGroups(TooManyGroups):
    """One principal runs as many groups as each may (`--max-groups-per-principal`): a new one
    of its own is refused; other principals' are not."""

    def __init__(self, limit: int, owner: str) -> None:
        GatewayError.__init__(
            self, f"{_who(owner)} runs its maximum of {limit} groups (max_groups_per_principal, "
            "--max-groups-per-principal), each in use (a consumer, a receive or unsettled "
            "deliveries): a new group of its own is refused; use an existing one, or drop "
            "(unsubscribe, delete) groups no longer used")
        self.limit = limit
        self.owner = owner


class Unavailable(GatewayError):
    """The back end cannot take the request now (broker down, shutting down)."""

    code = "UNAVAILABLE"
    reason = "UNAVAILABLE"
    retry_after_ms = 1000
    """How long a caller should wait before trying again (gRPC: `google.rpc.RetryInfo`): the
    store's writer restarts, and a broker back end tries to reconnect, within about a second
    (later in a long outage: both back off)."""


class BackendUnreachable(Unavailable):
    """The back end could not be reached, or refused the gateway (its credentials, say), while
    the gateway started: `gateway serve` says why in one line and exits with status 75
    (EX_TEMPFAIL), as when it loses its back end later (`Backend.fatal`), so that its supervisor
    starts it again."""


class Unauthenticated(GatewayError):
    code = "UNAUTHENTICATED"
    reason = "UNAUTHENTICATED"


class PermissionDenied(GatewayError):
    code = "PERMISSION_DENIED"
    reason = "PERMISSION_DENIED"


class Unimplemented(GatewayError):
    code = "UNIMPLEMENTED"
    reason = "UNIMPLEMENTED"


class MissingExtra(GatewayError):
    """A feature the configuration asks for needs an optional dependency that is not installed;
    the message names the pip extra to install."""

    code = "FAILED_PRECONDITION"
    reason = "MISSING_EXTRA"
