"""An imported copy (`migrate copy`, ImportMessages) keeps the first publish time its source
recorded, as it keeps a dead letter's reason and time; other reserved names are the
gateway's own to write."""

from __future__ import annotations

from gateway.backend.base import OutMessage
from gateway.core.properties import ATTEMPT, BORN_MS, DEAD_AT, DEAD_REASON, ORIGIN_TOPIC
from gateway.engine.admin_move import DEAD_LETTER, READY, _imported
from gateway.engine.api import Copy

T0 = 1_700_000_000_000


def test_an_imported_copy_keeps_its_first_publish_time() -> None:
    props = {BORN_MS: str(T0), DEAD_REASON: "max-retries", DEAD_AT: str(T0 + 9),
             ATTEMPT: "7", ORIGIN_TOPIC: "elsewhere", "app": "v"}
    for part in (READY, DEAD_LETTER):
        copy = _imported(Copy("k", part, OutMessage(b"b", props)), "orders", "g", {})
        assert copy.properties[BORN_MS] == str(T0)
        assert copy.properties["app"] == "v" and ATTEMPT not in copy.properties
    assert ORIGIN_TOPIC not in _imported(Copy("k", READY, OutMessage(b"b", props)),
                                         "orders", "g", {}).properties
