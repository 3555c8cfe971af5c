"""Strategic merge patches and JSON 6902 patches, as kustomize applies them to resources.

Only what the manifests in k8s/ need, with the semantics of the Kubernetes API:

* strategic merge: maps merge key by key, a null value deletes the key, lists of the kinds named
  in `MERGE_KEYS` merge item by item on their merge key (an item with `$patch: delete` removes the
  matching item), every other list is replaced whole;
* JSON 6902 (RFC 6902): add, remove, replace, move, copy and test on JSON pointers (RFC 6901).

Anything outside that subset raises `PatchError` rather than being guessed at.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

Json = Any

# patchMergeKey of the list fields the manifests patch (from the Kubernetes API types).
MERGE_KEYS: Mapping[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
}
# `ports` merges on containerPort in a container and on port in a Service.
PORT_MERGE_KEYS = ("containerPort", "port")


class PatchError(ValueError):
    """A patch that cannot be applied, or uses a feature outside the supported subset."""


def strategic_merge(original: Json, patch: Json) -> Json:
    """Return `original` with the strategic merge `patch` applied (neither is modified)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if "$patch" in patch:
        directive = patch["$patch"]
        if directive == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
        raise PatchError(f"unsupported $patch directive on a map: {directive!r}")
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            raise PatchError(f"unsupported strategic merge directive: {key}")
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = strategic_merge(result.get(key), value)
    return result


def _merge_key(field: str, items: list[Json]) -> str | None:
    if field in MERGE_KEYS:
        return MERGE_KEYS[field]
    if field == "ports":
        for candidate in PORT_MERGE_KEYS:
            if items and all(isinstance(i, dict) and candidate in i for i in items):
                return candidate
        raise PatchError("ports items need a containerPort or port to merge on")
    return None


def _merge_list(field: str, original: Json, patch: list[Json]) -> list[Json]:
    current = list(original) if isinstance(original, list) else []
    key = _merge_key(field, current + patch)
    if key is None:
        return copy.deepcopy(patch)
    merged = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"item of {field} lacks its merge key {key}: {item!r}")
        index = next((i for i, old in enumerate(merged) if old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
            continue
        if index is None:
            merged.append(strategic_merge({}, item))
        else:
            merged[index] = strategic_merge(merged[index], item)
    return merged


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Json], token: str, *, for_insert: bool) -> int:
    if token == "-" and for_insert:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"bad list index {token!r}")
    index = int(token)
    limit = len(container) if for_insert else len(container) - 1
    if index > limit:
        raise PatchError(f"list index {index} out of range")
    return index


def _parent(doc: Json, tokens: list[str]) -> Json:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"path segment {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_insert=False)]
        else:
            raise PatchError(f"cannot descend into a scalar at {token!r}")
    return node


def _get(doc: Json, path: str) -> Json:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"{path} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_insert=False)]
    raise PatchError(f"{path} does not exist")


def _add(doc: Json, path: str, value: Json) -> Json:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_insert=True), value)
    else:
        raise PatchError(f"cannot add under a scalar at {path}")
    return doc


def _remove(doc: Json, path: str) -> Json:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    _get(doc, path)
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        del parent[tokens[-1]]
    else:
        del parent[_index(parent, tokens[-1], for_insert=False)]
    return doc


def json6902(original: Json, operations: list[Json]) -> Json:
    """Return `original` with the RFC 6902 `operations` applied (the original is not modified)."""
    doc = copy.deepcopy(original)
    for operation in operations:
        if not isinstance(operation, dict):
            raise PatchError(f"operation must be a map: {operation!r}")
        op, path = operation.get("op"), operation.get("path")
        if not isinstance(path, str):
            raise PatchError(f"operation without a path: {operation!r}")
        if op in ("add", "replace", "test") and "value" not in operation:
            raise PatchError(f"{op} without a value: {operation!r}")
        if op == "add":
            doc = _add(doc, path, copy.deepcopy(operation["value"]))
        elif op == "remove":
            doc = _remove(doc, path)
        elif op == "replace":
            doc = _add(_remove(doc, path), path, copy.deepcopy(operation["value"]))
        elif op in ("move", "copy"):
            source = operation.get("from")
            if not isinstance(source, str):
                raise PatchError(f"{op} without a from: {operation!r}")
            value = copy.deepcopy(_get(doc, source))
            if op == "move":
                doc = _remove(doc, source)
            doc = _add(doc, path, value)
        elif op == "test":
            if _get(doc, path) != operation["value"]:
                raise PatchError(f"test failed at {path}: expected {operation['value']!r}")
        else:
            raise PatchError(f"unknown JSON patch operation {op!r}")
    return doc
