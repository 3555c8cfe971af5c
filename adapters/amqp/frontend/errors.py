"""AMQP 0-9-1 reply codes and the two kinds of protocol error: one that closes its channel
(a soft error) and one that closes the whole connection (a hard error).

The codes are the specification's. Which code a fault gets follows the specification's
classification, and where it leaves room, what RabbitMQ answers (so that clients report what
their users already know). Gateway exceptions (`gateway.errors`) map to reply codes in one place,
`from_gateway`.
"""

from __future__ import annotations

from gateway.errors import (
    ECHO_CHARS,
    GatewayError,
    InvalidArgument,
    MessageTooLarge,
    NotFound,
    PermissionDenied,
    TooManyGroups,
    TooManyTopics,
    Unauthenticated,
    Unavailable,
    shorten,
)

REPLY_SUCCESS = 200
CONTENT_TOO_LARGE = 311
NO_ROUTE = 312
NO_CONSUMERS = 313
CONNECTION_FORCED = 320
INVALID_PATH = 402
ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

NAMES = {
    REPLY_SUCCESS: "REPLY_SUCCESS", CONTENT_TOO_LARGE: "CONTENT_TOO_LARGE",
    NO_ROUTE: "NO_ROUTE", NO_CONSUMERS: "NO_CONSUMERS", CONNECTION_FORCED: "CONNECTION_FORCED",
    INVALID_PATH: "INVALID_PATH", ACCESS_REFUSED: "ACCESS_REFUSED", NOT_FOUND: "NOT_FOUND",
    RESOURCE_LOCKED: "RESOURCE_LOCKED", PRECONDITION_FAILED: "PRECONDITION_FAILED",
    FRAME_ERROR: "FRAME_ERROR", SYNTAX_ERROR: "SYNTAX_ERROR", COMMAND_INVALID: "COMMAND_INVALID",
    CHANNEL_ERROR: "CHANNEL_ERROR", UNEXPECTED_FRAME: "UNEXPECTED_FRAME",
    RESOURCE_ERROR: "RESOURCE_ERROR", NOT_ALLOWED: "NOT_ALLOWED",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED", INTERNAL_ERROR: "INTERNAL_ERROR",
}
HARD = frozenset({CONNECTION_FORCED, INVALID_PATH, FRAME_ERROR, SYNTAX_ERROR, COMMAND_INVALID,
                  CHANNEL_ERROR, UNEXPECTED_FRAME, RESOURCE_ERROR, NOT_ALLOWED, NOT_IMPLEMENTED,
                  INTERNAL_ERROR})
"""Codes the specification lists as connection exceptions."""
MAX_REPLY_TEXT = 255
"""A reply text is a short string."""


def short(value: object) -> str:
    """A value as echoed in a reply: quoted, cut to a reply's length."""
    return shorten(value, min(ECHO_CHARS, 100))


class AMQPError(Exception):
    """A protocol error: closes the channel it happened on, or the connection when `hard`."""

    def __init__(self, code: int, text: str, method: tuple[int, int] = (0, 0),
                 *, hard: bool | None = None) -> None:
        self.code = code
        self.text = f"{NAMES.get(code, str(code))} - {text}"
        self.method = method
        """(class id, method id) of the method that failed; (0, 0) for none."""
        self.hard = code in HARD if hard is None else hard
        super().__init__(self.text)

    @property
    def reply_text(self) -> str:
        """The text for Channel.Close / Connection.Close (a shortstr: at most 255 bytes)."""
        data = self.text.encode("utf-8")
        if len(data) <= MAX_REPLY_TEXT:
            return self.text
        return data[: MAX_REPLY_TEXT - 3].decode("utf-8", "ignore") + "..."

    def at(self, method: tuple[int, int]) -> AMQPError:
        """The same error, naming the method it happened in (where none was named)."""
        if self.method == (0, 0):
            self.method = method
        return self


def from_gateway(exc: GatewayError, method: tuple[int, int] = (0, 0)) -> AMQPError:
    """The reply for an error the engine or a check raised (the one place they are mapped)."""
    if isinstance(exc, PermissionDenied | Unauthenticated):
        return AMQPError(ACCESS_REFUSED, exc.message, method)
    if isinstance(exc, NotFound):
        return AMQPError(NOT_FOUND, exc.message, method)
    if isinstance(exc, MessageTooLarge | InvalidArgument):
        return AMQPError(PRECONDITION_FAILED, exc.message, method)
    if isinstance(exc, TooManyGroups | TooManyTopics):
        return AMQPError(RESOURCE_ERROR, exc.message, method, hard=False)
    if isinstance(exc, Unavailable):
        # The channel closes (a soft error, unlike RabbitMQ's resource alarms which block the
        # connection): the client may open another once the back end is back.
        return AMQPError(RESOURCE_ERROR, exc.message, method, hard=False)
    return AMQPError(INTERNAL_ERROR, exc.message, method, hard=False)
