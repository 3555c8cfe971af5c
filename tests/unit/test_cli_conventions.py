"""CLI conventions (issue 22): --version, help for every flag with its default, environment
variable errors that name the variable, the telemetry commands without their extra, and the
right program name in `export --help`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import gateway
from gateway.cli import main, parser

ROOT = Path(__file__).resolve().parents[2]
TELEMETRY = ("pyspark", "deltalake", "pyarrow", "matplotlib")
"""Top-level modules of the telemetry extra."""
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
from gateway.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def _gateway(*args: str, blocked: tuple[str, ...] = (), env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    """`gateway ARGS` in a fresh interpreter where the `blocked` modules are not installed."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), environ.get("PYTHONPATH", "")) if p)
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(BLOCKER), ",".join(blocked) or "-", *args],
        capture_output=True, text=True, timeout=120, env=environ, cwd=ROOT, check=False,
    )


def test_version_is_the_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["--version"])
    assert ended.value.code == 0
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out.strip() == f"gateway (retry-gateway) {pyproject}"
    assert gateway.__version__ == pyproject


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    for action in parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def _nested(prefix: str, p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """`p` and every subcommand under it, at any depth, by its whole command line."""
    found = {prefix: p}
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(_nested(f"{prefix} {name}", sub))
    return found


def _flags(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction)]


def test_every_flag_of_every_subcommand_has_help_with_its_default() -> None:
    subcommands = _subcommands()
    assert {"plan", "serve", "report", "export", "topics", "dlq"} <= set(subcommands)
    everything = _nested("gateway", parser())
    assert {"gateway dlq list", "gateway migrate copy", "gateway migrate rename"} <= set(everything)
    for name, sub in everything.items():
        for action in _flags(sub):
            where = f"{name} {action.option_strings[0]}"
            assert action.help, f"{where}: no help"
            if action.default not in (None, "", False, [], (), argparse.SUPPRESS) and not (
                    action.required):
                assert "default" in action.help, f"{where}: default {action.default!r} unsaid"


def test_every_help_page_speaks_to_users_not_to_developers() -> None:
    """A command's description is written for who runs it: no module docstring that names the
    functions building the parser or the modules behind it."""
    for name, sub in _nested("gateway", parser()).items():
        text = sub.format_help()
        for word in ("add_subcommands", "add_parser", "subparsers", "(`gateway."):
            assert word not in text, f"{name} --help says {word!r}"


def test_every_serve_flag_states_its_default_and_variable() -> None:
    for action in _flags(_subcommands()["serve"]):
        if action.dest == "config":
            continue
        assert action.help is not None
        assert "(default " in action.help or "(default: " in action.help, action.option_strings
        assert "object at 0x" not in action.help, action.help  # a default worked out at start
        assert f"env GATEWAY_{action.dest.upper()})" in action.help, action.option_strings


def test_serve_help_states_the_real_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default 127.0.0.1:50051; env GATEWAY_LISTEN)" in text
    assert "(default 64; env GATEWAY_CACHE_MB)" in text
    assert "(default off; env GATEWAY_TELEMETRY)" in text


@pytest.mark.parametrize("command", ["report", "export"])
def test_telemetry_commands_show_their_own_flags_with_help(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pyspark")
    with pytest.raises(SystemExit) as ended:
        main([command, "--help"])
    assert ended.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: gateway {command} "), out.splitlines()[0]
    lines = " ".join(out.split())
    for flag in ("--table", "--format", "--master", "--max-files-per-trigger") if (
            command == "export") else ("--table", "--out", "--expected"):
        assert flag in lines


def test_export_defaults_are_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyspark")
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default delta)" in text
    assert "(default local[*]" in text
    assert "(default 64)" in text


@pytest.mark.parametrize(("variable", "value", "allowed"), [
    ("GATEWAY_CACHE_MB", "abc", "an integer"),
    ("GATEWAY_CACHE_MB", "-1", "0..65536 MiB"),
    ("GATEWAY_GRACE_S", "1e9", "0..3600 s"),
    ("GATEWAY_LISTEN", "0.0.0.0:50051", "a loopback address"),
    ("GATEWAY_TELEMETRY", "maybe", "a boolean"),
    ("GATEWAY_PULSAR_LISTEN", "no-port", "HOST:PORT"),
])
def test_an_environment_variable_error_names_the_variable(
    variable: str, value: str, allowed: str
) -> None:
    run = _gateway("serve", env={variable: value})
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(f"gateway: error: {variable}="), line
    assert allowed in line


def test_a_flag_overrides_the_variable_and_is_named_as_the_setting() -> None:
    run = _gateway("serve", "--cache-mb", "-2", env={"GATEWAY_CACHE_MB": "abc"})
    assert run.returncode == 2
    assert run.stderr.strip() == "gateway: error: cache_mb=-2 is not allowed: 0..65536 MiB"


@pytest.mark.parametrize("command", ["report", "export"])
def test_a_telemetry_command_without_the_extra_is_one_line_and_exit_2(command: str) -> None:
    args = (["--table", "t", "--out", "o"] if command == "report"
            else ["--spool", "s", "--table", "t", "--checkpoint", "c"])
    run = _gateway(command, *args, blocked=TELEMETRY)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(f"gateway: error: `gateway {command}` needs the telemetry extra ")
    assert line.endswith("pip install 'retry-gateway[telemetry]'")
    assert run.stdout == ""


def test_a_missing_file_from_a_variable_is_one_line_naming_it(tmp_path: Path) -> None:
    run = _gateway("serve", "--data-dir", str(tmp_path / "data"),
                   env={"GATEWAY_TOKENS_FILE": str(tmp_path / "missing.toml")})
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("gateway: error: GATEWAY_TOKENS_FILE=")
    assert "a readable file (No such file or directory)" in line


@pytest.mark.parametrize("content", ["", "not a certificate\n"])
def test_an_unusable_tls_file_is_one_line_not_a_traceback(tmp_path: Path, content: str) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text(content)
    run = _gateway("serve", "--data-dir", str(tmp_path / "data"), "--tls-cert", str(junk),
                   "--tls-key", str(junk))
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("gateway: error: tls_cert=")
    assert "a PEM certificate chain whose key is tls_key" in line
