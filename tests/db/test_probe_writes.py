"""Write-path defects found by an adversarial probe (upsert, replay, reads, alter_schema).

Each test states the defect it guards against: upserts of one key twice in a
batch, replays that re-created a field a concurrent commit renamed or
dropped, reads of an unknown field, zero-row Arrow writes that set no
schema, merge resolvers returning the wrong thing, ambiguous alter_schema
calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from conftest import Lake

import merkle
from merkle.errors import ConflictError, SchemaError, UsageError

from .conftest import Connect

_SCHEMA = pa.schema([("k", pa.int64()), ("y", pa.string()), ("w", pa.int64())])


def _typed(conn: merkle.Connection) -> merkle.Database:
    db = conn.create_db("d").create_table("t", key="k", schema=_SCHEMA)
    return db.write("t", [{"k": 1, "y": "old", "w": 3}, {"k": 2, "y": "two", "w": 4}]).commit()


# -- 1. upsert of one key twice in a batch ---------------------------------------------


def test_upsert_applies_rows_of_one_key_in_order(conn: merkle.Connection) -> None:
    """Before: each row merged into the original record, the last won: {a: 1, b: 7}."""
    db = conn.create_db("d").create_table("t", key="k")
    db = db.write("t", [{"k": 1, "a": 1, "b": 1}]).commit()
    db = db.upsert("t", [{"k": 1, "a": 5}, {"k": 1, "b": 7}])
    assert db.get_records("t", [1])[1] == {"k": 1, "a": 5, "b": 7}
    assert db.commit().get_records("t", [1])[1] == {"k": 1, "a": 5, "b": 7}


def test_upsert_condition_sees_the_record_as_earlier_rows_left_it(
    conn: merkle.Connection,
) -> None:
    """Before: every row was tested against the stored record (order-dependent result)."""
    db = conn.create_db("d").create_table("t", key="k")
    db = db.write("t", [{"k": 1, "v": 1}]).commit()

    def newer(old: dict[str, Any], new: dict[str, Any]) -> bool:
        return bool(new["v"] > old["v"])

    rows = [{"k": 1, "v": 5}, {"k": 1, "v": 3}, {"k": 2, "v": 1}, {"k": 2, "v": 9}]
    db = db.upsert("t", rows, condition=newer)
    # v=3 is tested against v=5 (so skipped); k=2 is inserted, then matched by v=9.
    assert db.get_records("t", [1, 2]) == {1: {"k": 1, "v": 5}, 2: {"k": 2, "v": 9}}


def test_upsert_of_a_generator_replays_its_rows(lake: Lake, connect: Connect) -> None:
    """Before: the recorded op kept the consumed generator, so a replay upserted nothing."""
    a, b = connect(lake), connect(lake)
    _typed(a)
    mine = b.open_db("d").upsert("t", ({"k": k, "y": "up"} for k in (1, 5)))
    a.open_db("d").write("t", [{"k": 9, "y": "nine"}]).commit()
    done = mine.commit()
    got = done.get_records("t", [1, 5, 9])
    assert got == {
        1: {"k": 1, "y": "up", "w": 3},
        5: {"k": 5, "y": "up"},
        9: {"k": 9, "y": "nine"},
    }


# -- 2. replay over a concurrent rename or drop ---------------------------------------


@pytest.mark.parametrize("alter", [{"rename": {"y": "z"}}, {"drop": ["y"]}])
@pytest.mark.parametrize(
    "change",
    [
        lambda db: db.update("t", {1: {"y": "new"}}),
        lambda db: db.write("t", [{"k": 1, "y": "new"}]),
        lambda db: db.write("t", pa.table({"k": [1], "y": ["new"]})),
        lambda db: db.upsert("t", [{"k": 1, "y": "new"}]),
    ],
    ids=["update", "write", "write-arrow", "upsert"],
)
def test_replay_of_a_change_to_a_field_renamed_or_dropped_meanwhile_conflicts(
    lake: Lake, connect: Connect, alter: dict[str, Any], change: Any
) -> None:
    """Before: the replay re-created field 'y' holding only this transaction's value."""
    a, b = connect(lake), connect(lake)
    _typed(a)
    mine = change(b.open_db("d"))
    a.open_db("d").alter_schema("t", **alter).commit()
    with pytest.raises(ConflictError, match=r"'y'.*dropped or renamed by a concurrent commit"):
        mine.commit()
    head = a.open_db("d")
    assert "y" not in head.describe_table("t")["schema"].names
    assert head.version == 2  # nothing of the loser was committed


