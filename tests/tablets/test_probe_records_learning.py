"""Tests of what records teach a field, and how their misfits are named.

What an adversarial probe found:

* A ``map<string, null>`` field (its values all null so far) never learned its value
  type from records: ``{"size": 3}`` or ``[("size", 3)]`` was refused ("Invalid null
  value") on write, upsert and update, though the same value as Arrow data made it
  ``map<string, int64>`` (api.md, "A new field"). pyarrow infers no map from Python
  values (a dict is a struct, pairs are nothing), so the type learned never had the
  map's shape. A ``large_list<null>`` or fixed-size ``list<null>`` did not learn
  from a Python list either (inferred as a plain ``list``).
* A dictionary-of-string field given an int in records was named by its storage
  type ("field 'zone' is string"), not its own, as Arrow data names it.
* numpy ``datetime64`` / ``timedelta64`` scalars typed a new field from their
  ``item()`` (a date, a datetime dropping the unit, an int for nanoseconds) and
  were then refused by it; one whose unit was not the field's was refused by a
  declared field too ("Expected np.datetime64 but got: timestamp[s]").
"""

from __future__ import annotations

import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError

_MAP_OF_NULL = pa.map_(pa.string(), pa.null())
_MAP_OF_INT = pa.map_(pa.string(), pa.int64())


def _db(schema: pa.Schema | None = None) -> merkle.Database:
    conn = merkle.connect("memory://")
    return conn.create_db("d").create_table("t", key="k", schema=schema).commit()


def _typed(kind: pa.DataType) -> merkle.Database:
    """A table whose field ``f`` is declared ``kind``."""
    return _db(pa.schema([("k", pa.int64()), ("f", kind)]))


def _field_type(db: merkle.Database, name: str = "f") -> pa.DataType:
    return db.describe_table("t")["schema"].field(name).type


def _values(db: merkle.Database, name: str = "f") -> list[Any]:
    values: list[Any] = db.to_arrow("t").column(name).to_pylist()
    return values


def _map_of_null_written() -> merkle.Database:
    """A table whose map field was first written (as Arrow data) with null values only."""
    first = pa.table(
        {"k": [1], "f": pa.array([[("color", None)]], _MAP_OF_NULL)},
    )
    return _db().write("t", first).commit()


# -- a map of null learns from records -----------------------------------------------


@pytest.mark.parametrize("value", [{"size": 3}, [("size", 3)], [{"key": "size", "value": 3}]])
@pytest.mark.parametrize("call", ["write", "upsert", "update"])
def test_map_of_null_learns_its_value_type_from_records(call: str, value: Any) -> None:
    base = _map_of_null_written()
    assert _field_type(base) == _MAP_OF_NULL
    expected: list[Any]
    if call == "update":
        db = base.update("t", {1: {"f": value}})
        expected = [[("size", 3)]]
    else:
        db = getattr(base, call)("t", [{"k": 2, "f": value}])
        expected = [[("color", None)], [("size", 3)]]
    assert _field_type(db) == _MAP_OF_INT
    assert _values(db) == expected


def test_map_of_null_learns_as_the_arrow_write_does() -> None:
    base = _map_of_null_written()
    arrow = pa.table({"k": [2], "f": pa.array([[("size", 3)]], _MAP_OF_INT)})
    from_arrow = base.write("t", arrow)
    from_records = base.write("t", [{"k": 2, "f": {"size": 3}}])
    assert _field_type(from_records) == _field_type(from_arrow) == _MAP_OF_INT
    assert from_records.to_arrow("t").equals(from_arrow.to_arrow("t"))


def test_map_of_null_stays_when_the_values_are_null_again() -> None:
    db = _map_of_null_written().write("t", [{"k": 2, "f": {"a": None}}, {"k": 3, "f": {}}])
    assert _field_type(db) == _MAP_OF_NULL
    assert _values(db) == [[("color", None)], [("a", None)], []]


def test_map_of_null_with_values_of_two_kinds_is_refused() -> None:
    with pytest.raises(SchemaError, match="field 'f'"):
        _map_of_null_written().write("t", [{"k": 2, "f": {"a": 1, "b": "x"}}])


def test_map_of_null_keeps_its_key_type() -> None:
    """The map's key type was learned: int keys are refused, not taken as a new type."""
    with pytest.raises(SchemaError, match="field 'f'"):
        _map_of_null_written().write("t", [{"k": 2, "f": [(5, 3)]}])


