"""What each overlay changes, checked on its rendering against the base."""

from __future__ import annotations

from typing import Any

from .manifests import (
    OVERLAYS,
    env_map,
    find,
    gateway_config,
    gateway_container,
    rendered,
    serve_config,
    volume,
)


def _secret_ref(container: dict[str, Any], name: str) -> tuple[str, str]:
    entry = env_map(container)[name]
    assert "value" not in entry, f"{name} must come from a Secret, not a literal"
    ref = entry["valueFrom"]["secretKeyRef"]
    assert ref.get("optional", False) is False
    return ref["name"], ref["key"]


def test_base_keeps_the_embedded_store_on_an_empty_dir() -> None:
    resources = rendered("base")
    assert gateway_config(resources)["store"]["backend"] == "embedded"
    assert "emptyDir" in volume(resources, "gateway-data")
    assert "env" not in gateway_container(resources)


def test_embedded_overlay_puts_the_store_on_a_claim() -> None:
    resources = rendered("embedded")
    data = volume(resources, "gateway-data")
    assert set(data) == {"name", "persistentVolumeClaim"}, "the emptyDir must be gone"
    claim = find(resources, "PersistentVolumeClaim")
    assert data["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    config = gateway_config(resources)
    assert config["store"]["backend"] == "embedded"
    assert config["store"]["data_dir"] == "/var/lib/gateway"
    mounts = {m["name"]: m["mountPath"] for m in gateway_container(resources)["volumeMounts"]}
    assert mounts["gateway-data"] == config["store"]["data_dir"]


def test_embedded_overlay_runs_one_pod_and_recreates_it() -> None:
    spec = find(rendered("embedded"), "Deployment")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}, "rollingUpdate must be removed"


def test_embedded_overlay_leaves_the_rest_of_the_pod_alone() -> None:
    base, embedded = rendered("base"), rendered("embedded")
    assert gateway_container(base) == gateway_container(embedded)
    assert volume(base, "tmp") == volume(embedded, "tmp")
    assert find(base, "ConfigMap") == find(embedded, "ConfigMap")


def test_rabbitmq_overlay_selects_the_rabbitmq_backend() -> None:
    resources = rendered("rabbitmq")
    config = gateway_config(resources)
    assert config["store"]["backend"] == "rabbitmq"
    assert "url" not in config.get("rabbitmq", {}), "credentials never go into the ConfigMap"
    assert find(resources, "ConfigMap")["metadata"]["name"] == "gateway-config"


def test_rabbitmq_overlay_reads_the_broker_url_from_a_secret() -> None:
    resources = rendered("rabbitmq")
    gateway = gateway_container(resources)
    assert _secret_ref(gateway, "GATEWAY_RABBITMQ_URL") == ("gateway-rabbitmq", "url")
    assert set(env_map(gateway)) == {"GATEWAY_RABBITMQ_URL"}
    app = find(resources, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "GATEWAY_RABBITMQ_URL" not in env_map(app), "only the sidecar sees the broker"


def test_pulsar_overlay_selects_the_pulsar_backend() -> None:
    config = gateway_config(rendered("pulsar"))
    assert config["store"]["backend"] == "pulsar"
    assert not {"service_url", "token"} & set(config.get("pulsar", {}))


def test_pulsar_overlay_reads_url_and_token_from_secrets() -> None:
    gateway = gateway_container(rendered("pulsar"))
    assert _secret_ref(gateway, "GATEWAY_PULSAR_SERVICE_URL") == ("gateway-pulsar", "service-url")
    assert _secret_ref(gateway, "GATEWAY_PULSAR_TOKEN") == ("gateway-pulsar", "token")
    assert set(env_map(gateway)) == {"GATEWAY_PULSAR_SERVICE_URL", "GATEWAY_PULSAR_TOKEN"}


def test_broker_overlays_keep_the_base_pod_shape() -> None:
    base = gateway_container(rendered("base"))
    for overlay in ("rabbitmq", "pulsar"):
        gateway = dict(gateway_container(rendered(overlay)))
        gateway.pop("env")
        assert gateway == base, overlay
        assert find(rendered(overlay), "Deployment")["spec"]["replicas"] == 2


def test_overlays_keep_server_and_auth_settings_of_the_base() -> None:
    base = gateway_config(rendered("base"))
    for overlay in OVERLAYS:
        config = gateway_config(rendered(overlay))
        assert config["server"] == base["server"], overlay
        assert config["auth"] == base["auth"], overlay
        assert serve_config(rendered(overlay)).grace_s == base["server"]["grace_s"]


def test_gateway_loads_the_backend_and_secrets_of_each_overlay() -> None:
    base = serve_config(rendered("base"))
    assert (base.backend, base.data_dir) == ("embedded", "/var/lib/gateway")
    embedded = serve_config(rendered("embedded"))
    assert embedded == base
    rabbitmq = serve_config(rendered("rabbitmq"))
    assert rabbitmq.backend == "rabbitmq"
    assert rabbitmq.value("rabbitmq_url") == "secret:gateway-rabbitmq/url"
    pulsar = serve_config(rendered("pulsar"))
    assert pulsar.backend == "pulsar"
    assert pulsar.value("pulsar_service_url") == "secret:gateway-pulsar/service-url"
    assert pulsar.value("pulsar_token") == "secret:gateway-pulsar/token"
