"""gateway.v1 text fields with a control character: refused naming the field (the servicers
call these checks first, and answer INVALID_ARGUMENT with the error's text)."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidArgument
from gateway.server import validate
from gateway.v1 import gateway_pb2 as pb


def _subscribe(tag_filter: str) -> pb.Subscribe:
    return pb.Subscribe(topic="t", group="g", policy="rocketmq", tag_filter=tag_filter)


@pytest.mark.parametrize("tag_filter", ["a\0", "a||b\n", "\x1b[31m", "a\x85"])
def test_a_tag_filter_with_a_control_character_is_refused(tag_filter: str) -> None:
    """It was accepted: a filter no tag can match, held as the group's filter."""
    with pytest.raises(InvalidArgument) as caught:
        validate.subscribe(_subscribe(tag_filter))
    assert caught.value.field == "tag_filter"
    request = pb.ReceiveRequest(topic="t", group="g", policy="rocketmq", tag_filter=tag_filter,
                                max_messages=1)
    with pytest.raises(InvalidArgument) as caught:
        validate.receive(request)
    assert caught.value.field == "tag_filter"


@pytest.mark.parametrize("tag_filter", ["", "*", "a || b", "tagA||tagB", "données"])
def test_a_printable_tag_filter_passes(tag_filter: str) -> None:
    validate.subscribe(_subscribe(tag_filter))


@pytest.mark.parametrize("tag", ["a\0", "a\n", "\x85"])
def test_a_published_tag_with_a_control_character_is_refused(tag: str) -> None:
    """No tag_filter can name such a tag: the message could only reach groups that take all."""
    request = pb.PublishRequest(topic="t", messages=[pb.Message(body=b"x"),
                                                     pb.Message(body=b"y", tag=tag)])
    with pytest.raises(InvalidArgument) as caught:
        validate.publish(request, 0)
    assert caught.value.field == "messages[1].tag"


def test_a_printable_tag_passes() -> None:
    request = pb.PublishRequest(topic="t", messages=[pb.Message(body=b"x", tag="tag A é")])
    assert validate.publish(request, 0)[0].tag == "tag A é"
