"""Pushes after the source's retention trimmed the destination's version, and CAR exports
that cannot be written (a full disk): found by an adversarial probe."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import pytest
from conftest import Lake

import merkle
from merkle.errors import StorageError
from merkle.transfer import SyncDivergedError, car, export_car, import_car


@pytest.fixture
def src(tmp_path: Path) -> Iterator[merkle.Connection]:
    with merkle.connect(str(tmp_path / "src")) as conn:
        yield conn


@pytest.fixture
def dst(lake: Lake) -> Iterator[merkle.Connection]:
    with merkle.connect(lake.uri, **lake.options) as conn:
        yield conn


def _grow(db: merkle.Database, start: int, count: int) -> merkle.Database:
    for i in range(start, start + count):
        db = db.write("t", [{"k": i, "v": i}]).commit(message=f"row {i}")
    return db


def _pushed_then_trimmed(src: merkle.Connection, dst: merkle.Connection) -> merkle.Database:
    """``shop`` pushed to ``dst``, then grown on ``src`` and trimmed there past the
    version ``dst`` is at."""
    db = _grow(src.create_db("shop").create_table("t", key="k").commit(), 0, 3)
    merkle.sync(src, dst, "shop")
    db = _grow(db, 3, 3)
    merkle.gc(src, keep_versions=2, grace=timedelta(0))
    pushed = dst.refs.head("shop")
    assert pushed is not None
    assert src.refs.oldest_version("shop") > pushed.meta["synced_from"]["version"]
    return db


@pytest.mark.parametrize("one_version", [False, True])
def test_a_push_after_the_source_trimmed_the_destination_version_fast_forwards(
    src: merkle.Connection, dst: merkle.Connection, one_version: bool
) -> None:
    db = _pushed_then_trimmed(src, dst)
    before = dst.refs.head("shop")
    assert before is not None
    report = merkle.sync(src, dst, "shop", version=db.version if one_version else None)
    kept = [e.version for e in reversed(src.history("shop"))]
    assert report.source_versions == ([db.version] if one_version else kept)
    head = dst.open_db("shop")
    assert head.root == db.root
    assert sorted(r["k"] for r in head.scan("t")) == list(range(6))
    assert dst.refs.get("shop", before.version).root == before.root  # history kept
    assert merkle.sync(src, dst, "shop").up_to_date


def test_a_push_looks_through_collection_fences_at_the_destination(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    db = _pushed_then_trimmed(src, dst)
    fence = dst.refs.fence("shop", 1)
    assert fence.fence
    assert "synced_from" not in fence.meta
    merkle.sync(src, dst, "shop")
    assert dst.open_db("shop").root == db.root


def test_a_destination_committed_on_is_refused_and_the_error_says_trimmed(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    _pushed_then_trimmed(src, dst)
    ours = dst.open_db("shop").write("t", [{"k": 100, "v": 0}]).commit(message="on the copy")
    with pytest.raises(SyncDivergedError) as caught:
        merkle.sync(src, dst, "shop")
    message = str(caught.value)
    assert "trimmed" in message
    assert "never had" not in message
    assert "drop it at the destination and push again" in message
    head = dst.refs.head("shop")
    assert head is not None
    assert (head.version, head.root) == (ours.version, ours.root)


def test_a_destination_from_another_lake_is_refused(
    src: merkle.Connection, dst: merkle.Connection, tmp_path: Path
) -> None:
    with merkle.connect(str(tmp_path / "other")) as other:
        _grow(other.create_db("shop").create_table("t", key="k").commit(), 0, 2)
        merkle.sync(other, dst, "shop")
    head = dst.refs.head("shop")
    db = _grow(src.create_db("shop").create_table("t", key="k").commit(), 10, 3)
    merkle.gc(src, keep_versions=2, grace=timedelta(0))
    with pytest.raises(SyncDivergedError, match="trimmed"):
        merkle.sync(src, dst, "shop")
    assert dst.refs.head("shop") == head
    assert dst.open_db("shop").root != db.root


def test_a_destination_from_an_earlier_life_of_the_source_is_refused(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    _pushed_then_trimmed(src, dst)
    head = dst.refs.head("shop")
    src.drop_db("shop")
    _grow(src.create_db("shop").create_table("t", key="k").commit(), 50, 3)
    merkle.gc(src, keep_versions=2, grace=timedelta(0))
    with pytest.raises(SyncDivergedError):
        merkle.sync(src, dst, "shop")
    assert dst.refs.head("shop") == head


def test_sending_an_older_version_onto_a_newer_copy_says_it_would_go_back(
    src: merkle.Connection, dst: merkle.Connection
) -> None:
    db = _grow(src.create_db("shop").create_table("t", key="k").commit(), 0, 3)
    merkle.sync(src, dst, "shop")
    with pytest.raises(SyncDivergedError, match="newer than version 1 sent"):
        merkle.sync(src, dst, "shop", version=1)
    assert dst.open_db("shop").root == db.root


# -- CAR export onto a full disk ---------------------------------------------------------


class _FillsUp:
    """A file that takes ``room`` bytes, then fails like a full disk."""

    def __init__(self, handle: IO[bytes], room: int) -> None:
        self._handle, self._room = handle, room

    def write(self, data: bytes) -> int:
        if len(data) > self._room:
            self._handle.write(data[: self._room])
            self._room = 0
            self._handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= len(data)
        return self._handle.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __enter__(self) -> _FillsUp:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[merkle.Connection]:
    with merkle.connect(str(tmp_path / "lake")) as conn:
        db = conn.create_db("shop").create_table("t", key="k")
        db.write("t", [{"k": i, "v": "x" * 200} for i in range(500)]).commit()
        yield conn


def test_an_export_onto_a_full_disk_is_a_storage_error_and_leaves_no_file(
    shop: merkle.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = car._create

    def create(path: Any, **kwargs: Any) -> Any:
        return _FillsUp(opened(path, **kwargs), 4096)

    monkeypatch.setattr(car, "_create", create)
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.car").write_bytes(b"the previous export")
    for name in ("shop.car", "old.car"):
        with pytest.raises(StorageError) as caught:
            export_car(shop, "shop", out / name)
        assert str(out / name) in str(caught.value)
        assert "disk is full" in str(caught.value)
    assert sorted(p.name for p in out.iterdir()) == ["old.car"]  # no partial, no temp file
    assert (out / "old.car").read_bytes() == b"the previous export"


def test_a_complete_export_replaces_the_file_and_imports(
    shop: merkle.Connection, tmp_path: Path
) -> None:
    path = tmp_path / "shop.car"
    path.write_bytes(b"stale")
    report = export_car(shop, "shop", path)
    assert report.root == shop.open_db("shop").root
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".car")] == ["shop.car"]
    assert import_car(shop, path, "copy").root == report.root


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_export_to_a_device_that_is_full_is_a_storage_error(shop: merkle.Connection) -> None:
    with pytest.raises(StorageError, match="/dev/full: the disk is full"):
        export_car(shop, "shop", "/dev/full")
    full = pytest.raises(StorageError, match="the CAR file /dev/full: the disk is full")
    with open("/dev/full", "wb", buffering=0) as stream, full:
        export_car(shop, "shop", stream)


def test_an_export_to_a_symbolic_link_replaces_the_file_it_names(
    shop: merkle.Connection, tmp_path: Path
) -> None:
    """The temporary was renamed over the link itself: the link became a file and the file
    it named kept its old contents (run on /dev/stdout, that replaced the system's link)."""
    (tmp_path / "backups").mkdir()
    real = tmp_path / "backups" / "real.car"
    real.write_bytes(b"the previous export")
    link = tmp_path / "latest.car"
    link.symlink_to(Path("backups") / "real.car")
    export_car(shop, "shop", link)
    assert link.is_symlink()
    assert real.read_bytes()[:1] != b"t"  # the new archive, not the previous bytes
    assert import_car(shop, link, "copy").root == shop.open_db("shop").root


@pytest.mark.parametrize("target", ["-", "/dev/stdout"])
def test_an_export_to_standard_output_is_an_archive_alone(
    shop: merkle.Connection, tmp_path: Path, target: str
) -> None:
    """The summary line followed the archive on standard output, so a piped export could not
    be imported; '-' wrote a file named '-'."""
    import subprocess
    import sys

    lake = shop.store.uri
    done = subprocess.run(
        [sys.executable, "-m", "merkle.cli.main", "--lake", lake, "export", "shop", target],
        capture_output=True,
        cwd=tmp_path,
        check=True,
        timeout=120,
    )
    assert "exported 'shop' to standard output" in done.stderr.decode()
    assert not (tmp_path / "-").exists()
    archive = tmp_path / "piped.car"
    archive.write_bytes(done.stdout)
    assert import_car(shop, archive, "piped").root == shop.open_db("shop").root


def test_an_import_from_a_pipe_or_a_stream_says_it_needs_a_file(
    shop: merkle.Connection, tmp_path: Path
) -> None:
    """A pipe said the archive 'ends before its header' (it is read twice); a BytesIO
    raised a bare TypeError."""
    import io

    from merkle.errors import UsageError

    archive = tmp_path / "shop.car"
    export_car(shop, "shop", archive)
    with pytest.raises(UsageError, match="save the archive to a file first"):
        import_car(shop, io.BytesIO(archive.read_bytes()), "copy")  # type: ignore[arg-type]
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        import_car(shop, fifo, "copy")
    assert "copy" not in shop.list_dbs()


@pytest.mark.parametrize("length", [200, 240, 255])
def test_an_export_to_a_long_file_name_is_written(
    shop: merkle.Connection, tmp_path: Path, length: int
) -> None:
    """Before: a valid name of 240-255 bytes failed with "File name too long": the hidden
    temporary beside it added 22 bytes to the name."""
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / ("f" * (length - 4) + ".car")
    report = export_car(shop, "shop", path)
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert import_car(shop, path, "copy").root == report.root
