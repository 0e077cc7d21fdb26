"""GC on a storage that refuses writes (a full disk): it fails before holding writers up,
and an error while it holds the lock is the one raised.

Found by an adversarial probe on an 8 MB tmpfs: GC took its lock, failed to write
``gc/clock``, then failed to release the lock (that write needs space too). The
user saw the release's error, naming no object, and the lock stayed: every
commit waited ~35 s after space was freed. The storage's clock is now read
before the lock is taken, and a failed release is a note on the real error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aging import settle
from gc_helpers import build_history

import merkle
from merkle.errors import StorageError
from merkle.gc import collect
from merkle.gc.report import load_reports
from merkle.refs import GCLock
from merkle.refs.gclock import read_lock


def locks(conn: merkle.Connection) -> list[str]:
    return [info.key for info in conn.store.list("gc/lock/")]


def test_a_clock_that_cannot_be_written_stops_gc_before_it_takes_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with merkle.connect(tmp_path / "lake") as conn:
        build_history(conn, commits=2)

        def full(key: str, data: bytes) -> None:
            raise StorageError(f"cannot write {key!r}: [Errno 28] No space left on device")

        monkeypatch.setattr(conn.store, "put_hint", full)
        with pytest.raises(StorageError, match="gc/clock"):
            merkle.gc(conn, keep_versions=1, grace="0s")
        assert locks(conn) == [], "no lock left behind to hold writers up"


def test_a_lock_that_cannot_be_released_is_a_note_on_the_error_that_stopped_gc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with merkle.connect(tmp_path / "lake") as conn:
        build_history(conn, commits=2)

        def stops(*args: Any, **kwargs: Any) -> None:
            raise StorageError("cannot write 'refs/shop/...': [Errno 28] No space left on device")

        def unreleasable(self: GCLock) -> None:
            raise StorageError("cannot write 'gc/lock/...': [Errno 28] No space left on device")

        monkeypatch.setattr(collect, "_collect", stops)
        monkeypatch.setattr(GCLock, "release", unreleasable)
        with pytest.raises(StorageError, match="refs/shop") as raised:
            merkle.gc(conn, keep_versions=1, grace="0s")
        notes = " ".join(getattr(raised.value, "__notes__", []))
        assert "could not be released" in notes, notes
        assert "--break-lock" in notes, notes


def test_a_lock_that_cannot_be_released_after_a_collection_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with merkle.connect(tmp_path / "lake") as conn:
        build_history(conn, commits=2)

        def unreleasable(self: GCLock) -> None:
            raise StorageError("cannot write 'gc/lock/...': [Errno 28] No space left on device")

        monkeypatch.setattr(GCLock, "release", unreleasable)
        with pytest.raises(StorageError, match=r"could not be released.*--break-lock"):
            merkle.gc(conn, keep_versions=1, grace="0s")


def _report_puts_fail(conn: merkle.Connection, monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    """Make every write of a GC report fail once ``after`` of them have gone through."""
    real = conn.store.put
    seen = [0]

    def put(key: str, data: bytes) -> None:
        if key.startswith("gc/reports/"):
            seen[0] += 1
            if seen[0] > after:
                raise StorageError(f"cannot write {key!r}: [Errno 27] File too large")
        real(key, data)

    monkeypatch.setattr(conn.store, "put", put)


def test_a_report_that_cannot_be_written_stops_gc_before_it_trims_or_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """operations.md: GC writes its report before it deletes. It wrote it only after the
    trim and the sweep, and then said "nothing was written" (crash probe: a full disk
    trimmed the journal and deleted 13 of 17 blocks, then failed with no report)."""
    with merkle.connect(tmp_path / "lake") as conn:
        build_history(conn, commits=3)
        blocks = {cid for cid, _ in conn.blocks.list()}
        versions = [e.version for e in conn.history("shop")]
        _report_puts_fail(conn, monkeypatch, after=0)
        with pytest.raises(StorageError, match="gc/reports/"):
            merkle.gc(conn, keep_versions=1, grace="0s")
        monkeypatch.undo()
        assert {cid for cid, _ in conn.blocks.list()} == blocks, "nothing deleted"
        assert [e.version for e in conn.history("shop")] == versions, "nothing trimmed"
        lock = read_lock(conn.store)
        assert lock is None or not lock.held(conn.leases.timing), "writers are not held up"
        settle(conn)  # every block older than the grace, on any clock granularity
        report = merkle.gc(conn, keep_versions=1, grace="0s")  # with room again: it runs
        assert report.blocks_freed > 0


def test_a_final_report_that_cannot_be_written_says_the_collection_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with merkle.connect(tmp_path / "lake") as conn:
        build_history(conn, commits=3)
        _report_puts_fail(conn, monkeypatch, after=1)
        with pytest.raises(StorageError, match="the collection finished") as raised:
            merkle.gc(conn, keep_versions=1, grace="0s")
        monkeypatch.undo()
        assert "gc/reports/" in str(raised.value)
        (saved,) = load_reports(conn.store)  # the one written before the sweep
        assert saved["finished_at"] is None
        assert merkle.verify(conn).ok
