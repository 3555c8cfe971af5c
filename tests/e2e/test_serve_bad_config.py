"""`gateway serve` with a config file or a tokens file an operator got wrong: one line naming
the setting and what it may be, exit status 2, no traceback, and nothing started (never a
directory named `True`, never an admin granted by `admin = "false"`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`gateway serve ARGS` in `tmp_path` with `env` added to the environment; a gateway that
    starts is stopped by the timeout (and the test fails on its status)."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "gateway.cli", "serve", *args],
            capture_output=True, text=True, cwd=tmp_path, timeout=60,
            env=dict(os.environ, PYTHONPATH=str(REPO), **env),
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the gateway started: {exc.stderr!r}") from None


def refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("gateway: error: "), lines
    for word in words:
        assert word in lines[-1], lines[-1]


BASE = '[server]\nlisten = "127.0.0.1:0"\n[store]\ndata_dir = "data"\n'


@pytest.mark.parametrize(("text", "words"), [
    (BASE.replace('data_dir = "data"', "data_dir = true"),
     ("store.data_dir=True", "a string")),
    (BASE.replace('data_dir = "data"', "data_dir = {a = 1}"),
     ("store.data_dir=", "a string")),
    (BASE.replace("[store]", "gateway_id = 5\n[store]"),
     ("server.gateway_id=5", "a string")),
    (BASE.replace("[store]", "telemetry = \"yes\"\n[store]"),
     ("server.telemetry='yes'", "a boolean")),
    (BASE.replace("[store]", "grace_s = true\n[store]"),
     ("server.grace_s=True", "a number")),
    (BASE.replace("[store]", "max_rpcs = 10.5\n[store]"),
     ("server.max_rpcs=10.5", "an integer")),
])
def test_a_value_of_the_wrong_toml_type_is_refused(
    tmp_path: Path, text: str, words: tuple[str, ...]
) -> None:
    (tmp_path / "gateway.toml").write_text(text)
    refused(serve(tmp_path, "--config", "gateway.toml"), *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gateway.toml"]  # nothing created


@pytest.mark.parametrize(("text", "words"), [
    (BASE.replace('data_dir = "data"', 'data_dir = "da\\u0000ta"'), ("store.data_dir=",)),
    (BASE + '[auth]\ntokens_file = "tokens.toml\\u0000"\n', ("auth.tokens_file=",)),
    (BASE + '[auth]\ntls_cert = "c.pem\\u0000"\ntls_key = "k.pem"\n', ("auth.tls_cert=",)),
])
def test_a_nul_character_in_a_setting_is_refused(
    tmp_path: Path, text: str, words: tuple[str, ...]
) -> None:
    """TOML's "\\u0000" put a NUL in a path: a ValueError traceback from the writer process's
    start (data_dir) or from opening the file (tokens_file, tls_cert), exit status 1."""
    (tmp_path / "tokens.toml").write_text('[[principal]]\nname = "a"\ntoken = "t"\n')
    (tmp_path / "gateway.toml").write_text(text)
    refused(serve(tmp_path, "--config", "gateway.toml"), *words, "without NUL")


def test_a_config_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    (tmp_path / "gateway.toml").write_bytes(b"[server]\nlisten = \"\xff\xfe\"\n")
    refused(serve(tmp_path, "--config", "gateway.toml"), "config='gateway.toml'", "UTF-8")


def test_a_config_file_with_utf8_comments_is_read_whatever_the_locale(tmp_path: Path) -> None:
    (tmp_path / "gateway.toml").write_text(
        "# données – ok\n[server]\nlisten = \"127.0.0.1:0\"\nmax_rpcs = 0\n", encoding="utf-8")
    # max_rpcs = 0 makes it stop after reading the file: the file itself was read.
    refused(serve(tmp_path, "--config", "gateway.toml"), "max_rpcs=0")


TOKEN = '[[principal]]\nname = "app"\ntoken = "secret"\npublish = ["*"]\n'


@pytest.mark.parametrize(("text", "words"), [
    (b"[[principal]]\nname = \"\xff\"\n", ("tokens_file=", "UTF-8")),
    (b"principal = 5\n", ("tokens_file=", "[[principal]] tables")),
    (b"principal = [1, 2]\n", ("tokens_file=", "[[principal]] tables")),
    ((TOKEN + 'admin = "false"\n').encode(), ("principal[app].admin='false'", "true or false")),
    (TOKEN.replace('"secret"', "5").encode(), ("principal[app].token", "a string")),
    (TOKEN.replace('name = "app"', "name = 7").encode(), ("principal[0].name=7",)),
    (TOKEN.replace('token = "secret"', 'token_sha256 = "abc"').encode(),
     ("principal[app].token_sha256", "64 hexadecimal digits")),
    # A misspelt key was ignored: the principal silently lacked the permission it names.
    ((TOKEN + "admn = true\n").encode(), ("principal[app].admn", "keys name, token")),
    ((TOKEN + 'publsh = ["orders"]\n').encode(), ("principal[app].publsh", "publish")),
    ((TOKEN + '[[principals]]\nname = "ops"\ntoken = "t2"\n').encode(),
     ("tokens_file=", "not 'principals'")),
])
def test_a_tokens_file_an_operator_got_wrong_is_refused(
    tmp_path: Path, text: bytes, words: tuple[str, ...]
) -> None:
    (tmp_path / "tokens.toml").write_bytes(text)
    refused(serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", "data",
                  "--tokens-file", "tokens.toml"), *words)


@pytest.mark.parametrize(("config", "words"), [
    ('[auth]\nprincipals = [{name = "app", admin = true}]\n', ("principals=", "tokens_file")),
    ('[auth]\ntokens_file = "tokens.toml"\nprincipals = [{name = "apq", admin = true}]\n',
     ("auth.principals[0].name='apq'", "a [[principal]] in the tokens file")),
])
def test_config_permissions_that_reach_no_principal_are_refused(
    tmp_path: Path, config: str, words: tuple[str, ...]
) -> None:
    """`[auth] principals` without a tokens file, or naming none of its principals, were
    dropped without a word."""
    (tmp_path / "tokens.toml").write_text(TOKEN)
    (tmp_path / "gateway.toml").write_text(BASE + config)
    refused(serve(tmp_path, "--config", "gateway.toml"), *words)


@pytest.mark.parametrize(("args", "words"), [
    (("--amqp-listen", "127.0.0.1:5900", "--pulsar-listen", "127.0.0.1:5900"),
     ("pulsar_listen='127.0.0.1:5900'", "amqp_listen is 127.0.0.1:5900")),
    (("--listen", "127.0.0.1:5901", "--pulsar-listen", "127.0.0.1:5901"),
     ("pulsar_listen='127.0.0.1:5901'", "listen is 127.0.0.1:5901")),
    (("--listen", "127.0.0.1:5902", "--admin-listen", "localhost:5902"),
     ("admin_listen='localhost:5902'", "listen is 127.0.0.1:5902")),
])
def test_two_listeners_on_one_port_are_refused_naming_both(
    tmp_path: Path, args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    """Before, the second listener's bind failed half way through start-up with 'address
    already in use', naming no setting (after the first had announced it was listening)."""
    done = serve(tmp_path, "--data-dir", "data", *args)
    refused(done, *words)
    assert "listening" not in done.stderr