@pytest.mark.parametrize(
    ("kind", "value", "learned", "back"),
    [
        (pa.list_(_MAP_OF_NULL), [{"a": 3}, [("b", 4)]], pa.list_(_MAP_OF_INT), None),
        (
            pa.struct([("m", _MAP_OF_NULL), ("x", pa.int64())]),
            {"m": [("a", 1.5)], "x": 1},
            pa.struct([("m", pa.map_(pa.string(), pa.float64())), ("x", pa.int64())]),
            None,
        ),
        (
            pa.map_(pa.string(), _MAP_OF_NULL),
            {"a": {"b": True}},
            pa.map_(pa.string(), pa.map_(pa.string(), pa.bool_())),
            [("a", [("b", True)])],
        ),
        (
            pa.map_(pa.string(), pa.list_(pa.null())),
            {"a": [1]},
            pa.map_(pa.string(), pa.list_(pa.int64())),
            [("a", [1])],
        ),
        (
            pa.map_(pa.string(), pa.dictionary(pa.int32(), pa.null())),
            {"a": "x"},
            pa.map_(pa.string(), pa.dictionary(pa.int32(), pa.string())),
            [("a", "x")],
        ),
    ],
)
def test_a_map_of_null_inside_learns_from_records(
    kind: pa.DataType, value: Any, learned: pa.DataType, back: Any
) -> None:
    db = _typed(kind).write("t", [{"k": 1, "f": value}])
    assert _field_type(db) == learned
    if back is not None:
        assert _values(db) == [back]


def test_struct_with_null_member_learns_beside_a_map_given_as_pairs() -> None:
    """A map given as (key, value) pairs has no inferred type: it kept a null member of
    the same struct from being learned."""
    kind = pa.struct([("a", pa.list_(pa.null())), ("m", _MAP_OF_INT)])
    db = _typed(kind).write("t", [{"k": 1, "f": {"a": [1], "m": [("x", 1)]}}])
    assert _field_type(db) == pa.struct([("a", pa.list_(pa.int64())), ("m", _MAP_OF_INT)])
    assert _values(db) == [{"a": [1], "m": [("x", 1)]}]


def test_struct_given_as_a_tuple_learns_its_null_member() -> None:
    kind = pa.struct([("m", _MAP_OF_NULL), ("x", pa.null())])
    db = _typed(kind).write("t", [{"k": 1, "f": ([("a", 2)], "y")}])
    assert _field_type(db) == pa.struct([("m", _MAP_OF_INT), ("x", pa.string())])
    assert _values(db) == [{"m": [("a", 2)], "x": "y"}]


@pytest.mark.parametrize(
    ("kind", "value", "learned"),
    [
        (pa.large_list(pa.null()), [1, 2], pa.large_list(pa.int64())),
        (pa.list_(pa.null(), 2), [1, 2], pa.list_(pa.int64(), 2)),
        (
            pa.large_list(pa.struct([("a", pa.null())])),
            [{"a": 1}],
            pa.large_list(pa.struct([("a", pa.int64())])),
        ),
        (
            pa.struct([("a", pa.large_list(pa.null()))]),
            {"a": ["x"]},
            pa.struct([("a", pa.large_list(pa.string()))]),
        ),
    ],
)
def test_large_and_fixed_size_lists_of_null_learn_from_records(
    kind: pa.DataType, value: Any, learned: pa.DataType
) -> None:
    db = _typed(kind).write("t", [{"k": 1, "f": value}])
    assert _field_type(db) == learned
    assert _values(db) == [value]


def test_fixed_size_list_of_null_refuses_a_list_of_another_length() -> None:
    with pytest.raises(SchemaError, match="field 'f'"):
        _typed(pa.list_(pa.null(), 2)).write("t", [{"k": 1, "f": [1, 2, 3]}])


# -- a dictionary field is named by its own type -------------------------------------


def _zones() -> merkle.Database:
    zone = pa.array(["a", "b"]).dictionary_encode()
    return _db().write("t", pa.table({"k": [1, 2], "zone": zone})).commit()


@pytest.mark.parametrize("call", ["write", "upsert", "update"])
def test_records_misfit_names_the_dictionary_type(call: str) -> None:
    base = _zones()
    kind = _field_type(base, "zone")
    if call == "update":
        with pytest.raises(SchemaError) as caught:
            base.update("t", {1: {"zone": 5}})
    else:
        with pytest.raises(SchemaError) as caught:
            getattr(base, call)("t", [{"k": 3, "zone": 5}])
    text = str(caught.value)
    assert f"field 'zone' is {kind}: the value 5 (int)" in text
    assert "field 'zone' is string" not in text


def test_records_misfit_inside_a_list_names_the_dictionary_type() -> None:
    kind = pa.list_(pa.dictionary(pa.int32(), pa.string()))
    with pytest.raises(SchemaError) as caught:
        _typed(kind).write("t", [{"k": 1, "f": [5]}])
    assert f"field 'f' is {kind}:" in str(caught.value)


