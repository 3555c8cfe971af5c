"""The patch semantics the renderer relies on, on small documents."""

from __future__ import annotations

from typing import Any

import pytest

from .patching import PatchError, json6902, strategic_merge

POD: dict[str, Any] = {
    "spec": {
        "initContainers": [
            {"name": "gateway", "image": "g:1", "env": [{"name": "A", "value": "1"}]}
        ],
        "containers": [{"name": "app", "image": "a:1", "args": ["x", "y"]}],
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
    }
}


def test_maps_merge_and_null_deletes() -> None:
    merged = strategic_merge({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": None, "e": 4}, "f": 5})
    assert merged == {"a": 1, "b": {"d": 3, "e": 4}, "f": 5}


def test_named_lists_merge_item_by_item() -> None:
    patch = {"spec": {"volumes": [{"name": "data", "emptyDir": None, "hostPath": {"path": "/d"}}]}}
    merged = strategic_merge(POD, patch)
    assert merged["spec"]["volumes"] == [
        {"name": "data", "hostPath": {"path": "/d"}},
        {"name": "tmp", "emptyDir": {}},
    ]
    assert POD["spec"]["volumes"][0] == {"name": "data", "emptyDir": {}}, "original untouched"


def test_nested_named_lists_merge_and_new_items_append() -> None:
    patch = {
        "spec": {"initContainers": [{"name": "gateway", "env": [{"name": "B", "value": "2"}]}]}
    }
    gateway = strategic_merge(POD, patch)["spec"]["initContainers"][0]
    assert gateway["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert gateway["image"] == "g:1"


def test_delete_directive_removes_a_list_item() -> None:
    patch = {"spec": {"volumes": [{"name": "tmp", "$patch": "delete"}]}}
    assert strategic_merge(POD, patch)["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]


def test_plain_lists_are_replaced() -> None:
    patch = {"spec": {"containers": [{"name": "app", "args": ["z"]}]}}
    assert strategic_merge(POD, patch)["spec"]["containers"][0]["args"] == ["z"]


def test_ports_merge_on_container_port_or_service_port() -> None:
    container = {"ports": [{"containerPort": 1, "name": "a"}, {"containerPort": 2, "name": "b"}]}
    merged = strategic_merge(container, {"ports": [{"containerPort": 2, "name": "c"}]})
    assert merged["ports"] == [{"containerPort": 1, "name": "a"}, {"containerPort": 2, "name": "c"}]
    service = {"ports": [{"port": 80, "targetPort": 8080}]}
    merged = strategic_merge(service, {"ports": [{"port": 80, "targetPort": 9090}]})
    assert merged["ports"] == [{"port": 80, "targetPort": 9090}]


def test_items_without_their_merge_key_are_rejected() -> None:
    with pytest.raises(PatchError, match="merge key"):
        strategic_merge(POD, {"spec": {"volumes": [{"emptyDir": {}}]}})


def test_unsupported_directives_are_rejected() -> None:
    with pytest.raises(PatchError):
        strategic_merge(POD, {"spec": {"$setElementOrder/volumes": [{"name": "tmp"}]}})


def test_json6902_add_replace_remove() -> None:
    patched = json6902(
        POD,
        [
            {"op": "add", "path": "/spec/initContainers/0/env/-", "value": {"name": "B"}},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "a:2"},
            {"op": "remove", "path": "/spec/volumes/1"},
            {"op": "add", "path": "/spec/containers/0/args/0", "value": "w"},
        ],
    )
    assert patched["spec"]["initContainers"][0]["env"][-1] == {"name": "B"}
    assert patched["spec"]["containers"][0] == {
        "name": "app",
        "image": "a:2",
        "args": ["w", "x", "y"],
    }
    assert patched["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert POD["spec"]["containers"][0]["image"] == "a:1", "original untouched"


def test_json6902_move_copy_and_escaped_pointers() -> None:
    doc = {"metadata": {"annotations": {"a/b": "1", "c~d": "2"}}}
    patched = json6902(
        doc,
        [
            {"op": "copy", "from": "/metadata/annotations/a~1b", "path": "/metadata/x"},
            {"op": "move", "from": "/metadata/annotations/c~0d", "path": "/metadata/y"},
        ],
    )
    assert patched == {"metadata": {"annotations": {"a/b": "1"}, "x": "1", "y": "2"}}


def test_json6902_test_operation_guards_the_patch() -> None:
    ops = [{"op": "test", "path": "/spec/initContainers/0/name", "value": "other"}]
    with pytest.raises(PatchError, match="test failed"):
        json6902(POD, ops)


@pytest.mark.parametrize(
    "operation",
    [
        {"op": "remove", "path": "/spec/missing"},
        {"op": "replace", "path": "/spec/volumes/5", "value": {}},
        {"op": "add", "path": "/spec/missing/child", "value": 1},
        {"op": "add", "path": "spec", "value": 1},
        {"op": "add", "path": "/spec/volumes/01", "value": {}},
        {"op": "add", "path": "/spec/volumes/-"},
        {"op": "frobnicate", "path": "/spec"},
    ],
)
def test_json6902_rejects_bad_operations(operation: dict[str, object]) -> None:
    with pytest.raises(PatchError):
        json6902(POD, [operation])