@pytest.mark.parametrize(("url", "words"), [
    ("foo", ("rabbitmq_url='foo'", "amqp://USER:PASSWORD@HOST:PORT/VHOST")),
    ("http://broker:5672/", ("rabbitmq_url='http://broker:5672/'",)),
    ("amqp://guest:s3cret@127.0.0.1:99999/", ("rabbitmq_url='amqp://guest:***@127.0.0.1:99999/'",)),
    ("amqp://guest:s3cret@:5672/", ("rabbitmq_url='amqp://guest:***@:5672/'",)),
    ("amqps://guest:s3cret@127.0.0.1:5671/?cafile=/nonexistent/ca.pem",
     ("?cafile=/nonexistent/ca.pem", "a readable file", "No such file or directory")),
    ("amqps://guest:s3cret@127.0.0.1:5671/?certfile=/nonexistent/c.pem&keyfile=/etc",
     ("?certfile=/nonexistent/c.pem", "a readable file")),
    ("amqps://guest:s3cret@127.0.0.1:5671/?keyfile=/etc", ("?keyfile=/etc", "a readable file")),
    ("amqps://guest:s3cret@127.0.0.1:5671/?capath=/nonexistent",
     ("?capath=/nonexistent", "a readable directory")),
])
def test_a_rabbitmq_url_that_names_no_broker_is_refused(
    tmp_path: Path, url: str, words: tuple[str, ...]
) -> None:
    """Before, `foo` had the gateway retry a connection once a second for ever before it
    served (and deaf to SIGTERM meanwhile); a TLS file named in the URL that cannot be read was
    retried for the start wait (300 s); the error never shows the password. (`/nonexistent`
    stands for a path under `tmp_path` that does not exist: the machine may have one.)"""
    missing = str(tmp_path / "missing")
    url = url.replace("/nonexistent", missing)
    words = tuple(word.replace("/nonexistent", missing) for word in words)
    done = serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", "data",
                 "--backend", "rabbitmq", "--rabbitmq-url", url)
    refused(done, *words)
    assert "s3cret" not in done.stderr