def test_records_and_arrow_misfits_name_the_field_alike() -> None:
    base = _zones()
    kind = _field_type(base, "zone")
    with pytest.raises(SchemaError) as arrow:
        base.write("t", pa.table({"k": [3], "zone": pa.array([5])}))
    with pytest.raises(SchemaError) as records:
        base.write("t", [{"k": 3, "zone": 5}])
    assert f"field 'zone' is {kind}" in str(arrow.value)
    assert f"field 'zone' is {kind}" in str(records.value)


# -- numpy times in records ------------------------------------------------------------

_AT = "2024-05-01T10:00:00"


@pytest.mark.parametrize(
    ("value", "kind", "back"),
    [
        (np.datetime64("2024-05-01"), pa.date32(), datetime.date(2024, 5, 1)),
        (np.datetime64(_AT, "s"), pa.timestamp("s"), datetime.datetime(2024, 5, 1, 10)),
        (
            np.datetime64(_AT + ".123", "ms"),
            pa.timestamp("ms"),
            datetime.datetime(2024, 5, 1, 10, 0, 0, 123000),
        ),
        (np.datetime64(_AT, "us"), pa.timestamp("us"), datetime.datetime(2024, 5, 1, 10)),
        (np.timedelta64(5, "s"), pa.duration("s"), datetime.timedelta(seconds=5)),
        (np.timedelta64(7, "ms"), pa.duration("ms"), datetime.timedelta(milliseconds=7)),
        (np.datetime64("2024-05", "M"), pa.date32(), datetime.date(2024, 5, 1)),
        (np.datetime64("2024-05-01T10", "h"), pa.timestamp("s"), datetime.datetime(2024, 5, 1, 10)),
        (np.timedelta64(3, "D"), pa.duration("s"), datetime.timedelta(days=3)),
    ],
)
def test_numpy_time_types_a_new_field_by_its_unit(value: Any, kind: pa.DataType, back: Any) -> None:
    db = _db().write("t", [{"k": 1, "at": value}])
    assert _field_type(db, "at") == kind
    assert _values(db, "at") == [back]


def test_numpy_nanoseconds_make_a_timestamp_ns_exactly() -> None:
    value = np.datetime64(_AT + ".000000001", "ns")
    db = _db().write("t", [{"k": 1, "at": value}])
    assert _field_type(db, "at") == pa.timestamp("ns")
    stored = db.to_arrow("t").column("at")
    assert stored.cast(pa.int64()).to_pylist() == [int(value.astype(np.int64))]


def test_numpy_nanosecond_durations_make_a_duration_ns() -> None:
    db = _db().write("t", [{"k": 1, "at": np.timedelta64(5, "ns")}])
    assert _field_type(db, "at") == pa.duration("ns")
    assert db.to_arrow("t").column("at").cast(pa.int64()).to_pylist() == [5]


def test_numpy_time_types_a_field_as_a_numpy_array_of_it_is() -> None:
    for i, value in enumerate(
        [np.datetime64("2024-05-01"), np.datetime64(_AT, "s"), np.timedelta64(5, "ms")]
    ):
        db = _db().write("t", [{"k": i, "at": value}])
        assert _field_type(db, "at") == pa.array(np.array([value])).type


def test_numpy_times_of_several_units_take_the_finest() -> None:
    values = [np.datetime64(_AT, "s"), np.datetime64(_AT + ".5", "ms"), np.datetime64("NaT", "s")]
    db = _db().write("t", [{"k": i, "at": v} for i, v in enumerate(values)])
    assert _field_type(db, "at") == pa.timestamp("ms")
    assert _values(db, "at") == [
        datetime.datetime(2024, 5, 1, 10),
        datetime.datetime(2024, 5, 1, 10, 0, 0, 500000),
        None,
    ]


def test_numpy_seconds_with_python_datetimes_make_microseconds() -> None:
    values = [np.datetime64(_AT, "s"), datetime.datetime(2024, 1, 1, 0, 0, 0, 7)]
    db = _db().write("t", [{"k": i, "at": v} for i, v in enumerate(values)])
    assert _field_type(db, "at") == pa.timestamp("us")
    assert _values(db, "at") == [datetime.datetime(2024, 5, 1, 10), values[1]]


def test_numpy_date_and_time_of_day_in_one_field_are_refused() -> None:
    values = [np.datetime64("2024-05-01"), np.datetime64(_AT, "s")]
    with pytest.raises(SchemaError, match="values of different kinds"):
        _db().write("t", [{"k": i, "at": v} for i, v in enumerate(values)])


def test_numpy_timedelta_of_months_is_refused_clearly() -> None:
    with pytest.raises(SchemaError, match="no fixed length"):
        _db().write("t", [{"k": 1, "at": np.timedelta64(1, "M")}])


