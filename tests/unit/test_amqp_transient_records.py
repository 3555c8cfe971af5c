"""The journal's records of queues that do not outlive the server (non-durable, exclusive): a
snapshot taken while one exists keeps its record, so the next start finds its group to drop;
a deletion, a durable declaration of the name or an undone declaration settles it."""

from __future__ import annotations

import json
from pathlib import Path

from adapters.amqp.frontend.journal import Journal
from adapters.amqp.frontend.topology import Topology


def declared(topology: Topology, name: str, **kw: bool) -> None:
    topology.declare_queue(name, connection=1, durable=kw.get("durable", False),
                           exclusive=kw.get("exclusive", False), auto_delete=False,
                           arguments={"x-consumer-group": f"{name}-group"})


def test_a_snapshot_keeps_the_live_transient_queues(tmp_path: Path) -> None:
    topology = Topology()
    declared(topology, "temp")
    declared(topology, "mine", durable=True, exclusive=True)
    declared(topology, "kept", durable=True)
    records = [r for r in topology.snapshot() if r["op"] == "transient"]
    assert records == [{"op": "transient", "name": "temp", "group": "temp-group"},
                       {"op": "transient", "name": "mine", "group": "mine-group"}]
    later = Topology()
    for record in topology.snapshot():
        later.apply(record)
    assert later.stale == {"temp": "temp-group", "mine": "mine-group"}
    assert set(later.queues) == {"kept"}
    # Stale ones stay in every snapshot until settled.
    assert {r["name"] for r in later.snapshot() if r["op"] == "transient"} == {"temp", "mine"}


def test_transient_records_are_settled(tmp_path: Path) -> None:
    journal = tmp_path / "amqp"
    journal.mkdir()
    _, durable = Topology().declare_queue("b", connection=1, durable=True, exclusive=False,
                                          auto_delete=False, arguments={})
    (journal / "topology.jsonl").write_text("\n".join([
        '{"op":"transient","name":"a","group":"ga"}',
        '{"op":"transient","name":"b","group":"gb"}',
        '{"op":"transient","name":"c","group":"gc"}',
        '{"op":"transient","name":"d","group":"gd"}',
        '{"op":"unqueue","name":"a"}',
        json.dumps(durable),
        '{"op":"forget","name":"c"}',
    ]) + "\n")
    topology = Topology()
    Journal(journal).load(topology)
    assert topology.stale == {"d": "gd"}
    assert set(topology.queues) == {"b"}
    assert "c" not in topology.tombstones and "a" in topology.tombstones
