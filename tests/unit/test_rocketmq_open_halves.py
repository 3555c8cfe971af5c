"""`OpenHalves`: a principal's share of open transactions, reserved before a send is stored,
kept for the halves stored, given back when their transactions end."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from adapters.rocketmq.frontend.codec import Rejected
from adapters.rocketmq.frontend.open_halves import OVERHEAD, OpenHalves


@dataclass
class Entry:
    transaction_id: str


def test_a_principal_past_its_share_is_refused_and_others_go_on() -> None:
    halves = OpenHalves(share=10 * OVERHEAD)
    with halves.opening("alice", {0: 4 * OVERHEAD}) as opening:
        opening.stored([Entry("t1")])
    with pytest.raises(Rejected) as info, halves.opening("alice", {0: 5 * OVERHEAD}):
        pass
    assert "principal 'alice'" in info.value.message
    with halves.opening("bob", {0: 8 * OVERHEAD}) as opening:  # his own share
        opening.stored([Entry("t2")])
    halves.ended("t1")
    assert "alice" not in halves.by_owner
    with halves.opening("alice", {0: 9 * OVERHEAD}) as opening:
        opening.stored([Entry("t3")])


def test_what_was_not_stored_is_given_back() -> None:
    halves = OpenHalves(share=100 * OVERHEAD)
    with pytest.raises(RuntimeError), halves.opening("alice", {0: 10, 1: 10}):
        raise RuntimeError("the store failed")
    assert halves.by_owner == {}
    with halves.opening("alice", {0: 10, 2: 10}) as opening:
        assert opening.stored([Entry("t1"), Entry(""), Entry("")]) == ["t1"]  # one refused
    assert halves.by_owner == {"alice": 10 + OVERHEAD}


def test_a_send_past_the_share_is_refused_even_with_nothing_open() -> None:
    """One SendMessage may carry 64 MiB of transactional messages: all of it is counted."""
    halves = OpenHalves(share=2 * OVERHEAD)
    with pytest.raises(Rejected), halves.opening("alice", {0: OVERHEAD, 1: OVERHEAD}):
        pass
    assert halves.by_owner == {}
    unshared = OpenHalves(share=0)
    for i in range(100):
        with unshared.opening("", {0: 1 << 20}) as opening:
            opening.stored([Entry(f"t{i}")])