def test_numpy_nat_alone_adds_no_field() -> None:
    db = _db().write("t", [{"k": 1, "at": np.datetime64("NaT")}])
    assert "at" not in db.describe_table("t")["schema"].names


@pytest.mark.parametrize(
    ("value", "back"),
    [
        ([np.datetime64("2024-05-01")], [datetime.date(2024, 5, 1)]),
        ({"a": np.datetime64("2024-05-01")}, {"a": datetime.date(2024, 5, 1)}),
        ([np.datetime64("2024-05-01T10", "h")], [datetime.datetime(2024, 5, 1, 10)]),
    ],
)
def test_numpy_times_inside_lists_and_structs_type_a_new_field(value: Any, back: Any) -> None:
    db = _db().write("t", [{"k": 1, "at": value}])
    assert _values(db, "at") == [back]


@pytest.mark.parametrize(
    ("kind", "value", "back"),
    [
        (pa.timestamp("us"), np.datetime64(_AT, "s"), datetime.datetime(2024, 5, 1, 10)),
        (pa.timestamp("ns"), np.datetime64(_AT, "s"), datetime.datetime(2024, 5, 1, 10)),
        (pa.timestamp("s"), np.datetime64(_AT + ".000", "ms"), datetime.datetime(2024, 5, 1, 10)),
        (pa.date32(), np.datetime64("2024-05-01"), datetime.date(2024, 5, 1)),
        (pa.date32(), np.datetime64("2024-05-01T00:00:00", "s"), datetime.date(2024, 5, 1)),
        (pa.date64(), np.datetime64("2024-05-01"), datetime.date(2024, 5, 1)),
        (pa.duration("ms"), np.timedelta64(5, "s"), datetime.timedelta(seconds=5)),
        (pa.duration("us"), np.timedelta64(1, "D"), datetime.timedelta(days=1)),
        (pa.timestamp("us"), np.datetime64("NaT", "s"), None),
        (
            pa.list_(pa.timestamp("us")),
            [np.datetime64(_AT, "s"), np.datetime64("2024-05-01")],
            [datetime.datetime(2024, 5, 1, 10), datetime.datetime(2024, 5, 1)],
        ),
        (pa.list_(pa.date32()), [np.datetime64("2024-05-01")], [datetime.date(2024, 5, 1)]),
    ],
)
def test_numpy_time_into_a_declared_field_is_stored_exactly(
    kind: pa.DataType, value: Any, back: Any
) -> None:
    db = _typed(kind).write("t", [{"k": 1, "f": value}])
    assert _values(db) == [back]


def test_numpy_time_into_a_zoned_timestamp_is_taken_as_utc() -> None:
    kind = pa.timestamp("us", "UTC")
    db = _typed(kind).write("t", [{"k": 1, "f": np.datetime64(_AT, "s")}])
    assert _values(db) == [datetime.datetime(2024, 5, 1, 10, tzinfo=datetime.UTC)]


@pytest.mark.parametrize(
    ("kind", "value", "reason"),
    [
        (pa.timestamp("s"), np.datetime64(_AT + ".5", "ms"), "finer than the field's unit"),
        (pa.duration("s"), np.timedelta64(5, "ms"), "finer than the field's unit"),
        (pa.date32(), np.datetime64(_AT, "s"), "time of day"),
        (pa.duration("s"), np.datetime64("2024-05-01"), "holds a length of time"),
        (pa.timestamp("s"), np.timedelta64(5, "s"), "holds a point in time"),
        (pa.date32(), np.timedelta64(5, "D"), "holds a point in time"),
        (pa.list_(pa.timestamp("s")), [np.datetime64(_AT + ".5", "ms")], "finer than"),
        (pa.duration("s"), np.timedelta64(1, "M"), "no fixed length"),
        (pa.duration("s"), np.timedelta64(5), "without a unit"),
    ],
)
def test_numpy_time_that_does_not_fit_a_declared_field_is_refused(
    kind: pa.DataType, value: Any, reason: str
) -> None:
    with pytest.raises(SchemaError, match=reason):
        _typed(kind).write("t", [{"k": 1, "f": value}])


def test_numpy_time_field_takes_its_own_values_again() -> None:
    """The first write's field takes the same values on every later write."""
    for i, value in enumerate(
        [np.datetime64("2024-05-01"), np.datetime64(_AT, "ns"), np.timedelta64(5, "s")]
    ):
        db = _db().write("t", [{"k": 1, "at": value}]).commit()
        again = db.upsert("t", [{"k": 2, "at": value}]).update("t", {1: {"at": value}})
        assert len(_values(again, "at")) == 2, i
