"""Small state files of the Pulsar front end (reader positions, schemas), written whole."""

from __future__ import annotations

import os
from pathlib import Path


def replace_durably(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file: fsynced, renamed over it, and the
    rename itself fsynced (after a crash the file is the old one or the new one, whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    with temporary.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
