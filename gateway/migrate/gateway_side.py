"""A running gateway as either side of `gateway migrate copy`, over its admin API.

URL: `gateway://HOST:PORT/TOPIC?group=G` (`gateways://` for TLS); the topic is the rest of the
path, percent-decoded, so `gateway://127.0.0.1:50051/persistent://t/ns/orders?group=sub` works.

* As a source: a group's ready (and delayed) messages of the topic, its waiting retries (with due
  times and attempt counts) and its dead letters (`parts=ready,retry,dead-letter`, all by
  default; `naming=S` reads another scheme's destinations). A group the gateway does not know
  is refused (a misspelt one read the whole topic) unless `new-group=true` says it is meant to
  be new. Messages are read with
  ExportMessages and removed with RemoveExported once the destination confirmed their copies.
  Each is known in the destination's ledger by its part, position and id (`source_key`).
  The group must have no consumers open meanwhile.
* As a destination: ImportMessages, which stores each copy once (a ledger keyed by the source
  message). Ready copies go to the topic; retries and dead letters to the group's destinations
  (`naming=S` to choose the scheme; `part=dead-letter` puts every copy there, e.g. when copying
  a broker's dead-letter queue). `group` may be left out when every copy is a ready message.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence
from typing import NoReturn

import grpc

from gateway.admin_client import AdminClient, Target, connect
from gateway.errors import GatewayError, InvalidArgument, shorten
from gateway.limits import check_name, message_size
from gateway.migrate.endpoint import (
    DEAD_LETTER,
    PARTS,
    READY,
    RETRY,
    DestinationRefused,
    DestinationUnavailable,
    Item,
    NotAllowed,
    SourceKeepsCopies,
    SourceUnavailable,
    Stored,
    Url,
)
from gateway.v1 import admin_pb2 as pb

SCHEMES = ("gateway", "gateways")
DEFAULT_PORT = 50051
PART_CODES = {
    READY: pb.MESSAGE_PART_READY,
    RETRY: pb.MESSAGE_PART_RETRY,
    DEAD_LETTER: pb.MESSAGE_PART_DEAD_LETTER,
}
PAGE = 1000
"""Messages per ExportMessages page."""
MAX_REQUEST_BYTES = 32 << 20
"""Copies per ImportMessages call stay below this (the gateway takes 64 MiB requests)."""
MAX_IMPORT = 10_000
NAMING_PROBE_GROUP = "migrate-naming-check"
"""The group a destination without one names when it asks whether the gateway knows its
`naming=` (a read that changes nothing)."""
NEW_GROUP = "new-group"
"""A source URL's option saying that its group is meant to be new (read from the start)."""


class SourceRefused(GatewayError):
    """The source refused a request (consumers still open on the group, say)."""

    code = "FAILED_PRECONDITION"


def _raise(exc: grpc.aio.AioRpcError, side: str, name: str) -> NoReturn:
    code = exc.code()
    details = exc.details() or code.name
    text = f"{side} {name}: {code.name}: {details}"
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        raise (SourceUnavailable if side == "source" else DestinationUnavailable)(text) from None
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        raise NotAllowed(text) from None
    raise (SourceRefused if side == "source" else DestinationRefused)(text) from None


def check_naming(field: str, url: Url, namings: Collection[str] | None) -> str:
    """The `naming=S` option of a gateway URL: absent, or a non-empty name, refused up front
    naming the side (`from` / `to`) when empty (it meant the default without a word). Whether
    the gateway knows it is the gateway's to say, asked when the side opens (`_check_naming`):
    the schemes registered where the command runs (`namings`, named in the message) need not be
    the gateway's (another version, other products)."""
    if "naming" not in url.query:
        return ""
    naming = url.option("naming")
    if naming:
        return naming
    known = ", ".join(sorted(namings or ())) or "a scheme's name"
    raise InvalidArgument(field, url.shown, f"naming={naming} is no naming scheme: naming= one "
                                            f"of {known} (as the gateway knows them), or no "
                                            "naming option")


def no_topic(topic: str, topics: Sequence[str]) -> str:
    """Says that a gateway holding `topics` has no `topic`, with the close names it has (a
    misspelt name)."""
    near = difflib.get_close_matches(topic, topics, n=3)
    hint = f" (did you mean {', '.join(repr(t) for t in near)}?)" if near else ""
    return f"no topic {topic!r} on this gateway{hint}"


