"""Attack round 9: admin commands given odd arguments answer with exit status 2 and one line
naming the argument, never a traceback, a silent default or "cannot be reached" (5).

* `dlq list --since/--until` with a number of ms past what a filter holds (an int64 and the
  gateway's end of year 9999) was a ValueError traceback from protobuf, exit 1.
* `--tls-ca` (or `--tls-cert`/`--tls-key`) naming a file that holds no PEM block (a text file)
  failed the call with UNAVAILABLE (exit 5) after gRPC's C core logged four lines of its own.
* `--target ''` silently meant the default 127.0.0.1:50051; a target with no host or no port
  (`:50051`, `host:`) was tried and answered UNAVAILABLE (exit 5).

And more found by the same round: `serve` read `--tokens-file`/`--config` whole (/dev/zero:
MemoryError or the OOM killer); every command ended with a BrokenPipeError traceback under
`| head`; `plan` listed any `--limit` (10^11 rows ran on) and took any processing time;
`migrate copy` printed aiormq's own line before its own; `--until 0` (CLI) and
`until=1970-01-01T00:00` (console) went out as "no bound", so a delete took every other match.
"""

from __future__ import annotations

import asyncio
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest


def _gateway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True,
                          text=True, timeout=120)


def _usage_error(done: subprocess.CompletedProcess[str], field: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert field in lines[0], lines[0]


@pytest.mark.parametrize("flag", ["--since", "--until"])
@pytest.mark.parametrize("value", ["99999999999999999999999", "253402300800000"])
def test_a_filter_time_beyond_year_9999_is_refused_by_name(flag: str, value: str) -> None:
    done = _gateway("dlq", "list", "t", "g", flag, value, "--target", "127.0.0.1:1")
    _usage_error(done, flag.lstrip("-"))


@pytest.mark.parametrize("flag", ["--tls-ca", "--tls-cert"])
def test_a_file_without_a_pem_block_is_refused_by_name(tmp_path: Path, flag: str) -> None:
    text = tmp_path / "not-pem.txt"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    extra = ["--tls-key", str(text)] if flag == "--tls-cert" else []
    done = _gateway("topics", "--target", "127.0.0.1:1", flag, str(text), *extra,
                    "--timeout-s", "5")
    _usage_error(done, flag.lstrip("-").replace("-", "_"))


CORRUPT = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize("flag", ["--tls-ca", "--tls-cert"])
def test_a_pem_block_that_is_no_certificate_is_refused_by_name(tmp_path: Path, flag: str
                                                              ) -> None:
    """A PEM block whose content is no certificate (or a key that does not go with the
    certificate) reached gRPC, which logged lines of its own and failed UNAVAILABLE (exit 5)."""
    corrupt = tmp_path / "corrupt.pem"
    corrupt.write_text(CORRUPT)
    extra = ["--tls-key", str(corrupt)] if flag == "--tls-cert" else []
    done = _gateway("topics", "--target", "127.0.0.1:1", flag, str(corrupt), *extra,
                    "--timeout-s", "5")
    _usage_error(done, flag.lstrip("-").replace("-", "_"))


@pytest.mark.parametrize("target", ["", ":50051", "127.0.0.1:", " "])
def test_a_target_without_host_or_port_is_refused(target: str) -> None:
    done = _gateway("topics", "--target", target, "--timeout-s", "5")
    _usage_error(done, "target")


LIMIT_BYTES = 2 << 30
"""Address space `serve` may use here: an unbounded read of /dev/zero fails fast under it
(without it, the read took the machine's memory until the kernel killed the process)."""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


@pytest.mark.parametrize("flag", ["--tokens-file", "--config"])
def test_serve_refuses_a_settings_file_without_end_by_name(tmp_path: Path, flag: str) -> None:
    """`serve --tokens-file /dev/zero` (or `--config`) read the file whole: a MemoryError
    traceback and exit 1, or with no memory limit the kernel's OOM killer."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path / "data"),
         "--listen", "127.0.0.1:0", flag, "/dev/zero"],
        capture_output=True, text=True, timeout=120, preexec_fn=_limited)
    _usage_error(done, flag.lstrip("-").replace("-", "_"))


@pytest.mark.parametrize("args", [
    ["plan", "--policy", "rocketmq"],
    ["plan", "--policy", "pulsar", "--json"],
])
def test_a_reader_that_goes_away_ends_the_command_quietly(args: list[str]) -> None:
    """`gateway ... | head -1`: the reader closed the pipe and every command ended with a
    BrokenPipeError traceback; it ends as Unix tools do, with the status of SIGPIPE."""
    read, write = os.pipe()
    os.close(read)  # before the command writes: its first write finds no reader
    try:
        done = subprocess.run([sys.executable, "-m", "gateway.cli", *args], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.stderr == ""
    assert done.returncode == 128 + signal.SIGPIPE


@pytest.mark.parametrize("args, field", [
    # A policy that retries without limit listed 10^11 attempts: it ran on (memory growing)
    # until killed.
    (["--policy", "pulsar-nack", "--limit", "99999999999"], "limit"),
    (["--policy", "pulsar", "--limit", "10001"], "limit"),
    # Times past any wait printed a timeline in the year 3e12 and JSON numbers past an int64.
    (["--policy", "rocketmq", "--processing-ms", "99999999999999999999999"], "processing_ms"),
    (["--policy", "pulsar", "--pickup-ms", "34560000001"], "pickup_ms"),
])
def test_plan_refuses_a_timeline_past_its_bounds(args: list[str], field: str) -> None:
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "plan", *args],
                          capture_output=True, text=True, timeout=60)
    _usage_error(done, field)
    assert done.stdout == ""


def test_plan_lists_up_to_its_bound() -> None:
    done = _gateway("plan", "--policy", "pulsar-nack", "--limit", "10000", "--pickup-ms",
                    "34560000000", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count('"attempt"') == 10_000


def test_copy_from_a_broker_that_cannot_be_reached_says_so_in_one_line() -> None:
    """aiormq's own "error when creating transport: ..." line came before the command's."""
    done = _gateway("migrate", "copy", "--from", "amqp://guest:guest@127.0.0.1:1/?queue=q",
                    "--to", "gateway://127.0.0.1:1/u")
    assert done.returncode == 5, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot connect to RabbitMQ" in lines[0], done.stderr


def test_until_epoch_ms_0_bounds_the_filter(tmp_path: Path) -> None:
    """`--until 0` (dead-lettered before the epoch's first ms) was sent as 0, "no bound", so
    `dlq delete ... --reason r --until 0 --yes` deleted every dead letter with that reason
    instead of none; the ISO form of the same instant was bounded already."""
    from tests.console.gateway_proc import ADMIN_TOKEN, fill_dead_letters, running

    with running(tmp_path / "data") as gw:
        fill_dead_letters(gw, "r9-orders", "r9", [(b"one", {}), (b"two", {})], reason="bad")
        common = ["--target", gw.target, "--token", ADMIN_TOKEN]
        for until in ("1970-01-01T00:00:00Z", "0"):
            done = _gateway("dlq", "delete", "r9-orders", "r9", "--reason", "bad", "--until",
                            until, "--yes", *common)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == "deleted 0 dead letter(s)", (until, done.stdout)
        done = _gateway("dlq", "list", "r9-orders", "r9", "--json", *common)
        assert done.stdout.count('"message_id"') == 2, done.stdout
        # The console's filter (a browser's datetime-local value) had the same hole.
        listed = asyncio.run(_console_rows(gw.console, ADMIN_TOKEN, "/dead-letters?topic="
                                           "r9-orders&group=r9&until=1970-01-01T00:00"))
        assert listed == 0


async def _console_rows(base: str, token: str, page: str) -> int:
    """How many dead letters a console page lists, logged in with `token`."""
    import aiohttp

    def csrf(html: str) -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', html)
        assert found, html[:300]
        return found.group(1)

    async with aiohttp.ClientSession(base_url=base,
                                     cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
        async with client.get("/login") as r:
            form = {"csrf": csrf(await r.text()), "token": token, "next": "/"}
        async with client.post("/login", data=form, allow_redirects=False) as r:
            assert r.status == 303
        async with client.get(page) as r:
            assert r.status == 200, await r.text()
            return (await r.text()).count('name="id"')
