"""Metadata is the value's own: neither a read's result nor the caller's input is shared.

An adversarial probe (findings 1, 2 and 6): ``describe()["metadata"]``, ``metadata`` and
``describe_table(t)["metadata"]`` gave out the decoded root's own dict, which every value
of the version on the connection shares, so editing a read result changed them all and
the next commit of an unrelated change stored the edit. ``create_db(metadata=m)``,
``create_table(metadata=m)`` and the results of the metadata functions were kept as the
caller's dict itself, so the caller's later edits reached the value and the next commit.
``alter_schema`` with nothing to change made a version on a table created without a
schema and never written (the schema went from none to the key typed null). Found
beside them: the journal entry of the head, cached by the connection's journal reader,
was handed out as it was (``db.entry``, ``conn.refs.head``), so editing its ``meta`` or
``forked_from`` changed every later read of the head and what a tag of it stored.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import merkle

_DB_META = {"owner": "ops", "tags": ["a", "b"], "nested": {"n": 1}}
_TABLE_META = {"a": 1, "cols": ["x"], "nested": {"pii": False}}


def _lake(tmp_path: Path) -> str:
    return "file://" + str(tmp_path / "lake")


def _shop(uri: str) -> tuple[merkle.Connection, merkle.Database]:
    conn = merkle.connect(uri)
    db = conn.create_db("shop", metadata={"owner": "ops", "tags": ["a", "b"], "nested": {"n": 1}})
    db = db.create_table("t", key="k", metadata={"a": 1, "cols": ["x"], "nested": {"pii": False}})
    return conn, db.write("t", [{"k": 1, "v": 1}]).commit()


def _stored(uri: str) -> tuple[Any, Any]:
    """The metadata of the head as a fresh connection reads it from the lake."""
    fresh = merkle.connect(uri).open_db("shop")
    return fresh.metadata, fresh.describe_table("t")["metadata"]


def _unrelated_commit(db: merkle.Database) -> merkle.Database:
    return db.write("t", [{"k": 2, "v": 2}]).commit(message="unrelated write")


# -- reads give copies ---------------------------------------------------------------

_DB_READS: list[Callable[[merkle.Database], Any]] = [
    lambda db: db.metadata,
    lambda db: db.describe()["metadata"],
]


def _edit(meta: dict[str, Any]) -> None:
    """Every kind of edit a caller might make: a key, a nested dict, a nested list."""
    meta["owner"] = "MUTATED"
    meta["nested"]["n"] = "MUTATED"
    meta["tags"].append("MUTATED")


@pytest.mark.parametrize("read", _DB_READS, ids=["metadata", "describe"])
def test_editing_the_db_metadata_read_changes_nothing(
    tmp_path: Path, read: Callable[[merkle.Database], Any]
) -> None:
    uri = _lake(tmp_path)
    conn, db = _shop(uri)
    _edit(read(db))
    assert db.metadata == _DB_META
    assert db.describe()["metadata"] == _DB_META
    assert not db.dirty
    assert db.commit().version == db.version  # nothing to commit
    assert conn.open_db("shop").metadata == _DB_META  # another value of the same version
    _unrelated_commit(db)
    assert _stored(uri)[0] == _DB_META


def test_editing_the_table_metadata_read_changes_nothing(tmp_path: Path) -> None:
    uri = _lake(tmp_path)
    conn, db = _shop(uri)
    meta = db.describe_table("t")["metadata"]
    meta["a"] = "MUTATED"
    meta["nested"]["pii"] = "MUTATED"
    meta["cols"].append("MUTATED")
    assert db.describe_table("t")["metadata"] == _TABLE_META
    assert conn.open_db("shop").describe_table("t")["metadata"] == _TABLE_META
    _unrelated_commit(db)
    assert _stored(uri)[1] == _TABLE_META


def test_each_read_gives_its_own_copy(tmp_path: Path) -> None:
    _, db = _shop(_lake(tmp_path))
    assert db.metadata is not db.metadata
    assert db.metadata["tags"] is not db.describe()["metadata"]["tags"]
    first, second = db.describe_table("t")["metadata"], db.describe_table("t")["metadata"]
    assert first is not second
    assert first["nested"] is not second["nested"]


# -- inputs are copied -----------------------------------------------------------------


def test_create_db_keeps_a_copy_of_the_metadata(tmp_path: Path) -> None:
    uri = _lake(tmp_path)
    conn = merkle.connect(uri)
    m: dict[str, Any] = {"owner": "ops", "tags": ["a"]}
    db = conn.create_db("shop", metadata=m)
    m["owner"] = "edited"
    m["tags"].append("edited")
    assert db.metadata == {"owner": "ops", "tags": ["a"]}
    db = db.create_table("t", key="k").commit(message="create table")
    assert merkle.connect(uri).open_db("shop").metadata == {"owner": "ops", "tags": ["a"]}


def test_create_table_keeps_a_copy_of_the_metadata(tmp_path: Path) -> None:
    uri = _lake(tmp_path)
    conn = merkle.connect(uri)
    tm: dict[str, Any] = {"a": 1, "cols": ["x"]}
    db = conn.create_db("shop").create_table("t", key="k", metadata=tm)
    tm["a"] = "edited"
    tm["cols"].append("edited")
    assert db.describe_table("t")["metadata"] == {"a": 1, "cols": ["x"]}
    db.commit()
    assert _stored(uri)[1] == {"a": 1, "cols": ["x"]}


def test_alter_db_meta_keeps_a_copy_of_the_function_result(tmp_path: Path) -> None:
    uri = _lake(tmp_path)
    _, db = _shop(uri)
    kept: dict[str, Any] = {"owner": "new", "tags": []}
    altered = db.alter_db_meta(lambda _m: kept)
    kept["owner"] = "edited"
    kept["tags"].append("edited")
    assert altered.metadata == {"owner": "new", "tags": []}
    altered.commit()
    assert _stored(uri)[0] == {"owner": "new", "tags": []}


def test_alter_table_meta_keeps_a_copy_of_the_function_result(tmp_path: Path) -> None:
    uri = _lake(tmp_path)
    _, db = _shop(uri)
    kept: dict[str, Any] = {"a": 2, "cols": []}
    altered = db.alter_table_meta("t", lambda _m: kept)
    kept["a"] = "edited"
    kept["cols"].append("edited")
    assert altered.describe_table("t")["metadata"] == {"a": 2, "cols": []}
    altered.commit()
    assert _stored(uri)[1] == {"a": 2, "cols": []}


def test_metadata_function_args_are_copied_for_the_replay(tmp_path: Path) -> None:
    uri = _lake(tmp_path)
    _, db = _shop(uri)
    extra: dict[str, Any] = {"x": 1}
    mine = db.alter_db_meta(lambda m, e: {**m, "extra": e}, extra)
    mine = mine.alter_table_meta("t", lambda m, e: {**m, "extra": e}, extra)
    extra["x"] = "edited"  # after the call: not what the transaction asked for
    merkle.connect(uri).open_db("shop").write("t", [{"k": 9, "v": 9}]).commit()
    done = mine.commit()  # replayed on the concurrent head: the functions run again
    assert done.version == db.version + 2
    db_meta, table_meta = _stored(uri)
    assert db_meta == {**_DB_META, "extra": {"x": 1}}
    assert table_meta == {**_TABLE_META, "extra": {"x": 1}}


# -- journal entries: the reader's cached head is its own -----------------------------


def test_editing_a_value_entry_changes_neither_the_head_nor_a_tag(tmp_path: Path) -> None:
    uri = _lake(tmp_path)
    conn = merkle.connect(uri)
    src = conn.create_db("src").create_table("t", key="k").commit()
    db = conn.create_db("shop", root=src)  # a clone: its entry has forked_from
    forked = {"db": "src", "version": src.version}
    entry = db.entry
    entry.meta["merkle"] = {"fence": True}  # would make the head read as a gc fence
    assert entry.forked_from is not None
    entry.forked_from["db"] = "MUTATED"
    assert db.entry.meta == {}
    assert db.entry.forked_from == forked
    head = conn.refs.head("shop")
    assert head is not None
    assert not head.fence
    assert head.forked_from == forked
    conn.tag("shop", "v0")
    tagged = merkle.connect(uri).tags("shop")[0].entry
    assert tagged is not None
    assert (tagged.meta, tagged.forked_from) == ({}, forked)


def test_editing_the_head_entry_read_does_not_change_the_next_read() -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("shop").create_table("t", key="k").commit(message="made")
    db.entry.meta["x"] = 1  # the committed value's entry: the one the commit cached
    head = conn.refs.head("shop")
    assert head is not None
    head.meta["y"] = 2
    again = conn.refs.head("shop")
    assert again is not None
    assert again.meta == {}
    assert conn.open_db("shop").entry.meta == {}


# -- alter_schema that changes nothing ------------------------------------------------


def _schemaless() -> tuple[merkle.Connection, merkle.Database]:
    conn = merkle.connect("memory://")
    return conn, conn.create_db("x").create_table("t", key="k").commit()


def test_alter_schema_without_change_on_a_table_without_schema_makes_no_version() -> None:
    conn, db = _schemaless()
    same = db.alter_schema("t")
    assert same is db
    assert same.describe_table("t")["schema"] is None
    assert same.commit().version == db.version
    assert len(conn.history("x")) == 2


def test_alter_schema_with_empty_changes_on_a_table_without_schema_makes_no_version() -> None:
    _, db = _schemaless()
    same = db.alter_schema("t", add=[], drop=[], rename={}, widen={}, nullable=[], free=[])
    assert same is db
    assert same.commit().version == db.version


def test_a_table_whose_no_op_alter_was_asked_is_typed_by_its_first_write() -> None:
    _, db = _schemaless()
    db = db.alter_schema("t").write("t", [{"k": "a", "v": 1.5}]).commit()
    schema = db.describe_table("t")["schema"]
    assert schema is not None
    assert schema.field("k").type == pa.string()
    assert schema.field("v").type == pa.float64()


def test_alter_schema_that_types_the_key_still_makes_a_version() -> None:
    _, db = _schemaless()
    altered = db.alter_schema("t", add={"k": pa.int64()})
    assert altered.dirty
    done = altered.commit()
    assert done.version == db.version + 1
    schema = done.describe_table("t")["schema"]
    assert schema is not None
    assert schema.field("k").type == pa.int64()