def unknown_group(topic: str, group: str, groups: Sequence[str], truncated: bool) -> str:
    """Says that `group` is not among the known `groups` of `topic`, and how to copy from it as
    a new group all the same."""
    near = difflib.get_close_matches(group, groups, n=3)
    hint = f" (did you mean {', '.join(repr(g) for g in near)}?)" if near else ""
    shown = ", ".join(repr(g) for g in groups[:20]) + (", ..." if len(groups) > 20 else "")
    listed = f"known groups of the topic: {shown}" if groups else "the topic has no known group"
    more = " (the gateway listed only its first 1000 groups)" if truncated else ""
    return (f"no group {group!r} on topic {topic!r}{hint}; {listed}{more}. A new group would "
            f"read the topic from its first message: add {NEW_GROUP}=true to the URL if that "
            "is meant; nothing was copied")


class _Side:
    def __init__(self, url: Url, token: str, timeout_s: float, ca_file: str, field: str,
                 namings: Collection[str] | None) -> None:
        if url.scheme not in SCHEMES:
            raise InvalidArgument(field, url.shown, "gateway://HOST:PORT/TOPIC?group=G")
        if url.parts.username is not None or url.parts.password is not None:
            # A password in the URL was dropped without a word: a gateway takes a token.
            raise InvalidArgument(field, url.shown, f"no USER:PASSWORD@ on a gateway URL: give "
                                                    f"an admin token with --{field}-token-file")
        self.url = url
        self.topic = url.path
        if not self.topic:
            raise InvalidArgument(field, url.shown, "a topic: gateway://HOST:PORT/TOPIC")
        self.group = url.option("group")
        # Names the gateway would refuse, refused here: a destination's were refused only with
        # the first batch (exit 7), after a dry run had passed them.
        for part, name in (("topic", self.topic), ("group", self.group)):
            try:
                if name:
                    check_name(part, name)
            except InvalidArgument as exc:
                raise InvalidArgument(field, url.shown, f"{part}: {exc.allowed} (not "
                                                        f"{shorten(name)})") from None
        self.naming = check_naming(field, url, namings)
        self.field = field
        host = url.parts.hostname or ""
        self.address = f"[{host}]:{url.parts.port or DEFAULT_PORT}" if ":" in host else (
            f"{host}:{url.parts.port or DEFAULT_PORT}")
        self._target = Target(self.address, tls=url.scheme == "gateways", ca_file=ca_file)
        self._token = token
        self._timeout_s = timeout_s
        self._channel: grpc.aio.Channel | None = None
        self.client: AdminClient | None = None

    @property
    def name(self) -> str:
        return self.url.shown

    async def _check_naming(self, client: AdminClient, side: str) -> None:
        """Ask the gateway itself whether it knows `naming=S` (a read of one retry, changing
        nothing), before anything is taken: it, not this command, knows its schemes (a gateway
        of another version has others), and an unknown one was refused only with the first
        batch (exit 7), after a dry run had passed it."""
        if not self.naming:
            return
        try:
            await client.export(self.topic, self.group or NAMING_PROBE_GROUP, PART_CODES[RETRY],
                                "", 1, self.naming)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                _raise(exc, side, self.name)
            raise InvalidArgument(self.field, self.url.shown,
                                  f"naming= a scheme this gateway knows, not naming="
                                  f"{self.naming} ({exc.details()})") from None

    def _open_channel(self) -> AdminClient:
        self._channel = connect(self._target)
        self.client = AdminClient(self._channel, self._token, self._timeout_s)
        return self.client

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


