"""The authorizer the Pulsar front end uses, as a structural type (the engine's port is
`gateway.engine.port`)."""

from __future__ import annotations

from typing import Any, Protocol


class AuthorizerPort(Protocol):
    """Token authentication and topic permissions (`gateway.server.auth.Authorizer`)."""

    def authenticate(self, token: str | None) -> Any: ...

    def check_publish(self, principal: Any, topic: str) -> None: ...

    def check_consume(self, principal: Any, topic: str, group: str) -> None: ...

    def may_consume_topic(self, principal: Any, topic: str) -> bool: ...
