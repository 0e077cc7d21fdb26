"""Values a value-fidelity probe found changed, refused with a raw error, or unreadable
after an accepted write: each test failed before its fix.

Dictionaries of numbers, dates or bools (a pandas ``Categorical`` of ints) could not be
written at all; string and binary views and run-end encoded columns were stored as
they were, and Arrow has no take kernel for them (a write out of key order, and a
lookup in a pending batch, raised); a zoned time in years 1 to 9999 in its zone but not
in UTC was written and then unreadable as records; a numpy uint64 above 2**63 - 1 became
a negative float; a list or struct of bools was stored as numbers.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import merkle
from merkle.errors import SchemaError


def _table(kind: pa.DataType | None = None) -> merkle.Database:
    db = merkle.connect("memory://").create_db("d")
    if kind is None:
        return db.create_table("t", key="k")
    return db.create_table("t", key="k", schema=pa.schema([("k", pa.int64()), ("v", kind)]))


def _dict(value_type: pa.DataType) -> pa.DataType:
    return pa.dictionary(pa.int8(), value_type)


# -- dictionaries of values Arrow does not cast to a dictionary ----------------------------

DICTIONARIES = [
    (pa.int64(), [10, 20, 10]),
    (pa.date32(), [dt.date(2020, 1, 1), dt.date(1999, 5, 6), dt.date(2020, 1, 1)]),
    (pa.float64(), [1.5, -0.0, 0.0]),
    (pa.bool_(), [True, False, True]),
]


@pytest.mark.parametrize(("value_type", "values"), DICTIONARIES)
def test_a_dictionary_of_numbers_dates_or_bools_is_written_and_read_back(
    value_type: pa.DataType, values: list[Any]
) -> None:
    kind = _dict(value_type)
    column = pa.array(values, value_type).dictionary_encode().cast(kind)
    db = _table(kind).write("t", pa.table({"k": [3, 1, 2], "v": column})).commit()
    db = db.write("t", [{"k": 4, "v": values[0]}]).commit()
    want = {3: values[0], 1: values[1], 2: values[2], 4: values[0]}
    for read in (db, db.compact().commit()):
        table = read.to_arrow("t")
        assert table.schema.field("v").type == kind
        got = dict(zip(table.column("k").to_pylist(), table.column("v").to_pylist(), strict=True))
        assert got == want
        assert read.get_arrow("t", [1]).column("v").type == kind
        assert read.get_records("t", [4])[4]["v"] == values[0]


def test_a_pandas_categorical_of_ints_is_written() -> None:
    frame = pd.DataFrame({"k": [1, 2], "grade": pd.Categorical([3, 5])})
    db = _table().write("t", frame).commit()
    column = db.to_arrow("t").column("grade")
    assert pa.types.is_dictionary(column.type)
    assert column.to_pylist() == [3, 5]


def test_a_dictionary_of_numbers_inside_a_struct_is_written() -> None:
    kind = pa.struct([("a", _dict(pa.int64()))])
    db = _table(kind).write("t", [{"k": 1, "v": {"a": 7}}, {"k": 2, "v": None}]).commit()
    assert db.to_arrow("t").column("v").type == kind
    assert db.get_records("t", [1, 2]) == {1: {"k": 1, "v": {"a": 7}}, 2: {"k": 2}}


@pytest.mark.parametrize(
    "kind",
    [
        _dict(pa.list_(pa.int64())),
        _dict(pa.struct([("a", pa.int64())])),
        pa.list_(_dict(pa.int64())),
        pa.map_(pa.string(), _dict(pa.int64())),
    ],
)
def test_a_dictionary_no_read_can_rebuild_is_refused_when_declared(kind: pa.DataType) -> None:
    with pytest.raises(SchemaError, match="stores dictionaries of strings or bytes anywhere"):
        _table(kind)


def test_a_dictionary_of_lists_is_refused_as_a_new_field_and_decoded_into_a_declared_list() -> None:
    lists = pa.DictionaryArray.from_arrays(
        pa.array([0, 0], pa.int8()), pa.array([[1]], pa.list_(pa.int64()))
    )
    rows = pa.table({"k": pa.array([1, 2], pa.int64()), "v": lists})
    with pytest.raises(SchemaError, match="declare list<item: int64> in its place"):
        _table().write("t", rows)
    db = _table(pa.list_(pa.int64())).write("t", rows).commit()
    assert db.to_arrow("t").column("v").to_pylist() == [[1], [1]]


# -- views and run-end encoding: stored plain -------------------------------------------

VIEWS = {
    "string_view": (pa.array(["b", "a", None], pa.string_view()), "c"),
    "binary_view": (pa.array([b"b", b"a", None], pa.binary_view()), b"c"),
    "run_end_encoded": (pc.run_end_encode(pa.array(["x", "x", "y"]), run_end_type=pa.int32()), "z"),
    "list<string_view>": (pa.array([["x"], None, ["y", None]], pa.list_(pa.string_view())), ["q"]),
    "struct<string_view>": (
        pa.array([{"a": "x"}, None, {"a": None}], pa.struct([("a", pa.string_view())])),
        {"a": "w"},
    ),
}


@pytest.mark.parametrize("name", VIEWS)
def test_views_and_run_end_encoded_columns_are_written_out_of_order_and_looked_up(
    name: str,
) -> None:
    column, more = VIEWS[name]
    db = _table().write("t", pa.table({"k": pa.array([3, 1, 2], pa.int64()), "v": column}))
    db = db.commit().write("t", [{"k": 4, "v": more}]).delete("t", [2]).commit()
    want = {3: column[0].as_py(), 1: column[1].as_py(), 4: more}
    for read in (db, db.compact().commit()):
        table = read.to_arrow("t")
        assert table.schema.field("v").type == column.type
        got = dict(zip(table.column("k").to_pylist(), table.column("v").to_pylist(), strict=True))
        assert got == want
        picked = read.get_arrow("t", [1, 4])
        assert picked.schema.field("v").type == column.type
        assert picked.column("v").to_pylist() == [want[1], more]
        assert read.get_records("t", [3])[3]["v"] == want[3]


# -- zoned times whose UTC instant is outside years 1 to 9999 -----------------------------


@pytest.mark.parametrize(
    ("zone", "value"),
    [
        ("Asia/Kolkata", dt.datetime(1, 1, 1, 5, 30)),  # +05:53:28 then: year 0 in UTC
        ("America/New_York", dt.datetime(9999, 12, 31, 22, 0)),  # year 10000 in UTC
    ],
)
def test_a_zoned_time_inside_years_1_to_9999_in_its_zone_reads_back(
    zone: str, value: dt.datetime
) -> None:
    written = value.replace(tzinfo=zoneinfo.ZoneInfo(zone))
    db = _table(pa.timestamp("s", zone)).write("t", [{"k": 1, "v": written}]).commit()
    got = db.get_records("t", [1])[1]["v"]
    assert got == written
    assert got.utcoffset() == written.utcoffset()
    assert [r["v"] for r in db.scan("t")] == [written]


def test_a_zoned_time_outside_years_1_to_9999_in_its_zone_is_still_an_error() -> None:
    zone = "America/New_York"
    ticks = pa.array([-62135596800], pa.int64()).cast(pa.timestamp("s", zone))  # 0001-01-01Z
    db = _table(pa.timestamp("s", zone)).write("t", pa.table({"k": [1], "v": ticks})).commit()
    with pytest.raises(merkle.errors.UsageError, match="has no Python form"):
        db.get_records("t", [1])


# -- numbers that pyarrow misreads, bools that are no numbers -----------------------------


@pytest.mark.parametrize("kind", [pa.float64(), pa.float32(), pa.float16()])
def test_a_numpy_uint64_above_int64_is_refused_not_made_negative(kind: pa.DataType) -> None:
    db = _table(kind).commit()
    with pytest.raises(SchemaError, match="reads a numpy uint64 above"):
        db.write("t", [{"k": 1, "v": np.uint64(2**64 - 1)}])
    assert db.write("t", [{"k": 1, "v": np.uint64(7)}]).get_records("t", [1])[1]["v"] == 7.0


@pytest.mark.parametrize(
    ("source", "target", "values"),
    [
        (pa.list_(pa.bool_()), pa.list_(pa.int64()), [[True]]),
        (pa.list_(pa.bool_()), pa.list_(pa.float64()), [[False]]),
        (pa.struct([("x", pa.bool_())]), pa.struct([("x", pa.float32())]), [{"x": True}]),
        (pa.map_(pa.string(), pa.bool_()), pa.map_(pa.string(), pa.int8()), [[("a", True)]]),
    ],
)
def test_arrow_bools_inside_a_list_struct_or_map_are_no_numbers(
    source: pa.DataType, target: pa.DataType, values: list[Any]
) -> None:
    rows = pa.table({"k": [1], "v": pa.array(values, source)})
    with pytest.raises(SchemaError, match="but the data holds"):
        _table(target).write("t", rows)


@pytest.mark.parametrize(
    ("source", "target", "values"),
    [
        (pa.list_(pa.int32()), pa.list_(pa.int64()), [[1]]),
        (pa.list_(pa.null()), pa.list_(pa.int64()), [[None]]),
        (pa.list_(_dict(pa.string())), pa.list_(pa.string()), [["a"]]),
    ],
)
def test_arrow_lists_of_the_same_kind_still_fit(
    source: pa.DataType, target: pa.DataType, values: list[Any]
) -> None:
    rows = pa.table({"k": [1], "v": pa.array(values, source)})
    got = _table(target).write("t", rows).to_arrow("t").column("v")
    assert got.type == target
    assert got.to_pylist() == pa.array(values, source).to_pylist()


# -- decimals into integer fields ----------------------------------------------------------


def test_a_decimal_with_a_fraction_is_no_integer() -> None:
    """pyarrow truncates Decimal('2.5') into an int64 field to 2: records and Arrow columns
    (which Arrow casts value by value) both stored 2 without a word."""
    import decimal

    db = _table(pa.int64()).commit()
    half = decimal.Decimal("2.5")
    with pytest.raises(SchemaError, match="not a whole number"):
        db.write("t", [{"k": 1, "v": half}])
    with pytest.raises(SchemaError, match="not a whole number"):
        db.write("t", pa.table({"k": [1], "v": pa.array([half], pa.decimal128(5, 1))}))
    with pytest.raises(SchemaError, match=r"key field 'k' is int64: .* of row 0 "):
        db.write("t", pa.table({"k": pa.array([half], pa.decimal128(5, 1)), "v": [1]}))
    whole = decimal.Decimal("2.000")
    assert db.write("t", [{"k": 1, "v": whole}]).get_records("t", [1]) == {1: {"k": 1, "v": 2}}