class GatewaySource(_Side):
    """A group's messages on a running gateway; see the module docstring."""

    def __init__(self, url: Url, token: str = "", timeout_s: float = 30.0,
                 ca_file: str = "", namings: Collection[str] | None = None) -> None:
        super().__init__(url, token, timeout_s, ca_file, "from", namings)
        url.only("from", ("group", "naming", "parts", NEW_GROUP))
        if not self.group:
            raise InvalidArgument("from", url.shown, "a group: gateway://HOST:PORT/TOPIC?group=G")
        new_group = url.option(NEW_GROUP, "false")
        if new_group not in ("true", "false"):
            raise InvalidArgument("from", url.shown, f"{NEW_GROUP}=true or {NEW_GROUP}=false, "
                                                     f"not {NEW_GROUP}={shorten(new_group)}")
        self.new_group = new_group == "true"
        chosen = [p.strip() for p in url.option("parts", ",".join(PARTS)).split(",")]
        if not chosen or any(p not in PARTS for p in chosen):
            raise InvalidArgument("from", url.shown, f"parts from {', '.join(PARTS)}")
        self.parts = [p for p in PARTS if p in chosen]
        self._part = 0
        self._token_of: dict[str, str] = {}
        self._names = ("", "")
        self._scheme = self.naming

    @property
    def ledger(self) -> str:
        naming = f"&naming={self.naming}" if self.naming else ""
        return (f"gateway://{self.url.endpoint(DEFAULT_PORT)}/{self.topic}?group={self.group}"
                f"{naming}")

    @property
    def earlier_ledgers(self) -> tuple[str, ...]:
        return ()

    @property
    def destinations(self) -> tuple[str, str]:
        return self._names

    async def open(self) -> None:
        client = self._open_channel()
        try:
            view = await client.describe(self.topic, self.group)
        except grpc.aio.AioRpcError as exc:
            _raise(exc, "source", self.name)
        await self._check_naming(client, "source")
        if view.cannot_remove_exported:
            # RemoveExported would be refused after the first batch was stored at the
            # destination, leaving it at both ends: refused before anything is taken.
            raise SourceKeepsCopies(
                f"source {self.name}: this gateway's back end cannot remove exported messages "
                "by position, so a copy would leave every copied message at the source too: "
                "copy from the broker directly (`gateway migrate copy --from` a URL of the "
                "broker the gateway runs on); nothing was copied")
        if not (view.ready or view.delayed or view.inflight or view.waiting_retry
                or view.dead_letters):
            await self._exists(client)
        if not self.new_group:
            await self._known_group(client, view)
        self._names = (view.retry_topic, view.dead_letter_topic)
        # The scheme the group has now, for every export and removal of this run: found again
        # on each call it could change under the run (another topic's group of this name given
        # a dead letter under another scheme), and positions exported from one scheme's
        # destination were removed from the other's.
        self._scheme = self.naming or view.naming

    async def _exists(self, client: AdminClient) -> None:
        """Refuse a topic the gateway does not hold: a misspelt one copied nothing and exited 0.
        Asked only when the group holds nothing (a group may hold retries or dead letters of a
        topic whose own messages this gateway never stored: imported ones)."""
        try:
            topics = await client.topics()
        except grpc.aio.AioRpcError as exc:
            _raise(exc, "source", self.name)
        if self.topic not in topics:
            raise SourceRefused(f"source {self.name}: {no_topic(self.topic, topics)}; nothing "
                                "was copied")

    async def _known_group(self, client: AdminClient, view: pb.DescribeGroupResponse) -> None:
        """Refuse a group the gateway does not know (unless `new-group=true`): a gateway hands
        a new group the topic from its first message, so a misspelt group copied every
        message of the topic where the user meant what group G has not consumed yet."""
        if view.consumers or view.inflight or view.waiting_retry or view.dead_letters:
            return
        try:
            # The group itself first: a gateway lists at most 1000 groups, and one that knows
            # more might leave it out of a longer list (one before the filters lists them all,
            # so the topic is matched here too).
            listed = await client.groups(self.topic, self.group)
            if any((g.topic, g.group) == (self.topic, self.group) for g in listed.groups):
                return
            listed = await client.groups(self.topic)
        except grpc.aio.AioRpcError as exc:
            _raise(exc, "source", self.name)
        groups = sorted({g.group for g in listed.groups if g.topic == self.topic})
        if self.group in groups:
            return
        why = unknown_group(self.topic, self.group, groups, listed.truncated)
        raise SourceRefused(f"source {self.name}: {why}")

    async def count(self, exact: bool) -> dict[str, int] | None:
        assert self.client is not None
        try:
            if not exact:
                view = await self.client.describe(self.topic, self.group)
                counts = {READY: view.ready + view.delayed, RETRY: view.waiting_retry,
                          DEAD_LETTER: view.dead_letters}
                return {p: counts[p] for p in self.parts}
            found: dict[str, int] = {}
            for part in self.parts:
                token, found[part] = "", 0
                while True:
                    page = await self.client.export(self.topic, self.group, PART_CODES[part],
                                                    token, PAGE, self._scheme)
                    found[part] += len(page.messages)
                    token = page.next_page_token
                    if not token:
                        break
            return found
        except grpc.aio.AioRpcError as exc:
            _raise(exc, "source", self.name)

    async def take(self, max_items: int) -> list[Item]:
        assert self.client is not None
        while self._part < len(self.parts):
            part = self.parts[self._part]
            token = self._token_of.get(part, "")
            try:
                page = await self.client.export(self.topic, self.group, PART_CODES[part], token,
                                                min(max_items, PAGE), self._scheme)
            except grpc.aio.AioRpcError as exc:
                _raise(exc, "source", self.name)
            if page.next_page_token:
                self._token_of[part] = page.next_page_token
            else:
                self._part += 1
            if page.messages:
                return [_item(part, m) for m in page.messages]
        return []

    async def ack(self, items: Sequence[Item]) -> None:
        assert self.client is not None
        by_part: dict[str, list[int]] = {}
        for item in items:
            assert isinstance(item.handle, int)
            by_part.setdefault(item.part, []).append(item.handle)
        try:
            for part, positions in by_part.items():
                for start in range(0, len(positions), MAX_IMPORT):
                    await self.client.remove_exported(self.topic, self.group, PART_CODES[part],
                                                      positions[start:start + MAX_IMPORT],
                                                      self._scheme)
        except grpc.aio.AioRpcError as exc:
            _raise(exc, "source", self.name)


