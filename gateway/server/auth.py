"""Access control: bearer tokens, per-principal permissions on topics and groups, admin.

Tokens live in a TOML file (mounted from a Secret in Kubernetes; read by
`gateway.server.principals`):

    [[principal]]
    name = "billing"
    token = "..."                      # or token_sha256 = "<hex digest>"
    publish = ["orders", "orders.*"]   # topic patterns (fnmatch: *, ?, [..])
    consume = ["orders"]               # topic patterns
    groups = ["billing"]               # group patterns; consuming needs topic and group
    admin = false
    rocketmq_access_key = "AK"         # fields products declare (`Product.principal_fields`):
    rocketmq_secret_key = "SK"         # here the keys RocketMQ SDKs sign requests with

Retry and dead-letter destinations are reserved names (see `Authorizer`): permission to consume
a topic with a group covers that topic and group's destinations under every naming scheme, and
nothing else reaches them but patterns that name them (`%DLQ%*`) and, for publishing, admin.
Settling a delivery needs permission to consume its topic with its group. A missing or unknown
token is UNAUTHENTICATED; a known principal acting outside its permissions is PERMISSION_DENIED,
with the same message whether the topic exists or not.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from fnmatch import fnmatchcase
from typing import Any

import grpc

from gateway.core.destinations import MAX_NAME_CHARS, Destinations
from gateway.core.naming import NamingScheme
from gateway.engine.api import SettleGuard
from gateway.errors import (
    GatewayError,
    InvalidArgument,
    PermissionDenied,
    TooManyCalls,
    Unauthenticated,
    Undecodable,
)
from gateway.limits import StreamSlots, check_name
from gateway.server.errors import abort_error
from gateway.server.handlers import Behaviour, inner_behaviour, rebuild, responses
from gateway.server.principals import Principal, token_digest

PROTECTED_PREFIX = "/gateway.v1."
OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})
SETTLING_METHODS = frozenset({"/gateway.v1.Gateway/Settle", "/gateway.v1.Gateway/Consume"})
ECHO_CHARS = 200
"""Names echoed in errors are cut to this many characters."""
MAX_DEPTH = 3
"""How deep destinations of destinations are followed (`orders-g-RETRY-g-DLQ`)."""
_SETTLE_GUARD: ContextVar[SettleGuard | None] = ContextVar("settle_guard", default=None)
_OWNER: ContextVar[str] = ContextVar("owner", default="")


def current_settle_guard() -> SettleGuard | None:
    """The settle check of the gRPC call being served (None when auth is off): the gateway.v1
    handlers pass it to the engine with every settlement."""
    return _SETTLE_GUARD.get()


def current_owner() -> str:
    """The name of the principal of the gRPC call being served ("" when auth is off): the
    groups it makes count against its `max_groups_per_principal`."""
    return _OWNER.get()


def _match(patterns: Iterable[str], value: str) -> bool:
    return any(fnmatchcase(value, p) for p in patterns)


def _short(name: str) -> str:
    """A name as echoed in an error: cut to ECHO_CHARS."""
    return repr(name if len(name) <= ECHO_CHARS else name[:ECHO_CHARS] + "...")


class Authorizer:
    """Decides who may do what; `None` principals mean authentication is off.

    Retry and dead-letter destinations (names some naming scheme gives a topic and group) are
    reserved: a principal may consume or publish to one when it may consume one of the
    destination's owners (topic and group; where the name carries no topic, any topic with that
    group; where it carries no group, the topic with the group it subscribes with), or when one
    of its own patterns is itself a reserved name (`%DLQ%*`, `*.dlq`). Publishing as an owner
    into a name that carries no group (`{topic}.retry`: every group's of the topic) needs
    permission to publish to the topic too. Admins may publish to any. Plain patterns (`*`,
    `orders*`) never reach reserved names.
    """

    def __init__(self, principals: Iterable[Principal], schemes: Iterable[NamingScheme]) -> None:
        self.by_digest = {p.token_sha256: p for p in principals}
        self.destinations = Destinations(schemes)
        self._explicit: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}

    def principal(self, name: str) -> Principal | None:
        """The principal of that name, if the tokens file has one."""
        return next((p for p in self.by_digest.values() if p.name == name), None)

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise Unauthenticated("a bearer token is required (authorization: Bearer <token>)")
        digest = token_digest(token)
        for known, principal in self.by_digest.items():
            if hmac.compare_digest(known, digest):
                return principal
        raise Unauthenticated("the bearer token is not valid")

    def check_publish(self, principal: Principal | None, topic: str) -> None:
        if principal is None:
            return
        _check_length("topic", topic)
        if not self.destinations.reserved(topic):
            if _match(principal.publish, topic):
                return
        elif principal.admin or self._may_publish_to(principal, topic, 0):
            return
        raise PermissionDenied(f"{principal.name} may not publish to {_short(topic)}")

    def _may_publish_to(self, principal: Principal, topic: str, depth: int) -> bool:
        """May `principal` publish to `topic`? A reserved destination takes a principal whose
        own patterns name it (`*.dlq`), or one of its owners: a consumer of the topic with the
        group the name holds (`{topic}-{group}-RETRY`, `%DLQ%{group}`). A name without a group
        (`{topic}.retry`, `{topic}.dlq`) is read by every group of its topic, and a message
        published there counts as each group's retry or dead letter: it takes only a consumer of
        the topic that may publish to the topic itself (consuming the topic with a group of one's
        own let a principal reach other principals' groups of a topic it may not publish to)."""
        if not self.destinations.reserved(topic):
            return _match(principal.publish, topic)
        if _match(self._explicit_of(principal, "publish"), topic):
            return True
        if depth >= MAX_DEPTH or not principal.groups:
            return False
        for owner_topic, owner_group in self.destinations.owners(topic):
            if owner_group is None:
                if (owner_topic is not None
                        and self._may_publish_to(principal, owner_topic, depth + 1)
                        and self._may_consume(principal, owner_topic, None, depth + 1)):
                    return True
            elif owner_topic is None:
                if principal.consume and _match(principal.groups, owner_group):
                    return True
            elif self._may_consume(principal, owner_topic, owner_group, depth + 1):
                return True
        return False

    def check_consume(self, principal: Principal | None, topic: str, group: str) -> None:
        if principal is None:
            return
        _check_length("topic", topic)
        _check_length("group", group)
        if not self._may_consume(principal, topic, group, 0):
            raise PermissionDenied(
                f"{principal.name} may not consume {_short(topic)} as group {_short(group)}"
            )

    def may_consume_topic(self, principal: Principal | None, topic: str) -> bool:
        """Whether `principal` may consume `topic` with some group of its own (what a listing
        of topics shows it); always with authentication off."""
        if principal is None:
            return True
        return len(topic) <= MAX_NAME_CHARS and self._may_consume(principal, topic, None, 0)

    def check_admin(self, principal: Principal | None) -> None:
        if principal is None:
            return
        if not principal.admin:
            raise PermissionDenied(f"{principal.name} may not use admin verbs")

    def settle_guard(self, principal: Principal | None) -> SettleGuard | None:
        """What settling needs: None when auth is off, else a check of the delivery's topic and
        group that remembers its answers (one per caller, e.g. per stream)."""
        if principal is None:
            return None
        allowed: set[tuple[str, str]] = set()
        refused: dict[tuple[str, str], str] = {}

        def guard(topic: str, group: str) -> None:
            key = (topic, group)
            if key in allowed:
                return
            if key not in refused:
                if self._may_consume(principal, topic, group, 0):
                    allowed.add(key)
                    return
                # Not named: the topic and group are another principal's to know.
                refused[key] = (f"{principal.name} may not settle this delivery: it is of a "
                                f"topic and group {principal.name} may not consume")
            raise PermissionDenied(refused[key])

        return guard

    def _may_consume(self, principal: Principal, topic: str, group: str | None,
                     depth: int) -> bool:
        """May `principal` consume `topic` with `group` (None: with some group of its own)?"""
        if not (_match(principal.groups, group) if group is not None else principal.groups):
            return False
        owners = self.destinations.owners(topic)
        if not owners:
            return _match(principal.consume, topic)
        if _match(self._explicit_of(principal, "consume"), topic):
            return True
        if depth >= MAX_DEPTH:
            return False
        for owner_topic, owner_group in owners:
            as_group = owner_group if owner_group is not None else group
            if owner_topic is None:
                # `%DLQ%{group}`: the group's destination for every topic it consumes.
                if principal.consume and (
                    as_group is None or _match(principal.groups, as_group)
                ):
                    return True
            elif self._may_consume(principal, owner_topic, as_group, depth + 1):
                return True
        return False

    def _explicit_of(self, principal: Principal, kind: str) -> tuple[str, ...]:
        """The principal's patterns that are themselves reserved names (`%DLQ%*`)."""
        patterns: tuple[str, ...] = getattr(principal, kind)
        key = (kind, patterns)
        found = self._explicit.get(key)
        if found is None:
            found = tuple(p for p in patterns if self.destinations.reserved(p))
            self._explicit[key] = found
        return found


def _check_length(field: str, name: str) -> None:
    if len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(field, name[:ECHO_CHARS] + "...",
                              f"at most {MAX_NAME_CHARS} characters (got {len(name)})")


def bearer(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The call's bearer token (None without one). Several `authorization` values are refused:
    the first was taken, so a token added by a proxy in front lost to the caller's own."""
    values = [value for key, value in metadata or () if key.lower() == "authorization"]
    if len(values) > 1:
        raise Unauthenticated(f"one authorization header, not {len(values)}")
    for value in values:
        text = value.decode() if isinstance(value, bytes) else str(value)
        scheme, _, token = text.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Authenticates every gateway.v1 call and checks its permission before the handler runs;
    the streams open to everyone (grpc.* services) and refused streams waiting for their first
    frame take slots of `StreamSlots`."""

    def __init__(self, authorizer: Authorizer, slots: StreamSlots | None = None) -> None:
        """`slots`: the server's bound on streams no credentials admitted (the services of
        products on the same server share it)."""
        self.authorizer = authorizer
        self.slots = slots if slots is not None else StreamSlots()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method
        handler = await continuation(details)
        if handler is None:
            return handler
        if method in OPEN_METHODS or not method.startswith(PROTECTED_PREFIX):
            if method.startswith("/grpc.") and (handler.unary_stream or handler.stream_stream):
                return rebuild(handler, inner_behaviour(handler), self._counted(handler))
            return handler
        try:
            principal = self.authorizer.authenticate(bearer(details.invocation_metadata))
        except Unauthenticated as exc:
            if handler.unary_unary or handler.unary_stream:
                return _refused_unread(handler, exc)
            return rebuild(handler, *self._refuse(exc))
        check = self._check_for(method, principal)
        guard = self.authorizer.settle_guard(principal) if method in SETTLING_METHODS else None
        return rebuild(handler, *_guarded(handler, check, guard, principal.name))

    def _counted(self, handler: grpc.RpcMethodHandler) -> Behaviour:
        inner = inner_behaviour(handler)

        async def stream(request: Any, context: Any) -> Any:
            if not self.slots.take():
                await abort_error(context, TooManyCalls(
                    f"{self.slots.limit} streams without a token are open, the most "
                    "allowed"))
            try:
                async for item in responses(inner, request, context):
                    yield item
            finally:
                self.slots.give()

        return stream

    def _refuse(self, error: GatewayError) -> tuple[Behaviour, Behaviour]:
        """The refusal of a call without a valid token. A refused client stream waits briefly
        for its first frame (`_first_of`) in one of the slots of the open streams: when all
        are taken it is refused at once, so tokenless streams cannot hold every call the
        server takes (they held one each for a second, and a client that opened `--max-rpcs`
        of them over and over kept every caller with a token out)."""

        async def refusal(request: Any) -> GatewayError:
            if not hasattr(request, "__anext__") or not self.slots.take():
                return error
            try:
                return await _first_of(request) or error
            finally:
                self.slots.give()

        async def unary(request: Any, context: Any) -> Any:
            await abort_error(context, await refusal(request))

        async def stream(request: Any, context: Any) -> Any:
            await abort_error(context, await refusal(request))
            yield None  # pragma: no cover

        return unary, stream

    def _check_for(self, method: str, principal: Principal) -> Callable[[Any], None]:
        """The request's permission check. Names are checked first, as the handler checks
        them (INVALID_ARGUMENT naming the field and the range, never PERMISSION_DENIED for a
        name that is no name); a PublishStream request with a bad topic is let through for the
        handler to answer, so the stream goes on as it does without a tokens file."""
        authz = self.authorizer
        if method.startswith("/gateway.v1.Admin/"):
            return lambda request: authz.check_admin(principal)
        if method.endswith("/Publish"):
            def publish(request: Any) -> None:
                check_name("topic", request.topic)
                authz.check_publish(principal, request.topic)
            return publish
        if method.endswith("/PublishStream"):
            def publish_frame(request: Any) -> None:
                topic = request.publish.topic
                if _is_name(topic):
                    authz.check_publish(principal, topic)
            return publish_frame
        if method.endswith("/Receive"):
            def receive(request: Any) -> None:
                _check_consume(authz, principal, request.topic, request.group)
            return receive
        if method.endswith("/Consume"):
            def subscribe(request: Any) -> None:
                if request.HasField("subscribe"):
                    sub = request.subscribe
                    _check_consume(authz, principal, sub.topic, sub.group)
            return subscribe
        return lambda request: None


def _is_name(value: str) -> bool:
    try:
        check_name("topic", value)
    except InvalidArgument:
        return False
    return True


def _check_consume(authz: Authorizer, principal: Principal, topic: str, group: str) -> None:
    check_name("topic", topic)
    check_name("group", group)
    authz.check_consume(principal, topic, group)


REFUSED_READ_S = 1.0
"""How long a refused streaming call waits for the client's first request before answering."""


def _refused_unread(handler: grpc.RpcMethodHandler, error: GatewayError) -> Any:
    """A unary call without a valid token, refused without reading its request. grpc reads a
    unary request whole before the handler runs: a client without a token held the call (one
    of `--max-rpcs`) for as long as it took to send it, for ever when it never finished, and
    had the server buffer and decode up to the request limit (64 MiB) of every such call. It
    is served as a client stream (the same bytes on the wire) that is never read."""

    async def refuse(requests: Any, context: Any) -> Any:
        await abort_error(context, error)

    async def refuse_stream(requests: Any, context: Any) -> Any:
        await abort_error(context, error)
        yield None  # pragma: no cover

    if handler.unary_stream:
        return grpc.stream_stream_rpc_method_handler(refuse_stream, None,
                                                     handler.response_serializer)
    return grpc.stream_unary_rpc_method_handler(refuse, None, handler.response_serializer)


async def _first_of(request: Any) -> Undecodable | None:
    """Read a client stream's first request (briefly) before refusing the call: a refusal sent
    while the client is still writing it reaches the client, now and then, as INTERNAL
    instead of the status given. A first frame that does not decode is refused for that
    (before its token is looked at): the error is returned, to be the call's one refusal."""
    if not hasattr(request, "__anext__"):
        return None
    try:
        await asyncio.wait_for(anext(request, None), REFUSED_READ_S)
    except Undecodable as exc:
        return exc
    except Exception:  # a client that does not send, or has gone: refuse all the same
        return None
    return None


def _guarded(
    handler: grpc.RpcMethodHandler, check: Callable[[Any], None], guard: SettleGuard | None,
    owner: str,
) -> tuple[Behaviour, Behaviour]:
    """The handler with its permission check first and the call's settle guard and principal
    (`current_owner`) in context (tasks the handler starts inherit them)."""
    inner = inner_behaviour(handler)

    async def denied(context: Any, exc: GatewayError) -> None:
        await abort_error(context, exc)

    async def unary(request: Any, context: Any) -> Any:
        _SETTLE_GUARD.set(guard)
        _OWNER.set(owner)
        if handler.stream_unary:
            request = _checked_stream(request, check)
        else:
            try:
                check(request)
            except GatewayError as exc:
                await denied(context, exc)
        return await inner(request, context)

    async def stream(request: Any, context: Any) -> Any:
        _SETTLE_GUARD.set(guard)
        _OWNER.set(owner)
        if handler.stream_stream:
            request = _checked_stream(request, check)
        else:
            try:
                check(request)
            except GatewayError as exc:
                await denied(context, exc)
        try:
            async for item in responses(inner, request, context):
                yield item
        except PermissionDenied as exc:
            await denied(context, exc)

    return unary, stream


async def _checked_stream(requests: Any, check: Callable[[Any], None]) -> Any:
    """Every request of the stream is checked (a later subscribe frame as much as the first)."""
    async for request in requests:
        check(request)
        yield request
