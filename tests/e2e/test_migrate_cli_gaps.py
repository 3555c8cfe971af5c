"""`gateway migrate copy` refuses what a black-box attack found it taking, through
the command against running gateways (and the RabbitMQ of the other tests):

* an unknown `naming=` on either side is refused before anything is copied, dry run or not,
  naming the side and listing the schemes (it passed the dry run and failed the real run after
  its first batch, exit 7);
* a source topic the gateway does not hold is refused (it copied nothing and exited 0); a
  source that held nothing gets a warning;
* a URL without a topic names its side (`from=` / `to=`), not `url=`;
* garbage in URLs (port 0, a #fragment, credentials on a gateway URL, an empty option, a queue
  name the AMQP client cannot declare) is refused with exit 2, no traceback, no default."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import URL
from migrate_procs import Proc, migrate, read_part, start_gateway, stop, two_gateways

from gateway.client import GatewayClient

SCHEMES = ("amqp", "pulsar-2.6", "pulsar-2.7", "pulsar-2.9", "rabbitmq", "rocketmq")


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[tuple[Proc, Proc]]:
    """Two running gateways: a source and a destination."""
    with two_gateways(tmp_path) as pair:
        yield pair


async def _publish(target: str, topic: str, count: int) -> None:
    async with GatewayClient(target) as client:
        await client.publish(topic, [f"m{i}".encode() for i in range(count)])


async def test_an_unknown_naming_is_refused_before_anything_is_copied(
    gateways: tuple[Proc, Proc],
) -> None:
    source, destination = gateways
    await _publish(source.target, "orders", 3)
    url_a = f"gateway://{source.target}/orders?group=billing&new-group=true"
    url_b = f"gateway://{destination.target}/orders?group=billing"
    for side, args in (("to", ["--from", url_a, "--to", url_b + "&naming=bogus"]),
                       ("from", ["--from", url_a + "&naming=bogus", "--to", url_b]),
                       ("to", ["--from", url_a, "--to", url_b + "&naming="])):
        for dry in ([], ["--dry-run"]):
            run = migrate("copy", *args, *dry)
            assert run.returncode == 2, (args, dry, run.stdout, run.stderr)
            assert f"{side}='gateway://" in run.stderr, run.stderr
            assert "naming=" in run.stderr and ", ".join(SCHEMES) in run.stderr, run.stderr
            assert "Traceback" not in run.stderr
    assert len(await read_part(source.target, "orders", "billing", "ready")) == 3
    assert await read_part(destination.target, "orders", "billing", "ready") == []
    # A scheme the products register still goes through.
    run = migrate("copy", "--from", url_a, "--to", url_b + "&naming=pulsar-2.9")
    assert run.returncode == 0, run.stderr
    assert len(await read_part(destination.target, "orders", "billing", "ready")) == 3


async def test_a_source_topic_the_gateway_does_not_hold_is_refused(
    gateways: tuple[Proc, Proc],
) -> None:
    source, destination = gateways
    await _publish(source.target, "orders", 2)
    url_b = f"gateway://{destination.target}/orders?group=billing"
    typo = f"gateway://{source.target}/orderz?group=billing"
    for dry in ([], ["--dry-run"]):
        run = migrate("copy", "--from", typo, "--to", url_b, *dry)
        assert run.returncode == 2, (dry, run.stdout, run.stderr)
        assert "no topic 'orderz'" in run.stderr and "'orders'" in run.stderr, run.stderr
    assert await read_part(destination.target, "orders", "billing", "ready") == []

    url_a = f"gateway://{source.target}/orders?group=billing&new-group=true"
    first = migrate("copy", "--from", url_a, "--to", url_b)
    assert first.returncode == 0, first.stderr
    assert "warning" not in first.stderr
    # The topic is there and empty now: done, with a word that nothing was found.
    again = migrate("copy", "--from", url_a, "--to", url_b)
    assert again.returncode == 0, again.stderr
    assert "warning: 0 messages found" in again.stderr, again.stderr


def test_a_url_without_a_topic_names_its_side() -> None:
    for side, args in (("from", ["--from", "gateway://127.0.0.1:1/?group=g",
                                 "--to", "gateway://127.0.0.1:2/t"]),
                       ("to", ["--from", "gateway://127.0.0.1:1/t?group=g",
                               "--to", "gateway://127.0.0.1:2/?group=g"])):
        run = migrate("copy", *args, "--dry-run")
        assert run.returncode == 2, run.stderr
        assert f"{side}='gateway://" in run.stderr and "a topic" in run.stderr, run.stderr
        assert "url=" not in run.stderr


GOOD_TO = "gateway://127.0.0.1:2/t?group=g"
GARBAGE = [
    # port 0 meant the default port
    ("gateway://127.0.0.1:0/t?group=g", GOOD_TO, "from", "a port 1..65535"),
    (f"{URL.rsplit(':', 1)[0]}:0/?queue=q", GOOD_TO, "from", "a port 1..65535"),
    # a fragment was cut off
    ("gateway://127.0.0.1:1/t?group=g#x", GOOD_TO, "from", "no #fragment"),
    # a password on a gateway URL was dropped
    ("gateway://u:secret@127.0.0.1:1/t?group=g", GOOD_TO, "from", "--from-token-file"),
    # an empty part= meant no part
    ("gateway://127.0.0.1:1/t?group=g", "gateway://127.0.0.1:2/t?group=g&part=", "to",
     "part one of"),
    # names the destination gateway refuses with the first batch (exit 7), after a dry run
    ("gateway://127.0.0.1:1/t?group=g", "gateway://127.0.0.1:2/bad%01topic?group=g", "to",
     "topic: at most 255 bytes"),
    ("gateway://127.0.0.1:1/t?group=g", "gateway://127.0.0.1:2/t?group=%20", "to",
     "group: a non-empty name"),
    ("gateway://127.0.0.1:1/t?group=g", f"gateway://127.0.0.1:2/{'x' * 256}?group=g", "to",
     "topic: at most 255 bytes"),
    # a queue name the AMQP client library cannot declare: a ValueError traceback
    (f"{URL}?queue=\u00f6", GOOD_TO, "from", "?queue=NAME"),
    ("gateway://127.0.0.1:1/t?group=g", f"{URL}?queue=a%0Ab", "to", "?queue=NAME"),
]


@pytest.mark.parametrize(("source", "destination", "side", "expected"), GARBAGE)
def test_garbage_in_urls_is_refused_without_a_traceback(
    source: str, destination: str, side: str, expected: str,
) -> None:
    run = migrate("copy", "--from", source, "--to", destination, "--dry-run")
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert f"{side}='" in run.stderr and expected in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and "secret" not in run.stderr, run.stderr


def test_a_pulsar_topic_that_does_not_exist_reads_as_empty_with_a_warning(
    tmp_path: Path,
) -> None:
    """A Pulsar source cannot tell a topic that does not exist (the broker creates it on
    subscribe) from an empty one: the run copies nothing, exit 0, and says so on stderr; the
    dry run says it cannot count (it said "nothing to copy")."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    broker = start_gateway(tmp_path / "broker", "--pulsar-listen", f"127.0.0.1:{port}")
    dest = start_gateway(tmp_path / "dest")
    try:
        args = ["copy", "--from", f"pulsar://127.0.0.1:{port}/no-such-topic?subscription=s",
                "--to", f"gateway://{dest.target}/orders"]
        dry = migrate(*args, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "cannot count" in dry.stdout and "nothing" not in dry.stdout, dry.stdout
        run = migrate(*args)
        assert run.returncode == 0, run.stderr
        assert "copied 0 message(s)" in run.stdout, run.stdout
        assert "warning: 0 messages found at pulsar://" in run.stderr, run.stderr
    finally:
        stop(broker)
        stop(dest)


@pytest.mark.parametrize("url", [
    "amqp://guest:s3cretpw@[::1:5672/?queue=q",  # malformed IPv6
    "amqp://guest:s3cretpw@host:port/?queue=q",  # a port that is not a number
    "amqp://guest:s3cretpw@host/?queue=q&queue=r",  # an option twice
    "amqp://guest:s3cretpw@/?queue=q",  # no host
])
def test_a_url_that_cannot_be_read_is_not_echoed_with_its_password(url: str) -> None:
    """Errors about a URL that could be read show it without its password; those about one
    that could not be read showed it whole, password and all."""
    run = migrate("copy", "--from", url, "--to", "gateway://127.0.0.1:1/t?group=g", "--dry-run")
    assert run.returncode == 2, run.stderr
    assert "from='amqp://guest:***@" in run.stderr, run.stderr
    assert "s3cretpw" not in run.stderr + run.stdout
