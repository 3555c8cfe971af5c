"""The product seam (issue 17): products are found through entry points, import without their
optional dependencies, name the extra to install when asked for something that needs it, and a
product the gateway has never heard of plugs in with its settings, front end and principal
fields."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import grpc
import pytest
from structlog.testing import capture_logs

from gateway.core.registry import Registry
from gateway.errors import InvalidArgument
from gateway.product import (
    ENTRY_POINT_GROUP,
    FrontEnd,
    Host,
    OptionFlag,
    Product,
    build_registry,
    installed,
    setting,
)
from gateway.server.app import GatewayApp
from gateway.server.config import load
from gateway.server.principals import load_principals

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(path.parent.name for path in ROOT.glob("adapters/*/product.py"))
"""Every product package in the tree: each must be registered (pyproject.toml entry point)."""
OPTIONAL = ("pulsar", "_pulsar", "crc32c", "aio_pika", "aiormq", "pamqp", "rocketmq")
"""Top-level modules of the products' optional dependencies."""
BLOCKER = """
import sys
BLOCKED = set(sys.argv[1].split(","))

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
sys.argv = sys.argv[1:]
"""


def _python(code: str, blocked: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter where the `blocked` modules are not installed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code), ",".join(blocked), *args],
        capture_output=True, text=True, timeout=60, env=env, cwd=ROOT, check=False,
    )


def test_every_product_is_found_through_its_entry_point() -> None:
    points = {p.name: p for p in entry_points(group=ENTRY_POINT_GROUP)}
    assert sorted(points) == PACKAGES, "one line per product package in pyproject.toml " \
        "(then reinstall: entry points are read from the installed metadata)"
    for product in installed():
        assert points[product.name].load() is product
        assert points[product.name].value == f"adapters.{product.name}.product:PRODUCT"
    assert [p.name for p in installed()] == PACKAGES


def test_the_registry_of_the_products_is_the_builtin_one() -> None:
    from adapters import builtin_registry

    ours, builtin = build_registry(installed()), builtin_registry()
    assert sorted(ours.policies) == sorted(builtin.policies) == [
        "pulsar", "pulsar-nack", "rabbitmq", "rocketmq", "rocketmq-http", "rocketmq-orderly",
        "rocketmq-simple"]
    assert sorted(ours.schemes) == sorted(builtin.schemes)
    assert sorted(ours.dialects) == ["pulsar", "rabbitmq", "rocketmq"]


def test_products_import_and_configure_without_their_optional_dependencies() -> None:
    run = _python("""
        import argparse
        from gateway.product import installed
        from gateway.server.config import load
        from gateway.cli import main
        from adapters import builtin_registry
        names = [p.name for p in installed()]
        assert names == sys.argv[1].split(","), names
        assert "rocketmq-simple" in builtin_registry().policies
        config = load(env={"GATEWAY_PULSAR_LISTEN": "127.0.0.1:6650"})
        assert config.value("pulsar_listen") == "127.0.0.1:6650"
        assert main(["plan", "--policy", "pulsar", "--limit", "2"]) == 0
        for blocked in ("pulsar", "crc32c", "aio_pika", "rocketmq"):
            assert blocked not in sys.modules, blocked
        print("ok")
    """, OPTIONAL, ",".join(PACKAGES))
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip().endswith("ok")


