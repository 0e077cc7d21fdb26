"""Numbers into timestamp, time, date and duration fields, and dictionaries of views,
found by a probe (findings 15 and 16).

A value must fit its field exactly (doc/api.md, "A value must fit its field").
pyarrow takes a number into a temporal type as a count of its unit through
``int()``: 1.5 into duration[s] was stored as 1 s, -0.5 as 0, 1.5 into date32 as
1970-01-02, from records written or updated, and inside lists and structs; a
numpy float was refused for duration and timestamp but cut for time and date. A
number there is now held to the int field's rule: a whole one (Python's or
numpy's) is that many units, anything else a SchemaError naming the field.

A first Arrow write of a dictionary of string views (Polars' Categorical) made the
field a dictionary of strings, while declaring that type was refused: both now make
the same field (doc/api.md, "Dictionary fields").
"""

from __future__ import annotations

import datetime as dt
import decimal
import fractions
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError
from tests.tablets.test_fit_probe_values import _put, _table

WAYS = ("write", "upsert", "update", "update-mixed")

TEMPORAL = [
    pa.duration("s"),
    pa.duration("us"),
    pa.timestamp("s"),
    pa.timestamp("ms", tz="UTC"),
    pa.time32("s"),
    pa.time64("us"),
    pa.date32(),
]


def _wrapped(kind: pa.DataType, value: Any, shape: str) -> tuple[pa.DataType, Any]:
    if shape == "list":
        return pa.list_(kind), [value]
    if shape == "struct":
        return pa.struct([("d", kind)]), {"d": value}
    if shape == "map":
        return pa.map_(pa.string(), kind), {"a": value}
    return kind, value


@pytest.mark.parametrize("kind", TEMPORAL, ids=str)
@pytest.mark.parametrize("value", [1.5, -0.5, np.float64(1.5), np.float32(-2.5)], ids=repr)
@pytest.mark.parametrize("shape", ["top", "list", "struct", "map"])
def test_a_fraction_of_the_unit_is_refused(kind: pa.DataType, value: Any, shape: str) -> None:
    field_type, given = _wrapped(kind, value, shape)
    db = _table(field_type)
    for way in WAYS:
        with pytest.raises(SchemaError, match=r"field 'v'.*not a whole number"):
            _put(db, way, given)
    assert db.get_records("t", [1])[1].get("v") is None  # nothing was written


@pytest.mark.parametrize("kind", TEMPORAL, ids=str)
@pytest.mark.parametrize(
    "value",
    [decimal.Decimal("1.5"), fractions.Fraction(3, 2), np.bool_(True), float("nan")],
    ids=repr,
)
def test_numbers_int_would_cut_are_refused(kind: pa.DataType, value: Any) -> None:
    db = _table(kind)
    for way in WAYS:
        with pytest.raises(SchemaError, match="field 'v'"):
            _put(db, way, value)


def _two_units(kind: pa.DataType) -> Any:
    """What 2 of ``kind``'s unit reads back as."""
    return pa.array([2], pa.int32() if kind.bit_width == 32 else pa.int64()).view(kind)[0].as_py()


@pytest.mark.parametrize("kind", TEMPORAL, ids=str)
@pytest.mark.parametrize(
    "value", [2, 2.0, np.int64(2), np.float64(2.0), np.float32(2.0), np.uint8(2)], ids=repr
)
@pytest.mark.parametrize("shape", ["top", "list", "struct"])
def test_a_whole_number_counts_the_unit_as_an_int_does(
    kind: pa.DataType, value: Any, shape: str
) -> None:
    field_type, given = _wrapped(kind, value, shape)
    _, expected = _wrapped(kind, _two_units(kind), shape)
    db = _table(field_type)
    for way in WAYS:
        assert _put(db, way, given).get_records("t", [1])[1]["v"] == expected, way


def test_times_and_numpy_times_still_fit() -> None:
    """Python and numpy times are not numbers to the rule; their own checks still hold."""
    db = _table(pa.duration("s"))
    db = db.write("t", [{"k": 1, "v": np.timedelta64(3, "s")}, {"k": 2, "v": dt.timedelta(4)}])
    assert db.commit().get_records("t", [1, 2]) == {
        1: {"k": 1, "v": dt.timedelta(seconds=3)},
        2: {"k": 2, "v": dt.timedelta(days=4)},
    }
    with pytest.raises(SchemaError, match="fraction of a second"):
        db.write("t", [{"k": 1, "v": dt.timedelta(seconds=1.5)}])
    stamps = _table(pa.timestamp("s")).write("t", [{"k": 1, "v": np.datetime64(5, "s")}])
    assert stamps.commit().get_records("t", [1])[1]["v"] == dt.datetime(1970, 1, 1, 0, 0, 5)
    with pytest.raises(SchemaError, match="time of day"):
        _table(pa.date32()).write("t", [{"k": 1, "v": dt.datetime(2020, 1, 1, 12)}])


