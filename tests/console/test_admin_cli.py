"""The admin commands against a real `gateway serve` with tokens: every command, tables and
--json, paging, the confirmation prompt, and each documented exit status."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main
from tests.console.gateway_proc import ADMIN_TOKEN, APP_TOKEN, Gateway, fill_dead_letters

pytestmark = pytest.mark.slow


class Tty(io.StringIO):
    """A terminal's stdin that answers the prompt."""

    def isatty(self) -> bool:
        return True


def run(gw: Gateway, capsys: pytest.CaptureFixture[str], *args: str,
        token: str = ADMIN_TOKEN) -> tuple[int, str, str]:
    code = main([*args, "--target", gw.target, "--token", token])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(gw: Gateway, capsys: pytest.CaptureFixture[str], *args: str) -> object:
    code, out, err = run(gw, capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def dead(gw: Gateway) -> list[str]:
    return fill_dead_letters(gw, "cli-orders", "cli", [
        (b'{"n": 1}', {"color": "red"}), (b"plain two", {}), (b"\x00\xff", {}),
        (b"four", {"color": "blue"}), (b"five \x1b[31mred\x1b[0m", {})], reason="bad data")


def test_topics_groups_describe_retries(gw: Gateway, dead: list[str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(gw, capsys, "topics")
    assert code == 0 and out.splitlines()[0] == "TOPIC" and "cli-orders" in out
    assert "cli-orders" in as_json(gw, capsys, "topics")["topics"]  # type: ignore[index]
    code, out, _ = run(gw, capsys, "groups")
    assert code == 0 and "cli-orders" in out and "CONSUMERS" in out
    groups = as_json(gw, capsys, "groups")["groups"]  # type: ignore[index]
    mine = [g for g in groups if g["group"] == "cli"]
    assert mine and mine[0]["view"]["dead_letters"] == 5
    assert mine[0]["view"]["totals"]["dead_lettered"] == 5
    code, out, _ = run(gw, capsys, "describe", "cli-orders", "cli")
    assert code == 0 and "dead letters       5" in out and "%DLQ%cli" in out
    view = as_json(gw, capsys, "describe", "cli-orders", "cli")
    assert view["dead_letters"] == 5 and view["naming"] == "rocketmq"  # type: ignore[index]
    code, out, _ = run(gw, capsys, "retries", "cli-orders", "cli")
    assert code == 0 and "0 waiting" in out
    waiting = as_json(gw, capsys, "retries", "cli-orders", "cli")
    assert waiting == {"by_attempt": [], "next_due_ms": 0, "total": 0, "complete": True}


def test_dlq_list_pages_and_filters(gw: Gateway, dead: list[str],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(gw, capsys, "dlq", "list", "cli-orders", "cli", "--limit", "2")
    assert code == 0 and len(out.splitlines()) == 3 and "more: --page-token" in err
    token = err.split("--page-token ")[1].strip()
    page = as_json(gw, capsys, "dlq", "list", "cli-orders", "cli", "--limit", "2",
                   "--page-token", token)
    assert [d["message_id"] for d in page["dead_letters"]] == dead[2:4]  # type: ignore[index]
    everything = as_json(gw, capsys, "dlq", "list", "cli-orders", "cli", "--limit", "2",
                         "--all")
    assert [d["message_id"] for d in everything["dead_letters"]] == dead  # type: ignore[index]
    assert everything["next_page_token"] == ""  # type: ignore[index]
    red = as_json(gw, capsys, "dlq", "list", "cli-orders", "cli", "--text", "RED")
    assert [d["message_id"] for d in red["dead_letters"]] == [dead[0], dead[4]]  # type: ignore
    none = as_json(gw, capsys, "dlq", "list", "cli-orders", "cli", "--reason", "other",
                   "--since", "1h", "--min-attempt", "3", "--max-attempt", "3")
    assert none["dead_letters"] == []  # type: ignore[index]
    some = as_json(gw, capsys, "dlq", "list", "cli-orders", "cli", "--reason", "BAD",
                   "--since", "1h", "--min-attempt", "3", "--max-attempt", "3")
    assert len(some["dead_letters"]) == 5  # type: ignore[index]
    code, out, _ = run(gw, capsys, "dlq", "list", "cli-orders", "cli")
    # Terminal escape sequences in a body are never written to the terminal.
    assert "\x1b" not in out and "<17 bytes of binary>" in out and "<2 bytes of binary>" in out


def test_dlq_show(gw: Gateway, dead: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(gw, capsys, "dlq", "show", "cli-orders", "cli", dead[0])
    assert code == 0 and '"n": 1' in out and "color" in out and "bad data" in out
    assert out.count("READY -> INFLIGHT") == 3 and out.count("INFLIGHT -> WAITING_RETRY") == 2
    assert "INFLIGHT -> DEAD_LETTERED" in out and "timeline (from telemetry)" in out
    shown = as_json(gw, capsys, "dlq", "show", "cli-orders", "cli", dead[2])
    assert shown["dead_letter"]["body"] == "AP8="  # type: ignore[index]
    assert shown["dead_letter"]["body_text"] is None  # type: ignore[index]
    events = shown["timeline"]["events"]  # type: ignore[index]
    assert [e["to_state"] for e in events][-1] == "DEAD_LETTERED"


def test_exit_statuses(gw: Gateway, dead: list[str], capsys: pytest.CaptureFixture[str],
                       tmp_path: Path) -> None:
    assert run(gw, capsys, "dlq", "show", "cli-orders", "cli", "nope")[0] == 3
    assert run(gw, capsys, "topics", token="wrong")[0] == 4
    assert run(gw, capsys, "topics", token="")[0] == 4
    assert run(gw, capsys, "topics", token=APP_TOKEN)[0] == 4  # not an admin
    assert run(gw, capsys, "describe", "x" * 300, "g")[0] == 2
    assert run(gw, capsys, "dlq", "list", "cli-orders", "cli", "--limit", "0")[0] == 2
    assert run(gw, capsys, "dlq", "list", "cli-orders", "cli", "--since", "soon")[0] == 2
    assert run(gw, capsys, "dlq", "list", "cli-orders", "cli", "--min-attempt", "4",
               "--max-attempt", "2")[0] == 2
    # Out of the filter's range (a uint32) and not finite timeouts: usage errors, not a
    # traceback (ValueError from protobuf) or a call that ends DEADLINE_EXCEEDED at once.
    for flag, value in (("--max-attempt", "99999999999"), ("--min-attempt", str(2**32)),
                        ("--timeout-s", "nan"), ("--timeout-s", "inf"), ("--timeout-s", "1e30")):
        code, _, err = run(gw, capsys, "dlq", "list", "cli-orders", "cli", flag, value)
        assert code == 2 and flag[2:].replace("-", "_") in err, (flag, value, err)
    assert run(gw, capsys, "dlq", "resend", "cli-orders", "cli", "--yes")[0] == 2  # nothing
    # delete without ids or filter: refused before it asks (it has no --all; purge does that)
    code, _, err = run(gw, capsys, "dlq", "delete", "cli-orders", "cli")
    assert code == 2 and "message_ids" in err and "dlq purge" in err and "[y/N]" not in err
    # ids and --all together: which one was meant? Refused before anything happens.
    code, _, err = run(gw, capsys, "dlq", "resend", "cli-orders", "cli", "some-id", "--all",
                       "--yes")
    assert code == 2 and "--all" in err
    assert run(gw, capsys, "dlq", "resend", "cli-orders", "cli", "no-such-id", "--yes")[0] == 3
    assert main(["topics", "--target", "127.0.0.1:99999"]) == 2  # not port 34463
    code = main(["topics", "--target", "127.0.0.1:1", "--timeout-s", "3"])
    _, err = capsys.readouterr()
    assert code == 5 and "UNAVAILABLE" in err
    token_file = tmp_path / "token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    assert main(["topics", "--target", gw.target, "--token-file", str(token_file)]) == 0
    assert main(["topics", "--target", gw.target, "--token-file", str(tmp_path / "no")]) == 2
    capsys.readouterr()
    # A real process: no terminal and no --yes is exit 6; the usage error of argparse is 2.
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "dlq", "purge", "cli-orders",
                           "cli", "--target", gw.target, "--token", ADMIN_TOKEN],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 6 and "--yes" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "dlq", "frobnicate"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "dlq", "list", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "6  not confirmed" in proc.stdout


def test_resend_delete_purge_with_confirmation(gw: Gateway, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ids = fill_dead_letters(gw, "cli-act", "act", [(f"m{i}".encode(), {}) for i in range(4)])
    monkeypatch.setattr(sys, "stdin", Tty("n\n"))
    code, _, err = run(gw, capsys, "dlq", "resend", "cli-act", "act", ids[0])
    assert code == 6 and "[y/N]" in err
    monkeypatch.setattr(sys, "stdin", Tty("y\n"))
    code, out, err = run(gw, capsys, "dlq", "resend", "cli-act", "act", ids[0])
    assert code == 0 and out.strip() == "resent 1 dead letter(s)" and "to the original" in err
    assert as_json(gw, capsys, "dlq", "delete", "cli-act", "act", ids[1], "--yes") == {
        "deleted": 1}
    assert as_json(gw, capsys, "dlq", "resend", "cli-act", "act", "--text", "m2",
                   "--yes") == {"resent": 1}
    monkeypatch.setattr(sys, "stdin", Tty("yes\n"))
    code, out, err = run(gw, capsys, "dlq", "purge", "cli-act", "act")
    assert code == 0 and "Delete all 1 dead letter(s)" in err and "deleted 1" in out
    left = as_json(gw, capsys, "dlq", "list", "cli-act", "act")
    assert left["dead_letters"] == []  # type: ignore[index]
    # Resent messages wait for the group again: `purge` drops them (after confirming).
    view = as_json(gw, capsys, "describe", "cli-act", "act")
    assert view["ready"] == 2  # type: ignore[index]
    assert as_json(gw, capsys, "purge", "cli-act", "act", "--yes") == {"purged": 2}
