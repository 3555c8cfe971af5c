"""What a run of several gateway replicas on one broker must show, counted message by message.

Every delivery any consumer saw is written down (body, consumer, replica, attempt, when it came,
when its settlement was sent, whether the gateway confirmed it); `Ledger.violations` then checks
the rules of README "Several gateways on one broker" against the dead letters read from the
broker itself:

* nothing confirmed is lost: every body whose publish returned is acked (good) or dead-lettered
  (bad); an ack sent to the killed replica that never got its answer counts when the message
  never came again (and the test checks that nothing is left in the broker's queues);
* one consumer at a time: a body is delivered again only after the previous delivery's
  settlement was sent, or (a delivery on the killed replica) after the kill;
* a delivery comes again only when its settlement was not confirmed: a confirmed ack is the last
  delivery, and a confirmed fail is followed by exactly one retry;
* one attempt count: a body's attempts rise by one per delivery (a delivery lost with the killed
  replica, also one it had only prefetched, counts once: one gap is allowed right after the
  kill); its retries rise by one per confirmed failure and by at most one over a delivery lost
  with the killed replica (its failure may have been carried out before the replica died);
* dead-lettered once, after the policy's last retry, for the policy's reason.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Seen:
    """One delivery to one consumer."""

    body: str
    consumer: str
    replica: int
    attempt: int | None
    """Deliveries so far, this one included (None where the client does not show it)."""
    retries: int
    """Failures counted so far."""
    at: float
    """When the consumer got it (time.monotonic)."""
    settle_at: float | None = None
    """When its settlement was sent (None: never, e.g. its replica died first)."""
    outcome: str = ""
    """"ack" or "fail" once settled."""
    confirmed: bool = False
    """The gateway answered the settlement with OK (a native client's: assumed once sent)."""


@dataclass
class Letter:
    """A dead letter as read from the broker's dead-letter queue."""

    body: str
    reason: str
    """Why it died, as the dead letter says (`x-first-death-reason`)."""


@dataclass
class Ledger:
    """Everything one run saw; every method is called from the test's event loop or, for the
    native client's listener thread, only appends (list.append is atomic)."""

    max_retries: int
    reason: str
    """The dead letters' expected reason."""
    published: set[str] = field(default_factory=set)
    """Bodies whose publish returned (confirmed)."""
    attempted: set[str] = field(default_factory=set)
    """Bodies ever sent in a publish (a publish that failed may still have been stored)."""
    seen: list[Seen] = field(default_factory=list)
    letters: list[Letter] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Failures of consumers on replicas that were not killed."""
    kill_at: float | None = None
    killed: int = -1
    restart_at: float | None = None
    """When the killed replica was started again (its new consumers are not the dead ones)."""

    def delivered(self, body: str, consumer: str, replica: int, attempt: int | None,
                  retries: int) -> Seen:
        seen = Seen(body, consumer, replica, attempt, retries, time.monotonic())
        self.seen.append(seen)
        return seen

    @staticmethod
    def good(body: str) -> bool:
        return body.startswith("ok-")

    def acked(self) -> set[str]:
        """Good bodies acked: confirmed, or sent to the killed replica before it died and never
        delivered again (the ack was carried out; the answer was lost with the replica)."""
        out = {s.body for s in self.seen if s.outcome == "ack" and s.confirmed}
        for body, runs in self.by_body().items():
            last = runs[-1]
            if (last.outcome == "ack" and self._lost_with_replica(last)
                    and last.settle_at is not None):
                out.add(body)
        return out

    def dead(self) -> set[str]:
        return {letter.body for letter in self.letters}

    def done(self) -> bool:
        """Every confirmed good body acked and every confirmed bad one dead-lettered."""
        good = {b for b in self.published if self.good(b)}
        return good <= self.acked() and (self.published - good) <= self.dead()

    def dump(self, path: Path, problems: list[str]) -> None:
        """Everything seen, for reading after a failed run."""
        path.write_text(json.dumps({
            "kill_at": self.kill_at, "problems": problems,
            "seen": [asdict(s) for s in self.seen],
            "letters": [asdict(letter) for letter in self.letters],
        }, indent=1))

    def by_body(self) -> dict[str, list[Seen]]:
        out: dict[str, list[Seen]] = defaultdict(list)
        for seen in self.seen:
            out[seen.body].append(seen)
        for runs in out.values():
            runs.sort(key=lambda s: s.at)
        return out

    def _lost_with_replica(self, seen: Seen) -> bool:
        """A delivery held by the killed replica when it died, never settled as far as its
        consumer knows. Its consumer may record it a little after the kill (the frame was on
        its way); anything its consumers record before the replica is started again came from
        the killed process."""
        return (seen.replica == self.killed and self.kill_at is not None
                and (self.restart_at is None or seen.at < self.restart_at)
                and not seen.confirmed)

    def violations(self) -> list[str]:
        out: list[str] = list(self.errors)
        acked, dead = self.acked(), self.dead()
        for body in sorted(self.published):
            if self.good(body) and body not in acked:
                out.append(f"{body}: confirmed publish, never acked")
            if not self.good(body) and body not in dead:
                out.append(f"{body}: confirmed publish, never dead-lettered")
        unknown = {s.body for s in self.seen} - self.attempted
        out += [f"{body}: delivered but never published" for body in sorted(unknown)]
        letters: dict[str, list[Letter]] = defaultdict(list)
        for letter in self.letters:
            letters[letter.body].append(letter)
        for body, runs in self.by_body().items():
            out += self._check_runs(body, runs, letters.get(body, []))
        return out

    def _check_runs(self, body: str, runs: list[Seen], letters: list[Letter]) -> list[str]:
        out: list[str] = []
        for before, after in itertools.pairwise(runs):
            where = (f"{body}: {before.consumer}#{before.retries} -> "
                     f"{after.consumer}#{after.retries}")
            lost = self._lost_with_replica(before)
            if before.outcome == "ack" and before.confirmed:
                out.append(f"{where}: delivered again after a confirmed ack")
            elif not (before.confirmed or lost):
                out.append(f"{where}: delivered again though not lost with the killed replica")
            # One consumer at a time: the next delivery comes after the settlement was sent,
            # or after the replica holding the earlier one died.
            freed = self.kill_at if lost else before.settle_at
            if freed is None or after.at < freed:
                out.append(f"{where}: two consumers held the message at once")
            step = after.retries - before.retries
            if not (step == 1 or (lost and step == 0)):
                out.append(f"{where}: retries went from {before.retries} to {after.retries}")
            if before.attempt is not None and after.attempt is not None:
                gap = after.attempt - before.attempt
                after_kill = self.kill_at is not None and before.at <= self.kill_at <= after.at
                if gap != 1 and not (gap == 2 and after_kill):
                    out.append(f"{where}: attempt went from {before.attempt} to {after.attempt}")
        if runs and runs[0].retries != 0:
            out.append(f"{body}: first delivery counts {runs[0].retries} retries")
        if runs and runs[0].attempt not in (None, 1, 2):
            out.append(f"{body}: first delivery at attempt {runs[0].attempt}")
        if self.good(body):
            if letters:
                out.append(f"{body}: a good message was dead-lettered")
            return out
        if len(letters) != 1:
            out.append(f"{body}: dead-lettered {len(letters)} times")
        if runs and (runs[-1].retries != self.max_retries or runs[-1].outcome != "fail"):
            out.append(f"{body}: dead-lettered after a delivery with {runs[-1].retries} retries")
        out += [f"{body}: dead letter says {letter.reason}" for letter in letters
                if letter.reason != self.reason]
        return out
