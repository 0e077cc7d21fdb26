"""A file lake deleted (or moved) while a connection uses it: every operation says the
lake is gone, and nothing makes the directory again (which would start a new, empty
lake where the old one was). Before: the journal was reported "altered from outside",
and a commit made the lake directory again."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import merkle
from merkle.errors import NotFoundError, StorageError
from merkle.storage.file import FileStore


@pytest.mark.parametrize(
    "operation",
    [
        lambda conn: conn.history("shop"),
        lambda conn: conn.open_db("shop", version=0),
        lambda conn: conn.open_db("shop").write("t", [{"id": 3}]).commit(),
    ],
    ids=["history", "open-version", "commit"],
)
def test_a_lake_deleted_in_use_is_said_to_be_gone(
    tmp_path: Path, operation: Callable[[merkle.Connection], Any]
) -> None:
    root = tmp_path / "lake"
    with merkle.connect(root.as_uri(), create=True) as conn:
        db = conn.create_db("shop").create_table("t", key="id").write("t", [{"id": 1}]).commit()
        db.write("t", [{"id": 2}]).commit()
        shutil.rmtree(root)
        with pytest.raises((NotFoundError, StorageError), match="is gone") as caught:
            operation(conn)
        assert "altered" not in str(caught.value)
    assert not root.exists(), "the lake directory was made again"


def test_threads_making_a_new_lake_directory_are_not_told_it_is_gone(tmp_path: Path) -> None:
    """Several threads of one store write into a lake directory not made yet: one makes
    it, and none may take it for a directory that was there and went (a thread that saw
    it missing, then saw it marked as made, said "gone": 40 rounds in 300 failed)."""
    failed = 0
    for round_ in range(60):
        store = FileStore(str(tmp_path / f"lake-{round_}"), fsync=False)
        barrier = threading.Barrier(8)
        errors: list[BaseException] = []

        def put(
            n: int,
            store: FileStore = store,
            barrier: threading.Barrier = barrier,
            errors: list[BaseException] = errors,
        ) -> None:
            barrier.wait()
            try:
                store.put_if_absent("k/x", b"%d" % n)
            except StorageError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=put, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        failed += bool(errors)
    assert failed == 0
