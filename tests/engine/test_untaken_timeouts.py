"""Deliveries whose ack timeout passes while still in their push consumer's outbox (its front
end stopped taking them: a client that does not read) leave the outbox, and the credit they
used comes back. Before, they stayed there with their bodies while the retries were pushed on
top of them: a stuck consumer's outbox grew by one round of bodies per ack timeout (384 MiB for
an AMQP consumer of 2 MiB messages within seconds at a short time scale)."""

from __future__ import annotations

from .harness import Harness

MINUTE = 60_000


async def test_timed_out_untaken_deliveries_leave_the_outbox(h: Harness) -> None:
    spec = h.spec("rabbitmq")
    for n in range(3):
        await h.publish(f"m{n}".encode())
    consumer = await h.open(spec, credit=10)
    assert len(consumer.outbox) == 3 and consumer.credit == 7
    for round_ in range(1, 4):
        await h.advance(MINUTE)  # the ack timeout: each is failed, its retry due a minute on
        assert all(d.receipt in consumer.receipts for d in consumer.outbox)
        await h.advance(MINUTE)  # the retries fall due and are pushed again
        assert len(consumer.outbox) <= 3, f"round {round_}: {len(consumer.outbox)}"
        assert consumer.credit + len(consumer.outbox) == 10
    got = h.pushed(consumer)
    assert sorted(d.body for d in got) == [b"m0", b"m1", b"m2"]
    assert all(d.attempt >= 2 for d in got)
    for d in got:
        assert (await h.ack(d)).ok
    assert not consumer.receipts and consumer.credit == 10
