"""`gateway migrate copy`: move messages from a source to a destination, each copied once.

The loop takes a batch from the source, has the destination store it (each copy at most once:
the destination's ledger records the key of every source message it stored, in the same
transaction as the copy), and only then acknowledges the batch at the source. While the
destination stores batch n the source already hands out batch n+1. Killed at any point, a
second run with the same source copies nothing twice: what the source never saw acknowledged
comes again, and the ledger answers "already stored" for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from gateway.errors import InvalidArgument
from gateway.migrate.endpoint import (
    Destination,
    Item,
    PathOf,
    Source,
    Url,
    parse_url,
    same_place,
)
from gateway.migrate.gateway_side import (
    DEFAULT_PORT,
    SCHEMES,
    GatewayDestination,
    GatewaySource,
)
from gateway.migrate.progress import Progress

DEFAULT_BATCH = 500
MAX_BATCH = 10_000


@dataclass(slots=True)
class CopyResult:
    """What a run did."""

    source: str
    destination: str
    dry_run: bool
    taken: int = 0
    """Messages taken from the source and acknowledged there after their copy was stored."""
    stored: int = 0
    """Copies stored by this run."""
    skipped: int = 0
    """Messages an earlier run had copied already (acknowledged now, not stored again)."""
    by_part: dict[str, int] = field(default_factory=dict)
    """Messages by the part their copies are stored as (`Destination.part`, else the part the
    source hands them out from): dead letters of a broker's dead-letter queue copied with
    `part=dead-letter` count as dead letters, not as ready messages."""
    bytes: int = 0
    seconds: float = 0.0
    counted: bool = True
    """False for a dry run of a source that cannot count without taking (its `count` None)."""
    unchecked: str = ""
    """Why a dry run did not check the destination ("" = checked, `Destination.check`)."""

    @property
    def rate(self) -> float:
        return self.taken / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        parts = ", ".join(f"{n} {p}" for p, n in self.by_part.items() if n) or "nothing"
        note = f" (destination {self.unchecked})" if self.unchecked else ""
        if self.dry_run and not self.counted:
            return (f"dry run: {self.source} cannot count its messages without taking them: "
                    f"how many would be copied to {self.destination} is not known{note}")
        if self.dry_run:
            return f"dry run: {parts} to copy from {self.source} to {self.destination}{note}"
        return (f"copied {self.taken} message(s) ({parts}; {self.stored} stored, "
                f"{self.skipped} already there from an earlier run) from {self.source} to "
                f"{self.destination} in {self.seconds:.1f} s ({self.rate:,.0f} msg/s, "
                f"{self.bytes / max(self.seconds, 1e-9) / 1e6:.1f} MB/s)")

    @property
    def found_none(self) -> bool:
        """The source held no message (counted or taken): a name that does not exist, for a
        source that cannot tell one from an empty one."""
        if self.dry_run:
            return self.counted and not any(self.by_part.values())
        return self.taken == 0

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "destination": self.destination,
                "dry_run": self.dry_run, "counted": self.counted,
                "destination_checked": not self.unchecked, "taken": self.taken,
                "stored": self.stored, "skipped": self.skipped, "by_part": dict(self.by_part),
                "bytes": self.bytes,
                "seconds": round(self.seconds, 3), "rate": round(self.rate, 1)}


@dataclass(frozen=True, slots=True)
class Credentials:
    """What the gateway sides need: bearer tokens, TLS roots, the call timeout."""

    from_token: str = ""
    to_token: str = ""
    ca_file: str = ""
    timeout_s: float = 30.0


SideFactory = Callable[[Url, str, float], object]
"""(url, role "source" / "destination", call timeout in s) -> a Source or Destination (a
product's)."""


def default_ports(products: Mapping[str, int] | None = None) -> dict[str, int]:
    """Each scheme's default port: the gateway's own and the products' (`migration_ports`)."""
    return {**dict.fromkeys(SCHEMES, DEFAULT_PORT), **(products or {})}


def check_apart(source: str, destination: str, ports: Mapping[str, int] | None = None,
                paths: Mapping[str, PathOf] | None = None) -> None:
    """Refuse a destination that is the source itself; `ports` and `paths`: the products'
    default port of each scheme and how they spell a path (`same_place`; the gateway's own
    port is known here)."""
    if same_place(parse_url("from", source), parse_url("to", destination),
                  default_ports(ports), paths):
        raise InvalidArgument("to", destination, "another topic or queue than --from: a "
                              "place copied onto itself would lose the copies")


def open_side(text: str, role: str, credentials: Credentials,
              products: dict[str, SideFactory],
              namings: Collection[str] | None = None) -> Source | Destination:
    """The side a URL names: the gateway's own scheme, or one a product offers. `namings`: the
    naming schemes a gateway URL's `naming=` may name (the products' registry), checked before
    anything is opened; None leaves unknown names to the gateway."""
    field_name = "from" if role == "source" else "to"
    url = parse_url(field_name, text)
    if url.scheme in SCHEMES:
        if role == "source":
            return GatewaySource(url, credentials.from_token, credentials.timeout_s,
                                 credentials.ca_file, namings)
        return GatewayDestination(url, credentials.to_token, credentials.timeout_s,
                                  credentials.ca_file, namings)
    factory = products.get(url.scheme)
    if factory is None:
        known = ", ".join(sorted({*SCHEMES, *products}))
        raise InvalidArgument(field_name, url.shown, f"a URL of scheme {known}")
    side = factory(url, role, credentials.timeout_s)
    return side  # type: ignore[return-value]


async def copy(
    source: Source, destination: Destination, *, dry_run: bool = False,
    batch: int = DEFAULT_BATCH, progress: Progress | None = None,
) -> CopyResult:
    """Copy everything the source holds now; see the module docstring."""
    if not 1 <= batch <= MAX_BATCH:
        raise InvalidArgument("batch", batch, f"1..{MAX_BATCH}")
    result = CopyResult(source.name, destination.name, dry_run)
    await source.open()
    try:
        if dry_run:
            # The destination is checked as the real run opens it, without its side effects:
            # a dry run predicts the real run's status (a queue missing there, a wrong token).
            result.unchecked = await destination.check()
            counts = await source.count(exact=True)
            result.by_part = dict(counts or {})
            if destination.part and counts is not None:
                result.by_part = {destination.part: sum(counts.values())}
            result.counted = counts is not None
            return result
        await destination.open()
        try:
            estimate = await source.count(exact=False)
            if progress is not None:
                progress.start(sum(estimate.values()) if estimate else None)
            started = time.monotonic()
            await _run(source, destination, batch, result, progress)
            result.seconds = time.monotonic() - started
        finally:
            await destination.close()
    finally:
        await source.close()
    if progress is not None:
        progress.finish()
    return result


async def _run(source: Source, destination: Destination, batch: int, result: CopyResult,
               progress: Progress | None) -> None:
    ledger, names, earlier = source.ledger, source.destinations, source.earlier_ledgers
    items = await source.take(batch)
    while items:
        # The next batch is taken while this one is stored: the source's round trip overlaps
        # the destination's commit. Nothing is acknowledged before its copy is stored.
        following = asyncio.ensure_future(source.take(batch))
        try:
            stored = await destination.put(ledger, items, names, earlier)
            await source.ack(items)
        except BaseException:
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
            raise
        _count(result, items, stored.stored, stored.skipped, destination.part)
        if progress is not None:
            progress.advance(len(items), result.bytes)
        items = await following


def _count(result: CopyResult, items: list[Item], stored: int, skipped: int,
           as_part: str) -> None:
    result.taken += len(items)
    result.stored += stored
    result.skipped += skipped
    for item in items:
        part = as_part or item.part
        result.by_part[part] = result.by_part.get(part, 0) + 1
        result.bytes += item.size
