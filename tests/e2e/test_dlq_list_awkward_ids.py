"""`gateway dlq list` shows every dead letter on one row, whatever its id holds, and two ids
that differ show differently. Line breaks and other control characters were already escaped
(`\\n`), but a backslash was not: the id `a\\nb` (a backslash and an n) showed as the id with a
line break, so an operator could not tell them apart. Ids, keys and tags are now escaped as
Python's repr escapes them (a backslash as `\\\\`), without the quotes."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc

from gateway.server.app import running_gateway
from gateway.v1 import admin_pb2 as pb
from gateway.v1 import admin_pb2_grpc

IDS = {
    "plain": "plain",
    "line\nbreak": "line\\nbreak",
    "line\\nbreak": "line\\\\nbreak",  # a backslash and an n: not the id above
    "cr\rlf\n": "cr\\rlf\\n",
    "tab\tnul\x00": "tab\\tnul\\x00",
    "esc\x1b[31mred": "esc\\x1b[31mred",
    "seps\x0b\x0c\x1c\x85\u2028\u2029": "seps\\x0b\\x0c\\x1c\\x85\\u2028\\u2029",
    "ünïcode✓": "ünïcode✓",
    "tag\U000e0041rtl\u202e": "tag\\U000e0041rtl\\u202e",
}


async def _cli(target: str, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "dlq", *args, "--target", target,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err
    return proc.returncode, out.decode()


async def test_each_dead_letter_is_one_row_and_ids_stay_apart(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as app:
        target = f"127.0.0.1:{app.grpc_port}"
        async with grpc.aio.insecure_channel(target) as channel:
            await admin_pb2_grpc.AdminStub(channel).ImportMessages(pb.ImportMessagesRequest(
                topic="orders", group="g", ledger="seed",
                messages=[pb.MovedMessage(source_key=f"k{i}", part=pb.MESSAGE_PART_DEAD_LETTER,
                                          message_id=m, key=m, body=b"body")
                          for i, m in enumerate(IDS)]), timeout=30)

        _, out = await _cli(target, "list", "orders", "g")
        lines = out.splitlines()
        assert len(lines) == 1 + len(IDS), out  # the header, then one row each
        shown = sorted(line.split("  ")[0] for line in lines[1:])
        assert shown == sorted(IDS.values()), shown

        _, out = await _cli(target, "show", "orders", "g", "line\nbreak")
        assert "message id      line\\nbreak\n" in out, out
        assert "key             line\\nbreak\n" in out, out
