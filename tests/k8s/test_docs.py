"""docs/kubernetes.md matches the manifests: commands, Secrets, the grace rule."""

from __future__ import annotations

import re

import pytest

from .manifests import GRACE_MARGIN_S, OVERLAYS, REPO, pod_spec, rendered

DOC = REPO / "docs" / "kubernetes.md"


def _secret_keys(target: str) -> set[tuple[str, str]]:
    """(Secret, key) pairs the rendered pod reads, from env and from volumes."""
    spec = pod_spec(rendered(target))
    pairs = set()
    for container in spec["initContainers"] + spec["containers"]:
        for entry in container.get("env", []):
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                pairs.add((ref["name"], ref["key"]))
    for volume in spec["volumes"]:
        secret = volume.get("secret")
        if secret:
            pairs |= {(secret["secretName"], item["key"]) for item in secret["items"]}
    return pairs


def _documented_secret_keys(text: str) -> set[tuple[str, str]]:
    """(Secret, key) pairs that the doc's `kubectl create secret generic` commands create."""
    joined = text.replace("\\\n", " ")
    pairs = set()
    for match in re.finditer(r"kubectl create secret generic (\S+)([^\n]*)", joined):
        for key in re.findall(r"--from-(?:literal|file)=([\w.-]+)=", match[2]):
            pairs.add((match[1], key))
    return pairs


def test_doc_finds_secret_commands() -> None:
    sample = "kubectl create secret generic s \\\n  --from-file=a=./a \\\n  --from-literal=b=x\n"
    assert _documented_secret_keys(sample) == {("s", "a"), ("s", "b")}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_doc_shows_how_to_apply_each_overlay(overlay: str) -> None:
    assert f"kubectl apply -k k8s/overlays/{overlay}" in DOC.read_text()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_doc_creates_every_secret_key_the_overlay_reads(overlay: str) -> None:
    needed = _secret_keys(overlay)
    assert needed, "every overlay reads at least the tokens Secret"
    assert needed <= _documented_secret_keys(DOC.read_text())


def test_doc_states_the_grace_rule_and_the_drain_order() -> None:
    text = DOC.read_text()
    assert f"terminationGracePeriodSeconds = grace_s + {GRACE_MARGIN_S}" in text
    steps = ["NOT_SERVING", "no new deliveries", "accepts settles", "flushes the store", "status 0"]
    positions = [text.find(step) for step in steps]
    assert -1 not in positions, dict(zip(steps, positions, strict=True))
    assert positions == sorted(positions)


def test_doc_says_the_dockerfile_is_not_built_by_the_tests() -> None:
    assert "Dockerfile is not built by the tests" in DOC.read_text()
