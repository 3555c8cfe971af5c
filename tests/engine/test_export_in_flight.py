"""ExportMessages hands out copies for another system to take over: a message a pull consumer
still holds would be processed twice (there and by the destination), and RemoveExported would
remove it under the consumer. Export is refused while deliveries are in flight, as it is while
push consumers are open, naming how many; once they are settled it goes on."""

from __future__ import annotations

import pytest

from gateway.errors import FailedPrecondition

from .harness import GROUP, TOPIC, Harness


async def test_export_waits_for_pull_deliveries_in_flight(h: Harness) -> None:
    spec = h.spec("rocketmq")
    await h.publish(b"a", b"b")
    (d,) = await h.receive(spec, n=1)
    with pytest.raises(FailedPrecondition) as refused:
        await h.engine.admin.export(TOPIC, GROUP, "ready", -1, 100)
    assert "1 delivery in flight" in refused.value.message, refused.value.message
    assert (await h.ack(d)).ok
    page = await h.engine.admin.export(TOPIC, GROUP, "ready", -1, 100)
    assert [m.body for m in page.messages] == [b"b"]
