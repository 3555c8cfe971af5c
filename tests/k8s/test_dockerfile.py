"""The Dockerfile's structure, checked by reading it (no Docker engine where the tests run)."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field

from .manifests import CONFIG_PATH, GATEWAY_PORT, REPO, gateway_container, pod_spec, rendered

BASE_IMAGE = "python:3.11-slim"


@dataclass
class Stage:
    """One build stage: its FROM line and its instructions in order."""

    image: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Split a Dockerfile into stages of (INSTRUCTION, arguments), joining continued lines."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "dangling line continuation"
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args, re.I)
            assert match, f"bad FROM: {line}"
            stages.append(Stage(image=match[1], name=match[2] or str(len(stages))))
        elif keyword != "ARG" or stages:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, args.strip()))
    return stages


def _stages() -> list[Stage]:
    return parse_dockerfile((REPO / "Dockerfile").read_text())


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def test_parser_joins_continuations_and_splits_stages() -> None:
    stages = parse_dockerfile(
        "# c\nARG X=1\nFROM a:1 AS one\nRUN echo \\\n  hi\n# note\nFROM b AS two\nUSER 5\n"
    )
    assert [(s.image, s.name) for s in stages] == [("a:1", "one"), ("b", "two")]
    assert stages[0].instructions == [("RUN", "echo  hi")]
    assert stages[1].all("USER") == ["5"]


def test_builder_stage_builds_wheels_from_python_slim() -> None:
    builder, *_ = _stages()
    assert (builder.image, builder.name) == (BASE_IMAGE, "builder")
    assert any("pip wheel" in run for run in builder.all("RUN"))


def test_runtime_stage_is_slim_and_installs_the_builders_wheels() -> None:
    stages = _stages()
    assert len(stages) >= 2
    runtime = stages[-1]
    assert runtime.image == BASE_IMAGE
    assert runtime.name != "builder"
    installs = [run for run in runtime.all("RUN") if "pip install" in run]
    assert len(installs) == 1
    assert "from=builder" in installs[0] or runtime.all("COPY")
    assert "--no-index" in installs[0], "the runtime installs only the built wheels"
    assert not any("pip wheel" in run or "apt-get" in run for run in runtime.all("RUN"))


def test_runtime_runs_as_a_numeric_non_root_user_matching_the_manifests() -> None:
    runtime = _stages()[-1]
    users = runtime.all("USER")
    assert users, "the runtime stage must set USER"
    user = users[-1]
    assert re.fullmatch(r"\d+(:\d+)?", user), "USER must be numeric for runAsNonRoot"
    uid = int(user.partition(":")[0])
    assert uid != 0
    last_user = max(i for i, (kw, _) in enumerate(runtime.instructions) if kw == "USER")
    assert all(kw != "RUN" for kw, _ in runtime.instructions[last_user:])
    assert any(f"--uid {uid}" in run for run in runtime.all("RUN")), "create the user"
    for target in ("base", "embedded"):
        assert pod_spec(rendered(target))["securityContext"]["runAsUser"] == uid


def test_entrypoint_and_cmd_run_the_gateway_with_the_mounted_config() -> None:
    runtime = _stages()[-1]
    (entrypoint,) = runtime.all("ENTRYPOINT")
    (cmd,) = runtime.all("CMD")
    assert _exec_form(entrypoint) == ["gateway"]
    assert _exec_form(cmd) == ["serve", "--config", CONFIG_PATH]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "gateway" in pyproject["project"]["scripts"]
    args = gateway_container(rendered("base"))["args"]
    assert args[:3] == _exec_form(cmd), "the sidecar's args extend the image's CMD"


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


def test_extras_baked_into_the_image_exist() -> None:
    stages = _stages()
    optional = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for stage in stages:
        (extras,) = [a for a in stage.all("ARG") if a.startswith("EXTRAS=")]
        names = extras.partition("=")[2].split(",")
        assert {"rabbitmq", "pulsar"} <= set(names), "both broker back ends"
        assert set(names) <= set(optional)
        assert "telemetry" not in names, "Spark stays out of the sidecar image"
