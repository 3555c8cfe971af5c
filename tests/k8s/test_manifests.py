"""What every rendering (base and overlays) must keep: the sidecar shape, probes, security."""

from __future__ import annotations

import pytest

from .manifests import (
    GATEWAY_PORT,
    GRACE_MARGIN_S,
    PENDING_FLAGS,
    TARGETS,
    find,
    gateway_config,
    gateway_container,
    pod_spec,
    rendered,
    serve_arguments,
    serve_config,
    volume,
)

# The documented keys of gateway.toml: a misspelt key would silently be ignored or rejected.
CONFIG_KEYS = {
    "server": {"listen", "max_message_bytes", "grace_s", "max_held_mb", "max_unacked_mb"},
    "store": {"backend", "data_dir", "cache_mb"},
    "rabbitmq": {"url"},
    "pulsar": {"service_url", "token"},
    "auth": {"tokens_file", "principals"},
}
PRINCIPAL_KEYS = {"name", "publish", "consume", "groups", "admin"}
RUN_AS_USER = 10001

targets = pytest.mark.parametrize("target", TARGETS)


@targets
def test_gateway_is_a_native_sidecar(target: str) -> None:
    resources = rendered(target)
    gateway = gateway_container(resources)
    assert gateway["restartPolicy"] == "Always"
    assert gateway not in pod_spec(resources)["containers"]
    assert gateway["args"][0] == "serve"
    ports = {p["containerPort"] for p in gateway["ports"]}
    assert GATEWAY_PORT in ports


@targets
def test_application_dials_the_gateway_on_localhost(target: str) -> None:
    app = find(rendered(target), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in app["env"]}
    assert env["RETRY_GATEWAY_TARGET"]["value"] == f"localhost:{GATEWAY_PORT}"


@targets
@pytest.mark.parametrize("probe", ["startupProbe", "readinessProbe", "livenessProbe"])
def test_probes_use_grpc_health_on_the_gateway_port(target: str, probe: str) -> None:
    spec = gateway_container(rendered(target))[probe]
    expected = {"port": GATEWAY_PORT}
    if probe == "livenessProbe":
        # The gateway's always-SERVING name: a broker outage must not restart the sidecar.
        expected["service"] = "liveness"
    assert spec["grpc"] == expected, "grpc.health.v1 on the gateway port"
    for other in ("httpGet", "tcpSocket", "exec"):
        assert other not in spec


@targets
def test_gateway_listens_where_the_kubelet_probes(target: str) -> None:
    listen = gateway_config(rendered(target))["server"]["listen"]
    host, _, port = listen.rpartition(":")
    assert int(port) == GATEWAY_PORT
    assert host in ("0.0.0.0", "[::]"), "probes connect to the pod IP, not to localhost"


@targets
def test_startup_probe_allows_a_slow_store_recovery(target: str) -> None:
    startup = gateway_container(rendered(target))["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60


@targets
def test_liveness_outlasts_a_short_backend_outage_and_the_drain(target: str) -> None:
    resources = rendered(target)
    liveness = gateway_container(resources)["livenessProbe"]
    patience_s = liveness["periodSeconds"] * liveness["failureThreshold"]
    assert patience_s >= 60
    assert patience_s > serve_config(resources).grace_s


@targets
def test_every_container_has_requests_and_limits(target: str) -> None:
    spec = pod_spec(rendered(target))
    for container in spec["initContainers"] + spec["containers"]:
        resources = container["resources"]
        for section in ("requests", "limits"):
            assert set(resources[section]) == {"cpu", "memory"}, container["name"]


@targets
def test_security_context_is_restrictive(target: str) -> None:
    spec = pod_spec(rendered(target))
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True
    assert pod["runAsUser"] == RUN_AS_USER
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    for container in spec["initContainers"] + spec["containers"]:
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True, container["name"]
        assert isinstance(context["runAsUser"], int) and context["runAsUser"] > 0
        assert context["runAsUser"] == RUN_AS_USER
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}


@targets
def test_tmp_is_an_empty_dir_in_every_container(target: str) -> None:
    resources = rendered(target)
    spec = pod_spec(resources)
    for container in spec["initContainers"] + spec["containers"]:
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert "emptyDir" in volume(resources, mounts["/tmp"]), container["name"]


@targets
def test_gateway_data_dir_is_a_writable_volume(target: str) -> None:
    resources = rendered(target)
    data_dir = gateway_config(resources)["store"]["data_dir"]
    mounts = {m["mountPath"]: m for m in gateway_container(resources)["volumeMounts"]}
    assert data_dir in mounts
    assert not mounts[data_dir].get("readOnly", False)


