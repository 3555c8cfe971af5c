"""`gateway plan`: the timelines it prints match SEMANTICS.md for every policy.

Document numbers: RocketMQ 000, 002, 003; RabbitMQ 001; Pulsar 004.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from documented import DELAY_LEVELS_MS as PULSAR_LEVELS_MS
from documented import HOUR, MINUTE, SECOND
from documented import ROCKETMQ_TABLE_MS as TABLE_MS

from gateway.cli import main

GATEWAY = Path(sys.executable).with_name("gateway")


def plan_json(capsys, *args: str) -> dict:
    code = main(["plan", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def plan_error(capsys, *args: str) -> str:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    return err


def waits(result: dict) -> list[int]:
    return [a["delay_ms"] for a in result["attempts"]]


def cumulative(steps: list[int]) -> list[int]:
    total, out = 0, []
    for step in steps:
        total += step
        out.append(total)
    return out


def test_rocketmq_lists_17_deliveries_then_dlq(capsys):
    """16-step table, 17 deliveries, then `%DLQ%` + group (000, 002, 003)."""
    result = plan_json(capsys, "--policy", "rocketmq", "--group", "G")
    assert result["policy"] == "rocketmq"
    assert result["max_retries"] == 16
    assert len(result["attempts"]) == 17
    assert [a["attempt"] for a in result["attempts"]] == list(range(1, 18))
    assert waits(result) == [0, *TABLE_MS]
    assert [a["at_ms"] for a in result["attempts"]] == cumulative([0, *TABLE_MS])
    assert [a["retries"] for a in result["attempts"]] == list(range(17))
    assert [a["topic"] for a in result["attempts"]] == ["topic"] + ["%RETRY%G"] * 16
    assert result["truncated"] is False
    assert result["disposition"] == {"kind": "dlq", "destination": "%DLQ%G", "after_attempts": 17}


def test_worked_example_through_the_console_script():
    """Ready 0 s, pulled 5 s, fails 11 s, 10 s interval -> READY at 21 s (003, 000)."""
    proc = subprocess.run(
        [
            str(GATEWAY),
            "plan",
            "--policy",
            "rocketmq",
            "--processing-ms",
            "6000",
            "--pickup-ms",
            "5000",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    second = json.loads(proc.stdout)["attempts"][1]
    assert second["ready_ms"] == 21 * SECOND
    assert second["delay_ms"] == 10 * SECOND
    assert second["at_ms"] == 21 * SECOND


def test_worked_example_in_process(capsys):
    """The same timeline for later retries: READY = failure + interval (003)."""
    result = plan_json(
        capsys, "--policy", "rocketmq", "--processing-ms", "6000", "--pickup-ms", "5000"
    )
    ready = [a["ready_ms"] for a in result["attempts"]]
    assert ready[:3] == [0, 21 * SECOND, 21 * SECOND + 11 * SECOND + 30 * SECOND]


def test_rocketmq_table_output(capsys):
    """The human table ends with the disposition (002)."""
    assert main(["plan", "--policy", "rocketmq", "--group", "G"]) == 0
    out = capsys.readouterr().out
    assert "then: dead-lettered to %DLQ%G after 17 deliveries" in out
    assert "10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h, then 2h" in out


@pytest.mark.parametrize("version", ["4", "5"])
def test_rocketmq_past_16_waits_2h(capsys, version):
    """Every retry past 16 waits 2 h (000, 003)."""
    result = plan_json(capsys, "--policy", "rocketmq", "--max-retries", "20", "--version", version)
    assert waits(result) == [0, *TABLE_MS, 2 * HOUR, 2 * HOUR, 2 * HOUR, 2 * HOUR]
    assert result["disposition"]["after_attempts"] == 21


def test_rocketmq_requested_level(capsys):
    """A requested delay level applies to every retry (002)."""
    result = plan_json(capsys, "--policy", "rocketmq", "--level", "5", "--max-retries", "3")
    assert waits(result) == [0, MINUTE, MINUTE, MINUTE]


def test_rocketmq_broadcast_drops_at_first_failure(capsys):
    """Broadcasting: no retry (000, 002)."""
    result = plan_json(capsys, "--policy", "rocketmq", "--broadcast")
    assert len(result["attempts"]) == 1
    assert result["disposition"] == {"kind": "discard", "destination": None, "after_attempts": 1}


def test_rocketmq_dlq_off_discards(capsys):
    """5.x, dead-lettering off: discard (003)."""
    result = plan_json(
        capsys, "--policy", "rocketmq", "--option", "dead_letter=false", "--max-retries", "2"
    )
    assert waits(result) == [0, *TABLE_MS[:2]]
    assert result["disposition"]["kind"] == "discard"


def test_rocketmq_4x_no_upper_bound(capsys):
    """4.x TCP: no upper bound on max retries (000)."""
    result = plan_json(
        capsys, "--policy", "rocketmq", "--version", "4", "--max-retries", "5000", "--limit", "20"
    )
    assert result["max_retries"] == 5000
    assert result["truncated"] is True
    assert len(result["attempts"]) == 20
    assert result["disposition"]["after_attempts"] == 5001


def test_rocketmq_orderly(capsys):
    """Ordered: fixed 1000 ms by default, Integer.MAX_VALUE retries, in place (000)."""
    result = plan_json(capsys, "--policy", "rocketmq-orderly", "--group", "G", "--limit", "5")
    assert waits(result) == [0, 1000, 1000, 1000, 1000]
    assert {a["topic"] for a in result["attempts"]} == {"topic"}
    assert result["max_retries"] == 2_147_483_647
    assert result["truncated"] is True
    assert result["disposition"] == {
        "kind": "dlq",
        "destination": "%DLQ%G",
        "after_attempts": 2_147_483_648,
    }


def test_rocketmq_orderly_suspend(capsys):
    """suspendTimeMillis sets the interval (000)."""
    result = plan_json(
        capsys, "--policy", "rocketmq-orderly", "--suspend-ms", "10", "--max-retries", "2"
    )
    assert waits(result) == [0, 10, 10]
    assert result["disposition"]["after_attempts"] == 3


@pytest.mark.parametrize(
    ("args", "wait"),
    [
        ([], 30 * SECOND),
        (["--processing-ms", "6000"], 24 * SECOND),
        (["--processing-ms", "40000"], 0),
        (["--invisible-s", "10"], 10 * SECOND),
    ],
)
def test_rocketmq_simple(capsys, args, wait):
    """Simple: retry interval = invisible - processing; a timeout makes it 0 (003)."""
    result = plan_json(capsys, "--policy", "rocketmq-simple", "--group", "G", *args)
    assert waits(result) == [0] + [wait] * 16
    assert result["disposition"] == {"kind": "dlq", "destination": "%DLQ%G", "after_attempts": 17}


@pytest.mark.parametrize(("flag", "interval"), [([], 5 * MINUTE), (["--ordered"], MINUTE)])
def test_rocketmq_http(capsys, flag, interval):
    """HTTP: 1 min ordered, 5 min unordered, 288 retries = 289 deliveries (000)."""
    result = plan_json(capsys, "--policy", "rocketmq-http", "--group", "G", *flag, "--limit", "300")
    assert len(result["attempts"]) == 289
    assert set(waits(result)[1:]) == {interval}
    assert result["max_retries"] == 288
    assert result["disposition"]["after_attempts"] == 289
    assert result["truncated"] is False


def test_rabbitmq_default_discards_after_16_retries(capsys):
    """16 retries; no dead-letter exchange -> discarded (001)."""
    result = plan_json(capsys, "--policy", "rabbitmq", "--retry-interval-s", "10")
    assert waits(result) == [0] + [10 * SECOND] * 16
    assert result["disposition"] == {"kind": "discard", "destination": None, "after_attempts": 17}


def test_rabbitmq_dead_letter_exchange(capsys):
    """With a dead-letter exchange the message goes to the dead-letter queue (001)."""
    result = plan_json(
        capsys,
        "--policy",
        "rabbitmq",
        "--topic",
        "orders",
        "--dlx",
        "dlx",
        "--retry-interval-s",
        "1800",
    )
    assert waits(result) == [0] + [1800 * SECOND] * 16
    assert result["settings"]["x_dead_letter_exchange"] == "dlx"
    assert result["disposition"] == {
        "kind": "dlq",
        "destination": "orders.dlq",
        "after_attempts": 17,
    }


def test_rabbitmq_ack_timeout_is_a_failure(capsys):
    """Not acknowledged within 1 minute counts as a failure (001)."""
    result = plan_json(
        capsys,
        "--policy",
        "rabbitmq",
        "--retry-interval-s",
        "10",
        "--processing-ms",
        "90000",
        "--limit",
        "3",
    )
    assert [a["ready_ms"] for a in result["attempts"]] == [0, 70 * SECOND, 140 * SECOND]


def test_pulsar_incremental_then_dlq(capsys):
    """Incremental 1 s, 5 s, 10 s, …; 16 retries, the 17th failure -> DLQ (004)."""
    result = plan_json(capsys, "--policy", "pulsar", "--topic", "orders", "--group", "sub")
    assert waits(result) == [0, *PULSAR_LEVELS_MS[:16]]
    assert [a["topic"] for a in result["attempts"]] == ["orders"] + ["orders-sub-RETRY"] * 16
    assert result["disposition"] == {
        "kind": "dlq",
        "destination": "orders-sub-DLQ",
        "after_attempts": 17,
    }


@pytest.mark.parametrize(
    ("scheme", "retry", "dlq"),
    [
        ("pulsar-2.9", "persistent://t/ns/o-sub-RETRY", "persistent://t/ns/o-sub-DLQ"),
        ("pulsar-2.7", "persistent://t/ns/sub-RETRY", "persistent://t/ns/sub-DLQ"),
        ("pulsar-2.6", "persistent://t/ns/sub-retry", "persistent://t/ns/sub-dlq"),
    ],
)
def test_pulsar_names_per_scheme(capsys, scheme, retry, dlq):
    """Retry and DLQ topic names per cluster version (004)."""
    result = plan_json(
        capsys,
        "--policy",
        "pulsar",
        "--topic",
        "persistent://t/ns/o",
        "--group",
        "sub",
        "--naming",
        scheme,
        "--max-retries",
        "1",
    )
    assert result["naming"] == scheme
    assert [a["topic"] for a in result["attempts"]] == ["persistent://t/ns/o", retry]
    assert result["disposition"]["destination"] == dlq


@pytest.mark.parametrize("kind", ["exclusive", "failover"])
def test_pulsar_exclusive_retries_at_once(capsys, kind):
    """Exclusive/Failover: the retry is immediate (004)."""
    result = plan_json(capsys, "--policy", "pulsar", "--subscription-type", kind, "--delay-s", "60")
    assert waits(result) == [0] * 17
    assert result["disposition"]["kind"] == "dlq"


def test_pulsar_requested_delay_and_level(capsys):
    """reconsumeLater with a delay or a level (004)."""
    by_delay = plan_json(capsys, "--policy", "pulsar", "--delay-s", "864000", "--max-retries", "1")
    assert waits(by_delay) == [0, 864_000 * SECOND]
    by_level = plan_json(capsys, "--policy", "pulsar", "--level", "3", "--max-retries", "2")
    assert waits(by_level) == [0, 10 * SECOND, 10 * SECOND]


def test_pulsar_nack_unlimited(capsys):
    """negativeAcknowledge: 1 min, no limit without a dead-letter policy (004)."""
    result = plan_json(capsys, "--policy", "pulsar-nack", "--limit", "10")
    assert waits(result) == [0] + [MINUTE] * 9
    assert result["max_retries"] is None
    assert result["truncated"] is True
    assert result["disposition"] == {"kind": "none", "destination": None, "after_attempts": None}


def test_pulsar_nack_with_limit(capsys):
    """negativeAcknowledge with maxRedeliverCount 16: the 17th failure -> DLQ (004)."""
    result = plan_json(capsys, "--policy", "pulsar-nack", "--max-retries", "16", "--group", "s")
    assert len(result["attempts"]) == 17
    assert result["disposition"] == {
        "kind": "dlq",
        "destination": "topic-s-DLQ",
        "after_attempts": 17,
    }


def test_pulsar_nack_exclusive_never_exhausted(capsys):
    """Exclusive: the count stays 0, so a limit never triggers (004)."""
    result = plan_json(
        capsys,
        "--policy",
        "pulsar-nack",
        "--subscription-type",
        "exclusive",
        "--max-retries",
        "1",
        "--limit",
        "10",
    )
    assert {a["retries"] for a in result["attempts"]} == {0}
    assert len(result["attempts"]) == 10
    assert result["disposition"]["kind"] == "none"


@pytest.mark.parametrize(
    ("args", "texts"),
    [
        (["--policy", "kafka"], ["policy", "rocketmq", "pulsar"]),
        (["--policy", "pulsar", "--naming", "pulsar-3"], ["naming", "pulsar-2.9"]),
        (["--policy", "rocketmq", "--option", "colour=red"], ["policy_options", "max_retries"]),
        (["--policy", "rocketmq", "--option", "novalue"], ["option", "KEY=VALUE"]),
        (["--policy", "rocketmq", "--option", "max_retries=1", "--option", "max_retries=2"],
         ["option='max_retries=2'", "each KEY once"]),  # the last one won, silently
        (["--policy", "rocketmq", "--option", "max_retries=1", "--max-retries", "2"],
         ["max-retries", "--option max_retries"]),  # the flag won, silently
        (["--policy", "rocketmq", "--max-retries", "1001"], ["max_retries", "0..1000"]),
        (["--policy", "rocketmq-orderly", "--suspend-ms", "5"], ["suspend_ms", "10..30000 ms"]),
        (["--policy", "rocketmq-simple", "--invisible-s", "5"], ["invisible_s=5", "10..43200 s"]),
        (["--policy", "rocketmq-http", "--max-retries", "3"], ["max_retries", "not configurable"]),
        (["--policy", "rabbitmq", "--retry-interval-s", "5"], ["x_retry_interval_s", "10..1800 s"]),
        (["--policy", "rabbitmq", "--retry-interval-s", "1801"], ["x_retry_interval", "10..1800"]),
        (["--policy", "pulsar", "--delay-s", "0"], ["delay_s=0", "1..864000 s"]),  # as given
        (["--policy", "pulsar", "--delay-s", "864001"], ["delay_s=864001", "1..864000 s"]),
        (["--policy", "pulsar", "--delay-ms", "0"], ["delay_ms=0", "1000..864000000 ms"]),
        (["--policy", "rocketmq", "--group", "a#b"], ["group='a#b'", "without '#'"]),
        (["--policy", "pulsar", "--level", "19"], ["delay_level", "1..18"]),
        (["--policy", "pulsar", "--subscription-type", "x"], ["subscription_type", "failover"]),
        (["--policy", "rocketmq", "--invisible-s", "30"], ["invisible_s", "rocketmq-simple"]),
        (["--policy", "rocketmq", "--limit", "0"], ["limit", "1..10000"]),
        (["--policy", "rocketmq", "--processing-ms", "-1"], ["processing_ms", "0..34560000000 ms"]),
        (["--policy", "pulsar", "--delay-ms", "1", "--delay-s", "1"], ["delay_s", "--delay-ms"]),
        (["--policy", "rocketmq", "--group", ""], ["group", "non-empty"]),  # printed %RETRY%
        (["--policy", "pulsar", "--topic", "t\n"], ["topic", "printable"]),
        (["--policy", "pulsar", "--topic", "t" * 256], ["topic", "255 bytes"]),
    ],
)
def test_bad_input_exits_2_with_field_and_range(capsys, args, texts):
    """Bad input exits 2 and names the field and the allowed values on stderr (000-004)."""
    err = plan_error(capsys, *args)
    assert err.startswith("gateway: error: ")
    for text in texts:
        assert text in err


def test_bad_input_through_the_console_script():
    """The installed command exits 2 with the field and range on stderr (000)."""
    proc = subprocess.run(
        [str(GATEWAY), "plan", "--policy", "rocketmq-orderly", "--suspend-ms", "5", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "suspend_ms" in proc.stderr
    assert "10..30000 ms" in proc.stderr
