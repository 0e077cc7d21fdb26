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
from gc_helpers import build_history

import merkle
from merkle.errors import StorageError
from merkle.gc import collect
from merkle.refs import GCLock


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
