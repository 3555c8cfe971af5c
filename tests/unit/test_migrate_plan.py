"""`gateway migrate plan`: both sides agree with `gateway plan`, the suggestion is the closest the
target's own knobs allow, and every behaviour the target cannot express is named.

Numbers from SEMANTICS.md: RocketMQ 000, 002, 003; RabbitMQ 001; Pulsar 004.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from documented import HOUR, MINUTE, SECOND
from documented import ROCKETMQ_TABLE_MS as TABLE_MS

from adapters import builtin_registry
from gateway.cli import main

GATEWAY = Path(sys.executable).with_name("gateway")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "migration.md"
POLICIES = sorted(builtin_registry().policies)


def run_json(capsys, *args: str) -> dict:
    code = main(["migrate", "plan", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def plan_json(capsys, *args: str) -> dict:
    code = main(["plan", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def codes(result: dict) -> list[str]:
    return [w["code"] for w in result["warnings"]]


@pytest.mark.parametrize("source", POLICIES)
@pytest.mark.parametrize("target", POLICIES)
def test_every_pair_agrees_with_gateway_plan(capsys, source, target):
    """Each side's timeline is `gateway plan`'s for that policy, byte for byte."""
    result = run_json(capsys, "--from", source, "--to", target, "--topic", "T", "--group", "G")
    assert result["source"]["plan"] == plan_json(capsys, "--policy", source, "--topic", "T",
                                                 "--group", "G")
    assert result["target"]["plan"] == plan_json(capsys, "--policy", target, "--topic", "T",
                                                 "--group", "G")
    # The side-by-side rows are the two timelines.
    for side in ("source", "target"):
        attempts = result[side]["plan"]["attempts"]
        column = [row[side] for row in result["timeline"] if row[side] is not None]
        assert [(c["wait_ms"], c["at_ms"], c["retries"], c["from"]) for c in column] == [
            (a["delay_ms"], a["at_ms"], a["retries"], a["topic"]) for a in attempts]
    # The suggestion stays a policy the target accepts: plan it again with its options.
    options = [f"--option={k}={v}" for k, v in result["suggestion"]["options"].items()]
    again = plan_json(capsys, "--policy", target, "--topic", "T", "--group", "G", *options)
    assert again["settings"] == result["suggestion"]["plan"]["settings"]
    if source == target:
        assert result["suggestion"]["exact"] is True
        assert result["warnings"] == []


@pytest.mark.parametrize(("source", "target", "timing"), [
    (["rocketmq", "--max-retries", "3"], ["rabbitmq", "--retry-interval-s", "30", "--dlx", "X"],
     ["--processing-ms", "6000"]),
    (["pulsar", "--level", "5", "--naming", "pulsar-2.7"], ["rocketmq", "--version", "4"],
     ["--pickup-ms", "5000"]),
    (["rocketmq-orderly", "--suspend-ms", "500"], ["pulsar-nack", "--nack-delay-ms", "2000"],
     ["--limit", "30"]),
    (["rocketmq-simple", "--invisible-s", "60"], ["pulsar", "--delay-s", "30"], []),
])
def test_sides_with_options_agree_with_gateway_plan(capsys, source, target, timing):
    """Options after --from belong to the source, after --to to the target; the timing flags
    may stand on either side and apply to both."""
    result = run_json(capsys, "--from", *source, *timing, "--to", *target)
    assert result["source"]["plan"] == plan_json(capsys, "--policy", *source, *timing)
    assert result["target"]["plan"] == plan_json(capsys, "--policy", *target, *timing)
    again = run_json(capsys, *timing, "--from", *source, "--to", *target)
    assert again == result


def test_rocketmq_to_pulsar_levels_is_an_exact_match(capsys):
    """Pulsar's reconsumeLater levels 3..18 are RocketMQ's 16-step table (002, 004)."""
    result = run_json(capsys, "--from", "rocketmq", "--to", "pulsar", "--topic", "orders",
                      "--group", "billing")
    s = result["suggestion"]
    assert s["exact"] is True
    assert [r["delay_level"] for r in s["requests"]] == list(range(3, 19))
    assert any("levels 3..18" in line for line in s["how"])
    waits = [a["delay_ms"] for a in s["plan"]["attempts"]]
    assert waits == [0, *TABLE_MS]
    assert s["deliveries"] == result["source"]["deliveries"] == 17
    assert s["difference_ms"] == 0
    assert s["time_to_end_ms"] == result["source"]["time_to_end_ms"] == sum(TABLE_MS)
    # The 1 min push timeout is carried over as Pulsar's ackTimeout.
    assert s["options"] == {"ack_timeout_ms": "60000"}
    assert result["warnings"] == []
    assert s["end"] == {"kind": "dlq", "destination": "orders-billing-DLQ"}
    assert result["source"]["end"] == {"kind": "dlq", "destination": "%DLQ%billing"}


def test_rocketmq_to_rabbitmq_reports_the_difference_in_time_to_dead_letter(capsys):
    """One x-retry-interval cannot be a table: the interval keeping the time to the dead letter
    closest (sum of the table / 16 = 1071.25 s), within 10..1800 s, and the difference (001)."""
    result = run_json(capsys, "--from", "rocketmq", "--to", "rabbitmq", "--topic", "orders",
                      "--group", "billing")
    s = result["suggestion"]
    assert s["exact"] is False
    assert s["options"]["x_retry_interval_s"] == "1071"
    assert s["options"]["x_dead_letter_exchange"] == "orders.dlx"
    assert s["difference_ms"] == 16 * 1071 * SECOND - sum(TABLE_MS) == -4 * SECOND
    assert s["time_to_end_ms"] - result["source"]["time_to_end_ms"] == s["difference_ms"]
    assert s["end"]["kind"] == "dlq"
    assert codes(result) == ["fixed_interval"]
    assert "-4s" in result["warnings"][0]["message"]
    # As given (60 s default, no dead-letter exchange): discarded after 16 minutes.
    assert result["target"]["end"] == {"kind": "discard", "destination": None}
    assert result["difference_ms"] == 16 * MINUTE - sum(TABLE_MS)
    # No other interval in range comes closer.
    for other in (1070, 1072, 10, 1800):
        plan = plan_json(capsys, "--policy", "rabbitmq", "--retry-interval-s", str(other))
        waits = sum(a["delay_ms"] for a in plan["attempts"])
        assert abs(waits - sum(TABLE_MS)) > abs(s["difference_ms"])


def test_the_interval_stays_in_its_range(capsys):
    """20 retries of up to 2 h: the closest x-retry-interval is the top of 10..1800 s; the
    retries past the 16th (2 h each) and the count cannot be carried (000, 001)."""
    result = run_json(capsys, "--from", "rocketmq", "--max-retries", "20", "--to", "rabbitmq")
    assert result["suggestion"]["options"]["x_retry_interval_s"] == "1800"
    assert codes(result) == ["fixed_interval", "beyond_table", "deliveries"]
    assert "2h" in result["warnings"][1]["message"]
    short = run_json(capsys, "--from", "rabbitmq", "--retry-interval-s", "10", "--to",
                     "pulsar-nack")
    assert short["suggestion"]["options"]["nack_delay_ms"] == "10000"


def test_past_16_retries_pulsar_level_18_is_2h(capsys):
    result = run_json(capsys, "--from", "rocketmq", "--max-retries", "20", "--to", "pulsar")
    s = result["suggestion"]
    assert s["exact"] is True
    assert [r["delay_level"] for r in s["requests"]] == [*range(3, 19), 18, 18, 18, 18]
    assert s["options"]["max_retries"] == "20"
    assert [a["delay_ms"] for a in s["plan"]["attempts"]][-4:] == [2 * HOUR] * 4


def test_names_on_each_side(capsys):
    """Attempt counts, retry properties and destination names in each product's words."""
    result = run_json(capsys, "--from", "rocketmq", "--to", "pulsar-nack", "--topic", "T",
                      "--group", "G")
    src, dst = result["source"], result["target"]
    assert [c["name"] for c in src["attempt_count"]] == [
        "reconsumeTimes", "RECONSUME_TIME", "delivery_attempt"]
    assert [c["first"] for c in src["attempt_count"]] == [0, 0, 1]
    assert src["retry_properties"] == ["RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "RECONSUME_TIME"]
    assert src["destinations"] == {"retry": "%RETRY%G", "dead_letter": "%DLQ%G"}
    assert src["retries"] == "copy"
    assert [c["name"] for c in dst["attempt_count"]] == ["getRedeliveryCount()"]
    assert dst["retries"] == "in_place"
    assert dst["destinations"]["dead_letter"] == "T-G-DLQ"
    assert result["schemes"]["pulsar-2.7"] == {"retry": "G-RETRY", "dead_letter": "G-DLQ"}
    assert result["schemes"]["pulsar-2.6"] == {"retry": "G-retry", "dead_letter": "G-dlq"}
    rabbit = run_json(capsys, "--from", "pulsar", "--to", "rabbitmq")
    assert rabbit["source"]["attempt_count"][0]["name"] == "RECONSUMETIMES"
    assert rabbit["source"]["retry_properties"] == [
        "REAL_TOPIC", "ORIGIN_MESSAGE_ID", "RETRY_TOPIC", "RECONSUMETIMES"]
    assert [c["name"] for c in rabbit["target"]["attempt_count"]] == [
        "x-delivery-count", "redelivered", "x-death"]


@pytest.mark.parametrize(("args", "expected"), [
    (["--from", "rocketmq", "--broadcast", "--to", "pulsar"], "broadcast"),
    (["--from", "rocketmq-orderly", "--to", "rabbitmq"], "ordered"),
    (["--from", "pulsar", "--to", "rabbitmq"], "ack_timeout"),
    (["--from", "rocketmq", "--to", "pulsar-nack"], "count_resets"),
    (["--from", "rocketmq", "--to", "pulsar-nack", "--subscription-type", "exclusive"],
     "count_frozen"),
    (["--from", "rocketmq", "--to", "pulsar", "--subscription-type", "failover"], "immediate"),
    (["--from", "rocketmq-http", "--to", "rabbitmq"], "deliveries"),
    (["--from", "rabbitmq", "--to", "rocketmq-orderly"], "waits_differ"),
    (["--from", "rabbitmq", "--to", "pulsar"], "end"),
])
def test_warnings_name_what_the_target_cannot_express(capsys, args, expected):
    result = run_json(capsys, *args)
    assert expected in codes(result), result["warnings"]


def test_broadcast_target_with_the_mode_is_not_warned(capsys):
    result = run_json(capsys, "--from", "rocketmq", "--broadcast", "--to", "rocketmq",
                      "--broadcast")
    assert result["warnings"] == []


def test_table_output(capsys):
    assert main(["migrate", "plan", "--from", "rocketmq", "--to", "rabbitmq", "--group", "G"]) == 0
    out = capsys.readouterr().out
    assert "x-retry-interval = 1071 s" in out
    assert "[fixed_interval]" in out
    assert "dead letter %DLQ%G" in out
    assert re.search(r"^\s+17\s+2h\s+4:45:40", out, re.MULTILINE)


@pytest.mark.parametrize(("args", "field", "allowed"), [
    (["--from", "rocketmq", "--to", "rabbitmq", "--retry-interval-s", "5"],
     "to.x_retry_interval_s", "10..1800 s"),
    (["--from", "rocketmq", "--max-retries", "1001", "--to", "pulsar"],
     "from.max_retries", "0..1000"),
    (["--from", "nope", "--to", "pulsar"], "from.policy", "one of"),
    (["--from", "pulsar", "--to", "rocketmq-orderly", "--suspend-ms", "9"],
     "to.suspend_ms", "10..30000 ms"),
    (["--from", "pulsar", "--to", "pulsar", "--level", "19"], "to.delay_level", "1..18"),
    (["--from", "rocketmq", "--to", "pulsar", "--limit", "0"], "limit", "1..10000"),
    (["--from", "rocketmq", "--to", "pulsar", "--limit", "10001"], "limit", "1..10000"),
    (["--from", "rocketmq", "--processing-ms", "-1", "--to", "pulsar"], "from.processing_ms",
     "0..34560000000 ms"),
    (["--from", "rocketmq", "--from", "pulsar", "--to", "pulsar"], "from", "--from once"),
])
def test_bad_values_name_the_field_and_range(capsys, args, field, allowed):
    assert main(["migrate", "plan", *args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{field}=" in err and allowed in err


@pytest.mark.parametrize("args", [
    ["--from", "rocketmq", "--to", "pulsar", "--bogus", "1"],
    ["--from", "rocketmq"],
    ["--to", "pulsar"],
    ["--from", "rocketmq", "--to", "pulsar", "--limit", "x"],
])
def test_bad_usage_exits_2(capsys, args):
    with pytest.raises(SystemExit) as exited:
        main(["migrate", "plan", *args])
    assert exited.value.code == 2
    assert capsys.readouterr().err


def test_json_layout_is_stable_and_documented(capsys):
    """The keys are exactly the documented ones (docs/migration.md names every one)."""
    result = run_json(capsys, "--from", "rocketmq", "--to", "rabbitmq")
    assert result["format"] == "gateway.migrate.plan/1"
    top = {"format", "topic", "group", "source", "target", "timeline", "difference_ms",
           "suggestion", "warnings", "schemes"}
    side = {"policy", "dialect", "options", "naming", "max_retries", "deliveries",
            "time_to_end_ms", "end", "retries", "destinations", "attempt_count",
            "retry_properties", "dead_letter_properties", "plan"}
    suggestion = {"exact", "options", "requests", "how", "deliveries", "time_to_end_ms",
                  "difference_ms", "waits_matched", "waits_compared", "end", "plan"}
    row = {"delivery", "source", "target", "suggested"}
    assert set(result) == top
    assert set(result["source"]) == set(result["target"]) == side
    assert set(result["suggestion"]) == suggestion
    assert set(result["timeline"][0]) == row
    assert set(result["timeline"][0]["source"]) == {"wait_ms", "at_ms", "retries", "from"}
    docs = DOCS.read_text()
    for key in top | side | suggestion | row | {"wait_ms", "at_ms", "first", "kind", "note"}:
        assert f"`{key}`" in docs, key
    from gateway.migrate.plan_warnings import CODES
    for code in CODES:
        assert f"`{code}`" in docs, code


def test_through_the_console_script():
    proc = subprocess.run(
        [str(GATEWAY), "migrate", "plan", "--from", "rocketmq", "--to", "pulsar", "--json"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["suggestion"]["exact"] is True
    bad = subprocess.run(
        [str(GATEWAY), "migrate", "plan", "--from", "rocketmq", "--to", "rabbitmq",
         "--retry-interval-s", "1801"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert bad.returncode == 2
    assert "to.x_retry_interval_s=1801 is not allowed: 10..1800 s" in bad.stderr
