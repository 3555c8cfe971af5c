"""The unmodified Node.js clients of `tests/node` (versions pinned in its package-lock.json):
npm installs them there the first time a test needs one; without node and npm the test is
skipped and says so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parent / "node"


def node_script(package: str, script: str) -> Path:
    """`tests/node/SCRIPT`, with the npm `package` it drives installed."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip(f"node and npm are not installed: {package} cannot run")
    if not (NODE_DIR / "node_modules" / package).exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=NODE_DIR, check=True, timeout=300)
    return NODE_DIR / script
