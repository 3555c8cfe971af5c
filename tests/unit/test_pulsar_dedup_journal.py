"""The Pulsar front end's dedup journal: highest sequence ids per (topic, producer name) on
disk, read back after a restart (a torn last line skipped), compacted."""

from __future__ import annotations

from pathlib import Path

from adapters.pulsar.frontend import journal as journal_module
from adapters.pulsar.frontend.ids import DedupRegistry
from adapters.pulsar.frontend.journal import FILE_NAME, Journal


async def test_ids_survive_a_restart_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    first = DedupRegistry(journal=Journal(tmp_path))
    first.load()
    assert first._journal is not None
    first._journal.start()
    await first.persist("orders", "p", 4)
    await first.persist("orders", "p", 9)
    await first.persist("orders", "ünïcode \\ \"name\"", 2)
    await first.persist("other", "p", 1)
    await first._journal.close()
    with (tmp_path / FILE_NAME).open("ab") as f:
        f.write(b'["orders", "p", 12')  # a crash mid-write
    again = DedupRegistry(journal=Journal(tmp_path))
    again.load()
    assert again.last("orders", "p") == 9
    assert again.last("orders", "ünïcode \\ \"name\"") == 2
    assert again.last("other", "p") == 1
    assert again.last("orders", "nobody") == -1
    # Compacted on load: one line per pair.
    assert len((tmp_path / FILE_NAME).read_bytes().splitlines()) == 3


async def test_the_journal_is_compacted_while_running(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(journal_module, "COMPACT_MIN_LINES", 10)
    registry = DedupRegistry(journal=Journal(tmp_path))
    registry.load()
    assert registry._journal is not None
    registry._journal.start()
    for sequence_id in range(50):
        await registry.persist("t", "p", sequence_id)
    await registry._journal.close()
    assert len((tmp_path / FILE_NAME).read_bytes().splitlines()) < 10
    reloaded = DedupRegistry(journal=Journal(tmp_path))
    reloaded.load()
    assert reloaded.last("t", "p") == 49


async def test_a_failed_write_is_reported_and_later_ones_go_on(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.load()
    journal.start()
    real = journal._append

    def full(data: bytes) -> None:
        raise OSError(28, "No space left on device")

    journal._append = full  # type: ignore[method-assign]
    try:
        await journal.record("t", "p", 1)
    except OSError as exc:
        assert exc.errno == 28
    else:
        raise AssertionError("the failed write was not reported")
    journal._append = real  # type: ignore[method-assign]
    await journal.record("u", "p", 2)
    await journal.close()
    again = Journal(tmp_path)
    # The next write rewrote the file with the failed record: the covered ids written with
    # later records count it in.
    assert again.load() == {("t", "p"): 1, ("u", "p"): 2}