@targets
def test_termination_grace_covers_the_gateway_grace(target: str) -> None:
    resources = rendered(target)
    grace_s = serve_config(resources).grace_s
    assert grace_s > 0 and grace_s == int(grace_s)
    tgps = pod_spec(resources)["terminationGracePeriodSeconds"]
    assert tgps == int(grace_s) + GRACE_MARGIN_S


def test_grace_rule_sees_the_environment_and_flags() -> None:
    resources = rendered("base")
    assert serve_config(resources).grace_s == 20
    gateway_container(resources)["env"] = [{"name": "GATEWAY_GRACE_S", "value": "40"}]
    assert serve_config(resources).grace_s == 40
    gateway_container(resources)["args"] += ["--grace-s", "50"]
    assert serve_config(resources).grace_s == 50


@targets
def test_sidecar_args_are_understood_by_gateway_serve(target: str) -> None:
    namespace, unknown = serve_arguments(rendered(target))
    assert namespace.command == "serve"
    pending = [arg for arg in unknown if arg.startswith("-")]
    assert set(pending) <= PENDING_FLAGS
    assert len(unknown) == 2 * len(pending), f"stray arguments {unknown}"


@targets
def test_gateway_loads_its_config_as_mounted(target: str) -> None:
    resources = rendered(target)
    config = serve_config(resources)
    assert config.listen == f"0.0.0.0:{GATEWAY_PORT}"
    mounts = {m["mountPath"] for m in gateway_container(resources)["volumeMounts"]}
    assert config.data_dir in mounts


@targets
def test_gateway_config_uses_only_known_keys(target: str) -> None:
    config = gateway_config(rendered(target))
    assert set(config) <= set(CONFIG_KEYS)
    for section, values in config.items():
        assert set(values) <= CONFIG_KEYS[section], section
    for principal in config["auth"]["principals"]:
        assert set(principal) <= PRINCIPAL_KEYS
        assert principal["admin"] is False, "the application needs no admin rights"


@targets
def test_tokens_file_is_mounted_from_a_secret(target: str) -> None:
    resources = rendered(target)
    tokens_file = gateway_config(resources)["auth"]["tokens_file"]
    directory, _, file_name = tokens_file.rpartition("/")
    mounts = {m["mountPath"]: m for m in gateway_container(resources)["volumeMounts"]}
    assert mounts[directory]["readOnly"] is True
    secret = volume(resources, mounts[directory]["name"])["secret"]
    assert file_name in {item["path"] for item in secret["items"]}
    assert secret["defaultMode"] == 0o440


@targets
def test_metrics_service_targets_the_admin_port(target: str) -> None:
    resources = rendered(target)
    service = find(resources, "Service")
    gateway = gateway_container(resources)
    args = gateway["args"]
    admin_port = int(args[args.index("--admin-listen") + 1].rpartition(":")[2])
    named = {p["name"]: p["containerPort"] for p in gateway["ports"]}
    (port,) = service["spec"]["ports"]
    assert named[port["targetPort"]] == admin_port
    labels = find(resources, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


@targets
def test_disruption_budget_selects_the_pods_and_allows_drains(target: str) -> None:
    resources = rendered(target)
    budget = find(resources, "PodDisruptionBudget")["spec"]
    deployment = find(resources, "Deployment")["spec"]
    assert budget["selector"] == deployment["selector"]
    assert budget["maxUnavailable"] == 1
    assert "minAvailable" not in budget


@targets
def test_network_policy_keeps_other_pods_off_the_gateway_port(target: str) -> None:
    resources = rendered(target)
    policy = find(resources, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    labels = find(resources, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    spec = pod_spec(resources)
    named = {
        p["name"]: p["containerPort"]
        for c in spec["initContainers"] + spec["containers"]
        for p in c.get("ports", [])
    }
    allowed = {named.get(p["port"], p["port"]) for rule in policy["ingress"] for p in rule["ports"]}
    assert GATEWAY_PORT not in allowed
    assert allowed == {8080, 9464}


@targets
def test_gateway_image_is_set_by_the_images_transformer(target: str) -> None:
    image = gateway_container(rendered(target))["image"]
    assert image == "ghcr.io/example/retry-gateway:0.1.0"


@targets
def test_store_cache_fits_the_memory_limit(target: str) -> None:
    """The store's in-memory tail plus the gateway's own ~90 MiB and its store writer
    process's ~35 MiB stay under the limit."""
    resources = rendered(target)
    config = serve_config(resources)
    limit = gateway_container(resources)["resources"]["limits"]["memory"]
    assert limit.endswith("Mi")
    assert config.cache_mb + 90 + 35 < int(limit[:-2]) * 0.75
