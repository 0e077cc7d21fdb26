"""The file store under failing system calls and on filesystems where fsync covers one file.

Two kinds of test:

* A *crash model* records which directory entries a crash could lose: a
  name that a rename, link or mkdir made is pending until its directory is
  fsynced (XFS and btrfs keep no more than that; ext4's journal often keeps
  more, which is why this is modelled rather than observed). The scenarios
  are two writers sharing a lake, the first stalled between making a name
  and flushing its directory.
* Injected ``OSError``s on the calls around a link or rename: every one is a
  ``StorageError`` whose ``definite`` says whether the key changed, and a
  conditional put that did create the key says so.
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from merkle.blocks.store import BlockStore
from merkle.errors import NotFoundError, StorageError
from merkle.storage import open_store
from merkle.storage.file import FileStore


class CrashModel:
    """Which names survive a crash if fsync makes durable only what it is called on."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.pending: set[str] = set()  # names made since the model started, not yet flushed

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_replace, real_link, real_mkdir, real_fsync = os.replace, os.link, os.mkdir, os.fsync

        def made(call: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                result = call(*args, **kwargs)
                target = args[1] if call is not real_mkdir else args[0]
                self.pending.add(os.path.abspath(os.fspath(target)))
                return result

            return wrapper

        def fsync(fd: int) -> None:
            real_fsync(fd)
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                directory = os.readlink(f"/proc/self/fd/{fd}")
                self.pending = {p for p in self.pending if os.path.dirname(p) != directory}

        monkeypatch.setattr(os, "replace", made(real_replace))
        monkeypatch.setattr(os, "link", made(real_link))
        monkeypatch.setattr(os, "mkdir", made(real_mkdir))
        monkeypatch.setattr(os, "fsync", fsync)

    def survives(self, path: str) -> bool:
        """Whether ``path`` and every directory above it up to the lake root are durable."""
        probe = os.path.abspath(path)
        while probe != self.root:
            if probe in self.pending:
                return False
            probe = os.path.dirname(probe)
        return True


@pytest.fixture
def lake_root(tmp_path: Path) -> str:
    root = tmp_path / "lake"
    root.mkdir()
    return str(root)


def stalled_before_flushing_directories(root: str) -> FileStore:
    """A writer that makes names and never flushes a directory (paused, or killed, right after)."""
    store = FileStore(root)
    store._sync_dir = lambda directory: None  # type: ignore[method-assign]
    return store


def test_a_block_found_present_is_made_durable_before_the_entry_that_names_it(
    lake_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = CrashModel(lake_root)
    model.install(monkeypatch)
    first = BlockStore(stalled_before_flushing_directories(lake_root))
    cid = first.put(b"a block two transactions both write")
    block = os.path.join(lake_root, *first.key(cid).split("/"))
    assert not model.survives(block)  # renamed, directory not flushed yet

    second_store = FileStore(lake_root)
    assert BlockStore(second_store).put(b"a block two transactions both write") == cid
    assert second_store.put_if_absent("refs/db/00000000000000000000", str(cid).encode())

    entry = os.path.join(lake_root, "refs", "db", "00000000000000000000")
    assert model.survives(entry)
    assert model.survives(block), "the entry is durable, the block it names is not"


def test_an_object_in_a_directory_another_writer_made_survives_with_the_directory(
    lake_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = CrashModel(lake_root)
    model.install(monkeypatch)
    first = stalled_before_flushing_directories(lake_root)
    assert first.put_if_absent("refs/db/00000000000000000000", b"entry 0")

    second = FileStore(lake_root)
    assert second.put_if_absent("refs/db/00000000000000000001", b"entry 1")
    for version in (0, 1):  # the second flush covers its predecessor in the same directory
        assert model.survives(os.path.join(lake_root, "refs", "db", f"{version:020d}"))


def test_make_durable_without_fsync_does_nothing(
    lake_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(lake_root, fsync=False)
    store.put("blocks/a", b"1")
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    store.make_durable(["blocks/a"])
    assert synced == []


# -- injected failures -----------------------------------------------------------------


@pytest.fixture
def store(lake_root: str) -> Iterator[FileStore]:
    opened = FileStore(lake_root)
    opened.put("refs/db/seed", b"makes the directories")
    yield opened
    opened.close()


def temp_files(root: str) -> list[str]:
    return [name for _, _, names in os.walk(root) for name in names if name.startswith(".tmp-")]


def failing_directory_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_a_failed_flush_after_the_link_is_an_indefinite_storage_error(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_directory_fsync(monkeypatch)
    with pytest.raises(StorageError, match=r"refs/db/1.*may not survive a crash") as caught:
        store.put_if_absent("refs/db/1", b"ours")
    assert caught.value.definite is False  # it happened: the key is visible
    monkeypatch.undo()
    assert store.get("refs/db/1") == b"ours"
    assert temp_files(store.root) == []


def test_a_failed_flush_after_the_rename_is_an_indefinite_storage_error(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_directory_fsync(monkeypatch)
    with pytest.raises(StorageError, match=r"refs/db/2.*may not survive a crash") as caught:
        store.put_many([("refs/db/2", b"two"), ("refs/db/3", b"three")])
    assert caught.value.definite is False
    monkeypatch.undo()
    assert store.get_many(["refs/db/2", "refs/db/3"]) == {
        "refs/db/2": b"two",
        "refs/db/3": b"three",
    }


def link_that_fails(
    monkeypatch: pytest.MonkeyPatch, error: OSError, *, after_linking: bool
) -> None:
    real_link = os.link

    def link(src: Any, dst: Any, **kwargs: Any) -> None:
        if after_linking:
            real_link(src, dst, **kwargs)
        raise error

    monkeypatch.setattr(os, "link", link)


@pytest.mark.parametrize(
    "error",
    [
        FileExistsError(errno.EEXIST, "File exists"),  # an NFS retransmission of a link that won
        OSError(errno.EIO, "Input/output error"),
    ],
    ids=["EEXIST", "EIO"],
)
def test_a_link_that_reports_an_error_after_creating_the_key_is_a_win(
    store: FileStore, monkeypatch: pytest.MonkeyPatch, error: OSError
) -> None:
    link_that_fails(monkeypatch, error, after_linking=True)
    assert store.put_if_absent("refs/db/4", b"ours") is True
    monkeypatch.undo()
    assert store.get("refs/db/4") == b"ours"
    assert temp_files(store.root) == []


def test_a_link_that_fails_without_creating_the_key_is_a_definite_error(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    link_that_fails(monkeypatch, OSError(errno.EIO, "Input/output error"), after_linking=False)
    with pytest.raises(StorageError, match="refs/db/5") as caught:
        store.put_if_absent("refs/db/5", b"ours")
    assert caught.value.definite is True
    monkeypatch.undo()
    assert not store.exists("refs/db/5")
    assert temp_files(store.root) == []


def test_a_key_another_writer_holds_is_a_lost_race_even_if_the_link_lies(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put("refs/db/6", b"theirs")
    link_that_fails(monkeypatch, FileExistsError(errno.EEXIST, "File exists"), after_linking=False)
    monkeypatch.setattr(os.path, "lexists", lambda path: False)  # the key appeared after the check
    assert store.put_if_absent("refs/db/6", b"ours") is False
    monkeypatch.undo()
    assert store.get("refs/db/6") == b"theirs"


def raising(error: OSError) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error

    return fail


@pytest.mark.parametrize(
    ("call", "patched"),
    [
        (lambda s: s.stat("refs/db/seed"), "stat"),
        (lambda s: s.exists("refs/db/seed"), "stat"),
        (lambda s: list(s.list("refs/")), "scandir"),
        (lambda s: s.list_prefixes("refs/"), "listdir"),
        (lambda s: s.touch("refs/db/seed"), "utime"),
        (lambda s: s.delete("refs/db/seed"), "unlink"),
        (lambda s: s.make_durable(["refs/db/seed"]), "fsync"),
        (lambda s: s.remove_stale_temporaries(0.0), "scandir"),
    ],
    ids=["stat", "exists", "list", "list_prefixes", "touch", "delete", "make_durable", "temps"],
)
def test_every_operating_system_error_is_a_storage_error(
    store: FileStore,
    monkeypatch: pytest.MonkeyPatch,
    call: Callable[[FileStore], Any],
    patched: str,
) -> None:
    monkeypatch.setattr(os, patched, raising(PermissionError(errno.EACCES, "Permission denied")))
    with pytest.raises(StorageError, match="Permission denied") as caught:
        call(store)
    assert caught.value.definite is True  # nothing changed
    monkeypatch.undo()
    assert store.get("refs/db/seed") == b"makes the directories"


# -- temporary files ----------------------------------------------------------------------


def leave_temp(root: str, directory: str, size: int, mtime: float) -> str:
    path = os.path.join(root, *directory.split("/"), f".tmp-{uuid.uuid4().hex}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x" * size)
    os.utime(path, (mtime, mtime))
    return path


def test_stale_temporaries_are_removed_and_counted_and_nothing_else(store: FileStore) -> None:
    root = store.root
    old, young = 1_000_000.0, 3_000_000.0
    stale = [
        leave_temp(root, "blocks", 100, old),
        leave_temp(root, "refs/db", 20, old),
        leave_temp(root, "", 3, old),
    ]
    kept = leave_temp(root, "blocks", 7, young)
    other = os.path.join(root, "blocks", ".tmp-not-one-of-ours")
    Path(other).write_bytes(b"?")
    os.utime(other, (old, old))
    hidden = leave_temp(root, ".hidden", 1, old)

    assert store.remove_stale_temporaries(2_000_000.0) == (3, 123)
    assert not any(os.path.exists(path) for path in stale)
    assert all(os.path.exists(path) for path in (kept, other, hidden))
    assert store.get("refs/db/seed") == b"makes the directories"
    assert store.remove_stale_temporaries(2_000_000.0) == (0, 0)


def test_a_writer_whose_temporary_was_removed_gets_a_storage_error(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_link = os.link

    def link_after_a_sweep(src: Any, dst: Any, **kwargs: Any) -> None:
        assert store.remove_stale_temporaries(float("inf")) == (1, 4)
        real_link(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", link_after_a_sweep)
    with pytest.raises(StorageError, match="refs/db/7") as caught:
        store.put_if_absent("refs/db/7", b"late")
    assert caught.value.definite is True
    monkeypatch.undo()
    with pytest.raises(NotFoundError):
        store.get("refs/db/7")
