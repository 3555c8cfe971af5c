"""Binding, unbinding and deleting a queue cost the same however many bindings an exchange
holds: a new binding is looked up, not compared with every binding of its exchange (at the
topology budget, about 100,000 bindings, each bind held every client 10-20 ms, a restart
replaying its journal took minutes, and deleting a queue of many bindings was quadratic)."""

from __future__ import annotations

import pytest

from adapters.amqp.frontend.topology import Binding, Topology

BINDINGS = 3_000


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times two bindings were compared: `==`, or `same` where a version has it (the
    comparison each bind and replayed record made with every binding before bindings were
    kept by identity)."""
    count = [0]
    eq, same = Binding.__eq__, getattr(Binding, "same", None)

    def counting_eq(self: Binding, other: object) -> bool:
        count[0] += 1
        return eq(self, other)

    def counting_same(self: Binding, other: Binding) -> bool:
        count[0] += 1
        return bool(same(self, other)) if same is not None else self == other

    monkeypatch.setattr(Binding, "__eq__", counting_eq)
    monkeypatch.setattr(Binding, "same", counting_same, raising=False)
    return count


def topology_of(queues: int) -> Topology:
    topology = Topology()
    topology.declare_exchange("t", "topic", passive=False, durable=True, auto_delete=False,
                              internal=False, arguments={}, connection=1)
    for i in range(queues):
        topology.declare_queue(f"q{i}", connection=1, durable=True, exclusive=False,
                               auto_delete=False, arguments={})
    return topology


def test_binding_and_unbinding_do_not_compare_with_every_binding(compared: list[int]) -> None:
    topology = topology_of(2)
    for i in range(BINDINGS):
        assert topology.bind(Binding("t", "q0", True, f"k.{i}", {}), 1) is not None
    assert topology.bind(Binding("t", "q0", True, "k.7", {}), 1) is None  # already there
    assert topology.bind(Binding("t", "q0", True, "k.7", {"x": 1}), 1) is not None  # other args
    for i in range(0, BINDINGS, 2):
        assert topology.unbind(Binding("t", "q0", True, f"k.{i}", {}))
    assert topology.unbind(Binding("t", "q0", True, "k.0", {})) == []  # gone already
    assert compared[0] < BINDINGS  # not BINDINGS ** 2 / 2
    keys = [b.key for b in topology.exchanges["t"].bindings]  # in the order they were bound
    assert keys == [f"k.{i}" for i in range(1, BINDINGS, 2)] + ["k.7"]
    assert topology.binding_count == BINDINGS // 2 + 1
    assert topology.route(topology.exchanges["t"], "k.7", {}) == {"q0"}
    assert topology.route(topology.exchanges["t"], "k.8", {}) == set()


def test_a_journal_replay_does_not_compare_with_every_binding(compared: list[int]) -> None:
    topology = topology_of(1)
    for i in range(BINDINGS):
        topology.bind(Binding("t", "q0", True, f"k.{i}", {}), 1)
    records = topology.snapshot()
    again = Topology()
    for record in records:
        again.apply(record)
    binds = [r for r in records if r["op"] == "bind"]
    assert len(binds) == BINDINGS
    again.apply(binds[5])  # replayed twice: still one binding
    again.apply({**binds[7], "op": "unbind"})
    assert compared[0] < BINDINGS
    assert again.binding_count == BINDINGS - 1
    assert [b.key for b in again.exchanges["t"].bindings][:8] == [
        "k.0", "k.1", "k.2", "k.3", "k.4", "k.5", "k.6", "k.8"]


def test_deleting_a_queue_drops_its_bindings_only(compared: list[int]) -> None:
    topology = topology_of(3)
    for i in range(BINDINGS):
        topology.bind(Binding("t", f"q{i % 3}", True, f"k.{i}", {}), 1)
    changes = topology.delete_queue("q1")
    assert sum(c["op"] == "unbind" for c in changes) == BINDINGS // 3
    assert compared[0] < BINDINGS
    assert {b.destination for b in topology.exchanges["t"].bindings} == {"q0", "q2"}
    assert topology.binding_count == BINDINGS - BINDINGS // 3
