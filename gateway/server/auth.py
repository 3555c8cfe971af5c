"""Access control: bearer tokens, per-principal permissions on topics and groups, admin.

Tokens live in a TOML file (mounted from a Secret in Kubernetes):

    [[principal]]
    name = "billing"
    token = "..."                      # or token_sha256 = "<hex digest>"
    publish = ["orders", "orders.*"]   # topic patterns (fnmatch: *, ?, [..])
    consume = ["orders"]               # topic patterns
    groups = ["billing"]               # group patterns; consuming needs topic and group
    admin = false
    rocketmq_access_key = "AK"         # optional: RocketMQ SDKs sign requests with these
    rocketmq_secret_key = "SK"

Permission to consume a group covers the group's retry and dead-letter destinations under any
naming scheme. A missing or unknown token is UNAUTHENTICATED; a known principal acting outside
its permissions is PERMISSION_DENIED, with the same message whether the topic exists or not.
"""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import grpc

from gateway.core.naming import NamingScheme
from gateway.errors import InvalidArgument, PermissionDenied, Unauthenticated
from gateway.server.handlers import Behaviour, inner_behaviour, rebuild

PROTECTED_PREFIX = "/gateway.v1."
OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    token_sha256: str
    publish: tuple[str, ...] = ()
    consume: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    admin: bool = False
    rocketmq_access_key: str = ""
    """RocketMQ SDKs sign with an access key and secret instead of a bearer token."""
    rocketmq_secret_key: str = ""




