"""A file lake deleted (or moved) while a connection uses it: every operation says the
lake is gone, and nothing makes the directory again (which would start a new, empty
lake where the old one was). Before: the journal was reported "altered from outside",
and a commit made the lake directory again."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import merkle
from merkle.errors import NotFoundError, StorageError


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
