"""A `GATEWAY_<KEY>` variable `serve` does not know (a typo: `GATEWAY_MAX_PUBLISH_MBB`) was
ignored without a word, so the gateway ran with the default the operator meant to change. It is
still not refused (one manifest's environment may serve the `gateway` commands too:
`GATEWAY_TOKEN`, `GATEWAY_TARGET`), but `serve` warns at start, naming it and the setting it
most likely meant."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from gateway.server.config import unknown_env


def test_a_misspelt_variable_is_named_with_the_setting_it_likely_meant() -> None:
    found = unknown_env({"GATEWAY_MAX_PUBLISH_MBB": "5", "GATEWAY_MAX_PUBLISH_MB": "4",
                         "GATEWAY_GATEWAYID": "x", "GATEWAY_ZZZZZZZZ": "1", "PATH": "/bin"})
    assert found == [("GATEWAY_GATEWAYID", "GATEWAY_GATEWAY_ID"),
                     ("GATEWAY_MAX_PUBLISH_MBB", "GATEWAY_MAX_PUBLISH_MB"),
                     ("GATEWAY_ZZZZZZZZ", None)]


def test_settings_products_and_the_commands_variables_are_known() -> None:
    env = {"GATEWAY_TOKEN": "t", "GATEWAY_TARGET": "h:1", "GATEWAY_FROM_TOKEN": "t",
           "GATEWAY_TO_TOKEN": "t", "GATEWAY_LOG_LEVEL": "info", "GATEWAY_PULSAR_LISTEN": "",
           "GATEWAY_ROCKETMQ_FIFO_GROUPS": "g", "GATEWAY_AMQP_LISTEN": ""}
    assert unknown_env(env) == []


def test_serve_warns_about_it_at_start(tmp_path: Path) -> None:
    env = {**__import__("os").environ, "GATEWAY_MAX_PUBLISH_MBB": "5"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data")],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    lines = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "gateway started" in line:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    warnings = [json.loads(line) for line in lines if "GATEWAY_MAX_PUBLISH_MBB" in line]
    assert warnings, "".join(lines)
    assert warnings[0]["level"] == "warning"
    assert warnings[0]["meant"] == "GATEWAY_MAX_PUBLISH_MB"
