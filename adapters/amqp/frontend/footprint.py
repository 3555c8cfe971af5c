"""What declared queues, exchanges and bindings hold in memory, and the budgets that bound it:
per connection (what the entities it declared hold while it is open), per principal with
authentication (what it declared over all its connections, those read back from the journal
included; with how many of each kind) and for the whole listener (every entity, whoever
declared it, those read back from the journal included).

The count limits (`topology.MAX_QUEUES` and the others) leave the arguments unbounded but per
frame: 2,000 queues of 800 arguments each took the gateway to 325 MB. An entity counts
`ENTITY_COST`, twice the characters of its names, and `VALUE_COST` per argument value at every
depth plus twice the characters of every name, string and byte string in its arguments (they
are held decoded, and again as text in a binding's identity or a journal record): an upper
estimate (queues of 800 short string arguments, decoded from their frames, held 149 bytes per
argument, and count 290).

Past a budget, the declaration is refused with 406 PRECONDITION_FAILED (the channel closes), as
RabbitMQ refuses a queue past its virtual host's or the cluster's queue limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.amqp.frontend.errors import PRECONDITION_FAILED, AMQPError, short

ENTITY_COST = 512
"""A queue, an exchange or a binding without arguments (its object, settings, index entries)."""
VALUE_COST = 256
"""One argument value, at any depth (its key and decoded value, its text form)."""
MIB = 1 << 20
MAX_TOPOLOGY_MB = 128
"""Default budget of every declared entity together (`[amqp] max_topology_mb`)."""
MAX_CONNECTION_TOPOLOGY_MB = 32
"""Default budget of the entities one connection declared (`[amqp]
max_topology_mb_per_connection`)."""
TOTAL_SETTING = "amqp.max_topology_mb"
CONNECTION_SETTING = "amqp.max_topology_mb_per_connection"
PRINCIPAL_SETTING = "amqp.max_topology_mb_per_principal"


def entity_cost(names: tuple[str, ...], arguments: Mapping[str, Any]) -> int:
    """What one entity of these names and arguments holds, in bytes (an estimate)."""
    return ENTITY_COST + 2 * sum(len(name) for name in names) + _table(arguments)


def _table(table: Mapping[str, Any]) -> int:
    return sum(VALUE_COST + 2 * len(key) + _value(value) for key, value in table.items())


def _value(value: Any) -> int:
    if isinstance(value, str | bytes | bytearray):
        return 2 * len(value)
    if isinstance(value, Mapping):
        return _table(value)
    if isinstance(value, list | tuple):
        return sum(VALUE_COST + _value(item) for item in value)
    return 0


@dataclass
class Budget:
    """The bytes declared entities hold, in all, per connection that declared them, and per
    principal that declared them (with a tokens file: its share, so that one client declaring
    durable entities over many connections cannot fill the gateway for every other)."""

    total_limit: int = MAX_TOPOLOGY_MB * MIB
    connection_limit: int = MAX_CONNECTION_TOPOLOGY_MB * MIB
    principal_limit: int = 0
    """Bytes the entities one principal declared may hold (0: no share of its own)."""
    principal_counts: Mapping[str, int] = field(default_factory=dict)
    """Entities of each kind ("queue", "exchange", "binding") one principal may have declared
    (a kind not named: no share of its own)."""
    total: int = 0
    by_connection: dict[int, int] = field(default_factory=dict)
    """Open connections' shares (a closed connection's entities count in `total` only)."""
    by_principal: dict[str, int] = field(default_factory=dict)
    """The bytes each principal's entities hold, those read back from the journal included."""
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    """(principal, kind): how many entities of that kind each principal declared."""

    def charge(self, holder: int | None, cost: int, what: str, principal: str = "",
               kind: str = "") -> None:
        """Count a new `kind` entity of `holder` (a connection; None: read back from the
        journal, never refused) declared by `principal` ("": none known); past a budget,
        PRECONDITION_FAILED naming it."""
        if holder is not None:
            held = self.by_connection.get(holder, 0)
            if held + cost > self.connection_limit:
                raise _over(what, "on this connection", self.connection_limit,
                            CONNECTION_SETTING)
            if principal:
                self._check_share(principal, cost, what, kind)
            if self.total + cost > self.total_limit:
                raise _over(what, "on this gateway", self.total_limit, TOTAL_SETTING)
            self.by_connection[holder] = held + cost
        self.total += cost
        if principal:
            self.by_principal[principal] = self.by_principal.get(principal, 0) + cost
            self.counts[(principal, kind)] = self.counts.get((principal, kind), 0) + 1

    def _check_share(self, principal: str, cost: int, what: str, kind: str) -> None:
        most = self.principal_counts.get(kind)
        if most is not None and self.counts.get((principal, kind), 0) >= most:
            raise AMQPError(PRECONDITION_FAILED, f"cannot declare {what}: {kind} limit of "
                                                 f"principal {short(principal)} ({most}) is "
                                                 f"reached (its share of the gateway's limit on "
                                                 f"declared {kind}s)")
        if self.principal_limit and (
                self.by_principal.get(principal, 0) + cost > self.principal_limit):
            raise _over(what, f"by principal {short(principal)}", self.principal_limit,
                        PRINCIPAL_SETTING)

    def release(self, holder: int | None, cost: int, principal: str = "",
                kind: str = "") -> None:
        """An entity is gone."""
        self.total -= cost
        if holder is not None and holder in self.by_connection:
            self.by_connection[holder] -= cost
        if principal and principal in self.by_principal:
            self.by_principal[principal] -= cost
            self.counts[(principal, kind)] = self.counts.get((principal, kind), 1) - 1

    def forget(self, holder: int) -> None:
        """A connection closed: what it declared and left counts for the gateway only."""
        self.by_connection.pop(holder, None)


def _over(what: str, where: str, limit: int, setting: str) -> AMQPError:
    return AMQPError(PRECONDITION_FAILED, f"cannot declare {what}: the queues, exchanges and "
                                          f"bindings declared {where}, with their arguments, "
                                          f"would hold more than {limit // MIB} MiB ({setting})")
