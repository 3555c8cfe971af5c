"""A client of the gateway's public admin API (`gateway.v1.Admin`) over gRPC, for the admin
commands of the CLI and for the web console: any other tool can do what they do the same way.

`connect(target)` opens a channel (plain, TLS, or mTLS with a client certificate); `AdminClient`
calls the Admin service with a bearer token when one is given.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

import grpc

from gateway.errors import InvalidArgument
from gateway.token_file import read_bounded
from gateway.v1 import admin_pb2 as pb
from gateway.v1 import admin_pb2_grpc

DEFAULT_TIMEOUT_S = 30.0
MAX_RECEIVE_BYTES = 256 * 1024 * 1024
"""A page of 1000 dead letters of up to 4 MiB each would not fit; pages that big are refused
by the channel with RESOURCE_EXHAUSTED (ask for smaller pages)."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where the gateway is and how to reach it."""

    address: str = "127.0.0.1:50051"
    """HOST:PORT, or `unix:PATH` for a Unix socket."""
    tls: bool = False
    """Use TLS (implied by any of the files below)."""
    ca_file: str = ""
    """PEM roots to check the gateway's certificate with ("" = the system's)."""
    cert_file: str = ""
    """PEM client certificate, for a gateway that requires one (mTLS)."""
    key_file: str = ""
    server_name: str = ""
    """The name the gateway's certificate must carry when it differs from the address's host."""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise InvalidArgument("tls_key", self.key_file, "a client certificate and its key "
                                                            "together (--tls-cert, --tls-key)")
        if not self.address:
            raise InvalidArgument("target", self.address, "HOST:PORT of the gateway")

    @property
    def secure(self) -> bool:
        return self.tls or bool(self.ca_file or self.cert_file)


MAX_PEM_BYTES = 16 << 20
"""The largest PEM file read (a CA bundle is a few hundred KiB): /dev/zero was read until the
memory ran out."""


def _read(field: str, path: str) -> bytes | None:
    """The PEM file's bytes; one without a PEM block (a text file given by mistake) is refused
    by name: gRPC's C core logged lines of its own and the call failed UNAVAILABLE."""
    if not path:
        return None
    data = read_bounded(field, path, MAX_PEM_BYTES, "", kind="PEM file")
    if b"-----BEGIN " not in data:
        raise InvalidArgument(field, path, "a PEM file (it holds no -----BEGIN block)")
    return data


def _check_pem(target: Target, roots: bytes | None, chain: bytes | None) -> None:
    """The CA file holds certificates, and the client certificate goes with its key: else gRPC
    logged lines of its own and the call failed UNAVAILABLE, naming no flag. An encrypted key
    is refused too (gRPC takes no password)."""
    if roots is not None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
                cadata=roots.decode("ascii", "replace"))
        except (ssl.SSLError, ValueError) as exc:
            raise InvalidArgument("tls_ca", target.ca_file,
                                  f"PEM CA certificates ({_ssl_reason(exc)})") from None
    if chain is not None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(
                target.cert_file, target.key_file, password=lambda: b"")
        except (ssl.SSLError, ValueError) as exc:
            raise InvalidArgument("tls_cert", target.cert_file,
                                  "a PEM certificate chain whose key is tls_key, not encrypted "
                                  f"({_ssl_reason(exc)})") from None


def _ssl_reason(exc: Exception) -> str:
    return str(getattr(exc, "reason", None) or exc)


def connect(target: Target) -> grpc.aio.Channel:
    """A channel to the gateway (not yet connected: the first call connects)."""
    options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]
    if not target.secure:
        return grpc.aio.insecure_channel(target.address, options=options)
    if target.server_name:
        options.append(("grpc.ssl_target_name_override", target.server_name))
    roots = _read("tls_ca", target.ca_file)
    chain = _read("tls_cert", target.cert_file)
    key = _read("tls_key", target.key_file)
    _check_pem(target, roots, chain)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=roots, private_key=key, certificate_chain=chain,
    )
    return grpc.aio.secure_channel(target.address, credentials, options=options)


