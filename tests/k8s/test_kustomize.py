"""The renderer on small kustomizations written for each test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from .kustomize import KustomizeError, render

DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web"},
    "spec": {
        "replicas": 2,
        "template": {
            "spec": {
                "initContainers": [{"name": "side", "image": "side"}],
                "containers": [{"name": "main", "image": "registry.local:5000/main:1"}],
            }
        },
    },
}


def _write(directory: Path, files: dict[str, object]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        text = content if isinstance(content, str) else yaml.safe_dump(content)
        (directory / name).write_text(text)
    return directory


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return _write(
        tmp_path / "base",
        {
            "kustomization.yaml": {
                "resources": ["deploy.yaml"],
                "configMapGenerator": [
                    {
                        "name": "conf",
                        "files": ["app.toml"],
                        "literals": ["MODE=a"],
                        "options": {"disableNameSuffixHash": True, "labels": {"x": "y"}},
                    }
                ],
            },
            "deploy.yaml": DEPLOYMENT,
            "app.toml": "a = 1\n",
        },
    )


def _overlay(tmp_path: Path, kustomization: dict[str, object], **files: object) -> Path:
    return _write(
        tmp_path / "overlay",
        {"kustomization.yaml": {"resources": ["../base"], **kustomization}, **files},
    )


def _get(resources: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [r for r in resources if r["kind"] == kind]
    return found


def test_base_renders_resources_and_generated_config_map(base: Path) -> None:
    resources = render(base)
    assert _get(resources, "Deployment") == DEPLOYMENT
    assert _get(resources, "ConfigMap") == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "conf", "labels": {"x": "y"}},
        "data": {"app.toml": "a = 1\n", "MODE": "a"},
    }


def test_generator_merge_and_replace(base: Path, tmp_path: Path) -> None:
    options = {"disableNameSuffixHash": True}
    merged = _overlay(
        tmp_path,
        {
            "configMapGenerator": [
                {"name": "conf", "behavior": "merge", "files": ["app.toml"], "options": options}
            ]
        },
        **{"app.toml": "a = 2\n"},
    )
    assert _get(render(merged), "ConfigMap")["data"] == {"app.toml": "a = 2\n", "MODE": "a"}
    replaced = _overlay(
        tmp_path,
        {
            "configMapGenerator": [
                {"name": "conf", "behavior": "replace", "literals": ["K=v"], "options": options}
            ]
        },
    )
    assert _get(render(replaced), "ConfigMap")["data"] == {"K": "v"}


def test_generator_create_over_an_existing_map_fails(base: Path, tmp_path: Path) -> None:
    overlay = _overlay(
        tmp_path,
        {
            "configMapGenerator": [
                {"name": "conf", "literals": ["K=v"], "options": {"disableNameSuffixHash": True}}
            ]
        },
    )
    with pytest.raises(KustomizeError, match="already exists"):
        render(overlay)


def test_generator_with_a_hashed_name_is_refused(base: Path, tmp_path: Path) -> None:
    overlay = _overlay(tmp_path, {"configMapGenerator": [{"name": "other", "literals": ["K=v"]}]})
    with pytest.raises(KustomizeError, match="disableNameSuffixHash"):
        render(overlay)


def test_strategic_merge_patch_from_a_file(base: Path, tmp_path: Path) -> None:
    patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"tier": "x"}},
        "spec": {
            "replicas": 1,
            "template": {"spec": {"initContainers": [{"name": "side", "restartPolicy": "Always"}]}},
        },
    }
    overlay = _overlay(tmp_path, {"patches": [{"path": "p.yaml"}]}, **{"p.yaml": patch})
    deployment = _get(render(overlay), "Deployment")
    assert deployment["metadata"] == {"name": "web", "labels": {"tier": "x"}}
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["template"]["spec"]["initContainers"] == [
        {"name": "side", "image": "side", "restartPolicy": "Always"}
    ]


def test_json6902_patch_needs_and_uses_its_target(base: Path, tmp_path: Path) -> None:
    ops = yaml.safe_dump([{"op": "replace", "path": "/spec/replicas", "value": 5}])
    without = _overlay(tmp_path, {"patches": [{"patch": ops}]})
    with pytest.raises(KustomizeError, match="target"):
        render(without)
    target = {"group": "apps", "version": "v1", "kind": "Deployment", "name": "w.b"}
    overlay = _overlay(tmp_path, {"patches": [{"patch": ops, "target": target}]})
    assert _get(render(overlay), "Deployment")["spec"]["replicas"] == 5


def test_patch_matching_nothing_fails(base: Path, tmp_path: Path) -> None:
    ops = yaml.safe_dump([{"op": "replace", "path": "/spec/replicas", "value": 5}])
    overlay = _overlay(
        tmp_path, {"patches": [{"patch": ops, "target": {"kind": "Deployment", "name": "we"}}]}
    )
    with pytest.raises(KustomizeError, match="matches no resource"):
        render(overlay)


def test_images_rewrite_name_and_tag_in_all_containers(base: Path, tmp_path: Path) -> None:
    overlay = _overlay(
        tmp_path,
        {
            "images": [
                {"name": "side", "newName": "ghcr.io/o/side", "newTag": "2"},
                {"name": "registry.local:5000/main", "digest": "sha256:abc"},
            ]
        },
    )
    pod = _get(render(overlay), "Deployment")["spec"]["template"]["spec"]
    assert pod["initContainers"][0]["image"] == "ghcr.io/o/side:2"
    assert pod["containers"][0]["image"] == "registry.local:5000/main@sha256:abc"


@pytest.mark.parametrize(
    "field", [{"namePrefix": "x-"}, {"commonLabels": {"a": "b"}}, {"replicas": []}]
)
def test_unsupported_fields_fail_loudly(
    base: Path, tmp_path: Path, field: dict[str, object]
) -> None:
    with pytest.raises(KustomizeError, match="unsupported"):
        render(_overlay(tmp_path, field))


def test_duplicate_resources_fail(base: Path, tmp_path: Path) -> None:
    overlay = _overlay(tmp_path, {"resources": ["../base", "d.yaml"]}, **{"d.yaml": DEPLOYMENT})
    with pytest.raises(KustomizeError, match="defined twice"):
        render(overlay)
