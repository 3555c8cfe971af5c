"""`gateway dlq show/resend/delete` find a dead letter by its id as `dlq list` prints it. The
table escapes ids (a line break as `\\n`, a backslash as `\\\\`, other control characters as
`\\xHH`), but the commands took the id literally, so an id copied from the table did not match
(`show` exited 3, `resend` and `delete` did nothing). The id itself is looked for first, then
the one printed so: where the printed form of one id is another id, that other one wins."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc

from gateway.server.app import running_gateway
from gateway.v1 import admin_pb2 as pb
from gateway.v1 import admin_pb2_grpc

IDS = ["line\nbreak", "back\\slash", "tab\tnul\x00", "esc\x1b[0m", "plain"]


async def _cli(target: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "dlq", *args, "--target", target,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _seed(target: str, group: str, ids: list[str]) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        await admin_pb2_grpc.AdminStub(channel).ImportMessages(pb.ImportMessagesRequest(
            topic="orders", group=group, ledger=f"seed-{group}",
            messages=[pb.MovedMessage(source_key=f"k{i}", part=pb.MESSAGE_PART_DEAD_LETTER,
                                      message_id=m, body=f"body {i}".encode())
                      for i, m in enumerate(ids)]), timeout=30)


async def _listed(target: str, group: str) -> list[str]:
    code, out, err = await _cli(target, "list", "orders", group)
    assert code == 0, err
    return sorted(line.split("  ")[0] for line in out.splitlines()[1:])


async def test_ids_as_listed_are_found(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as app:
        target = f"127.0.0.1:{app.grpc_port}"
        await _seed(target, "g", IDS)
        printed = await _listed(target, "g")
        assert sorted(printed) == sorted(["line\\nbreak", "back\\\\slash", "tab\\tnul\\x00",
                                          "esc\\x1b[0m", "plain"]), printed

        # Each id as the table printed it, and as itself.
        for shown, body in (("line\\nbreak", "body 0"), ("back\\\\slash", "body 1"),
                            ("tab\\tnul\\x00", "body 2"), ("line\nbreak", "body 0"),
                            ("back\\slash", "body 1"), ("plain", "body 4")):
            code, out, err = await _cli(target, "show", "orders", "g", shown)
            assert code == 0, (shown, err)
            assert f"\n{body}\n" in out, (shown, out)

        # Not an id, nor the printed form of one (an escape `list` never prints: \x41 is A).
        for absent in ("line\\rbreak", "\\x41", "back\\slash\\", "\\ud800"):
            code, _, err = await _cli(target, "show", "orders", "g", absent)
            assert code == 3, (absent, err)
            assert "NOT_FOUND" in err, err

        # Bytes that are not UTF-8 (they arrive as lone surrogates): refused, no traceback.
        for verb in (["show", "orders", "g", "a\udcff"],
                     ["delete", "orders", "g", "plain", "a\udcff", "--yes"]):
            code, _, err = await _cli(target, *verb)
            assert code == 2 and "UTF-8 text" in err and "Traceback" not in err, err

        code, out, err = await _cli(target, "delete", "orders", "g", "tab\\tnul\\x00",
                                    "esc\\x1b[0m", "--yes")
        assert (code, out) == (0, "deleted 2 dead letter(s)\n"), err
        code, out, err = await _cli(target, "resend", "orders", "g", "back\\\\slash",
                                    "line\\nbreak", "--yes")
        assert (code, out) == (0, "resent 2 dead letter(s)\n"), err
        assert await _listed(target, "g") == ["plain"]

        code, out, err = await _cli(target, "delete", "orders", "g", "line\\nbreak", "--yes")
        assert code == 3 and out == "deleted 0 dead letter(s)\n", err


async def test_the_id_itself_is_looked_for_first(tmp_path: Path) -> None:
    # `line\nbreak` as typed (a backslash and an n) is an id, and the printed form of another.
    async with running_gateway(tmp_path / "data") as app:
        target = f"127.0.0.1:{app.grpc_port}"
        await _seed(target, "g", ["line\nbreak", "line\\nbreak"])
        code, out, err = await _cli(target, "show", "orders", "g", "line\\nbreak")
        assert code == 0, err
        assert "\nbody 1\n" in out and "message id      line\\\\nbreak\n" in out, out
        code, out, err = await _cli(target, "show", "orders", "g", "line\\\\nbreak")
        assert code == 0 and "\nbody 1\n" in out, err
        code, out, err = await _cli(target, "delete", "orders", "g", "line\\nbreak", "--yes")
        assert (code, out) == (0, "deleted 1 dead letter(s)\n"), err
        assert await _listed(target, "g") == ["line\\nbreak"]  # the line break's, printed
        # Now the typed form names no id itself: the one printed so is found.
        code, out, err = await _cli(target, "delete", "orders", "g", "line\\nbreak", "--yes")
        assert (code, out) == (0, "deleted 1 dead letter(s)\n"), err