class AdminClient:
    """The Admin service's calls, each with the caller's bearer token (if any)."""

    def __init__(self, channel: grpc.aio.Channel, token: str = "",
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._stub = admin_pb2_grpc.AdminStub(channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout_s = timeout_s

    async def _call(self, method: str, request: Any) -> Any:
        return await getattr(self._stub, method)(request, metadata=self._metadata,
                                                 timeout=self._timeout_s)

    async def topics(self) -> list[str]:
        response = await self._call("ListTopics", pb.ListTopicsRequest())
        return list(response.topics)

    async def groups(self, topic: str = "", group: str = "") -> pb.ListGroupsResponse:
        """The groups the gateway knows (its first 1000), only `topic`'s and only those named
        `group` when given."""
        response: pb.ListGroupsResponse = await self._call(
            "ListGroups", pb.ListGroupsRequest(topic=topic, group=group))
        return response

    async def describe(self, topic: str, group: str) -> pb.DescribeGroupResponse:
        response: pb.DescribeGroupResponse = await self._call(
            "DescribeGroup", pb.DescribeGroupRequest(topic=topic, group=group))
        return response

    async def waiting_retries(self, topic: str, group: str) -> pb.ListWaitingRetriesResponse:
        response: pb.ListWaitingRetriesResponse = await self._call(
            "ListWaitingRetries", pb.ListWaitingRetriesRequest(topic=topic, group=group))
        return response

    async def dead_letters(
        self, topic: str, group: str, *, limit: int = 0, page_token: str = "",
        where: pb.DeadLetterFilter | None = None,
    ) -> pb.ListDeadLettersResponse:
        response: pb.ListDeadLettersResponse = await self._call(
            "ListDeadLetters",
            pb.ListDeadLettersRequest(topic=topic, group=group, limit=limit,
                                      page_token=page_token, filter=where))
        return response

    async def dead_letter(self, topic: str, group: str, message_id: str) -> pb.DeadLetterMessage:
        response = await self._call(
            "GetDeadLetter",
            pb.GetDeadLetterRequest(topic=topic, group=group, message_id=message_id))
        found: pb.DeadLetterMessage = response.dead_letter
        return found

    async def timeline(self, topic: str, group: str, message_id: str) -> pb.GetTimelineResponse:
        response: pb.GetTimelineResponse = await self._call(
            "GetTimeline",
            pb.GetTimelineRequest(topic=topic, group=group, message_id=message_id))
        return response

    async def resend(
        self, topic: str, group: str, message_ids: list[str] | None = None,
        where: pb.DeadLetterFilter | None = None,
    ) -> int:
        response = await self._call(
            "ResendDeadLetters",
            pb.ResendDeadLettersRequest(topic=topic, group=group, message_ids=message_ids or [],
                                        filter=where))
        return int(response.resent)

    async def delete(
        self, topic: str, group: str, message_ids: list[str] | None = None,
        where: pb.DeadLetterFilter | None = None, everything: bool = False,
    ) -> int:
        response = await self._call(
            "DeleteDeadLetters",
            pb.DeleteDeadLettersRequest(topic=topic, group=group, message_ids=message_ids or [],
                                        filter=where, all=everything))
        return int(response.deleted)

    async def purge(self, topic: str, group: str) -> int:
        response = await self._call("Purge", pb.PurgeRequest(topic=topic, group=group))
        return int(response.purged)

    async def rename(
        self, topic: str, group: str, from_naming: str, to_naming: str, dry_run: bool = False,
    ) -> pb.RenameDestinationsResponse:
        response: pb.RenameDestinationsResponse = await self._call(
            "RenameDestinations",
            pb.RenameDestinationsRequest(topic=topic, group=group, from_naming=from_naming,
                                         to_naming=to_naming, dry_run=dry_run))
        return response

    async def export(
        self, topic: str, group: str, part: int, page_token: str = "", limit: int = 0,
        naming: str = "",
    ) -> pb.ExportMessagesResponse:
        response: pb.ExportMessagesResponse = await self._call(
            "ExportMessages",
            pb.ExportMessagesRequest(topic=topic, group=group, part=part,  # type: ignore[arg-type]
                                     page_token=page_token, limit=limit, naming=naming))
        return response

    async def remove_exported(
        self, topic: str, group: str, part: int, positions: list[int], naming: str = "",
    ) -> int:
        response = await self._call(
            "RemoveExported",
            pb.RemoveExportedRequest(topic=topic, group=group, part=part,  # type: ignore[arg-type]
                                     positions=positions, naming=naming))
        return int(response.removed)

    async def import_messages(
        self, request: pb.ImportMessagesRequest
    ) -> pb.ImportMessagesResponse:
        response: pb.ImportMessagesResponse = await self._call("ImportMessages", request)
        return response
