"""The overlays are rendered by the real `kubectl kustomize`, offline, and its errors surface."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .kubectl import kubectl, kustomize, offline_env
from .manifests import TARGETS, find, rendered, target_dir


def test_kubectl_is_the_wheels_binary_with_kustomize() -> None:
    done = subprocess.run([kubectl(), "version", "--client"], capture_output=True, text=True,
                          env=offline_env(), timeout=60, check=True)
    assert "Client Version: v1." in done.stdout
    assert "Kustomize Version: v5." in done.stdout


@pytest.mark.parametrize("target", TARGETS)
def test_every_target_renders_offline(target: str) -> None:
    resources = rendered(target)
    names = {(r["kind"], r["metadata"]["name"]) for r in resources}
    assert ("ConfigMap", "gateway-config") in names, "no name hash: the pod mounts it by name"
    assert ("Deployment", "example-app") in names
    for container in find(resources, "Deployment")["spec"]["template"]["spec"]["initContainers"]:
        assert container["image"].startswith("ghcr.io/example/retry-gateway:"), "images: applied"


# Overlays that build on another overlay (which builds on the base) instead of the base itself.
ON_OVERLAY = {"replicas": "../rabbitmq"}


def test_overlays_build_on_the_base() -> None:
    for target in TARGETS[1:]:
        parent = ON_OVERLAY.get(target, "../../base")
        assert parent in (target_dir(target) / "kustomization.yaml").read_text()


def test_a_broken_kustomization_fails_with_kubectls_message(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources:\n  - missing.yaml\n"
    )
    with pytest.raises(RuntimeError, match=r"missing\.yaml"):
        kustomize(tmp_path)