SERVE = """
    from gateway.cli import main
    raise SystemExit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(("args", "blocked", "sentence"), [
    (["--backend", "pulsar"], ("pulsar", "_pulsar"),
     "the pulsar back end needs pulsar-client: pip install 'retry-gateway[pulsar]'"),
    (["--backend", "rabbitmq"], ("aio_pika", "aiormq"),
     "the rabbitmq back end needs aio-pika and aiormq: pip install 'retry-gateway[rabbitmq]'"),
    (["--pulsar-listen", "127.0.0.1:0"], ("crc32c",),
     "the pulsar front end needs crc32c: pip install 'retry-gateway[pulsar]'"),
])
def test_a_missing_extra_is_one_sentence_and_exit_2(
    tmp_path: Path, args: list[str], blocked: tuple[str, ...], sentence: str
) -> None:
    run = _python(SERVE, blocked, "serve", "--data-dir", str(tmp_path), "--listen",
                  "127.0.0.1:0", "--grace-s", "0", *args)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == f"gateway: error: {sentence}"
    assert "Traceback" not in run.stderr


async def test_without_the_rocketmq_sdk_the_gateway_serves_on_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.server.app import running_gateway

    monkeypatch.setitem(sys.modules, "rocketmq.grpc_protocol", None)
    with capture_logs() as logs:
        async with running_gateway(tmp_path) as app:
            assert app.front_ends == {}
    assert {"event": "rocketmq front end not available: install retry-gateway[rocketmq]",
            "log_level": "info"} in logs


def test_principals_carry_the_fields_products_declare(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text('[[principal]]\nname = "a"\ntoken = "t"\nrocketmq_access_key = "AK"\n'
                      'rocketmq_secret_key = "SK"\n'
                      '[[principal]]\nname = "b"\ntoken = "u"\n')
    fields = [f for p in installed() for f in p.principal_fields]
    assert fields == ["rocketmq_access_key", "rocketmq_secret_key"]
    a, b = load_principals(tokens, (), fields)
    assert (a.extra("rocketmq_access_key"), a.extra("rocketmq_secret_key")) == ("AK", "SK")
    assert a.extra("other") == "" and b.extra("rocketmq_access_key") == ""
    # A key neither the gateway nor a product declares is refused by name (it was ignored).
    tokens.write_text('[[principal]]\nname = "a"\ntoken = "t"\nother = "x"\n')
    with pytest.raises(InvalidArgument, match=r"principal\[a\]\.other"):
        load_principals(tokens, (), fields)


# A product the gateway has never heard of: settings, flags of its own, a front end.


@dataclass(frozen=True, slots=True)
class DemoConfig:
    demo_listen: str = setting("", toml="server.demo_listen", flag="--demo-listen",
                               listener=True)
    demo_level: int = setting(3, toml="demo.level")
    demo_groups: tuple[str, ...] = setting((), toml="demo.groups", allowed="group names")


class DemoFrontEnd:
    def __init__(self, host: Host, config: DemoConfig) -> None:
        self.host, self.config = host, config
        self.calls: list[str] = []

    def mount(self, server: grpc.aio.Server) -> tuple[str, ...]:
        self.calls.append("mount")
        return ()

    async def start(self) -> None:
        self.calls.append("start")

    async def stop(self) -> None:
        self.calls.append("stop")


class Demo(Product[DemoConfig]):
    name = "demo"
    extra = "demo"
    config_type = DemoConfig
    principal_fields = ("demo_key",)
    plan_flags = (OptionFlag("--demo-x", "x"),)

    def register(self, registry: Registry) -> None:
        pass

    def front_end(self, host: Host, config: DemoConfig) -> FrontEnd | None:
        if not config.demo_listen:
            return None
        host.listener("demo_listen", config.demo_listen)
        return DemoFrontEnd(host, config)


PRODUCTS = (*installed(), Demo())


def test_a_new_product_brings_its_settings(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[server]\ndemo_listen = "127.0.0.1:0"\n[demo]\nlevel = 7\n'
                    'groups = ["a", "b"]\n')
    config = load(str(path), env={"GATEWAY_DEMO_LEVEL": "9"}, products=PRODUCTS)
    assert config.section(Demo()) == DemoConfig("127.0.0.1:0", 9, ("a", "b"))
    assert config.value("demo_level") == 9
    path.write_text("[demo]\ncolour = 'red'\n")
    with pytest.raises(InvalidArgument) as raised:
        load(str(path), env={}, products=PRODUCTS)
    assert (raised.value.field, raised.value.allowed) == ("demo.colour", "keys groups, level")
    path.write_text("[demo]\ngroups = 'a'\n")
    with pytest.raises(InvalidArgument, match="group names"):
        load(str(path), env={}, products=PRODUCTS)
    with pytest.raises(InvalidArgument, match="loopback"):
        load(env={"GATEWAY_DEMO_LISTEN": "0.0.0.0:1"}, products=PRODUCTS)
    assert load(env={}, products=installed()).section(Demo()) == DemoConfig()


async def test_a_new_product_front_end_is_driven_by_the_composition_root(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text('[[principal]]\nname = "p"\ntoken = "t"\ndemo_key = "k"\n')
    config = load(env={}, products=PRODUCTS, flags={
        "listen": "127.0.0.1:0", "data_dir": str(tmp_path / "data"), "grace_s": 0,
        "demo_listen": "127.0.0.1:0", "tokens_file": str(tokens)})
    app = GatewayApp(config, products=PRODUCTS)
    await app.start()
    front: Any = app.front_ends["demo"]
    try:
        assert front.calls == ["mount", "start"]
        assert front.host.engine is app.engine
        assert front.host.authorizer is app.authorizer is not None
        (principal,) = app.authorizer.by_digest.values()
        assert principal.extra("demo_key") == "k"
        assert list(app.front_ends) == ["rocketmq", "demo"]
    finally:
        await app.stop(0)
    assert front.calls == ["mount", "start", "stop"]
