"""Collections deleting in parallel while the move-aside directory is first made.

A file lake's conditional delete moves a block into ``blocks/.tmp-aside``,
making that directory on first use. Two deletions at once both found it
missing; the one whose rename failed first, and that then found the
directory made by the other, took the failure for "removed already" and
left its block in place: a collection freed one block fewer than its dry
run counted, and crash leftovers survived a collection (CI, three tests,
seen once). The rename is now tried again whenever the object is still
there.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from merkle.storage import filegc
from merkle.storage.filegc import ASIDE_DIR, delete_if_older


def _old_files(directory: Path, count: int) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = directory / f"block{i:04d}"
        path.write_bytes(b"x")
        os.utime(path, (time.time() - 7200, time.time() - 7200))
        paths.append(str(path))
    return paths


def test_a_rename_that_missed_a_directory_another_deletion_made_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path,) = _old_files(tmp_path / "blocks", 1)
    holder = tmp_path / "blocks" / ASIDE_DIR
    real = os.rename
    calls: list[str] = []

    def other_deletion_made_it_first(src: Any, dst: Any) -> None:
        calls.append(str(dst))
        if len(calls) == 1:  # missing when this rename ran, made by another thread after
            holder.mkdir()
            raise FileNotFoundError(2, "No such file or directory", str(dst))
        real(src, dst)

    monkeypatch.setattr(filegc.os, "rename", other_deletion_made_it_first)
    assert delete_if_older(path, time.time(), lambda _: None)
    assert not os.path.exists(path)
    assert len(calls) == 2


def test_parallel_deletions_in_a_fresh_directory_all_remove_their_files(tmp_path: Path) -> None:
    for attempt in range(5):
        paths = _old_files(tmp_path / f"blocks{attempt}", 64)
        with ThreadPoolExecutor(8) as pool:
            removed = list(
                pool.map(lambda p: delete_if_older(p, time.time(), lambda _: None), paths)
            )
        assert all(removed), removed.count(False)
        assert not any(os.path.exists(p) for p in paths)


def test_a_file_already_gone_is_not_removed_again(tmp_path: Path) -> None:
    path = str(tmp_path / "blocks" / "gone")
    (tmp_path / "blocks").mkdir()
    assert not delete_if_older(path, time.time(), lambda _: None)