@pytest.mark.parametrize("column", [pa.array([2.0]), pa.array([1.5]), pa.array([2])], ids=str)
def test_an_arrow_number_column_is_refused_whatever_its_values(column: pa.Array) -> None:
    db = _table(pa.duration("s"))
    with pytest.raises(SchemaError, match="field 'v' is duration"):
        db.write("t", pa.table({"k": [1], "v": column}))


@pytest.mark.parametrize("array", [np.array([2.0]), np.array([1.5]), np.array([2])], ids=str)
def test_a_numpy_number_array_as_a_list_value_is_refused_as_arrow_data(array: Any) -> None:
    db = _table(pa.list_(pa.duration("s")))
    with pytest.raises(SchemaError, match="field 'v' is list<item: duration"):
        db.write("t", [{"k": 1, "v": array}])


# -- dictionaries of views (Polars' Categorical) -----------------------------------

VIEWS = pa.dictionary(pa.int8(), pa.string_view())
STRINGS = pa.dictionary(pa.int8(), pa.string())


def _categorical() -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(
        pa.array([0, 1, None], pa.int8()), pa.array(["a", "b"], pa.string_view())
    )


def _field_type(db: Any, name: str = "v") -> pa.DataType:
    return db.describe_table("t")["schema"].field(name).type


def test_a_declared_dictionary_of_views_is_the_field_a_first_write_makes() -> None:
    conn = merkle.connect("memory://")
    written = conn.create_db("w").create_table("t", key="k")
    written = written.write("t", pa.table({"k": [1, 2, 3], "v": _categorical()})).commit()
    schema = pa.schema([("k", pa.int64()), ("v", VIEWS)])
    declared = conn.create_db("d").create_table("t", key="k", schema=schema)
    assert _field_type(declared) == _field_type(written) == STRINGS
    declared = declared.write("t", pa.table({"k": [1, 2, 3], "v": _categorical()}))
    declared = declared.write("t", [{"k": 4, "v": "c"}]).commit()
    column = declared.to_arrow("t").column("v")
    assert column.type == STRINGS
    assert column.to_pylist() == ["a", "b", None, "c"]


def test_alter_schema_adds_a_dictionary_of_views_as_strings_or_bytes() -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k")
    db = db.write("t", [{"k": 1}]).commit()
    binary_views = pa.dictionary(pa.int32(), pa.binary_view())
    db = db.alter_schema("t", add=[pa.field("b", binary_views)]).alter_schema("t", add={"v": VIEWS})
    assert _field_type(db, "b") == pa.dictionary(pa.int32(), pa.binary())
    assert _field_type(db, "v") == STRINGS


def test_a_nested_dictionary_of_views_is_refused_both_ways() -> None:
    conn = merkle.connect("memory://")
    schema = pa.schema([("k", pa.int64()), ("v", pa.list_(VIEWS))])
    with pytest.raises(SchemaError, match=r"field 'v'.*string_view"):
        conn.create_db("d").create_table("t", key="k", schema=schema)
    lists = pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()), _categorical().slice(0, 2))
    db = conn.create_db("w").create_table("t", key="k")
    with pytest.raises(SchemaError, match=r"field 'v'.*string_view"):
        db.write("t", pa.table({"k": [1], "v": lists}))


@pytest.mark.parametrize("value", [2, 2.0, 86_400_001, -1, np.int64(3_600_000)])
def test_a_date64_number_that_is_not_whole_days_is_refused(value: Any) -> None:
    """A date64 counts milliseconds but holds whole days: 2 stored 2 ms, an invalid
    date64 that read back as the epoch's day (fixer's note, twenty-third session)."""
    schema = pa.schema([("k", pa.int64()), ("d", pa.date64())])
    with merkle.connect("memory://") as conn:
        db = conn.create_db("x").create_table("t", key="k", schema=schema)
        with pytest.raises(SchemaError, match="whole number of days"):
            db.write("t", [{"k": 1, "d": value}])
        days = db.write("t", [{"k": 1, "d": 2 * 86_400_000}]).to_arrow("t")
        assert days.column("d").to_pylist() == [dt.date(1970, 1, 3)]


def test_a_written_value_with_no_python_form_names_its_kinds_limit() -> None:
    """A value checked one by one (no cast kernel: a struct member Arrow cannot match)
    that Python cannot hold said "(years 1 to 9999 only)" for any kind; a duration has
    no years (fixer's note, twenty-third session)."""
    member = pa.field("x", pa.int64(), nullable=False)
    kind = pa.struct([pa.field("d", pa.duration("s")), member])
    schema = pa.schema([("k", pa.int64()), ("s", kind)])
    column = pa.array([{"d": 2**62}], pa.struct([("d", pa.duration("s"))]))
    with merkle.connect("memory://") as conn:
        db = conn.create_db("x").create_table("t", key="k", schema=schema)
        with pytest.raises(SchemaError, match="timedelta, which holds") as raised:
            db.write("t", pa.table({"k": [1], "s": column}))
        assert "9999" not in str(raised.value)
