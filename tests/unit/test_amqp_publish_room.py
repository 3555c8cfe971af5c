"""The room for published messages not yet stored over every AMQP connection
(`admission.PublishRoom`): who fits is admitted, who does not waits its turn in order (a large
message is not passed by small ones for ever), a message larger than the room goes alone, and
a connection that closes waits no more."""

from __future__ import annotations

from adapters.amqp.frontend.admission import PublishRoom


class Conn:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def admitted(self) -> None:
        self.log.append(self.name)


def test_waiters_are_admitted_in_order_as_room_frees() -> None:
    log: list[str] = []
    room = PublishRoom(100)
    a, big, small = Conn(log, "a"), Conn(log, "big"), Conn(log, "small")
    assert room.take(a, 60)
    assert not room.take(big, 90)  # does not fit: waits
    assert not room.take(small, 20)  # would fit, but waits behind the first who waits
    room.give(60)  # empty: big goes, then small does not fit beside it
    assert (log, room.held) == (["big"], 90)
    room.give(90)
    assert (log, room.held, room.waiting, room.most) == (["big", "small"], 20, 0, 90)


def test_a_message_larger_than_the_room_goes_alone() -> None:
    log: list[str] = []
    room = PublishRoom(100)
    assert room.take(Conn(log, "x"), 250)  # nothing held: admitted
    assert not room.take(Conn(log, "y"), 1)
    room.give(250)
    assert (log, room.held, room.most) == (["y"], 1, 250)


def test_a_connection_that_closes_waits_no_more() -> None:
    log: list[str] = []
    room = PublishRoom(100)
    first, gone, last = Conn(log, "first"), Conn(log, "gone"), Conn(log, "last")
    assert room.take(first, 50)
    assert not room.take(gone, 80)
    assert not room.take(last, 40)
    room.cancel(gone)  # the next in line fits now
    assert (log, room.held, room.waiting) == (["last"], 90, 0)
