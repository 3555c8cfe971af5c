"""Access to the rendered manifests of k8s/ for the tests: the base, the overlays, their parts."""

from __future__ import annotations

import argparse
import copy
import functools
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from gateway.cli import serve_cmd
from gateway.server.config import ServeConfig, load

from .kubectl import Resource, kustomize

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
BASE = K8S / "base"
OVERLAYS = ("embedded", "rabbitmq", "pulsar", "replicas")
TARGETS = ("base", *OVERLAYS)

GATEWAY_CONTAINER = "gateway"
GATEWAY_PORT = 50051
CONFIG_PATH = "/etc/gateway/gateway.toml"
# terminationGracePeriodSeconds = grace_s + GRACE_MARGIN_S (the rule in k8s/base/deployment.yaml).
GRACE_MARGIN_S = 15


def target_dir(target: str) -> Path:
    """The kustomization directory of "base" or of an overlay name."""
    return BASE if target == "base" else K8S / "overlays" / target


@functools.cache
def _rendered(target: str) -> tuple[Resource, ...]:
    return tuple(kustomize(target_dir(target)))


def rendered(target: str) -> list[Resource]:
    """The rendered resources of `target`: a private copy the caller may modify."""
    return copy.deepcopy(list(_rendered(target)))


def find(resources: list[Resource], kind: str, name: str | None = None) -> Resource:
    """The one resource of `kind` (and `name`, if given)."""
    found = [
        r
        for r in resources
        if r["kind"] == kind and (name is None or r["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(resources: list[Resource]) -> dict[str, Any]:
    """The pod spec of the example Deployment."""
    spec: dict[str, Any] = find(resources, "Deployment")["spec"]["template"]["spec"]
    return spec


def gateway_container(resources: list[Resource]) -> dict[str, Any]:
    """The gateway sidecar's container spec."""
    matches = [
        c for c in pod_spec(resources).get("initContainers", []) if c["name"] == GATEWAY_CONTAINER
    ]
    assert len(matches) == 1, "the gateway must be exactly one init container"
    container: dict[str, Any] = matches[0]
    return container


def env_map(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A container's environment variables by name."""
    return {item["name"]: item for item in container.get("env", [])}


def volume(resources: list[Resource], name: str) -> dict[str, Any]:
    """The pod volume called `name`."""
    matches = [v for v in pod_spec(resources).get("volumes", []) if v["name"] == name]
    assert len(matches) == 1, f"expected one volume {name}"
    found: dict[str, Any] = matches[0]
    return found


def config_file_volume(resources: list[Resource]) -> tuple[str, str]:
    """The ConfigMap name and key mounted at the gateway's --config path."""
    container = gateway_container(resources)
    args = container.get("args", [])
    assert args[args.index("--config") + 1] == CONFIG_PATH
    mounts = [m for m in container["volumeMounts"] if m["mountPath"] == CONFIG_PATH]
    assert len(mounts) == 1, f"nothing mounted at {CONFIG_PATH}"
    source = volume(resources, mounts[0]["name"])
    return source["configMap"]["name"], mounts[0]["subPath"]


def gateway_config(resources: list[Resource]) -> dict[str, Any]:
    """The gateway.toml the sidecar reads, parsed."""
    name, key = config_file_volume(resources)
    config_map = find(resources, "ConfigMap", name)
    return tomllib.loads(config_map["data"][key])


# Flags the manifests pass that `gateway serve` does not parse yet: the admin (metrics) listener
# of issue 9. Remove an entry as soon as the serve command accepts it.
PENDING_FLAGS: frozenset[str] = frozenset()


def serve_arguments(resources: list[Resource]) -> tuple[argparse.Namespace, list[str]]:
    """The sidecar's args parsed by the real `gateway serve` parser: (namespace, unparsed)."""
    parser = argparse.ArgumentParser(prog="gateway")
    serve_cmd.add_parser(parser.add_subparsers(dest="command", required=True))
    namespace, unknown = parser.parse_known_args(gateway_container(resources)["args"])
    return namespace, unknown


def pod_environment(resources: list[Resource]) -> dict[str, str]:
    """The sidecar's environment, with each Secret value replaced by "secret:NAME/KEY"."""
    env: dict[str, str] = {}
    for name, entry in env_map(gateway_container(resources)).items():
        if "value" in entry:
            env[name] = entry["value"]
        else:
            ref = entry["valueFrom"]["secretKeyRef"]
            env[name] = f"secret:{ref['name']}/{ref['key']}"
    return env


def serve_config(resources: list[Resource]) -> ServeConfig:
    """The configuration `gateway serve` loads in the pod: ConfigMap file, environment, flags."""
    namespace, _ = serve_arguments(resources)
    assert namespace.config == CONFIG_PATH
    flags = {name: getattr(namespace, name) for name in serve_cmd.FLAGS}
    name, key = config_file_volume(resources)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / key
        path.write_text(find(resources, "ConfigMap", name)["data"][key])
        return load(str(path), env=pod_environment(resources), flags=flags)
