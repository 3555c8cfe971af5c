"""Attack round 10 on the `gateway` command line and its config file, as an outsider would:
every refusal is one line naming the setting and what it may be, exit status 2, never a
traceback, a silent default or a gateway that serves what it was not asked to.

* A damaged store file (`database disk image is malformed`) ended `serve` with a traceback
  logged as "gateway failed" and exit status 1.
* A product's field of a `[[principal]]` given as another TOML type than a string
  (`rocketmq_secret_key = ["s"]`, `= true`) became its Python text ("['s']", "True").
* A typo in the config file listed every key of the section, without the one meant.
* `--listen '[::1:0'` (a bracket left open) served, announced as `[::1:PORT`.
* `--tracing-endpoint http://` (no host) was taken; every export then failed.
* `--config ''` (an unset variable) ran on the defaults without a word.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`gateway serve ARGS` in `tmp_path`; a gateway that starts is a failure (the timeout)."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "gateway.cli", "serve", *args],
            capture_output=True, text=True, cwd=tmp_path, timeout=60,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the gateway started: {exc.stderr!r}") from None


def refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one error line of a refusal with exit status 2, holding every word."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("gateway: error: "), done.stderr
    for word in words:
        assert word in line, line
    return line


def test_a_damaged_store_file_is_one_line_naming_the_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(data)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        while "gateway listening" not in proc.stderr.readline():
            assert time.monotonic() < deadline and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        proc.wait()
    store = data / "store.sqlite3"
    size = store.stat().st_size
    assert size > 8192
    with open(store, "r+b") as f:  # every page after the schema's: the tables' own
        f.seek(8192)
        f.write(b"\xa5" * (size - 8192))
    line = refused(serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", str(data)),
                   "embedded store did not open", str(data), "malformed")
    assert "gateway failed" not in line


TOKEN = '[[principal]]\nname = "app"\ntoken = "t0ken"\n'


@pytest.mark.parametrize("value", ["12345678", '["s3cret"]', "true", "{ a = 1 }"])
def test_a_product_field_of_a_principal_must_be_a_string(tmp_path: Path, value: str) -> None:
    (tmp_path / "tokens.toml").write_text(
        TOKEN + f'rocketmq_access_key = "ak"\nrocketmq_secret_key = {value}\n')
    line = refused(serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", "data",
                         "--tokens-file", "tokens.toml"),
                   "principal[app].rocketmq_secret_key", "a string")
    assert "s3cret" not in line  # a secret is never echoed


@pytest.mark.parametrize(("text", "hint"), [
    ('[server]\nlistne = "127.0.0.1:0"\n', "did you mean listen?"),
    ('[store]\nbackedn = "embedded"\n', "did you mean backend?"),
    ('[server]\ndata_dir = "data"\n', "did you mean [store] data_dir?"),
    ('[servre]\nlisten = "127.0.0.1:0"\n', "did you mean [server]?"),
    ('[tracng]\nenabled = true\n', "did you mean [tracing]?"),
    ('listen = "127.0.0.1:0"\n', "did you mean listen under [server]?"),
])
def test_a_typo_in_the_config_file_says_what_was_meant(tmp_path: Path, text: str,
                                                       hint: str) -> None:
    (tmp_path / "gateway.toml").write_text(text)
    refused(serve(tmp_path, "--config", "gateway.toml", "--data-dir", "data"), hint)


@pytest.mark.parametrize("address", ["[::1:0", "::1]:0", "[]:0", "[127.0.0.1]:0"])
def test_a_listen_address_with_a_stray_bracket_is_refused(tmp_path: Path, address: str) -> None:
    refused(serve(tmp_path, "--listen", address, "--data-dir", "data"),
            f"listen='{address}'", "[::1]:PORT")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("url", ["http://", "https://:4317", "http://collector:0",
                                 "http://collector:70000", "http://collector:port"])
def test_a_tracing_endpoint_without_a_host_or_port_is_refused(tmp_path: Path, url: str) -> None:
    refused(serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", "data", "--tracing",
                  "--tracing-endpoint", url),
            "tracing_endpoint=", "with a host")


def test_an_empty_config_path_is_refused_not_ignored(tmp_path: Path) -> None:
    refused(serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", "data", "--config", ""),
            "config=''", "a readable TOML file")
    assert not (tmp_path / "data").exists()


def test_sigterm_stops_a_gateway_whose_log_reader_went_away(tmp_path: Path) -> None:
    """`gateway serve 2>&1 | head` (or a log collector that died): the `stopping` line raised
    BrokenPipeError in the SIGTERM handler before it set the stop, and the gateway ignored
    every SIGTERM after (only SIGKILL ended it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        while "gateway listening" not in proc.stderr.readline():
            assert time.monotonic() < deadline and proc.poll() is None
        proc.stderr.close()  # the reader goes away
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_a_file_setting_of_another_back_end_is_said_at_start(tmp_path: Path) -> None:
    """`[pulsar] token` on the embedded back end was ignored without a word (the same as a
    flag is refused, and a variable is warned about)."""
    (tmp_path / "gateway.toml").write_text('[pulsar]\ntoken = "t0ken"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data"), "--config", "gateway.toml"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={k: v for k, v in dict(os.environ, PYTHONPATH=str(REPO)).items()
             if not k.startswith("GATEWAY_")})
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        while "gateway listening" not in (lines[-1] if lines else ""):
            assert time.monotonic() < deadline and proc.poll() is None, lines
            lines.append(proc.stderr.readline())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()
    unused = [line for line in lines if "setting not used" in line]
    assert len(unused) == 1 and '"pulsar.token"' in unused[0], lines
    assert "t0ken" not in "".join(lines)


