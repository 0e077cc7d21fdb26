"""Fixtures of the storage tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from merkle.storage import open_store
from merkle.storage.file import FileStore


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[FileStore]:
    store = open_store(tmp_path / "lake")
    assert isinstance(store, FileStore)
    yield store
    store.close()