@pytest.mark.parametrize("url", [
    "pulsar://guest:s3cret@[::1:6650",  # the client library's ValueError, a traceback
    "pulsar://broker:0",
    "pulsar://broker:99999",
    "pulsar://broker:6650/extra/path",
    "http://broker:8080",
])
def test_a_pulsar_service_url_the_client_cannot_use_is_refused(tmp_path: Path, url: str) -> None:
    """Before, a malformed one failed the start with the client library's traceback (exit 1),
    password and all."""
    done = serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", "data",
                 "--backend", "pulsar", "--pulsar-service-url", url)
    refused(done, "pulsar_service_url=", "pulsar://HOST:PORT")
    assert "s3cret" not in done.stderr
    assert "Traceback" not in done.stderr


def test_an_empty_data_dir_is_refused(tmp_path: Path) -> None:
    """Before, GATEWAY_DATA_DIR= (a variable set from a missing secret, say) put the store in
    whatever directory the gateway was started in."""
    refused(serve(tmp_path, "--listen", "127.0.0.1:0", GATEWAY_DATA_DIR=""),
            "GATEWAY_DATA_DIR=''", "a directory path")
    (tmp_path / "gateway.toml").write_text('[store]\ndata_dir = ""\n')
    refused(serve(tmp_path, "--listen", "127.0.0.1:0", "--config", "gateway.toml"),
            "data_dir=''", "a directory path")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gateway.toml"]


