"""Tests of a dictionary whose value type is ``null`` (``dictionary<int32, null>``), at any depth.

What an adversarial probe found: an all-null dictionary-encoded column
(``pa.array([None, None]).dictionary_encode()``) written as a new field fixed its
type as ``dictionary<int32, null>`` for good: every later write of values, as a
dictionary of strings or as plain strings, was refused with "field 'c' is null,
but the data holds string", naming the field by its stored type, not its own.
``null`` elsewhere in a field's type (``list<null>``, ``struct<a: null>``) takes
a later write's type and widens to any type (api.md, "A new field"); a
dictionary's value type now follows the same rule, at the top and inside a list,
struct or map, and its index type is kept unless the data's numbers more values.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError
from merkle.tablets.nulltypes import fills_nulls, has_null, refined

_NULL = pa.null()
_INT32 = pa.int32()


def _dict(values: pa.DataType = _NULL, index: pa.DataType = _INT32) -> pa.DataType:
    return pa.dictionary(index, values)


def _null_dictionary(count: int, index: pa.DataType = _INT32) -> pa.DictionaryArray:
    """``count`` nulls as a dictionary of null values (what ``dictionary_encode`` of an
    all-null array gives for int32, built by hand for the other index types)."""
    return pa.DictionaryArray.from_arrays(pa.nulls(count, index), pa.array([], pa.null()))


def _lists_of_null_dictionary() -> pa.ListArray:
    """``[[None], []]`` as ``list<dictionary<int32, null>>``: pyarrow builds no such array
    from Python lists."""
    return pa.ListArray.from_arrays(pa.array([0, 1, 1], pa.int32()), _null_dictionary(1))


def _table(limit: int | None = None) -> merkle.Database:
    conn = merkle.connect("memory://")
    options = {} if limit is None else {"tablet_size_limit": limit}
    return conn.create_db("d").create_table("t", key="k", **options)


def _field_type(db: merkle.Database, name: str = "c") -> pa.DataType:
    return db.describe_table("t")["schema"].field(name).type


def _column(db: merkle.Database, name: str = "c") -> pa.ChunkedArray:
    return db.to_arrow("t").column(name)


# -- the rule itself ---------------------------------------------------------------------


def test_has_null_sees_a_dictionary_of_null_at_any_depth() -> None:
    assert has_null(_dict())
    assert has_null(pa.list_(_dict()))
    assert has_null(pa.struct([("a", pa.map_(pa.string(), _dict()))]))
    assert not has_null(_dict(pa.string()))
    assert not has_null(pa.list_(_dict(pa.string())))


def test_refined_learns_the_values_and_keeps_the_index_unless_the_data_needs_a_wider_one() -> None:
    assert refined(_dict(), pa.string()) == _dict(pa.string())
    assert refined(_dict(), _dict(pa.string(), pa.int8())) == _dict(pa.string())
    assert refined(_dict(index=pa.int8()), _dict(pa.string(), pa.int16())) == _dict(
        pa.string(), pa.int16()
    )
    assert refined(_dict(index=pa.int8()), _dict(pa.null(), pa.int64())) == _dict(index=pa.int8())
    ordered = pa.dictionary(pa.int32(), pa.null(), ordered=True)
    assert refined(ordered, pa.string()) == pa.dictionary(pa.int32(), pa.string(), ordered=True)
    assert refined(pa.list_(_dict()), pa.list_(pa.binary())) == pa.list_(_dict(pa.binary()))
    assert refined(pa.list_(_dict()), pa.large_list(pa.binary())) == pa.list_(_dict())


def test_fills_nulls_takes_a_dictionary_of_null_to_values_but_no_narrower_index() -> None:
    assert fills_nulls(_dict(), _dict(pa.string()))
    assert fills_nulls(_dict(), _dict(pa.string(), pa.int64()))
    assert fills_nulls(pa.list_(_dict()), pa.list_(_dict(pa.string())))
    assert not fills_nulls(_dict(), _dict(pa.string(), pa.int8()))
    assert not fills_nulls(_dict(pa.string()), _dict(pa.string()))


# -- the repro: a later write learns the values ------------------------------------------

_LATER: dict[str, Any] = {
    "dictionary": lambda: pa.array(["x"]).dictionary_encode(),
    "plain": lambda: pa.array(["x"]),
    "records": None,
}


def _write_later(db: merkle.Database, how: str) -> merkle.Database:
    if how == "records":
        return db.write("t", [{"k": 3, "c": "x"}])
    return db.write("t", pa.table({"k": [3], "c": _LATER[how]()}))


@pytest.mark.parametrize("how", list(_LATER))
@pytest.mark.parametrize("commit_first", [True, False], ids=["stored", "pending"])
def test_a_write_of_values_types_a_dictionary_of_null(how: str, commit_first: bool) -> None:
    db = _table().write("t", pa.table({"k": [1, 2], "c": _null_dictionary(2)}))
    if commit_first:
        db = db.commit()
    assert _field_type(db) == _dict()
    db = _write_later(db, how)
    assert _field_type(db) == _dict(pa.string())
    column = _column(db)
    assert column.type == _dict(pa.string())
    assert column.to_pylist() == [None, None, "x"]
    db = db.commit()
    assert _column(db).to_pylist() == [None, None, "x"]
    with pytest.raises(SchemaError, match="'c'"):
        db.write("t", pa.table({"k": [4], "c": pa.array([b"bytes"])}))


def test_every_read_path_gives_the_learned_type_and_the_old_version_its_own() -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("t", key="k")
    db = db.write("t", pa.table({"k": [1, 2], "c": _null_dictionary(2)})).commit()
    old_version = db.version
    later = pa.array(["y", "x"]).dictionary_encode()
    db = db.write("t", pa.table({"k": [2, 3], "c": later})).commit()
    assert db.get_records("t", [1, 3]) == {1: {"k": 1}, 3: {"k": 3, "c": "x"}}  # null: absent
    assert [r.get("c") for r in db.scan("t")] == [None, "y", "x"]
    changes = db.diff(old_version)["t"].records()
    assert [(c["key"], c["change"], c["old"], c["new"]) for c in changes] == [
        (2, "update", {"k": 2}, {"k": 2, "c": "y"}),
        (3, "insert", None, {"k": 3, "c": "x"}),
    ]
    old = conn.open_db("d", version=old_version)
    assert old.to_arrow("t").schema.field("c").type == _dict()
    assert old.to_arrow("t").column("c").to_pylist() == [None, None]
    assert [r.get("c") for r in old.scan("t")] == [None, None]
    compacted = db.compact("t").commit()
    assert _column(compacted).type == _dict(pa.string())
    assert _column(compacted).to_pylist() == [None, "y", "x"]


def test_a_dictionary_of_null_over_many_tablets_reads_back_after_compaction() -> None:
    db = _table(limit=4)
    db = db.write("t", pa.table({"k": list(range(20)), "c": _null_dictionary(20)}))
    db = db.compact("t").commit()
    assert len(db.list_tablets("t")) > 1  # stored tablets whose column is of type null
    db = db.write("t", [{"k": 7, "c": "a"}, {"k": 30, "c": "b"}]).commit()
    db = db.write("t", pa.table({"k": [8], "c": _null_dictionary(1)})).commit()  # pending
    db = db.compact("t").commit()
    assert all(t["count"] for t in db.list_tablets("t"))
    assert _column(db).to_pylist() == [("a" if i == 7 else None) for i in range(20)] + ["b"]
    assert _column(db).type == _dict(pa.string())


def test_the_index_type_is_kept_unless_the_data_numbers_more_values() -> None:
    many = [f"v{i}" for i in range(300)]
    keys = list(range(3, 303))
    db = _table().write("t", pa.table({"k": [1, 2], "c": _null_dictionary(2, pa.int8())}))
    wide = pa.array(many).dictionary_encode().cast(_dict(pa.string(), pa.int16()))
    learned = db.write("t", pa.table({"k": keys, "c": wide})).commit()
    assert _field_type(learned) == _dict(pa.string(), pa.int16())
    assert _column(learned).to_pylist() == [None, None, *many]
    with pytest.raises(SchemaError, match="index type int8 numbers at most 128"):
        db.write("t", pa.table({"k": keys, "c": pa.array(many)}))  # plain: int8 kept
    db = _table().write("t", pa.table({"k": [1, 2], "c": _null_dictionary(2)}))
    narrow = pa.array(["x"]).dictionary_encode().cast(_dict(pa.string(), pa.int8()))
    assert _field_type(db.write("t", pa.table({"k": [3], "c": narrow}))) == _dict(pa.string())


# -- inside a list, struct or map --------------------------------------------------------


def _struct_of_null_dictionary() -> pa.StructArray:
    return pa.StructArray.from_arrays([_null_dictionary(2), pa.array([1, 2])], names=["a", "b"])


def _map_of_null_dictionary() -> pa.MapArray:
    keys = pa.array(["x", "y"])
    return pa.MapArray.from_arrays(pa.array([0, 1, 2], pa.int32()), keys, _null_dictionary(2))


_NESTED = [
    (
        _lists_of_null_dictionary,
        pa.array([["x", "y"]]),
        pa.list_(_dict(pa.string())),
        [[None], [], ["x", "y"]],
    ),
    (
        _struct_of_null_dictionary,
        pa.array([{"a": "x", "b": 3}]),
        pa.struct([("a", _dict(pa.string())), ("b", pa.int64())]),
        [{"a": None, "b": 1}, {"a": None, "b": 2}, {"a": "x", "b": 3}],
    ),
    (
        _map_of_null_dictionary,
        pa.array([[("z", "v")]], pa.map_(pa.string(), pa.string())),
        pa.map_(pa.string(), _dict(pa.string())),
        [[("x", None)], [("y", None)], [("z", "v")]],
    ),
]


@pytest.mark.parametrize(
    ("first", "later", "learned", "expected"), _NESTED, ids=["list", "struct", "map"]
)
def test_an_arrow_write_types_a_dictionary_of_null_inside_a_field(
    first: Any, later: pa.Array, learned: pa.DataType, expected: list[Any]
) -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("t", key="k")
    db = db.write("t", pa.table({"k": [1, 2], "c": first()})).commit()
    old_version = db.version
    assert has_null(_field_type(db))
    db = db.write("t", pa.table({"k": [3], "c": later})).commit()
    assert _field_type(db) == learned
    assert _column(db).type == learned
    assert _column(db).to_pylist() == expected
    assert [r.get("c") for r in db.scan("t")] == expected
    assert db.get_records("t", [1])[1]["c"] == expected[0]
    assert len(db.diff(old_version)["t"].records()) == 1
    old = conn.open_db("d", version=old_version)
    assert old.to_arrow("t").column("c").to_pylist() == expected[:2]
    assert _column(db.compact("t").commit()).to_pylist() == expected


def test_records_type_a_list_of_dictionary_of_null() -> None:
    db = _table().write("t", pa.table({"k": [1, 2], "c": _lists_of_null_dictionary()})).commit()
    db = db.write("t", [{"k": 3, "c": ["x"]}]).commit()
    assert _field_type(db) == pa.list_(_dict(pa.string()))
    assert _column(db).to_pylist() == [[None], [], ["x"]]


# -- values no dictionary holds; error messages ------------------------------------------


@pytest.mark.parametrize("records", [True, False], ids=["records", "arrow"])
def test_values_no_dictionary_holds_are_refused_naming_the_type_to_declare(records: bool) -> None:
    db = _table().write("t", pa.table({"k": [1, 2], "c": _null_dictionary(2)})).commit()
    data: Any = [{"k": 3, "c": [1]}] if records else pa.table({"k": [3], "c": pa.array([[1]])})
    with pytest.raises(SchemaError, match=r"field 'c' is dictionary.*declare list<item: int64>"):
        db.write("t", data)
    db = db.alter_schema("t", widen={"c": pa.list_(pa.int64())}).commit()
    db = db.write("t", data).commit()
    assert _column(db).to_pylist() == [None, None, [1]]


def test_a_misfit_names_the_field_by_its_dictionary_type_not_its_storage() -> None:
    db = _table().write("t", pa.table({"k": [1], "c": pa.array(["a"]).dictionary_encode()}))
    with pytest.raises(SchemaError, match=r"field 'c' is dictionary<values=string, indices=int32"):
        db.write("t", pa.table({"k": [2], "c": pa.array([1])}))


# -- widen -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wide",
    [_dict(pa.string()), _dict(pa.string(), pa.int64()), pa.string(), pa.int64()],
    ids=str,
)
def test_a_dictionary_of_null_widens_to_values(wide: pa.DataType) -> None:
    db = _table().write("t", pa.table({"k": [1, 2], "c": _null_dictionary(2)})).commit()
    db = db.alter_schema("t", widen={"c": wide}).commit()
    assert _field_type(db) == wide
    assert _column(db).type == wide
    assert _column(db).to_pylist() == [None, None]


def test_a_list_of_dictionary_of_null_widens_then_takes_values() -> None:
    db = _table().write("t", pa.table({"k": [1, 2], "c": _lists_of_null_dictionary()})).commit()
    db = db.alter_schema("t", widen={"c": pa.list_(_dict(pa.string()))}).commit()
    db = db.write("t", pa.table({"k": [3], "c": pa.array([["x"]])})).commit()
    assert _column(db).type == pa.list_(_dict(pa.string()))
    assert _column(db).to_pylist() == [[None], [], ["x"]]


def test_a_widen_to_a_narrower_index_is_still_refused() -> None:
    db = _table().write("t", pa.table({"k": [1, 2], "c": _null_dictionary(2)})).commit()
    with pytest.raises(SchemaError, match="cannot widen field 'c'"):
        db.alter_schema("t", widen={"c": _dict(pa.string(), pa.int8())})


# -- merge -------------------------------------------------------------------------------


def test_a_merge_joins_a_dictionary_of_null_with_the_values_the_other_side_learned() -> None:
    with merkle.connect("memory://") as conn:
        main = conn.create_db("main").create_table("t", key="k")
        main = main.write("t", pa.table({"k": [1], "c": _null_dictionary(1)})).commit()
        dev = conn.create_db("dev", root=main)
        main.write("t", pa.table({"k": [2], "c": _null_dictionary(1)})).commit()
        dev.write("t", [{"k": 3, "c": "x"}]).commit()
        merged = conn.merge("dev", "main")
        assert _field_type(merged) == _dict(pa.string())
        rows = sorted(merged.scan("t"), key=lambda r: r["k"])
        assert [r.get("c") for r in rows] == [None, None, "x"]