def _item(part: str, m: pb.MovedMessage) -> Item:
    from gateway.backend.base import OutMessage

    message = OutMessage(m.body, dict(m.properties), m.key, m.tag, m.deliver_at_ms,
                         m.message_id, m.attempt, m.retries)
    return Item(source_key(part, m), part, message, m.position, message_size(message))


def source_key(part: str, m: pb.MovedMessage) -> str:
    """A source message's key in the destination's ledger: where it is stored (its part and
    position, the same on every run), then its id. The id alone named two messages as one when
    they shared it (two copies of RabbitMQ messages with one `message_id`, a ready message and
    a dead letter with the same id): the second was taken for copied and removed uncopied."""
    return f"{part}@{m.position}/{m.message_id}"


class GatewayDestination(_Side):
    """Copies stored once on a running gateway; see the module docstring."""

    def __init__(self, url: Url, token: str = "", timeout_s: float = 30.0,
                 ca_file: str = "", namings: Collection[str] | None = None) -> None:
        super().__init__(url, token, timeout_s, ca_file, "to", namings)
        url.only("to", ("group", "naming", "part"))
        self.part = url.option("part")
        if "part" in url.query and self.part not in PARTS:
            raise InvalidArgument("to", url.shown, f"part one of {', '.join(PARTS)}")
        # Refused before anything is taken (the gateway refused the first batch, exit 7).
        if "group" in url.query and not self.group:
            raise InvalidArgument("to", url.shown, "group=G with a non-empty G, or no group "
                                                   "option (only ready messages arrive)")
        if self.part in (RETRY, DEAD_LETTER) and not self.group:
            raise InvalidArgument("to", url.shown, f"a group for part={self.part}: "
                                                   "gateway://HOST:PORT/TOPIC?group=G&part=...")

    async def open(self) -> None:
        client = self._open_channel()
        try:
            await client.topics()
        except grpc.aio.AioRpcError as exc:
            _raise(exc, "destination", self.name)
        await self._check_naming(client, "destination")

    async def check(self) -> str:
        """A dry run's check: the read-only calls `open` makes (ListTopics: reachable, the
        token an admin's; the gateway knows `naming=`)."""
        try:
            await self.open()
        finally:
            await self.close()
        return ""

    async def put(self, ledger: str, items: Sequence[Item],
                  source_destinations: tuple[str, str], earlier: Sequence[str] = ()) -> Stored:
        assert self.client is not None
        stored = skipped = 0
        for chunk in _chunks(items):
            request = pb.ImportMessagesRequest(
                topic=self.topic, group=self.group, ledger=ledger, naming=self.naming,
                source_retry_topic=source_destinations[0],
                source_dead_letter_topic=source_destinations[1], earlier_ledgers=earlier)
            add = request.messages.add
            for item in chunk:
                m = item.message
                add(message_id=m.message_id, body=m.body, properties=m.properties, key=m.key,
                    tag=m.tag, deliver_at_ms=m.deliver_at_ms, attempt=m.attempt,
                    retries=m.retries, part=PART_CODES[self.part or item.part],
                    source_key=item.key, first_delivery=item.first_delivery)
            try:
                answer = await self.client.import_messages(request)
            except grpc.aio.AioRpcError as exc:
                _raise(exc, "destination", self.name)
            stored += answer.stored
            skipped += answer.skipped
        return Stored(stored, skipped)


def _chunks(items: Sequence[Item]) -> list[Sequence[Item]]:
    chunks: list[Sequence[Item]] = []
    start = size = 0
    for i, item in enumerate(items):
        if i > start and (i - start == MAX_IMPORT or size + item.size > MAX_REQUEST_BYTES):
            chunks.append(items[start:i])
            start, size = i, 0
        size += item.size + 64
    if start < len(items):
        chunks.append(items[start:])
    return chunks