def test_a_data_dir_that_is_a_file_is_named_in_the_error(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("not a directory")
    refused(serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", "data"),
            "cannot open the store in", "data", "File exists")


@pytest.mark.parametrize(("args", "words"), [
    (("--rabbitmq-url", "amqp://guest:s3cret@broker:5672/"),
     ("--rabbitmq-url", "--backend rabbitmq", "embedded")),
    (("--pulsar-service-url", "pulsar://broker:6650"),
     ("--pulsar-service-url", "--backend pulsar", "embedded")),
    (("--backend", "pulsar", "--pulsar-service-url", "pulsar://127.0.0.1:1",
      "--rabbitmq-start-wait-s", "5"), ("--rabbitmq-start-wait-s", "--backend rabbitmq",
                                        "pulsar")),
])
def test_a_back_end_flag_without_that_back_end_is_refused(
    tmp_path: Path, args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    """`serve --rabbitmq-url ...` without `--backend rabbitmq` served on the embedded store
    without a word: the messages an application meant for RabbitMQ stayed on this machine."""
    done = serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", "data", *args)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("gateway: error: "), line
    for word in words:
        assert word in line, line
    assert "s3cret" not in line


def test_a_back_end_variable_without_that_back_end_is_said_at_start(tmp_path: Path) -> None:
    """The environment may carry settings for every back end (one manifest for several
    sidecars): the gateway starts, and says which it does not use."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", "data"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO),
                 GATEWAY_RABBITMQ_URL="amqp://guest:s3cret@broker:5672/"))
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "listening on" in line:
                break
        said = "".join(lines)
        assert "setting not used" in said and "GATEWAY_RABBITMQ_URL" in said, said
        assert "s3cret" not in said
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("flag", ["--listen", "--admin-listen", "--amqp-listen",
                                  "--pulsar-listen"])
def test_a_port_of_non_ascii_digits_is_refused_naming_the_setting(
    tmp_path: Path, flag: str
) -> None:
    """'²' passes str.isdigit() but not int(): the gateway stopped with a traceback."""
    args = ("--listen", "127.0.0.1:0") if flag != "--listen" else ()
    done = serve(tmp_path, *args, "--data-dir", "data", flag, "127.0.0.1:\u00b2")
    refused(done, flag.removeprefix("--").replace("-", "_"))


@pytest.mark.parametrize(("flag", "value", "words"), [
    *[("--max-publish-mb", v, ("max_publish_mb",)) for v in ("0", "65537", "-1", "lots")],
    *[("--gateway-id", v, ("gateway_id", "printable")) for v in ("", "   ", "a\nb", "x" * 256)],
])
def test_the_publish_budget_and_gateway_id_are_checked(
    tmp_path: Path, flag: str, value: str, words: tuple[str, ...]
) -> None:
    """`--max-publish-mb` and `--gateway-id` (new, or without a check before): exit 2, no
    traceback, naming the setting."""
    done = serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", "data", flag, value)
    assert done.returncode == 2, done.stderr
    assert all(word in done.stderr for word in words) or (
        flag == "--max-publish-mb" and flag in done.stderr), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("text", "words"), [
    (BASE + '[tracing]\nservice_name = "gw\\nlevel=error forged"\n',
     ("tracing_service_name=", "printable")),
    (BASE + '[tracing]\nservice_name = "gw\\u001b[31m"\n', ("tracing_service_name=", "printable")),
    (BASE + '[pulsar]\ntoken = "s3cret\\r\\nX-Forged: 1"\n', ("pulsar_token=", "printable ASCII")),
    (BASE + '[pulsar]\ntoken = "s3cret\\u0000"\n', ("pulsar.token=",)),
    (BASE + '[pulsar]\ntoken = " s3cret"\n', ("pulsar_token=", "printable ASCII")),
    (BASE + '[rocketmq]\naccess_key = "ak"\nsecret_key = "s3cret\\u0007"\n',
     ("rocketmq_secret_key=", "printable ASCII")),
    (BASE + '[rocketmq]\naccess_key = "a, k"\nsecret_key = "s3cret"\n',
     ("rocketmq_access_key=", "printable ASCII", "comma")),
])
def test_a_control_character_in_a_text_setting_is_refused(
    tmp_path: Path, text: str, words: tuple[str, ...]
) -> None:
    """A service name, token or key with a line break or another control character was taken
    as it was: the service name went into every trace resource and log line (a forged second
    line), a token into the back end's authorization header. The secret is never echoed."""
    (tmp_path / "gateway.toml").write_text(text)
    done = serve(tmp_path, "--config", "gateway.toml")
    refused(done, *words)
    assert "s3cret" not in done.stderr


def test_a_control_character_in_the_pulsar_token_variable_is_refused(tmp_path: Path) -> None:
    done = serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", "data",
                 GATEWAY_PULSAR_TOKEN="s3cret\x1b")
    refused(done, "GATEWAY_PULSAR_TOKEN=", "printable ASCII")
    assert "s3cret" not in done.stderr


@pytest.mark.parametrize(("text", "words"), [
    (TOKEN.replace('name = "app"', 'name = "app\\nforged"'), ("principal[0].name=", "printable")),
    (TOKEN.replace('name = "app"', 'name = "app\\u0085"'), ("principal[0].name=", "printable")),
    (TOKEN.replace('name = "app"', 'name = "   "'), ("principal[0].name=", "non-empty")),
    (TOKEN.replace('name = "app"', f'name = "{"x" * 256}"'), ("principal[0].name=", "255")),
    (TOKEN.replace('"secret"', '"s3cret\\u0000"'), ("principal[app].token", "printable ASCII")),
    (TOKEN.replace('"secret"', '"s3cr\u00e9t"'), ("principal[app].token", "printable ASCII")),
    (TOKEN.replace('"secret"', '"s3cret "'), ("principal[app].token", "printable ASCII")),
])
def test_a_tokens_file_name_or_token_with_a_control_character_is_refused(
    tmp_path: Path, text: str, words: tuple[str, ...]
) -> None:
    """A principal's name goes into log lines, refusals and metrics; a line break in it forged
    a log line. A token no `authorization` header can carry (a control or non-ASCII character,
    a blank at either end that the header loses) made a principal no client could be."""
    (tmp_path / "tokens.toml").write_text(text, encoding="utf-8")
    done = serve(tmp_path, "--listen", "127.0.0.1:0", "--data-dir", "data",
                 "--tokens-file", "tokens.toml")
    refused(done, *words)
    assert "s3cr" not in done.stderr
