"""Producer access modes (CommandProducer's `producer_access_mode`): a topic takes any number of
Shared producers, or one Exclusive producer and no other, across every connection of a front
end, as on a broker. WaitForExclusive and ExclusiveWithFencing are not served (refused at the
edge). The field is not in the front end's proto subset: it is read from the unknown fields."""

from __future__ import annotations

from google.protobuf.unknown_fields import UnknownFieldSet

from adapters.pulsar.wire import wire_pb2 as pb

FIELD = 10
"""CommandProducer.producer_access_mode in Pulsar's PulsarApi.proto."""
SHARED, EXCLUSIVE, WAIT_FOR_EXCLUSIVE, EXCLUSIVE_WITH_FENCING = 0, 1, 2, 3
NAMES = {SHARED: "Shared", EXCLUSIVE: "Exclusive", WAIT_FOR_EXCLUSIVE: "WaitForExclusive",
         EXCLUSIVE_WITH_FENCING: "ExclusiveWithFencing"}
SERVED = (SHARED, EXCLUSIVE)


def mode(request: pb.CommandProducer) -> int:
    """The access mode the PRODUCER asks for (Shared when it names none)."""
    unknown = UnknownFieldSet(request)
    found = SHARED
    for i in range(len(unknown)):
        item = unknown[i]
        if item.field_number == FIELD and isinstance(item.data, int):
            found = item.data  # the last one counts, as in protobuf
    return found


class ProducerAccess:
    """Producers attached per topic: how many Shared ones, or the name of the Exclusive one."""

    def __init__(self) -> None:
        self._shared: dict[str, int] = {}
        self._exclusive: dict[str, str] = {}

    def attach(self, topic: str, name: str, exclusive: bool) -> str:
        """Attach a producer; "" when done, else why it may not attach."""
        holder = self._exclusive.get(topic)
        if holder is not None:
            return f"topic {topic!r} has an exclusive producer ({holder!r})"
        if exclusive:
            shared = self._shared.get(topic, 0)
            if shared:
                return f"topic {topic!r} has {shared} other producers: not exclusive"
            self._exclusive[topic] = name
        else:
            self._shared[topic] = self._shared.get(topic, 0) + 1
        return ""

    def detach(self, topic: str, exclusive: bool) -> None:
        """A producer attached with `attach` has gone."""
        if exclusive:
            self._exclusive.pop(topic, None)
            return
        left = self._shared.get(topic, 0) - 1
        if left > 0:
            self._shared[topic] = left
        else:
            self._shared.pop(topic, None)
