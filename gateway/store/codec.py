"""How the store keeps a message's properties (JSON text) and hands a message row out."""

from __future__ import annotations

import json
from collections.abc import Mapping

from gateway.backend.base import Lease, StoredMessage
from gateway.store import guard
from gateway.store.index import GroupIndex
from gateway.store.reader import Row

_escape = json.encoder.encode_basestring_ascii


def props_json(properties: Mapping[str, str]) -> str:
    """`json.dumps(properties)` for a dict of strings, without building an encoder per call."""
    try:
        return "{" + ", ".join([f"{_escape(k)}: {_escape(v)}" for k, v in properties.items()]) + "}"
    except TypeError:  # not all strings
        guard.check_properties(properties)
        raise


def props(text: str) -> Mapping[str, str]:
    """The properties kept as `text` by `props_json`."""
    if text == "{}":
        return {}
    loaded: dict[str, str] = json.loads(text)
    return loaded


def stored(group: GroupIndex, row: Row, token: str) -> StoredMessage:
    """`row` as `group` gets it, under the lease `token` ("" for a peek)."""
    return StoredMessage(
        lease=Lease(group.topic.name, group.name, row.pos, token),
        message_id=row.message_id,
        topic=group.topic.name,
        body=row.body,
        properties=props(row.props),
        key=row.key,
        tag=row.tag,
        publish_ms=row.publish_ms,
        deliver_at_ms=row.deliver_at_ms,
        attempt=row.attempt,
        retries=row.retries,
    )