def test_a_gateway_started_with_stderr_closed_serves(tmp_path: Path) -> None:
    """`gateway serve 2>&-` (a daemon started without a stderr): the first log line was an
    AttributeError on `None`, exit status 1, nothing said anywhere."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(tmp_path / "data")],
        stdout=subprocess.DEVNULL, cwd=tmp_path, preexec_fn=lambda: os.close(2),
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline and proc.poll() is None, proc.returncode
            with socket.socket() as c:
                if c.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_python_dash_m_gateway_runs_the_command(tmp_path: Path) -> None:
    """`python -m gateway ...` said "No module named gateway.__main__" (exit 1): only
    `python -m gateway.cli` and the console script ran it."""
    done = subprocess.run([sys.executable, "-m", "gateway", "serve", "--max-rpcs", "0"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    refused(done, "max_rpcs=0", "1..1000000")


@pytest.mark.parametrize("names", ['["", "orders"]', '["orders", "  "]'])
def test_an_empty_name_in_a_list_setting_is_refused(tmp_path: Path, names: str) -> None:
    """`fifo_groups = ["", "orders"]` served with the empty name dropped without a word."""
    (tmp_path / "gateway.toml").write_text(f"[rocketmq]\nfifo_groups = {names}\n")
    refused(serve(tmp_path, "--config", "gateway.toml", "--listen", "127.0.0.1:0",
                  "--data-dir", "data"), "rocketmq.fifo_groups=", "a list of group names")


@pytest.mark.parametrize(("args", "env", "words"), [
    (["--cache-mb", "\u0663"], {}, ("--cache-mb", "invalid int value")),
    (["--grace-s", "\u0661"], {}, ("--grace-s", "invalid float value")),
    (["--rabbitmq-start-wait-s", "\u0661"], {}, ("--rabbitmq-start-wait-s", "invalid float")),
    ([], {"GATEWAY_CACHE_MB": "\u0663"}, ("GATEWAY_CACHE_MB=", "an integer")),
])
def test_a_number_of_non_ascii_digits_is_refused(tmp_path: Path, args: list[str],
                                                 env: dict[str, str],
                                                 words: tuple[str, ...]) -> None:
    """Python reads `٣` (an Arabic-Indic 3) as 3: `--cache-mb ٣` served with 3 MiB, where a
    port of such digits is refused."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
             "--data-dir", "data", *args],
            capture_output=True, text=True, cwd=tmp_path, timeout=60,
            env=dict(os.environ, PYTHONPATH=str(REPO), **env))
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the gateway started: {exc.stderr!r}") from None
    assert "Traceback" not in done.stderr and done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert all(word in line for word in words), line
