"""The `replicas` overlay: several gateways on one RabbitMQ (README "Several gateways on one
broker"), checked on its rendering by the real `kubectl kustomize` against the rabbitmq
overlay it builds on. The generic checks (schema, probes, grace rule, security, docs) run on it
through `manifests.OVERLAYS`."""

from __future__ import annotations

from .manifests import find, gateway_config, gateway_container, rendered, serve_config


def test_it_runs_three_gateways_spread_over_nodes() -> None:
    deployment = find(rendered("replicas"), "Deployment")
    assert deployment["spec"]["replicas"] == 3
    (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["maxSkew"] == 1
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert spread["labelSelector"]["matchLabels"].items() <= labels.items()


def test_every_gateway_uses_the_one_broker_of_the_rabbitmq_overlay() -> None:
    replicas, rabbitmq = rendered("replicas"), rendered("rabbitmq")
    assert gateway_container(replicas) == gateway_container(rabbitmq)
    assert gateway_config(replicas) == gateway_config(rabbitmq)
    config = serve_config(replicas)
    assert config.backend == "rabbitmq"
    assert config.value("rabbitmq_url") == "secret:gateway-rabbitmq/url"


def test_a_drain_stops_one_gateway_at_a_time_and_updates_roll() -> None:
    resources = rendered("replicas")
    budget = find(resources, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    strategy = find(resources, "Deployment")["spec"]["strategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0


def test_nothing_else_differs_from_the_rabbitmq_overlay() -> None:
    replicas, rabbitmq = rendered("replicas"), rendered("rabbitmq")
    for resources in (replicas, rabbitmq):
        spec = find(resources, "Deployment")["spec"]
        spec.pop("replicas")
        spec["template"]["spec"].pop("topologySpreadConstraints", None)
    assert replicas == rabbitmq
