"""Exchanges, queues and bindings, and how a published message is routed (pure: no I/O).

Every change a client asks for is checked here against the rules of AMQP 0-9-1 as RabbitMQ
applies them (reserved `amq.` names, equivalent redeclaration, exclusive ownership, `if-unused`
and `if-empty`), raising `AMQPError` with the specification's reply code. A change to a durable
entity is returned as a record (`Change`) for the journal; `apply` replays one.

A queue is a gateway topic (of the queue's name) consumed by one group (the queue's name unless
`x-consumer-group` names another). The default exchange routes a message to the topic its routing
key names; `route` returns the names and the caller decides which exist.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.amqp.frontend import delayed, edge
from adapters.amqp.frontend.edge import QueueSettings
from adapters.amqp.frontend.errors import (
    ACCESS_REFUSED,
    COMMAND_INVALID,
    NOT_FOUND,
    PRECONDITION_FAILED,
    RESOURCE_LOCKED,
    AMQPError,
    short,
)
from adapters.amqp.frontend.footprint import Budget, entity_cost
from adapters.amqp.frontend.routeturns import routing
from adapters.amqp.frontend.routing import DIRECT, FANOUT, HEADERS, TOPIC, TYPES
from adapters.amqp.frontend.values import FieldValue, table_from_text, table_to_text

DEFAULT = ""
BUILTIN = {"amq.direct": DIRECT, "amq.fanout": FANOUT, "amq.topic": TOPIC,
           "amq.headers": HEADERS, "amq.match": HEADERS}
MAX_QUEUES = 10_000
MAX_EXCHANGES = 10_000
MAX_BINDINGS = 100_000
MAX_TOMBSTONES = 10_000
Change = dict[str, Any]
"""One change to a durable entity, as the journal keeps it (JSON)."""


@dataclass(slots=True)
class Queue:
    name: str
    durable: bool
    auto_delete: bool
    arguments: dict[str, FieldValue]
    settings: QueueSettings
    owner: int | None = None
    """The connection of an exclusive queue."""
    declared_by: str = ""
    """The principal that declared it ("" without authentication)."""
    consumers: int = 0
    had_consumers: bool = False
    cost: int = 0
    """What it holds in memory (`footprint`), counted against `holder`'s budget."""
    holder: int | None = None
    """The connection that declared it (None: read back from the journal)."""


@dataclass(slots=True)
class Binding:
    source: str
    destination: str
    to_queue: bool
    key: str
    arguments: dict[str, FieldValue]
    _identity: tuple[str, str, bool, str, str] | None = field(default=None, compare=False,
                                                              repr=False)
    cost: int = field(default=0, compare=False)
    holder: int | None = field(default=None, compare=False)
    declared_by: str = field(default="", compare=False)

    def identity(self) -> tuple[str, str, bool, str, str]:
        """What makes two bindings the same: their ends, key and arguments (as text, written
        once per binding: comparing a new binding with every one of a headers exchange's
        bindings wrote both argument tables out again each time, seconds for a few thousand
        bindings of large arguments, with every client waiting)."""
        if self._identity is None:
            self._identity = (self.source, self.destination, self.to_queue, self.key,
                              table_to_text(self.arguments))
        return self._identity


@dataclass(slots=True)
class Exchange:
    name: str
    kind: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, FieldValue] = field(default_factory=dict)
    alternate: str | None = None
    builtin: bool = False
    table: dict[tuple[str, str, bool, str, str], Binding] = field(default_factory=dict)
    """Its bindings by `Binding.identity`, in the order they were bound: found, not compared
    with each (at the topology budget an exchange holds about 100,000)."""
    had_bindings: bool = False
    cost: int = 0
    holder: int | None = None
    declared_by: str = ""
    _listed: list[Binding] | None = None

    @property
    def bindings(self) -> list[Binding]:
        """Its bindings in the order they were bound (made again after a change)."""
        if self._listed is None:
            self._listed = list(self.table.values())
        return self._listed


