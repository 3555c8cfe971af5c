"""A small kustomize: renders a kustomization directory into its list of resources offline.

kustomize is not available where the tests run, so this renders the subset of the
Kustomization format that k8s/ uses, the way `kubectl kustomize` does:

* `resources`: YAML files (one or more documents) and directories holding a kustomization;
* `configMapGenerator`: `files` and `literals`, `behavior` create, merge or replace, and
  `options` (labels, annotations; `disableNameSuffixHash` must be true, as content hashes are
  not computed here);
* `patches`: from `path` or inline `patch`, a strategic merge patch (a map) or a JSON 6902 patch
  (a list, which needs a `target`); `target` selects by group, version, kind and name (a regex);
* `images`: `newName`, `newTag` and `digest` for matching containers and init containers.

Any other field raises `KustomizeError`, so a manifest change that relies on something this
renderer does not do fails the tests instead of being rendered wrongly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from .patching import json6902, strategic_merge

Resource = dict[str, Any]

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = frozenset(
    {"apiVersion", "kind", "resources", "configMapGenerator", "patches", "images"}
)
SUPPORTED_GENERATOR_OPTIONS = frozenset({"disableNameSuffixHash", "labels", "annotations"})
WORKLOAD_KINDS = frozenset(
    {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}
)


class KustomizeError(ValueError):
    """A kustomization that is invalid or uses a feature this renderer does not implement."""


def kustomization_file(directory: Path) -> Path:
    """Return the kustomization file of `directory`."""
    for name in KUSTOMIZATION_FILES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    raise KustomizeError(f"no kustomization file in {directory}")


def load_kustomization(directory: Path) -> dict[str, Any]:
    """Load and check the kustomization of `directory`."""
    data = yaml.safe_load(kustomization_file(directory).read_text())
    if not isinstance(data, dict):
        raise KustomizeError(f"{directory}: kustomization is not a map")
    unknown = set(data) - SUPPORTED_FIELDS
    if unknown:
        raise KustomizeError(f"{directory}: unsupported kustomization fields {sorted(unknown)}")
    if data.get("kind", "Kustomization") != "Kustomization":
        raise KustomizeError(f"{directory}: kind must be Kustomization")
    return data


def load_documents(path: Path) -> list[Resource]:
    """Return the non-empty YAML documents of `path`."""
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "metadata" not in doc:
            raise KustomizeError(f"{path}: not a Kubernetes resource: {doc!r}")
    return docs


def resource_id(resource: Resource) -> tuple[str, str, str]:
    """Identify a resource the way kustomize does: apiVersion group, kind and name."""
    group = resource["apiVersion"].rpartition("/")[0]
    return group, resource["kind"], resource["metadata"]["name"]


def render(directory: Path) -> list[Resource]:
    """Render the kustomization in `directory` into its resources."""
    directory = directory.resolve()
    kustomization = load_kustomization(directory)
    resources: list[Resource] = []
    for entry in kustomization.get("resources", []):
        target = (directory / entry).resolve()
        loaded = render(target) if target.is_dir() else load_documents(target)
        _extend_unique(resources, loaded, directory)
    for generator in kustomization.get("configMapGenerator", []):
        _apply_config_map_generator(resources, generator, directory)
    for patch in kustomization.get("patches", []):
        _apply_patch(resources, patch, directory)
    for image in kustomization.get("images", []):
        _apply_image(resources, image)
    return resources


def _extend_unique(resources: list[Resource], new: Iterable[Resource], where: Path) -> None:
    seen = {resource_id(r) for r in resources}
    for resource in new:
        rid = resource_id(resource)
        if rid in seen:
            raise KustomizeError(f"{where}: resource {rid} defined twice")
        seen.add(rid)
        resources.append(resource)


def _generated_data(generator: dict[str, Any], directory: Path) -> dict[str, str]:
    data: dict[str, str] = {}
    for entry in generator.get("files", []):
        key, _, source = entry.partition("=") if "=" in entry else ("", "", entry)
        data[key or Path(source).name] = (directory / source).read_text()
    for literal in generator.get("literals", []):
        key, sep, value = literal.partition("=")
        if not sep:
            raise KustomizeError(f"literal without '=': {literal!r}")
        data[key] = value
    unknown = set(generator) - {"name", "behavior", "files", "literals", "options"}
    if unknown:
        raise KustomizeError(f"unsupported configMapGenerator fields {sorted(unknown)}")
    return data


def _apply_config_map_generator(
    resources: list[Resource], generator: dict[str, Any], directory: Path
) -> None:
    options = generator.get("options", {})
    unknown = set(options) - SUPPORTED_GENERATOR_OPTIONS
    if unknown:
        raise KustomizeError(f"unsupported generator options {sorted(unknown)}")
    if options.get("disableNameSuffixHash") is not True:
        raise KustomizeError("configMapGenerator needs disableNameSuffixHash: true here")
    name = generator["name"]
    data = _generated_data(generator, directory)
    behavior = generator.get("behavior", "create")
    existing = next((r for r in resources if resource_id(r) == ("", "ConfigMap", name)), None)
    if behavior == "create":
        if existing is not None:
            raise KustomizeError(f"ConfigMap {name} already exists; use behavior merge")
        metadata: dict[str, Any] = {"name": name}
        for field in ("labels", "annotations"):
            if field in options:
                metadata[field] = dict(options[field])
        resources.append(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
        )
        return
    if existing is None:
        raise KustomizeError(f"ConfigMap {name} to {behavior} does not exist")
    if behavior == "merge":
        existing["data"] = {**existing.get("data", {}), **data}
    elif behavior == "replace":
        existing["data"] = data
    else:
        raise KustomizeError(f"unknown generator behavior {behavior!r}")
    for field in ("labels", "annotations"):
        if field in options:
            existing["metadata"].setdefault(field, {}).update(options[field])


def _matches(resource: Resource, target: dict[str, Any]) -> bool:
    unknown = set(target) - {"group", "version", "kind", "name"}
    if unknown:
        raise KustomizeError(f"unsupported patch target fields {sorted(unknown)}")
    group, _, version = resource["apiVersion"].rpartition("/")
    wanted = {"group": group, "version": version, "kind": resource["kind"]}
    if any(field in target and target[field] != wanted[field] for field in wanted):
        return False
    return "name" not in target or bool(re.fullmatch(target["name"], resource["metadata"]["name"]))


def _apply_patch(resources: list[Resource], entry: dict[str, Any], directory: Path) -> None:
    unknown = set(entry) - {"path", "patch", "target"}
    if unknown or ("path" in entry) == ("patch" in entry):
        raise KustomizeError(f"a patch needs exactly one of path and patch: {entry!r}")
    text = (directory / entry["path"]).read_text() if "path" in entry else entry["patch"]
    body = yaml.safe_load(text)
    target = entry.get("target")
    if isinstance(body, dict) and target is None:
        group, _, version = body["apiVersion"].rpartition("/")
        target = {
            "group": group,
            "version": version,
            "kind": body["kind"],
            "name": re.escape(body["metadata"]["name"]),
        }
    if not isinstance(body, (dict, list)):
        raise KustomizeError(f"patch is neither a map nor a list: {entry!r}")
    if target is None:
        raise KustomizeError("a JSON 6902 patch needs a target")
    selected = [i for i, r in enumerate(resources) if _matches(r, target)]
    if not selected:
        raise KustomizeError(f"patch {entry!r} matches no resource")
    for index in selected:
        if isinstance(body, list):
            resources[index] = json6902(resources[index], body)
        else:
            resources[index] = strategic_merge(resources[index], _merge_body(body))


def _merge_body(patch: Resource) -> Resource:
    """The part of a strategic merge patch that is merged: not its identity fields."""
    body = {k: v for k, v in patch.items() if k not in ("apiVersion", "kind")}
    body["metadata"] = {k: v for k, v in patch.get("metadata", {}).items() if k != "name"}
    return body


def _pod_spec(resource: Resource) -> dict[str, Any] | None:
    kind = resource["kind"]
    if kind not in WORKLOAD_KINDS:
        return None
    spec: dict[str, Any] = resource.get("spec", {})
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
    pod: dict[str, Any] = spec.get("template", {}).get("spec", {})
    return pod


def _split_image(image: str) -> tuple[str, str]:
    """Split an image reference into its name and its ':tag' or '@digest' suffix."""
    if "@" in image:
        name, _, digest = image.partition("@")
        return name, "@" + digest
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon:]
    return image, ""


def _apply_image(resources: list[Resource], image: dict[str, Any]) -> None:
    unknown = set(image) - {"name", "newName", "newTag", "digest"}
    if unknown:
        raise KustomizeError(f"unsupported images fields {sorted(unknown)}")
    for resource in resources:
        pod = _pod_spec(resource)
        if pod is None:
            continue
        for field in ("initContainers", "containers"):
            for container in pod.get(field, []):
                name, suffix = _split_image(container["image"])
                if name != image["name"]:
                    continue
                if "digest" in image:
                    suffix = "@" + image["digest"]
                elif "newTag" in image:
                    suffix = ":" + str(image["newTag"])
                container["image"] = image.get("newName", name) + suffix
