"""A file store's conditional delete: what a collection removes is checked where no
writer can refresh it any more.

A collector that stalled past its lock (a paused process) used to delete a batch
it had decided on before the pause, though a writer had meanwhile relied on one of
its blocks (found present, timestamp refreshed) in an acknowledged commit.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from merkle.blocks import BlockStore
from merkle.storage import filegc, open_store
from merkle.storage.file import FileStore

OLD = time.time() - 3600


def _old_object(store: FileStore, key: str, data: bytes = b"x") -> None:
    store.put(key, data)
    store.set_mtime(key, OLD)


def _leftovers(root: Path) -> list[str]:
    return [name for _, _, names in os.walk(root) for name in names if name.startswith(".tmp-")]


def test_an_object_still_old_is_removed(file_store: FileStore, tmp_path: Path) -> None:
    _old_object(file_store, "blocks/a")
    assert file_store.delete_if_older("blocks/a", cutoff=OLD + 1)
    assert not file_store.exists("blocks/a")
    assert not _leftovers(tmp_path)


def test_an_object_refreshed_since_is_kept(file_store: FileStore, tmp_path: Path) -> None:
    _old_object(file_store, "blocks/a", b"kept")
    file_store.touch("blocks/a")  # a writer reused it after the collector listed it
    assert not file_store.delete_if_older("blocks/a", cutoff=OLD + 1)
    assert file_store.get("blocks/a") == b"kept"
    assert not _leftovers(tmp_path)


def test_a_missing_object_is_not_removed(file_store: FileStore) -> None:
    assert not file_store.delete_if_older("blocks/none", cutoff=time.time())


def test_an_object_written_again_while_aside_keeps_the_new_copy(
    file_store: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer whose touch found the object moved aside writes it again; the collector
    then finds the aside copy refreshed and leaves the new copy in place."""
    _old_object(file_store, "blocks/a", b"same")
    real_stat = os.stat

    def writer_meanwhile(path: str, *args: object, **kwargs: object) -> os.stat_result:
        if os.path.basename(path).startswith(".tmp-"):
            os.utime(path)  # refreshed just before the move...
            file_store.put("blocks/a", b"same")  # ...and written again after it
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(filegc.os, "stat", writer_meanwhile)
    assert not file_store.delete_if_older("blocks/a", cutoff=OLD + 1)
    monkeypatch.undo()
    assert file_store.get("blocks/a") == b"same"
    assert not _leftovers(tmp_path)


def test_block_stores_delete_conditionally_where_the_store_can(tmp_path: Path) -> None:
    from merkle.blocks.cid import RAW

    files = BlockStore(open_store(str(tmp_path / "lake")))
    old, fresh = files.put(b"old", RAW), files.put(b"fresh", RAW)
    for cid in (old, fresh):
        files.store.set_mtime(files.key(cid), OLD)
    files.store.touch(files.key(fresh))
    assert files.delete_many_if_older([(old, 3), (fresh, 5)], cutoff=OLD + 1) == [(old, 3)]
    assert not files.has(old)
    assert files.has(fresh)
    memory = BlockStore(open_store("memory://"))
    assert memory.delete_many_if_older([(old, 3)], cutoff=OLD + 1) is None
