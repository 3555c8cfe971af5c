"""The MQv2-HMAC-SHA1 check against signatures made by the RocketMQ SDK's own signer."""

from __future__ import annotations

import calendar

import pytest
from rocketmq import ClientConfiguration, Credentials
from rocketmq.v5.util.signature import Signature

from adapters.rocketmq.frontend.auth import Authenticator, parse_authorization, sign
from gateway.errors import Unauthenticated

NOW = calendar.timegm((2026, 11, 22, 3, 0, 0, 0, 0, 0))
"""2026-11-22T03:00:00Z."""


def _metadata(ak: str, sk: str, date_time: str) -> list[tuple[str, str]]:
    auth = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature="
    return [("x-mq-date-time", date_time), ("authorization", auth + sign(sk, date_time))]


def _auth(offset_s: int = 0, skew_s: int = 60) -> Authenticator:
    return Authenticator({"ak1": "sk1"}, skew_s, now_s=lambda: NOW, utc_offset_s=lambda _: offset_s)


def test_sdk_signature_is_accepted() -> None:
    config = ClientConfiguration("127.0.0.1:1", Credentials("ak1", "sk1"))
    metadata = Signature.metadata(config, "client-1")
    assert Authenticator({"ak1": "sk1"}, 900).check(metadata) == "ak1"


def test_sdk_signature_with_wrong_secret_is_rejected_clearly() -> None:
    config = ClientConfiguration("127.0.0.1:1", Credentials("ak1", "not-the-secret"))
    with pytest.raises(Unauthenticated, match="signature mismatch for access key 'ak1'"):
        Authenticator({"ak1": "sk1"}, 900).check(Signature.metadata(config, "client-1"))


def test_utc_date_within_skew_is_accepted() -> None:
    assert _auth().check(_metadata("ak1", "sk1", "20261122T030045Z")) == "ak1"


def test_local_time_with_z_suffix_is_accepted() -> None:
    # The SDK formats local time (here UTC+8) and appends Z.
    assert _auth(offset_s=8 * 3600).check(_metadata("ak1", "sk1", "20261122T110010Z")) == "ak1"


def test_date_outside_skew_is_rejected() -> None:
    with pytest.raises(Unauthenticated, match="more than 60 s away"):
        _auth().check(_metadata("ak1", "sk1", "20261122T030500Z"))


def test_unknown_access_key_is_rejected() -> None:
    with pytest.raises(Unauthenticated, match="unknown access key 'other'"):
        _auth().check(_metadata("other", "sk1", "20261122T030000Z"))


def test_missing_authorization_is_rejected() -> None:
    with pytest.raises(Unauthenticated, match="missing authorization header"):
        _auth().check([("x-mq-date-time", "20261122T030000Z")])


def test_malformed_date_is_rejected() -> None:
    with pytest.raises(Unauthenticated, match="not a date"):
        _auth().check(_metadata("ak1", "sk1", "yesterday"))


def test_other_algorithm_is_rejected() -> None:
    with pytest.raises(Unauthenticated, match="only MQv2-HMAC-SHA1"):
        _auth().check([("authorization", "Basic abc"), ("x-mq-date-time", "20261122T030000Z")])


def test_credential_scope_after_slash_is_ignored() -> None:
    header = "MQv2-HMAC-SHA1 Credential=ak1/scope, SignedHeaders=x-mq-date-time, Signature=ab"
    assert parse_authorization(header) == ("ak1", "x-mq-date-time", "ab")


def test_without_credentials_everything_passes() -> None:
    auth = Authenticator(None, 0)
    assert not auth.enabled
    assert auth.check([]) == ""


def test_real_clock_default_accepts_a_fresh_sdk_signature() -> None:
    config = ClientConfiguration("127.0.0.1:1", Credentials("ak1", "sk1"))
    auth = Authenticator({"ak1": "sk1"}, 5)
    assert auth.check(Signature.metadata(config, "c")) == "ak1"


@pytest.mark.parametrize("header", ["authorization", "x-mq-date-time"])
def test_an_authentication_header_that_is_not_text_is_refused_naming_it(header: str) -> None:
    metadata: list[tuple[str, str | bytes]] = [
        (k, v.encode() if k != header else b"\xff\xfe") for k, v in
        _metadata("ak1", "sk1", "20261122T030000Z")]
    with pytest.raises(Unauthenticated, match=f"the {header} header is not UTF-8 text"):
        _auth().check(metadata)


def test_binary_headers_the_check_does_not_read_are_not_decoded() -> None:
    metadata: list[tuple[str, str | bytes]] = [
        ("x-junk-bin", b"\xff"), ("authorization-bin", b"\x80"),
        *_metadata("ak1", "sk1", "20261122T030000Z")]
    assert _auth().check(metadata) == "ak1"
