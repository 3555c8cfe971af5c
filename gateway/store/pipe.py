"""Framing between the store and its writer process: an 8-byte little-endian length, then a
pickle. Both ends are this package's own code over a private socket pair."""

from __future__ import annotations

import pickle
import struct

HEADER = struct.Struct("<Q")


def frame(obj: object) -> bytes:
    """One frame holding `obj`."""
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


class FrameBuffer:
    """Bytes as they arrive in, whole frames' objects out."""

    def __init__(self) -> None:
        self._data = bytearray()

    def feed(self, data: bytes) -> None:
        self._data += data

    def pending(self) -> int:
        """Bytes received but not yet taken as frames."""
        return len(self._data)

    def frames(self) -> list[object]:
        """Every whole frame received so far, in order (a partial one stays buffered)."""
        out: list[object] = []
        data = self._data
        at = 0
        with memoryview(data) as view:
            while len(data) - at >= HEADER.size:
                (size,) = HEADER.unpack_from(data, at)
                end = at + HEADER.size + size
                if len(data) < end:
                    break
                out.append(pickle.loads(view[at + HEADER.size:end]))
                at = end
        if at:
            del data[:at]
        return out
