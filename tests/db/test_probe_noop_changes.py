"""Changes that change nothing make no version (an adversarial probe's findings 6 and 8).

``alter_db_meta`` / ``alter_table_meta`` whose function returned the metadata as it
was still made a version (and were replayed over a concurrent commit, where a
function setting a value back undid the other writer's change); a function that
changed the metadata in place changed the value it was called on, and every value
of that version. ``update`` of a key without a record added its fields to the schema
(typed by a value never stored) and made a version.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError

Fn = Callable[[Any], Any]


_TABLE_META = {"owner": "ann", "tags": ["a", "b"], "n": 1, "pii": False}


def _shop() -> tuple[merkle.Connection, merkle.Database]:
    conn = merkle.connect("memory://")
    db = conn.create_db("shop", metadata={"owner": "ann", "tags": ["a", "b"], "n": 1})
    db = db.create_table("orders", key="id", metadata=dict(_TABLE_META))
    db = db.write("orders", [{"id": 1, "qty": 2}, {"id": 2, "qty": 3}]).commit()
    return conn, db


def _versions(conn: merkle.Connection) -> int:
    return len(conn.history("shop"))


_SAME: list[Fn] = [
    lambda m: m,
    lambda m: {**m, "owner": "ann"},
    lambda m: dict(reversed(list(m.items()))),  # another key order: stored alike
    lambda m: {**m, "tags": ("a", "b")},  # a tuple is stored as the list
]


# -- alter_db_meta / alter_table_meta ----------------------------------------------


@pytest.mark.parametrize("fn", _SAME)
def test_alter_db_meta_that_keeps_the_metadata_makes_no_version(fn: Fn) -> None:
    conn, db = _shop()
    before = _versions(conn)
    altered = db.alter_db_meta(fn)
    assert not altered.dirty
    after = altered.commit()
    assert (after.version, after.root) == (db.version, db.root)
    assert _versions(conn) == before


@pytest.mark.parametrize("fn", _SAME)
def test_alter_table_meta_that_keeps_the_metadata_makes_no_version(fn: Fn) -> None:
    conn, db = _shop()
    before = _versions(conn)
    altered = db.alter_table_meta("orders", fn)
    assert not altered.dirty
    after = altered.commit()
    assert (after.version, after.root) == (db.version, db.root)
    assert _versions(conn) == before


def test_an_unchanged_alter_beside_writes_keeps_the_writes_pending() -> None:
    _conn, db = _shop()
    db = db.write("orders", [{"id": 3, "qty": 1}]).alter_table_meta("orders", lambda m: m)
    db = db.alter_db_meta(lambda m: m).commit()
    assert db.get_records("orders", [3]) == {3: {"id": 3, "qty": 1}}
    assert db.describe_table("orders")["metadata"] == _TABLE_META


@pytest.mark.parametrize("new", [True, 1.0])
def test_metadata_equal_in_python_but_stored_apart_is_a_change(new: Any) -> None:
    conn, db = _shop()
    after = db.alter_db_meta(lambda m: {**m, "n": new}).commit()
    assert after.version == db.version + 1
    assert type(conn.open_db("shop").metadata["n"]) is type(new)
    table = after.alter_table_meta("orders", lambda m: {**m, "n": new}).commit()
    assert table.version == after.version + 1
    assert type(conn.open_db("shop").describe_table("orders")["metadata"]["n"]) is type(new)


def test_metadata_changed_and_changed_back_makes_no_version() -> None:
    conn, db = _shop()
    before = _versions(conn)
    db_back = db.alter_db_meta(lambda m: {**m, "owner": "bob"}).alter_db_meta(
        lambda m: {**m, "owner": "ann"}
    )
    assert db_back.commit().version == db.version
    table_back = db.alter_table_meta("orders", lambda m: {**m, "pii": True}).alter_table_meta(
        "orders", lambda m: {**m, "pii": False}
    )
    assert table_back.commit().version == db.version
    assert _versions(conn) == before


def test_a_function_that_changes_the_metadata_in_place_changes_only_its_result() -> None:
    conn, db = _shop()

    def set_owner(m: dict[str, Any]) -> dict[str, Any]:
        m["owner"] = "bob"
        m["tags"].append("c")
        return m

    def set_pii(m: dict[str, Any]) -> dict[str, Any]:
        m["pii"] = True
        return m

    altered = db.alter_db_meta(set_owner).alter_table_meta("orders", set_pii)
    assert db.metadata == {"owner": "ann", "tags": ["a", "b"], "n": 1}
    assert conn.open_db("shop").metadata == {"owner": "ann", "tags": ["a", "b"], "n": 1}
    assert db.describe_table("orders")["metadata"] == _TABLE_META
    assert conn.open_db("shop").describe_table("orders")["metadata"]["pii"] is False
    after = altered.commit()
    assert after.version == db.version + 1
    assert after.metadata == {"owner": "bob", "tags": ["a", "b", "c"], "n": 1}
    assert after.describe_table("orders")["metadata"] == {**_TABLE_META, "pii": True}


def test_an_unchanged_alter_is_not_replayed_over_a_concurrent_metadata_change() -> None:
    conn, db = _shop()
    other = conn.open_db("shop")
    other = other.alter_db_meta(lambda m: {**m, "owner": "bob"})
    other = other.alter_table_meta("orders", lambda m: {**m, "pii": True}).commit()
    mine = db.write("orders", [{"id": 3, "qty": 1}])
    mine = mine.alter_db_meta(lambda m: {**m, "owner": "ann"})
    mine = mine.alter_table_meta("orders", lambda m: {**m, "pii": False})
    done = mine.commit()
    assert done.version == other.version + 1
    head = conn.open_db("shop")
    assert head.metadata["owner"] == "bob"
    assert head.describe_table("orders")["metadata"]["pii"] is True
    assert head.get_records("orders", [3]) == {3: {"id": 3, "qty": 1}}


def test_an_unchanged_alter_alone_commits_nothing_after_a_concurrent_commit() -> None:
    conn, db = _shop()
    other = conn.open_db("shop").alter_db_meta(lambda m: {**m, "owner": "bob"}).commit()
    done = db.alter_db_meta(lambda m: {**m, "owner": "ann"}).commit(rebase=False)
    assert done.version == db.version
    assert conn.open_db("shop").version == other.version
    assert conn.open_db("shop").metadata["owner"] == "bob"


def test_a_real_metadata_change_is_still_replayed() -> None:
    conn, db = _shop()
    conn.open_db("shop").alter_db_meta(lambda m: {**m, "owner": "bob"}).commit()
    done = db.alter_db_meta(lambda m: {**m, "n": m["n"] + 1}).commit()
    assert done.metadata == {"owner": "bob", "tags": ["a", "b"], "n": 2}


# -- update of keys without a record -------------------------------------------------


def _names(db: merkle.Database) -> list[str]:
    schema = db.describe_table("orders")["schema"]
    assert schema is not None
    return list(schema.names)


def test_update_of_a_missing_key_learns_nothing_and_makes_no_version() -> None:
    conn, db = _shop()
    before = _versions(conn)
    updated = db.update("orders", {99: {"note": "gift"}})
    assert _names(updated) == ["id", "qty"]
    after = updated.commit()
    assert after.version == db.version
    assert _versions(conn) == before
    later = after.write("orders", [{"id": 1, "qty": 2, "note": 5}]).commit()
    assert later.describe_table("orders")["schema"].field("note").type == pa.int64()


def test_update_of_a_key_deleted_in_the_transaction_learns_nothing() -> None:
    _conn, db = _shop()
    db = db.delete("orders", [1]).update("orders", {1: {"note": "gift"}})
    assert _names(db) == ["id", "qty"]
    after = db.commit()
    assert _names(after) == ["id", "qty"]
    assert after.get_records("orders", [1, 2]) == {2: {"id": 2, "qty": 3}}


def test_update_of_a_key_written_in_the_transaction_is_applied() -> None:
    _conn, db = _shop()
    db = db.write("orders", [{"id": 7, "qty": 1}]).update("orders", {7: {"note": "gift"}})
    assert _names(db) == ["id", "qty", "note"]
    after = db.commit()
    assert after.get_records("orders", [7]) == {7: {"id": 7, "qty": 1, "note": "gift"}}


def test_update_of_some_missing_keys_learns_from_the_applied_values_only() -> None:
    _conn, db = _shop()
    db = db.update("orders", {99: {"note": "gift", "extra": [1]}, 1: {"note": 5}}).commit()
    schema = db.describe_table("orders")["schema"]
    assert schema.names == ["id", "qty", "note"]
    assert schema.field("note").type == pa.int64()
    assert db.get_records("orders", [1, 99]) == {1: {"id": 1, "qty": 2, "note": 5}}


def test_update_of_a_missing_key_does_not_check_its_values() -> None:
    _conn, db = _shop()
    skipped = db.upsert("orders", [{"id": 98, "qty": "abc"}], when_not_matched="skip")
    assert skipped.commit().version == db.version  # the upsert's rule
    assert db.update("orders", {98: {"qty": "abc"}}).commit().version == db.version
    with pytest.raises(SchemaError, match="qty"):
        db.update("orders", {98: {"qty": "abc"}, 1: {"qty": "abc"}})


def test_update_of_a_missing_key_does_not_type_a_null_field() -> None:
    schema = pa.schema([("id", pa.int64()), ("note", pa.null())])
    db = (
        merkle.connect("memory://")
        .create_db("shop")
        .create_table("orders", key="id", schema=schema)
    )
    db = db.write("orders", [{"id": 1}]).commit()
    db = db.update("orders", {2: {"note": "x"}}).commit()
    assert db.describe_table("orders")["schema"].field("note").type == pa.null()
    db = db.update("orders", {1: {"note": 3}}).commit()
    assert db.describe_table("orders")["schema"].field("note").type == pa.int64()


def test_update_of_a_missing_composite_key_learns_nothing() -> None:
    db = merkle.connect("memory://").create_db("shop")
    db = db.create_table("orders", key=["a", "b"], schema_free=True)
    db = db.write("orders", [{"a": 1, "b": "x", "v": 1}]).commit()
    after = db.update("orders", {(1, "y"): {"w": {"any": 1}}, (1, "x"): {"v": 2}}).commit()
    assert _names(after) == ["a", "b", "v"]
    assert after.get_records("orders", [(1, "x")]) == {(1, "x"): {"a": 1, "b": "x", "v": 2}}


def test_an_update_replayed_where_the_key_now_exists_learns_its_field() -> None:
    conn, db = _shop()
    conn.open_db("shop").write("orders", [{"id": 99, "qty": 1}]).commit()
    done = db.update("orders", {99: {"note": "gift"}}).commit()
    assert done.get_records("orders", [99]) == {99: {"id": 99, "qty": 1, "note": "gift"}}