def _limit(what: str, kind: str, limit: int) -> AMQPError:
    """A count limit reached: 406 PRECONDITION_FAILED, the channel closes, as RabbitMQ refuses a
    queue past its virtual host's `max-queues` ("queue limit in vhost '/' (N) is reached")."""
    return AMQPError(PRECONDITION_FAILED, f"cannot {what}: {kind} limit in vhost '/' ({limit}) "
                                          f"is reached (the gateway's limit on declared {kind}s)")


def _inequivalent(kind: str, name: str, what: str, got: object, have: object) -> AMQPError:
    return AMQPError(PRECONDITION_FAILED, f"inequivalent arg '{what}' for {kind} {short(name)} "
                                          f"in vhost '/': received {got!r} but current is "
                                          f"{have!r}")


class Topology:
    """The server's exchanges, queues and bindings."""

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget or Budget()
        """What the declared entities hold in memory, bounded per connection and in all."""
        self.exchanges: dict[str, Exchange] = {
            DEFAULT: Exchange(DEFAULT, DIRECT, builtin=True),
            **{name: Exchange(name, kind, builtin=True) for name, kind in BUILTIN.items()},
        }
        self.queues: dict[str, Queue] = {}
        self.binding_count = 0
        self._into: dict[tuple[bool, str], dict[int, Binding]] = {}
        """The bindings to each queue (True) or exchange (False), by `id`."""
        self.bindings_tested = 0
        """Bindings matched against messages so far (what routing cost: `publishing`)."""
        self.tombstones: dict[str, None] = {}
        """Queues deleted over AMQP (oldest first): their topics may still hold messages for
        other groups, but they are no queue to AMQP clients until declared again."""
        self.stale: dict[str, str] = {}
        """Non-durable queues of an earlier run, by name: their groups (`transient` records),
        which kept their messages while they were there, are dropped at start."""

    # ------------------------------------------------------------------ lookups
    def exchange(self, name: str) -> Exchange:
        found = self.exchanges.get(name)
        if found is None:
            raise AMQPError(NOT_FOUND, f"no exchange {short(name)} in vhost '/'")
        return found

    def queue(self, name: str, connection: int | None = None) -> Queue:
        found = self.queues.get(name)
        if found is None:
            raise AMQPError(NOT_FOUND, f"no queue {short(name)} in vhost '/'")
        if connection is not None:
            self.check_owner(found, connection)
        return found

    @staticmethod
    def check_owner(queue: Queue, connection: int) -> None:
        if queue.owner is not None and queue.owner != connection:
            raise AMQPError(RESOURCE_LOCKED, f"cannot obtain exclusive access to locked queue "
                                             f"{short(queue.name)} in vhost '/'")

    # ------------------------------------------------------------------ exchanges
    def declare_exchange(self, name: str, kind: str, *, passive: bool, durable: bool,
                         auto_delete: bool, internal: bool, arguments: Mapping[str, FieldValue],
                         connection: int | None = None, principal: str = "") -> Change | None:
        edge.check_name("exchange", name, allow_empty=True)
        if passive:
            self.exchange(name)
            return None
        if not name:
            raise AMQPError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        if kind not in (*TYPES, delayed.DELAYED):
            raise AMQPError(COMMAND_INVALID, f"unknown exchange type {short(kind)}; "
                                             f"allowed: {', '.join((*TYPES, delayed.DELAYED))}")
        existing = self.exchanges.get(name)
        if existing is not None:
            for what, got, have in (("type", kind, existing.kind),
                                    ("durable", durable, existing.durable),
                                    ("auto_delete", auto_delete, existing.auto_delete),
                                    ("internal", internal, existing.internal)):
                if got != have:
                    raise _inequivalent("exchange", name, what, got, have)
            return None
        edge.check_declarable("exchange", name)
        if kind == delayed.DELAYED:
            delayed.check(arguments)
        alternate = edge.exchange_alternate(arguments)
        if len(self.exchanges) >= MAX_EXCHANGES + len(BUILTIN) + 1:
            raise _limit(f"declare exchange {short(name)}", "exchange", MAX_EXCHANGES)
        cost = entity_cost((name, kind), arguments)
        self.budget.charge(connection, cost, f"exchange {short(name)}", principal, "exchange")
        self.exchanges[name] = Exchange(name, kind, durable, auto_delete, internal,
                                        dict(arguments), alternate, cost=cost, holder=connection,
                                        declared_by=principal)
        return _exchange_record(self.exchanges[name]) if durable else None

    def delete_exchange(self, name: str, *, if_unused: bool) -> list[Change]:
        edge.check_name("exchange", name, allow_empty=True)
        if not name:  # RabbitMQ's texts
            raise AMQPError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        if name in BUILTIN:
            raise AMQPError(ACCESS_REFUSED, f"deletion of system exchange {short(name)} in "
                                            "vhost '/' not allowed")
        exchange = self.exchanges.get(name)
        if exchange is None:
            return []  # RabbitMQ: deleting an exchange that is not there succeeds
        inbound = list(self._into.get((False, name), {}).values())
        if if_unused and (exchange.bindings or inbound):
            raise AMQPError(PRECONDITION_FAILED, f"exchange {short(name)} in vhost '/' in use")
        changes: list[Change] = []
        for binding in [*exchange.bindings, *inbound]:
            changes.extend(self._unbind(binding))
        self.drop_exchange(name)
        if exchange.durable:
            changes.append({"op": "unexchange", "name": name})
        return changes

    def drop_exchange(self, name: str) -> None:
        """Forget an exchange (deleted, or its declaration not kept)."""
        exchange = self.exchanges.pop(name, None)
        if exchange is not None:
            for binding in list(exchange.table.values()):  # none, unless replaced unbound
                self._detach(exchange, binding)
            self.budget.release(exchange.holder, exchange.cost, exchange.declared_by, "exchange")

    # ------------------------------------------------------------------ queues
    def declare_queue(self, name: str, *, connection: int, durable: bool, exclusive: bool,
                      auto_delete: bool, arguments: Mapping[str, FieldValue],
                      principal: str = "") -> tuple[Queue, Change | None]:
        """A new or an equivalent existing queue (its name: `server_name` for "")."""
        existing = self.queues.get(name)
        settings = edge.queue_settings(name, arguments)
        if existing is not None:
            self.check_owner(existing, connection)
            for what, got, have in (("durable", durable, existing.durable),
                                    ("exclusive", exclusive, existing.owner is not None),
                                    ("auto_delete", auto_delete, existing.auto_delete)):
                if got != have:
                    raise _inequivalent("queue", name, what, got, have)
            if settings != existing.settings:
                got_args, have_args = settings.shown(), existing.settings.shown()
                # As RabbitMQ: the first argument that differs, by name (None: absent).
                differs = next((k for k in sorted({*got_args, *have_args})
                                if got_args.get(k) != have_args.get(k)), None)
                if differs is None:
                    raise _inequivalent("queue", name, "arguments", got_args, have_args)
                raise _inequivalent("queue", name, differs, got_args.get(differs),
                                    have_args.get(differs))
            return existing, None
        if len(self.queues) >= MAX_QUEUES:
            raise _limit(f"declare queue {short(name)}", "queue", MAX_QUEUES)
        cost = entity_cost((name,), arguments)
        self.budget.charge(connection, cost, f"queue {short(name)}", principal, "queue")
        queue = Queue(name, durable, auto_delete, dict(arguments), settings,
                      owner=connection if exclusive else None, declared_by=principal,
                      cost=cost, holder=connection)
        self.queues[name] = queue
        self.tombstones.pop(name, None)
        if not durable or exclusive:
            return queue, None
        return queue, {"op": "queue", "name": name, "auto_delete": auto_delete,
                       "arguments": table_to_text(arguments), "principal": principal}

    @staticmethod
    def server_name() -> str:
        return "amq.gen-" + secrets.token_urlsafe(16)

    def drop_queue(self, name: str) -> Queue | None:
        """Forget a queue (deleted, or its declaration not kept)."""
        queue = self.queues.pop(name, None)
        if queue is not None:
            self.budget.release(queue.holder, queue.cost, queue.declared_by, "queue")
        return queue

    def delete_queue(self, name: str) -> list[Change]:
        queue = self.drop_queue(name)
        if queue is None:
            return []
        self._bury(name)
        changes: list[Change] = []
        for binding in list(self._into.get((True, name), {}).values()):
            changes.extend(self._unbind(binding))
        changes.append({"op": "unqueue", "name": name})
        return changes

    def _bury(self, name: str) -> None:
        self.tombstones.pop(name, None)
        self.tombstones[name] = None
        while len(self.tombstones) > MAX_TOMBSTONES:
            del self.tombstones[next(iter(self.tombstones))]

    # ------------------------------------------------------------------ bindings
    def bind(self, binding: Binding, connection: int | None = None,
             principal: str = "") -> Change | None:
        source = self.exchange(binding.source)
        if not binding.source:
            raise AMQPError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        if binding.to_queue:
            destination_durable = self.queue(binding.destination).durable
        else:
            destination_durable = self.exchange(binding.destination).durable
        edge.check_binding_arguments(delayed.routing_kind(source.kind, source.arguments),
                                     binding.arguments)
        if binding.identity() in source.table:
            return None
        if self.binding_count >= MAX_BINDINGS:
            raise _limit(f"bind {short(binding.destination)} to exchange "
                         f"{short(binding.source)}", "binding", MAX_BINDINGS)
        kind = "queue" if binding.to_queue else "exchange"
        cost = entity_cost((binding.source, binding.destination, binding.key),
                           binding.arguments)
        self.budget.charge(connection, cost, f"a binding of {kind} {short(binding.destination)}"
                                             f" to exchange {short(binding.source)}", principal,
                           "binding")
        binding.cost, binding.holder, binding.declared_by = cost, connection, principal
        self._attach(source, binding)
        if not (source.durable and destination_durable):
            return None
        return {"op": "bind", **_binding_record(binding)}

    def unbind(self, binding: Binding) -> list[Change]:
        source = self.exchange(binding.source)
        if not binding.source:
            raise AMQPError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        if binding.to_queue:
            self.queue(binding.destination)
        else:
            self.exchange(binding.destination)
        found = source.table.get(binding.identity())
        if found is None:
            return []  # RabbitMQ: removing a binding that is not there succeeds
        return self._unbind(found)

    def _unbind(self, binding: Binding) -> list[Change]:
        source = self.exchanges.get(binding.source)
        if source is None or source.table.get(binding.identity()) is not binding:
            return []
        self._detach(source, binding)
        changes: list[Change] = [{"op": "unbind", **_binding_record(binding)}]
        if source.auto_delete and source.had_bindings and not source.table and not (
            source.builtin
        ):
            changes.extend(self.delete_exchange(source.name, if_unused=False))
        return changes

    def _attach(self, source: Exchange, binding: Binding) -> None:
        source.table[binding.identity()] = binding
        source._listed = None
        source.had_bindings = True
        self._into.setdefault((binding.to_queue, binding.destination), {})[id(binding)] = binding
        self.binding_count += 1

    def _detach(self, source: Exchange, binding: Binding) -> None:
        del source.table[binding.identity()]
        source._listed = None
        into = self._into.get((binding.to_queue, binding.destination))
        if into is not None:
            into.pop(id(binding), None)
            if not into:
                del self._into[(binding.to_queue, binding.destination)]
        self.binding_count -= 1
        self.budget.release(binding.holder, binding.cost, binding.declared_by, "binding")

    # ------------------------------------------------------------------ routing
    def route(self, exchange: Exchange, routing_key: str,
              headers: Mapping[str, FieldValue]) -> set[str]:
        """The queue names a message reaches (exchange-to-exchange bindings and alternate
        exchanges followed, each exchange once). Through the default exchange: the routing key
        itself. All at once: `routeturns.route` serves others meanwhile."""
        found: set[str] = set()
        for _ in routing(self, exchange, routing_key, headers, found):
            pass
        return found

    # ------------------------------------------------------------------ journal
    def apply(self, change: Change) -> None:
        """Replay one journal record (at start-up)."""
        op = change["op"]
        if op == "exchange":
            arguments = table_from_text(change["arguments"])
            self.drop_exchange(change["name"])
            cost = entity_cost((change["name"], change["kind"]), arguments)
            principal = change.get("principal", "")
            self.budget.charge(None, cost, "", principal, "exchange")
            self.exchanges[change["name"]] = Exchange(
                change["name"], change["kind"], True, bool(change["auto_delete"]),
                bool(change["internal"]), arguments, edge.exchange_alternate(arguments),
                cost=cost, declared_by=principal)
        elif op == "unexchange":
            self.drop_exchange(change["name"])
        elif op == "queue":
            arguments = table_from_text(change["arguments"])
            name = change["name"]
            self.drop_queue(name)
            cost = entity_cost((name,), arguments)
            self.budget.charge(None, cost, "", change.get("principal", ""), "queue")
            self.queues[name] = Queue(name, True, bool(change["auto_delete"]), arguments,
                                      edge.queue_settings(name, arguments),
                                      declared_by=change.get("principal", ""), cost=cost)
            self.tombstones.pop(name, None)
            self.stale.pop(name, None)
        elif op == "unqueue":
            self.drop_queue(change["name"])
            self._bury(change["name"])
            self.stale.pop(change["name"], None)
        elif op == "transient":
            self.stale[change["name"]] = change["group"]
        elif op == "forget":  # a declaration undone, or a stale group dropped: no tombstone
            self.drop_queue(change["name"])
            self.stale.pop(change["name"], None)
        elif op == "bind":
            binding = _binding_of(change)
            source = self.exchanges.get(binding.source)
            if source is not None and binding.identity() not in source.table:
                binding.cost = entity_cost((binding.source, binding.destination, binding.key),
                                           binding.arguments)
                self.budget.charge(None, binding.cost, "", binding.declared_by, "binding")
                self._attach(source, binding)
        elif op == "unbind":
            binding = _binding_of(change)
            source = self.exchanges.get(binding.source)
            found = None if source is None else source.table.get(binding.identity())
            if source is not None and found is not None:
                self._detach(source, found)
        else:
            raise ValueError(f"unknown journal record {op!r}")

    def snapshot(self) -> list[Change]:
        """Records that rebuild every durable entity (for compacting the journal), and those of
        the queues that do not outlive the server (`transient`)."""
        out: list[Change] = []
        for e in self.exchanges.values():
            if e.durable and not e.builtin:
                out.append(_exchange_record(e))
        for q in self.queues.values():
            if q.durable and q.owner is None:
                out.append({"op": "queue", "name": q.name, "auto_delete": q.auto_delete,
                            "arguments": table_to_text(q.arguments),
                            "principal": q.declared_by})
        for e in self.exchanges.values():
            for b in e.bindings:
                if self._durable_binding(b):
                    out.append({"op": "bind", **_binding_record(b)})
        out.extend({"op": "unqueue", "name": name} for name in self.tombstones)
        out.extend(transient(q) for q in self.queues.values()
                   if not q.durable or q.owner is not None)
        out.extend({"op": "transient", "name": name, "group": group}
                   for name, group in self.stale.items())
        return out

    def _durable_binding(self, b: Binding) -> bool:
        source = self.exchanges.get(b.source)
        if source is None or not source.durable:
            return False
        if b.to_queue:
            queue = self.queues.get(b.destination)
            return queue is not None and queue.durable and queue.owner is None
        target = self.exchanges.get(b.destination)
        return target is not None and target.durable


def transient(queue: Queue) -> Change:
    """The record of a queue that does not outlive the server (non-durable or exclusive): its
    group, created at declare, is dropped at the next start unless the queue was deleted."""
    return {"op": "transient", "name": queue.name, "group": queue.settings.group}


def _exchange_record(e: Exchange) -> Change:
    return {"op": "exchange", "name": e.name, "kind": e.kind, "auto_delete": e.auto_delete,
            "internal": e.internal, "arguments": table_to_text(e.arguments),
            "principal": e.declared_by}


def _binding_record(b: Binding) -> dict[str, Any]:
    return {"source": b.source, "destination": b.destination, "to_queue": b.to_queue,
            "key": b.key, "arguments": table_to_text(b.arguments), "principal": b.declared_by}


def _binding_of(change: Change) -> Binding:
    return Binding(change["source"], change["destination"], bool(change["to_queue"]),
                   change["key"], table_from_text(change["arguments"]),
                   declared_by=change.get("principal", ""))