def test_replayed_write_does_not_recreate_an_empty_dropped_field(
    lake: Lake, connect: Connect
) -> None:
    """Before: the recorded rows held every column of the old schema, so a write of other
    fields replayed over a drop of 'w' brought 'w' back (empty)."""
    a, b = connect(lake), connect(lake)
    _typed(a)
    mine = b.open_db("d").write("t", [{"k": 5, "y": "five"}])
    a.open_db("d").alter_schema("t", drop=["w"]).commit()
    done = mine.commit()
    assert done.describe_table("t")["schema"].names == ["k", "y"]
    assert done.get_records("t", [1, 5]) == {1: {"k": 1, "y": "old"}, 5: {"k": 5, "y": "five"}}


def test_replay_still_adds_a_brand_new_field(lake: Lake, connect: Connect) -> None:
    """Legitimate replays are kept: a new field, over a head that renamed another one."""
    a, b = connect(lake), connect(lake)
    _typed(a)
    mine = b.open_db("d").update("t", {1: {"n": 7}}).write("t", [{"k": 6, "m": "x"}])
    a.open_db("d").alter_schema("t", rename={"y": "z"}).commit()
    done = mine.commit()
    assert done.describe_table("t")["schema"].names == ["k", "z", "w", "n", "m"]
    assert done.get_records("t", [1, 6]) == {
        1: {"k": 1, "z": "old", "w": 3, "n": 7},
        6: {"k": 6, "m": "x"},
    }


def test_own_drop_then_write_of_the_field_replays(lake: Lake, connect: Connect) -> None:
    """A transaction that drops a field and writes it again adds a new field: not a conflict."""
    a, b = connect(lake), connect(lake)
    _typed(a)
    mine = b.open_db("d").alter_schema("t", drop=["w"]).write("t", [{"k": 1, "w": 10}])
    a.open_db("d").write("t", [{"k": 8}]).commit()
    done = mine.commit()
    assert done.get_records("t", [1, 2, 8]) == {
        1: {"k": 1, "w": 10},
        2: {"k": 2, "y": "two"},
        8: {"k": 8},
    }


# -- 3. reads naming an unknown field ---------------------------------------------------


@pytest.mark.parametrize(
    "read",
    [
        lambda db: db.to_arrow("t", fields=["typo"]),
        lambda db: db.get_records("t", [1], fields=["y", "typo"]),
        lambda db: db.get_arrow("t", [1], fields=["typo"]),
        lambda db: list(db.scan("t", fields=["typo"])),
        lambda db: db.to_batches("t", fields=["typo"]),
    ],
    ids=["to_arrow", "get_records", "get_arrow", "scan", "to_batches"],
)
def test_reading_an_unknown_field_is_a_usage_error(conn: merkle.Connection, read: Any) -> None:
    """Before: the reads returned only the key column, as if the values were missing."""
    db = _typed(conn)
    with pytest.raises(UsageError, match=r"table 't' has no field 'typo'; its fields: k, y, w"):
        read(db)


def test_reading_known_fields_still_works(conn: merkle.Connection) -> None:
    db = _typed(conn)
    assert db.to_arrow("t", fields=["w"]).column_names == ["k", "w"]
    assert db.get_records("t", [1], fields=["y"]) == {1: {"k": 1, "y": "old"}}


# -- 4. zero-row Arrow writes -----------------------------------------------------------


def _empty_inputs() -> Iterator[Any]:
    schema = pa.schema([("k", pa.int32()), ("v", pa.decimal128(5, 2))])
    yield schema.empty_table()
    yield pa.RecordBatchReader.from_batches(schema, [])


