"""Every manifest of the base and every rendered overlay is valid for a current Kubernetes."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
from kubernetes_validate.utils import all_versions

from .kubectl import load_documents, load_kustomization
from .manifests import BASE, TARGETS, find, rendered

# The newest release whose schemas kubernetes-validate ships (1.37.0 in kubernetes-validate
# 1.37.0). Strict schemas reject unknown fields, so a misspelt key fails too.
KUBERNETES_VERSION = "1.37.0"


def _validate(resource: dict[str, object]) -> str:
    validated: str = kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
    return validated


def test_schema_version_is_the_newest_shipped() -> None:
    assert all_versions()[-1] == KUBERNETES_VERSION


def test_every_base_manifest_file_is_valid() -> None:
    files = load_kustomization(BASE)["resources"]
    assert files, "the base lists no resources"
    for name in files:
        docs = load_documents(BASE / name)
        assert docs, f"{name} holds no resource"
        for doc in docs:
            assert _validate(doc) == "1.37", name


@pytest.mark.parametrize("target", TARGETS)
def test_every_rendered_resource_is_valid(target: str) -> None:
    resources = rendered(target)
    kinds = {r["kind"] for r in resources}
    assert {"Deployment", "ConfigMap", "Service", "PodDisruptionBudget"} <= kinds
    for resource in resources:
        assert _validate(resource) == "1.37", (target, resource["kind"])


def test_validation_rejects_a_misspelt_field() -> None:
    deployment = copy.deepcopy(find(rendered("base"), "Deployment"))
    deployment["spec"]["template"]["spec"]["initContainers"][0]["restartPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(deployment)


def test_validation_rejects_a_probe_port_of_the_wrong_type() -> None:
    deployment = copy.deepcopy(find(rendered("base"), "Deployment"))
    deployment["spec"]["template"]["spec"]["initContainers"][0]["readinessProbe"]["grpc"][
        "port"
    ] = "grpc"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(deployment)