def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _patterns(entry: dict[str, Any], key: str, name: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidArgument(f"principal[{name}].{key}", value, "a list of non-empty patterns")
    return tuple(value)


def load_principals(
    path: str | Path, permissions: Iterable[dict[str, Any]] = ()
) -> list[Principal]:
    """Principals from the tokens file, with permissions from config merged in by name."""
    try:
        doc = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        allowed = f"a readable file ({exc.strerror})"
        raise InvalidArgument("tokens_file", str(path), allowed) from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument("tokens_file", str(path), f"valid TOML ({exc})") from None
    extra = {str(p.get("name", "")): p for p in permissions}
    out: list[Principal] = []
    for i, raw in enumerate(doc.get("principal", [])):
        entry = {**extra.get(str(raw.get("name", "")), {}), **raw}
        name = str(entry.get("name", ""))
        if not name:
            raise InvalidArgument(f"principal[{i}].name", name, "a non-empty name")
        token = entry.get("token")
        digest = entry.get("token_sha256")
        if bool(token) == bool(digest):
            raise InvalidArgument(f"principal[{name}].token", "***", "exactly one of token, "
                                  "token_sha256")
        out.append(Principal(
            name=name,
            token_sha256=str(digest).lower() if digest else _digest(str(token)),
            publish=_patterns(entry, "publish", name),
            consume=_patterns(entry, "consume", name),
            groups=_patterns(entry, "groups", name),
            admin=bool(entry.get("admin", False)),
            rocketmq_access_key=str(entry.get("rocketmq_access_key", "")),
            rocketmq_secret_key=str(entry.get("rocketmq_secret_key", "")),
        ))
    if not out:
        raise InvalidArgument("tokens_file", str(path), "at least one [[principal]]")
    return out


def _match(patterns: Iterable[str], value: str) -> bool:
    return any(fnmatchcase(value, p) for p in patterns)


class Authorizer:
    """Decides who may do what; `None` principals mean authentication is off."""

    def __init__(self, principals: Iterable[Principal], schemes: Iterable[NamingScheme]) -> None:
        self.by_digest = {p.token_sha256: p for p in principals}
        self.schemes = tuple(schemes)

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise Unauthenticated("a bearer token is required (authorization: Bearer <token>)")
        digest = _digest(token)
        for known, principal in self.by_digest.items():
            if hmac.compare_digest(known, digest):
                return principal
        raise Unauthenticated("the bearer token is not valid")

    def check_publish(self, principal: Principal | None, topic: str) -> None:
        if principal is None:
            return
        if not _match(principal.publish, topic):
            raise PermissionDenied(f"{principal.name} may not publish to {topic!r}")

    def check_consume(self, principal: Principal | None, topic: str, group: str) -> None:
        if principal is None:
            return
        denied = PermissionDenied(f"{principal.name} may not consume {topic!r} as group {group!r}")
        if not _match(principal.groups, group):
            raise denied
        if _match(principal.consume, topic) or self._group_destination(topic, group):
            return
        raise denied

    def check_admin(self, principal: Principal | None) -> None:
        if principal is None:
            return
        if not principal.admin:
            raise PermissionDenied(f"{principal.name} may not use admin verbs")

    def _group_destination(self, topic: str, group: str) -> bool:
        """True when `topic` is one of `group`'s own retry or dead-letter destinations."""
        for scheme in self.schemes:
            for template in (scheme.retry_template, scheme.dead_letter_template):
                if "{topic}" in template:
                    prefix, _, suffix = template.partition("{topic}")
                    prefix_g = prefix.format(group=group, ns="")
                    suffix_g = suffix.format(group=group, ns="")
                    if topic.startswith(prefix_g) and topic.endswith(suffix_g) and len(
                        topic
                    ) > len(prefix_g) + len(suffix_g):
                        return True
                else:
                    name = template.format(group=group, ns="")
                    if topic == name or topic.endswith("/" + name):
                        return True
        return False


def bearer(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    for key, value in metadata or ():
        if key.lower() == "authorization":
            text = value.decode() if isinstance(value, bytes) else str(value)
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Authenticates every gateway.v1 call and checks its permission before the handler runs."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method
        handler = await continuation(details)
        if handler is None or method in OPEN_METHODS or not method.startswith(PROTECTED_PREFIX):
            return handler
        try:
            principal = self.authorizer.authenticate(bearer(details.invocation_metadata))
        except Unauthenticated as exc:
            return rebuild(handler, *_refuse(grpc.StatusCode.UNAUTHENTICATED, exc.message))
        check = self._check_for(method, principal)
        return rebuild(handler, *_guarded(handler, check))

    def _check_for(self, method: str, principal: Principal) -> Callable[[Any], None]:
        authz = self.authorizer
        if method.startswith("/gateway.v1.Admin/"):
            return lambda request: authz.check_admin(principal)
        if method.endswith("/Publish"):
            return lambda request: authz.check_publish(principal, request.topic)
        if method.endswith("/Receive"):
            return lambda request: authz.check_consume(principal, request.topic, request.group)
        if method.endswith("/Consume"):
            def first(request: Any) -> None:
                if request.WhichOneof("kind") == "subscribe":
                    sub = request.subscribe
                    authz.check_consume(principal, sub.topic, sub.group)
            return first
        return lambda request: None



def _refuse(code: grpc.StatusCode, message: str) -> tuple[Behaviour, Behaviour]:
    async def unary(request: Any, context: Any) -> Any:
        await context.abort(code, message)

    async def stream(request: Any, context: Any) -> Any:
        await context.abort(code, message)
        yield None  # pragma: no cover

    return unary, stream


def _guarded(handler: grpc.RpcMethodHandler, check: Callable[[Any], None]) -> tuple[
    Behaviour, Behaviour
]:
    inner = inner_behaviour(handler)

    async def denied(context: Any, exc: PermissionDenied) -> None:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, exc.message)

    async def unary(request: Any, context: Any) -> Any:
        if handler.stream_unary:
            request = _checked_stream(request, check)
        else:
            try:
                check(request)
            except PermissionDenied as exc:
                await denied(context, exc)
        return await inner(request, context)

    async def stream(request: Any, context: Any) -> Any:
        if handler.stream_stream:
            request = _checked_stream(request, check)
        else:
            try:
                check(request)
            except PermissionDenied as exc:
                await denied(context, exc)
        try:
            async for item in inner(request, context):
                yield item
        except PermissionDenied as exc:
            await denied(context, exc)

    return unary, stream


async def _checked_stream(requests: Any, check: Callable[[Any], None]) -> Any:
    first = True
    async for request in requests:
        if first:
            check(request)
            first = False
        yield request