@pytest.mark.parametrize("data", list(_empty_inputs()), ids=["table", "reader"])
def test_zero_row_arrow_write_sets_the_schema(conn: merkle.Connection, data: Any) -> None:
    """Before: nothing was recorded, and to_arrow showed the key as type null."""
    db = conn.create_db("d").create_table("t", key="k").commit()
    db = db.write("t", data).commit()
    assert db.version == 2
    schema = db.describe_table("t")["schema"]
    assert schema == pa.schema([("k", pa.int32()), ("v", pa.decimal128(5, 2))])
    assert db.to_arrow("t").schema == schema
    assert db.write("t", [{"k": 1, "v": Decimal("1.5")}]).get_records("t", [1])[1] == {
        "k": 1,
        "v": Decimal("1.50"),
    }


def test_zero_row_write_to_a_table_with_that_schema_is_no_change(
    conn: merkle.Connection,
) -> None:
    db = _typed(conn)
    assert not db.write("t", _SCHEMA.empty_table()).dirty
    assert not db.write("t", []).dirty


# -- 5. merge resolver results -------------------------------------------------------


def _conflicting(conn: merkle.Connection) -> None:
    base = _typed(conn)
    conn.create_db("ours", root=base)
    conn.create_db("theirs", root=base)
    conn.open_db("ours").update("t", {1: {"y": "A"}}).commit()
    conn.open_db("theirs").update("t", {1: {"y": "B"}}).commit()


def test_check_resolved() -> None:
    """The check merge.py is to apply to what a resolver returns (see the report)."""
    from merkle.db.inputs import check_resolved
    from merkle.tablets.conform import KeyLayout

    one = KeyLayout.of("k")
    assert check_resolved(None, 1, one, "t") is None
    assert check_resolved({"k": 1, "y": "x"}, 1, one, "t") == {"k": 1, "y": "x"}
    with pytest.raises(UsageError, match="returned int 5 for key 1 of table 't'"):
        check_resolved(5, 1, one, "t")
    with pytest.raises(UsageError, match="cannot change the key"):
        check_resolved({"k": 99}, 1, one, "t")


@pytest.mark.parametrize("resolver", [lambda c: 5, lambda c: {**c["ours"], "k": 99}])
def test_merge_resolver_returning_a_wrong_value_is_a_usage_error(
    conn: merkle.Connection, resolver: Any
) -> None:
    """Before: a non-mapping raised a builtin TypeError; a changed key was ignored."""
    _conflicting(conn)
    with pytest.raises(UsageError, match="merge resolver returned"):
        conn.merge("theirs", "ours", resolve=resolver)


# -- 6. ambiguous alter_schema calls --------------------------------------------------


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ({"rename": {"y": ""}}, "cannot rename 'y' to '': a field name must be a non-empty"),
        ({"rename": {"y": None}}, "cannot rename 'y' to None"),
        ({"rename": {"y": "z"}, "drop": ["y"]}, "names field 'y' in both drop and rename"),
        ({"widen": {"w": pa.int64()}, "rename": {"w": "ww"}}, "'w' in both rename and widen"),
        ({"rename": {"y": "w"}, "drop": ["w"]}, "'w' in both drop and rename"),
        ({"add": {"q": pa.int8()}, "drop": ["q"]}, "'q' in both add and drop"),
    ],
)
def test_ambiguous_alter_schema_is_refused_naming_both_parts(
    conn: merkle.Connection, parts: dict[str, Any], message: str
) -> None:
    """Before: misleading errors ('that name is taken', 'no such field') or silent no-ops."""
    db = _typed(conn)
    with pytest.raises(SchemaError, match=message):
        db.alter_schema("t", **parts)


def test_compatible_parts_of_one_alter_schema_call_still_apply(conn: merkle.Connection) -> None:
    db = conn.create_db("d").create_table(
        "t", key="k", schema=pa.schema([("k", pa.int64()), pa.field("n", pa.int32(), False)])
    )
    db = db.write("t", [{"k": 1, "n": 2}]).alter_schema(
        "t", widen={"n": pa.int64()}, nullable=["n"]
    )
    field = db.describe_table("t")["schema"].field("n")
    assert field.type == pa.int64()
    assert field.nullable
