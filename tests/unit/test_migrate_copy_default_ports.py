"""`gateway migrate copy` refuses to copy a place onto itself however its URLs spell the port: a
URL without a port means its scheme's default (the product's `migration_ports`, the gateway's
own 50051), so `amqp://127.0.0.1:5672/?queue=q` and `amqp://localhost/?queue=q` are one queue;
and its path as the product spells it (`migration_path`: no virtual host is `/`, `%2F`; a short
Pulsar topic name is its full name). Only the same port and path as written were recognised:
the copy started, found its own copies in the ledger and removed them. Refused with the usual
INVALID_ARGUMENT for `to`, exit 2."""

from __future__ import annotations

import pytest

from gateway.cli import main
from gateway.cli.migrate_move_cmd import _spellings
from gateway.errors import InvalidArgument
from gateway.migrate import copy as cp
from gateway.product import installed

SAME = [
    ("amqp://guest:guest@127.0.0.1:5672/?queue=q", "amqp://guest:guest@localhost/?queue=q"),
    ("amqp://h/?queue=q", "amqp://H.:5672/?queue=q"),
    ("amqps://h:5671/?queue=q", "amqps://h/?queue=q"),
    ("amqp://h:/?queue=q", "amqp://h:5672/?queue=q"),  # an empty port is no port
    ("amqp://[::1]/?queue=q", "amqp://127.0.0.1:5672/?queue=q"),
    ("amqp://[2001:DB8::1]:5672/?queue=q", "amqp://[2001:db8:0::1]/?queue=q"),
    ("amqp://h/?queue=q", "amqps://h:5671/?queue=q"),  # each scheme's default: one broker
    ("pulsar://host:6650/orders?subscription=s", "pulsar://host/orders?subscription=s"),
    ("pulsar+ssl://host:6651/orders?subscription=s", "pulsar://host/orders?subscription=s"),
    ("gateway://127.0.0.1:50051/orders?group=g", "gateway://localhost/orders?group=h"),
    ("gateways://LOCALHOST./orders?group=g", "gateway://[::1]:50051/orders"),
    # The path as the product spells it: the virtual host / and a full topic name.
    ("amqp://h/%2F?queue=q", "amqp://h?queue=q"),
    ("amqp://h/?queue=q", "amqp://h:5672/%2f?queue=q"),
    ("pulsar://h/orders?subscription=s",
     "pulsar://h:6650/persistent://public/default/orders?subscription=s"),
    ("pulsar://h/t/ns/orders?subscription=s",
     "pulsar://h/persistent%3A%2F%2Ft%2Fns%2Forders?subscription=s"),
]

APART = [
    ("amqp://h:5673/?queue=q", "amqp://h/?queue=q"),
    ("amqp://h:5671/?queue=q", "amqp://h/?queue=q"),  # amqp on 5671 is not amqp's default
    ("pulsar://host:6651/orders?subscription=s", "pulsar://host/orders?subscription=s"),
    ("gateway://h:50052/orders?group=g", "gateway://h/orders?group=g"),
    ("amqp://h/?queue=q", "amqp://h/?queue=r"),
    ("pulsar://a/orders?subscription=s", "pulsar://b/orders?subscription=s"),
    ("amqp://h/vh?queue=q", "amqp://h/?queue=q"),
    ("amqp://h/%2Fvh?queue=q", "amqp://h/vh?queue=q"),
    ("pulsar://h/orders?subscription=s",
     "pulsar://h/non-persistent://public/default/orders?subscription=s"),
    ("gateway://h/orders?group=g", "gateway://h/persistent://public/default/orders?group=g"),
]


@pytest.mark.parametrize("source, destination", SAME)
def test_a_default_port_is_the_same_place(source: str, destination: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    for a, b in ((source, destination), (destination, source)):
        code = main(["migrate", "copy", "--from", a, "--to", b])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "to=" in err and "onto itself" in err, err


@pytest.mark.parametrize("source, destination", APART)
def test_other_ports_are_other_places(source: str, destination: str) -> None:
    cp.check_apart(source, destination, *_spellings())
    cp.check_apart(destination, source, *_spellings())


def test_every_product_scheme_has_a_default_port() -> None:
    for product in installed():
        assert set(product.migration_ports) == set(product.migration_schemes), product.name
        assert all(0 < p < 65536 for p in product.migration_ports.values()), product.name


def test_without_ports_only_the_gateway_defaults_are_known() -> None:
    with pytest.raises(InvalidArgument):
        cp.check_apart("gateway://h/t?group=g", "gateway://h:50051/t")
    cp.check_apart("amqp://h/?queue=q", "amqp://h:1/?queue=q")
