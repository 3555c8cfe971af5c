"""Every product setting still loads from the TOML file, `GATEWAY_<KEY>` and its flag, as before
the products declared their own settings (issue 17): same keys, same names, same errors."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import serve_cmd
from gateway.errors import InvalidArgument
from gateway.server.config import ServeConfig, load

TOML = """
[server]
pulsar_listen = "127.0.0.1:6651"
pulsar_advertised = "pulsar://gw:6651"

[rabbitmq]
url = "amqp://u:p@rabbit:5672/"

[pulsar]
service_url = "pulsar://broker:6650"
token = "tok"

[rocketmq]
access_key = "AK"
secret_key = "SK"
advertised = "gw:8081"
fifo_groups = ["g1", "g2"]
"""
EXPECTED = {
    "pulsar_listen": "127.0.0.1:6651",
    "pulsar_advertised": "pulsar://gw:6651",
    "rabbitmq_url": "amqp://u:p@rabbit:5672/",
    "pulsar_service_url": "pulsar://broker:6650",
    "pulsar_token": "tok",
    "rocketmq_access_key": "AK",
    "rocketmq_secret_key": "SK",
    "rocketmq_advertised": "gw:8081",
    "rocketmq_fifo_groups": ("g1", "g2"),
}
DEFAULTS = {
    "pulsar_listen": "",
    "pulsar_advertised": "",
    "rabbitmq_url": "amqp://guest:guest@127.0.0.1:5672/",
    "pulsar_service_url": "",
    "pulsar_token": "",
    "rocketmq_access_key": "",
    "rocketmq_secret_key": "",
    "rocketmq_advertised": "",
    "rocketmq_fifo_groups": (),
}


def flat(config: ServeConfig, key: str) -> Any:
    return config.value(key)


def test_product_keys_load_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(TOML)
    config = load(str(path), env={})
    assert {key: flat(config, key) for key in EXPECTED} == EXPECTED


def test_product_keys_default_as_before() -> None:
    config = load(env={})
    assert {key: flat(config, key) for key in DEFAULTS} == DEFAULTS


def test_product_keys_load_from_the_environment() -> None:
    env = {f"GATEWAY_{key.upper()}": value for key, value in EXPECTED.items()}
    env["GATEWAY_ROCKETMQ_FIFO_GROUPS"] = " g1, g2 ,"
    config = load(env=env)
    assert {key: flat(config, key) for key in EXPECTED} == EXPECTED


def test_product_flags_parse_and_win_over_file_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(TOML)
    parser = argparse.ArgumentParser(prog="gateway")
    serve_cmd.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([
        "serve", "--config", str(path), "--pulsar-listen", "127.0.0.1:7000",
        "--rabbitmq-url", "amqp://flag/", "--pulsar-service-url", "pulsar://flag:6650",
        "--backend", "pulsar",
    ])
    flags = {name: getattr(args, name) for name in serve_cmd.FLAGS}
    config = load(args.config, env={"GATEWAY_RABBITMQ_URL": "amqp://env/"}, flags=flags)
    assert flat(config, "pulsar_listen") == "127.0.0.1:7000"
    assert flat(config, "rabbitmq_url") == "amqp://flag/"
    assert flat(config, "pulsar_service_url") == "pulsar://flag:6650"
    assert flat(config, "pulsar_token") == "tok"
    assert config.backend == "pulsar"


@pytest.mark.parametrize(("text", "field", "allowed"), [
    ("[pulsar]\nurl = 'x'\n", "pulsar.url", "keys service_url, token"),
    ("[rabbitmq]\nhost = 'x'\n", "rabbitmq.host", "keys start_wait_s, url"),
    ("[rocketmq]\nfifo = []\n", "rocketmq.fifo",
     "keys access_key, advertised, fifo_groups, secret_key"),
    ("[server]\nrocketmq_advertised = 'x'\n", "server.rocketmq_advertised", "pulsar_listen"),
    ("[kafka]\nurl = 'x'\n", "config",
     "sections server, store, amqp, rabbitmq, pulsar, rocketmq, auth"),
    ("[rocketmq]\nfifo_groups = 'g1'\n", "rocketmq.fifo_groups", "a list of group names"),
    ("[rocketmq]\nfifo_groups = [1]\n", "rocketmq.fifo_groups", "a list of group names"),
])
def test_unknown_and_malformed_product_keys_are_refused(
    tmp_path: Path, text: str, field: str, allowed: str
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    with pytest.raises(InvalidArgument) as raised:
        load(str(path), env={})
    assert raised.value.field == field
    assert allowed in raised.value.allowed


def test_unknown_backend_names_every_installed_one() -> None:
    with pytest.raises(InvalidArgument) as raised:
        load(env={"GATEWAY_BACKEND": "kafka"})
    assert raised.value.field == "GATEWAY_BACKEND"  # the variable the user set (issue 22)
    assert raised.value.allowed == "one of embedded, rabbitmq, pulsar"


def test_a_remote_product_listener_needs_auth() -> None:
    with pytest.raises(InvalidArgument) as raised:
        load(env={"GATEWAY_PULSAR_LISTEN": "0.0.0.0:6650"})
    assert raised.value.field == "GATEWAY_PULSAR_LISTEN"  # the variable the user set
    config = load(env={"GATEWAY_PULSAR_LISTEN": "0.0.0.0:6650",
                       "GATEWAY_ALLOW_REMOTE_UNAUTHENTICATED": "true"})
    assert flat(config, "pulsar_listen") == "0.0.0.0:6650"


@pytest.mark.parametrize(("text", "field", "allowed"), [
    ("[amqp]\nmax_topology_mb = 0\n", "amqp_max_topology_mb", "1..65536 MiB"),
    ("[amqp]\nmax_topology_mb = 8\nmax_topology_mb_per_connection = 9\n",
     "amqp_max_topology_mb_per_connection", "1..8 MiB (amqp_max_topology_mb)"),
    ("[amqp]\nmax_pending_publish_mb = 0\n", "amqp_max_pending_publish_mb", "1..65536 MiB"),
])
def test_amqp_topology_budgets_out_of_range_are_refused(tmp_path: Path, text: str, field: str,
                                                         allowed: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    with pytest.raises(InvalidArgument) as raised:
        load(str(path), env={})
    assert (raised.value.field, raised.value.allowed) == (field, allowed)


def test_amqp_topology_budgets_load_from_the_file_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text("[amqp]\nmax_topology_mb = 512\n")
    config = load(str(path), env={"GATEWAY_AMQP_MAX_TOPOLOGY_MB_PER_CONNECTION": "64"})
    assert (flat(config, "amqp_max_topology_mb"),
            flat(config, "amqp_max_topology_mb_per_connection")) == (512, 64)
    assert (flat(load(env={}), "amqp_max_topology_mb"),
            flat(load(env={}), "amqp_max_topology_mb_per_connection")) == (128, 32)
    path.write_text("[amqp]\nmax_pending_publish_mb = 100\n")
    assert flat(load(str(path), env={}), "amqp_max_pending_publish_mb") == 100
    assert flat(load(env={}), "amqp_max_pending_publish_mb") == 256


@pytest.mark.parametrize(("text", "field", "allowed"), [
    ("[rocketmq]\ntransaction_check_first_s = 9\n", "rocketmq_transaction_check_first_s",
     "10..43200 s"),
    ("[rocketmq]\ntransaction_check_interval_s = 43201\n",
     "rocketmq_transaction_check_interval_s", "10..43200 s"),
    ("[rocketmq]\ntransaction_check_interval_s = -60\n",
     "rocketmq_transaction_check_interval_s", "10..43200 s"),
    ("[rocketmq]\ntransaction_check_max = 0\n", "rocketmq_transaction_check_max", "1..1000"),
    ("[rocketmq]\ntransaction_check_max = 1001\n", "rocketmq_transaction_check_max", "1..1000"),
])
def test_rocketmq_transaction_checks_out_of_range_are_refused(
    tmp_path: Path, text: str, field: str, allowed: str
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    with pytest.raises(InvalidArgument) as raised:
        load(str(path), env={})
    assert (raised.value.field, raised.value.allowed) == (field, allowed)


def test_rocketmq_transaction_checks_reach_the_front_end(tmp_path: Path) -> None:
    """The three check settings of the file (or the environment) are the checker's times."""
    pytest.importorskip("rocketmq.grpc_protocol")
    from adapters.rocketmq.frontend.settings import CheckTimes
    from adapters.rocketmq.product import PRODUCT

    path = tmp_path / "gateway.toml"
    path.write_text("[rocketmq]\ntransaction_check_first_s = 30\n"
                    "transaction_check_interval_s = 120\n")
    config = load(str(path), env={"GATEWAY_ROCKETMQ_TRANSACTION_CHECK_MAX": "3"})
    section = config.section(PRODUCT)
    times = PRODUCT._settings(_NoAuthHost(), section).transaction_check
    assert times == CheckTimes(first_ms=30_000, interval_ms=120_000, max_checks=3)
    default = PRODUCT._settings(_NoAuthHost(), load(env={}).section(PRODUCT))
    assert default.transaction_check == CheckTimes()  # 10 s, 60 s, 15 checks: a broker's


class _NoAuthHost:
    authorizer = None
