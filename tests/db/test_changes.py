"""Partial and conditional writes, delete by predicate, composite keys (issue 11, points 4, 5).

Each operation is recorded and replayed when a commit loses a race: the
concurrency tests commit another transaction first and check that the
replay worked on the records as the winner left them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import Lake

import merkle
from merkle.errors import UsageError

from .conftest import Connect


def _shop(conn: merkle.Connection) -> merkle.Database:
    db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=8, patch_limit=5)
    rows = [{"id": i, "name": f"n{i}", "qty": i % 4, "price": float(i)} for i in range(40)]
    return db.write("t", rows).commit()


def test_update_changes_only_the_given_fields(conn: merkle.Connection) -> None:
    """Before: a write replaced the whole record; there was no partial update."""
    db = _shop(conn)
    db = db.update("t", {3: {"qty": 99}, 5: {"name": None}, 1000: {"qty": 1}}).commit()
    assert db.get_records("t", [3, 5, 1000]) == {
        3: {"id": 3, "name": "n3", "qty": 99, "price": 3.0},
        5: {"id": 5, "qty": 1, "price": 5.0},  # None removes a field
    }
    assert db.describe_table("t")["count"] == 40  # an update inserts nothing
    with pytest.raises(UsageError, match="key field 'id'"):
        db.update("t", {3: {"id": 4}})
    with pytest.raises(UsageError, match="int64"):
        db.update("t", {3: {"qty": "lots"}})


def test_conditional_upsert(conn: merkle.Connection) -> None:
    db = _shop(conn)
    incoming = [{"id": 1, "qty": 50}, {"id": 2, "qty": 0}, {"id": 500, "name": "new", "qty": 7}]

    def newer(old: dict[str, Any], new: dict[str, Any]) -> bool:
        return bool(new["qty"] > old["qty"])

    upserted = db.upsert("t", incoming, condition=newer)
    assert upserted.get_records("t", [1, 2, 500]) == {
        1: {"id": 1, "name": "n1", "qty": 50, "price": 1.0},  # merged: other fields kept
        2: {"id": 2, "name": "n2", "qty": 2, "price": 2.0},  # the condition said no
        500: {"id": 500, "name": "new", "qty": 7},  # inserted
    }
    only_new = db.upsert("t", incoming, when_matched="skip")
    assert only_new.get_records("t", [1, 500]) == {
        1: {"id": 1, "name": "n1", "qty": 1, "price": 1.0},
        500: {"id": 500, "name": "new", "qty": 7},
    }
    replaced = db.upsert(
        "t", pa.Table.from_pylist(incoming[:1]), when_not_matched="skip", when_matched="replace"
    )
    assert replaced.get_records("t", [1, 500]) == {1: {"id": 1, "qty": 50}}
    with pytest.raises(UsageError, match="when_matched"):
        db.upsert("t", incoming, when_matched="merge")


def test_delete_where(conn: merkle.Connection) -> None:
    db = _shop(conn).write("t", [{"id": 100, "qty": 0}])  # a pending record too
    by_expression = db.delete_where("t", (pc.field("qty") == 0) & (pc.field("id") > 10)).commit()
    left = {r["id"] for r in by_expression.scan("t")}
    assert left == {i for i in range(40) if i % 4 or i <= 10}
    by_function = db.delete_where("t", lambda r: r.get("name", "").endswith("7"))
    assert {r["id"] for r in by_function.scan("t")} == {*range(40), 100} - {7, 17, 27, 37}
    with pytest.raises(UsageError, match="Expression"):
        db.delete_where("t", "qty == 0")


def test_new_operations_replay_on_a_concurrent_commit(lake: Lake, connect: Connect) -> None:
    first, second = connect(lake), connect(lake)
    _shop(first)
    mine = (
        first.open_db("shop")
        .update("t", {1: {"qty": 100}})
        .upsert("t", [{"id": 2, "qty": 200}], condition=lambda old, new: old["qty"] < 10)
        .delete_where("t", pc.field("qty") == 3)
    )
    # Meanwhile another client changes the same records and adds one that matches.
    second.open_db("shop").write(
        "t", [{"id": 1, "name": "theirs", "qty": 1}, {"id": 2, "qty": 50}, {"id": 77, "qty": 3}]
    ).commit()
    done = mine.commit()
    assert done.version == 3
    head = connect(lake).open_db("shop")
    got = head.get_records("t", [1, 2, 3, 77])
    assert got[1] == {"id": 1, "name": "theirs", "qty": 100}  # their record, my field
    assert got[2] == {"id": 2, "qty": 50}  # the condition, tested again, says no
    assert 3 not in got  # deleted in both views
    assert 77 not in got  # matched the predicate on the new head


# -- composite keys ------------------------------------------------------------------------


def test_composite_keys(lake: Lake, connect: Connect) -> None:
    """Before: key=["user", "seq"] was refused."""
    conn = connect(lake)
    db = conn.create_db("ev").create_table(
        "e",
        key=["user", "seq"],
        key_codec=["str", "reverse(int)"],
        tablet_size_limit=4,
        patch_limit=3,
    )
    rows = [{"user": u, "seq": s, "v": f"{u}{s}"} for u in ("AT", "DE", "FR") for s in range(5)]
    db.write("e", rows).commit()
    db = connect(lake).open_db("ev")
    assert db.describe_table("e")["key"] == ["user", "seq"]
    assert db.describe_table("e")["key_codec"] == "tuple(str,reverse(int))"
    de = [(r["user"], r["seq"]) for r in db.scan("e", from_pk=("DE",), to_pk=("DE",))]
    assert de == [("DE", 4), ("DE", 3), ("DE", 2), ("DE", 1), ("DE", 0)]  # seq descending
    assert db.get_records("e", [("FR", 1), ("XX", 0)]) == {
        ("FR", 1): {"user": "FR", "seq": 1, "v": "FR1"}
    }
    assert db.to_arrow("e").column_names == ["user", "seq", "v"]
    assert db.to_arrow("e", from_pk=("AT", 1), to_pk=("DE", 3)).num_rows == 2 + 2
    db = db.delete("e", [("AT", 0)]).update("e", {("DE", 2): {"v": "changed"}}).commit()
    assert db.get_records("e", [("AT", 0), ("DE", 2)]) == {
        ("DE", 2): {"user": "DE", "seq": 2, "v": "changed"}
    }
    with pytest.raises(UsageError, match="no value for the key"):
        db.write("e", [{"user": "AT", "v": 1}])


def test_tuple_valued_keys_keep_working(conn: merkle.Connection) -> None:
    db = conn.create_db("k").create_table("t", key="k")
    db = db.write("t", [{"k": ("a", 1), "v": 1}, {"k": ("a", 2), "v": 2}]).commit()
    assert db.get_records("t", [("a", 2)]) == {("a", 2): {"k": ("a", 2), "v": 2}}
    assert [r["k"] for r in db.scan("t", from_pk=("a",))] == [("a", 1), ("a", 2)]


def test_a_string_is_not_a_list_of_keys(conn: merkle.Connection) -> None:
    """Before: get_records(table, "abc") looked up the keys "a", "b" and "c"."""
    db = _shop(conn)
    with pytest.raises(UsageError, match="list of keys"):
        db.get_records("t", "abc")
    with pytest.raises(UsageError, match="list of keys"):
        db.delete("t", "abc")


def test_a_commit_that_changes_no_data_makes_no_version(conn: merkle.Connection) -> None:
    """Before: loading the same records again made a new version each time."""
    db = _shop(conn)
    same = db.write(
        "t", [{"id": i, "name": f"n{i}", "qty": i % 4, "price": float(i)} for i in range(10)]
    )
    again = same.delete("t", [12345]).commit()
    assert again.version == db.version == 1
    assert not again.dirty
    changed = db.write("t", [{"id": 1, "name": "n1", "qty": 1, "price": 1.5}]).commit()
    assert changed.version == 2


def test_update_of_typed_fields_keeps_types_and_adds_fields(conn: merkle.Connection) -> None:
    data = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int32()),
            "tag": pa.array(["a", "b", "a"]).dictionary_encode(),
            "n": pa.array([1, 2, 3], pa.int8()),
        }
    )
    db = conn.create_db("u").create_table("t", key="id").write("t", data).commit()
    db = db.update("t", {2: {"tag": "c", "extra": 1.5}, 3: {"n": None}}).commit()
    back = db.to_arrow("t")
    assert back.schema.field("tag").type == data.schema.field("tag").type
    assert back.schema.field("extra").type == pa.float64()
    assert back.to_pylist() == [
        {"id": 1, "tag": "a", "n": 1, "extra": None},
        {"id": 2, "tag": "c", "n": 2, "extra": 1.5},
        {"id": 3, "tag": "a", "n": None, "extra": None},
    ]
    with pytest.raises(UsageError, match="int8"):
        db.update("t", {1: {"n": 1000}})


def test_writes_to_a_composite_key_replay(lake: Lake, connect: Connect) -> None:
    first, second = connect(lake), connect(lake)
    first.create_db("ev").create_table("e", key=["user", "seq"]).commit()
    mine = first.open_db("ev").write("e", [{"user": "a", "seq": 1, "v": "mine"}])
    second.open_db("ev").write("e", [{"user": "b", "seq": 1, "v": "theirs"}]).commit()
    assert mine.commit().version == 3
    assert [r["v"] for r in connect(lake).open_db("ev").scan("e")] == ["mine", "theirs"]
