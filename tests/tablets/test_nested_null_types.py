"""Tests of ``null`` inside a field's type (``list<null>``, ``struct<a: null>``, ...).

What a stateful probe found: a field whose first write held only empty lists was
typed ``list<null>`` and could never hold values: a later write of ``[3]`` was
refused ("Invalid null value"), and ``alter_schema(widen={"tags": list<int64>})``
was refused as narrowing. A top-level null field takes a later write's type and
widens to any type (api.md, "A new field"); the same rule now holds at any depth,
and the empty lists and nulls already written (pending or in stored tablets)
read back unchanged.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError
from merkle.tablets.nulltypes import fills_nulls, has_null, refined


def _table(limit: int | None = None) -> merkle.Database:
    conn = merkle.connect("memory://")
    options = {} if limit is None else {"tablet_size_limit": limit}
    return conn.create_db("d").create_table("t", key="k", **options)


def _field_type(db: merkle.Database, name: str) -> pa.DataType:
    return db.describe_table("t")["schema"].field(name).type


# -- the rule itself ---------------------------------------------------------------------


def test_has_null_sees_null_at_any_depth() -> None:
    assert has_null(pa.list_(pa.struct([("a", pa.map_(pa.string(), pa.null()))])))
    assert not has_null(pa.list_(pa.struct([("a", pa.map_(pa.string(), pa.int8()))])))


def test_refined_fills_nulls_by_shape_and_keeps_the_rest() -> None:
    old = pa.struct([("a", pa.null()), ("b", pa.int8())])
    assert refined(old, pa.struct([("a", pa.string())])) == pa.struct(
        [("a", pa.string()), ("b", pa.int8())]
    )
    assert refined(pa.list_(pa.null()), pa.large_list(pa.int64())) == pa.list_(pa.null())
    assert refined(pa.list_(pa.null(), 2), pa.list_(pa.int8(), 3)) == pa.list_(pa.null(), 2)
    assert fills_nulls(pa.list_(pa.null()), pa.list_(pa.list_(pa.int8())))
    assert not fills_nulls(pa.list_(pa.null()), pa.large_list(pa.int8()))
    assert not fills_nulls(pa.list_(pa.int8()), pa.list_(pa.int8()))


# -- records ----------------------------------------------------------------------------


@pytest.mark.parametrize("commit_first", [True, False], ids=["stored", "pending"])
def test_a_write_of_values_types_a_list_of_null(commit_first: bool) -> None:
    db = _table().write("t", [{"k": 1, "tags": []}, {"k": 2, "tags": None}])
    if commit_first:
        db = db.commit()
    assert _field_type(db, "tags") == pa.list_(pa.null())
    db = db.write("t", [{"k": 3, "tags": [3]}])
    assert _field_type(db, "tags") == pa.list_(pa.int64())
    expected = [[], None, [3]]
    assert db.to_arrow("t").column("tags").to_pylist() == expected
    db = db.commit()
    assert db.to_arrow("t").column("tags").to_pylist() == expected
    assert [r.get("tags") for r in db.scan("t")] == expected
    assert db.to_arrow("t").schema.field("tags").type == pa.list_(pa.int64())
    with pytest.raises(SchemaError, match="'tags'"):
        db.write("t", [{"k": 4, "tags": ["s"]}])


def test_a_struct_member_of_type_null_takes_a_later_type() -> None:
    db = _table().write("t", [{"k": 1, "s": {"a": None, "b": 1}}]).commit()
    assert _field_type(db, "s") == pa.struct([("a", pa.null()), ("b", pa.int64())])
    db = db.write("t", [{"k": 2, "s": {"b": 2}}]).commit()  # teaches nothing
    assert _field_type(db, "s") == pa.struct([("a", pa.null()), ("b", pa.int64())])
    db = db.write("t", [{"k": 3, "s": {"a": "x", "b": 3}}]).commit()
    assert _field_type(db, "s") == pa.struct([("a", pa.string()), ("b", pa.int64())])
    assert db.to_arrow("t").column("s").to_pylist() == [
        {"a": None, "b": 1},
        {"a": None, "b": 2},
        {"a": "x", "b": 3},
    ]


def test_a_list_of_null_over_many_tablets_reads_back_after_compaction() -> None:
    db = _table(limit=4)
    db = db.write("t", [{"k": i, "tags": []} for i in range(20)]).compact("t").commit()
    assert len(db.list_tablets("t")) > 1  # stored list<null> tablets
    db = db.write("t", [{"k": 7, "tags": [1, 2]}, {"k": 30, "tags": [5]}]).commit()
    db = db.write("t", [{"k": 8, "tags": []}]).commit()  # pending, of both types
    db = db.compact("t").commit()
    assert all(t["count"] for t in db.list_tablets("t"))
    tags = db.to_arrow("t").column("tags").to_pylist()
    assert tags == [[] if i != 7 else [1, 2] for i in range(20)] + [[5]]
    assert db.to_arrow("t").schema.field("tags").type == pa.list_(pa.int64())


# -- Arrow -------------------------------------------------------------------------------

_FIRST_AND_LATER = [
    (pa.list_(pa.null()), [[]], pa.list_(pa.int32()), [[1, 2]]),
    (pa.large_list(pa.null()), [[]], pa.large_list(pa.string()), [["x"]]),
    (pa.list_(pa.null(), 0), [[]], pa.list_(pa.int8(), 0), [[]]),
    (pa.struct([("a", pa.null())]), [{"a": None}], pa.struct([("a", pa.float64())]), [{"a": 1.5}]),
    (
        pa.map_(pa.string(), pa.null()),
        [[("x", None)]],
        pa.map_(pa.string(), pa.int16()),
        [[("y", 4)]],
    ),
]


@pytest.mark.parametrize(("first", "old", "later", "new"), _FIRST_AND_LATER, ids=lambda x: str(x))
def test_an_arrow_write_types_a_null_inside_a_field(
    first: pa.DataType, old: list[object], later: pa.DataType, new: list[object]
) -> None:
    db = _table().write("t", pa.table({"k": [1], "f": pa.array(old, first)})).commit()
    assert _field_type(db, "f") == first
    db = db.write("t", pa.table({"k": [2], "f": pa.array(new, later)})).commit()
    assert _field_type(db, "f") == later
    column = db.to_arrow("t").column("f")
    assert column.type == later
    assert column.to_pylist() == pa.array(old + new, later).to_pylist()


# -- widen -------------------------------------------------------------------------------


def test_the_repro_list_of_null_widens_then_takes_values() -> None:
    db = _table().write("t", [{"k": 1, "tags": []}, {"k": 2, "tags": None}]).commit()
    db = db.alter_schema("t", widen={"tags": pa.list_(pa.int64())}).commit()
    assert _field_type(db, "tags") == pa.list_(pa.int64())
    db = db.write("t", [{"k": 3, "tags": [3]}]).commit()
    assert db.to_arrow("t").column("tags").to_pylist() == [[], None, [3]]


@pytest.mark.parametrize(
    ("first", "old", "wide"), [(f, o, w) for f, o, w, _ in _FIRST_AND_LATER], ids=lambda x: str(x)
)
def test_null_at_any_depth_widens_to_any_type(
    first: pa.DataType, old: list[object], wide: pa.DataType
) -> None:
    db = _table().write("t", pa.table({"k": [1, 2], "f": pa.array([*old, None], first)})).commit()
    db = db.alter_schema("t", widen={"f": wide}).commit()
    column = db.to_arrow("t").column("f")
    assert column.type == wide
    assert column.to_pylist() == pa.array([*old, None], wide).to_pylist()


@pytest.mark.parametrize(
    "wide",
    [pa.large_list(pa.int64()), pa.int64(), pa.list_(pa.int64(), 1), pa.struct([("a", pa.int8())])],
    ids=str,
)
def test_a_widen_that_changes_the_shape_is_still_refused(wide: pa.DataType) -> None:
    db = _table().write("t", [{"k": 1, "tags": []}]).commit()
    with pytest.raises(SchemaError, match="null at any depth"):
        db.alter_schema("t", widen={"tags": wide})


# -- merge -------------------------------------------------------------------------------


def test_a_merge_joins_a_list_of_null_with_the_type_the_other_side_learned() -> None:
    with merkle.connect("memory://") as conn:
        main = conn.create_db("main").create_table("t", key="k")
        main = main.write("t", [{"k": 1, "tags": []}]).commit()
        dev = conn.create_db("dev", root=main)
        main.write("t", [{"k": 2, "tags": []}]).commit()
        dev.write("t", [{"k": 3, "tags": [7]}]).commit()
        merged = conn.merge("dev", "main")
        assert _field_type(merged, "tags") == pa.list_(pa.int64())
        rows = sorted(merged.scan("t"), key=lambda r: r["k"])
        assert [r["tags"] for r in rows] == [[], [], [7]]
