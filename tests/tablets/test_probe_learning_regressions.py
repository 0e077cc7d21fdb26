"""Regressions of what records teach a field, found by a probe of the records path.

* A list of dicts that are not map entries (``[{"x": 1}]``), or entries whose keys
  are all None, written into a ``map<_, null>`` field raised pyarrow's raw
  ``ValueError`` ("A null type field may not be non-nullable"): the type learned
  from them was a map of ``null`` keys, which Arrow has not. They are refused as
  any value that is no map is, with a SchemaError naming the field and the key.
* A Python ``set`` as a list value skipped the checks a list gets: into a
  fixed-size list of another length it was cut to fit (``{1, 2, 3}`` stored as
  ``[1, 2]``) or raised a raw ``ArrowInvalid``, and its items were never checked
  (``{1.5}`` into ``list<int64>`` was stored as ``[1]``), at any depth.
* numpy times of different units, or with a ``datetime``, inside lists (one list,
  or the lists of several records), structs or maps were refused ("Cannot mix
  NumPy datetime64 units") where api.md types them by the finest unit.
"""

from __future__ import annotations

import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError


def _db(schema: pa.Schema | None = None) -> merkle.Database:
    conn = merkle.connect("memory://")
    return conn.create_db("d").create_table("t", key="k", schema=schema).commit()


def _typed(kind: pa.DataType) -> merkle.Database:
    """A table whose field ``f`` is declared ``kind``."""
    return _db(pa.schema([("k", pa.int64()), ("f", kind)]))


def _field_type(db: merkle.Database) -> pa.DataType:
    kind: pa.DataType = db.describe_table("t")["schema"].field("f").type
    return kind


def _values(db: merkle.Database) -> list[Any]:
    values: list[Any] = db.to_arrow("t").column("f").to_pylist()
    return values


# -- a map of null given no map ------------------------------------------------------

_MAPS_OF_NULL = [
    pa.map_(pa.string(), pa.null()),
    pa.map_(pa.string(), pa.list_(pa.null())),
    pa.map_(pa.string(), pa.struct([("a", pa.null())])),
]


@pytest.mark.parametrize("kind", _MAPS_OF_NULL, ids=str)
@pytest.mark.parametrize(
    "value", [[{"x": 1}], [{"kk": "a", "vv": 1}], [{"value": 1}, {"x": 2}]], ids=repr
)
@pytest.mark.parametrize("call", ["write", "upsert", "update"])
def test_map_of_null_refuses_dicts_that_are_no_entries(
    call: str, kind: pa.DataType, value: Any
) -> None:
    base = _typed(kind).write("t", [{"k": 1, "f": None}]).commit()
    if call == "update":
        with pytest.raises(SchemaError) as caught:
            base.update("t", {1: {"f": value}})
    else:
        with pytest.raises(SchemaError) as caught:
            getattr(base, call)("t", [{"k": 1, "f": value}])
    text = str(caught.value)
    assert "field 'f'" in text
    assert "key 1" in text
    assert "an entry has member" in text
    assert _field_type(base) == kind


@pytest.mark.parametrize("kind", _MAPS_OF_NULL, ids=str)
@pytest.mark.parametrize("value", [[(None, 1)], [{"key": None, "value": 1}]], ids=repr)
def test_map_of_null_refuses_a_null_key_as_a_schema_error(kind: pa.DataType, value: Any) -> None:
    base = _typed(kind)
    with pytest.raises(SchemaError, match="field 'f'"):
        base.write("t", [{"k": 1, "f": value}])
    assert _field_type(base) == kind


def test_map_of_null_still_learns_from_entries() -> None:
    db = _typed(pa.map_(pa.string(), pa.null())).write(
        "t", [{"k": 1, "f": [{"key": "a", "value": 1}]}, {"k": 2, "f": [{"key": "b", "value": 2}]}]
    )
    assert _field_type(db) == pa.map_(pa.string(), pa.int64())
    assert _values(db) == [[("a", 1)], [("b", 2)]]


# -- a set is checked as a list ------------------------------------------------------


@pytest.mark.parametrize("item", [pa.int64(), pa.null()], ids=str)
@pytest.mark.parametrize("value", [{1, 2, 3}, {7}], ids=repr)
def test_a_set_of_another_length_does_not_fit_a_fixed_size_list(
    item: pa.DataType, value: set[int]
) -> None:
    base = _typed(pa.list_(item, 2))
    with pytest.raises(SchemaError, match=r"field 'f'.*key 1"):
        base.write("t", [{"k": 1, "f": value}])
    assert base.to_arrow("t").num_rows == 0


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (pa.list_(pa.list_(pa.int64(), 2)), [{1, 2, 3}]),
        (pa.struct([("a", pa.list_(pa.int64(), 2))]), {"a": {1, 2, 3}}),
        (pa.map_(pa.string(), pa.list_(pa.int64(), 2)), {"a": {1, 2, 3}}),
        (pa.map_(pa.string(), pa.list_(pa.int64(), 2)), [("a", {7})]),
    ],
    ids=str,
)
def test_a_set_in_a_fixed_size_list_at_any_depth_is_length_checked(
    kind: pa.DataType, value: Any
) -> None:
    base = _typed(kind)
    with pytest.raises(SchemaError, match="field 'f'"):
        base.write("t", [{"k": 1, "f": value}])
    assert base.to_arrow("t").num_rows == 0


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (pa.list_(pa.int64()), {1.5}),
        (pa.list_(pa.float32()), {0.1}),
        (pa.list_(pa.binary()), {"ab"}),
        (pa.map_(pa.string(), pa.int64()), {("a", 1.5)}),
    ],
    ids=str,
)
def test_the_items_of_a_set_are_checked_as_a_lists_are(kind: pa.DataType, value: Any) -> None:
    base = _typed(kind)
    with pytest.raises(SchemaError, match="field 'f'"):
        base.write("t", [{"k": 1, "f": value}])
    assert base.to_arrow("t").num_rows == 0


def test_a_set_that_fits_is_stored_as_its_items() -> None:
    db = _typed(pa.list_(pa.int64(), 2)).write("t", [{"k": 1, "f": {5, 6}}]).commit()
    assert sorted(_values(db)[0]) == [5, 6]
    learned = _typed(pa.list_(pa.null(), 2)).write("t", [{"k": 1, "f": {5, 6}}]).commit()
    assert _field_type(learned) == pa.list_(pa.int64(), 2)
    assert sorted(_values(learned)[0]) == [5, 6]


# -- numpy times of different units meet at every depth ------------------------------

_S = np.datetime64(1, "s")
_MS = np.datetime64(2, "ms")
_NS = np.datetime64(5, "ns")
_AT_1S = datetime.datetime(1970, 1, 1, 0, 0, 1)
_AT_2MS = datetime.datetime(1970, 1, 1, 0, 0, 0, 2000)


def test_units_meet_in_one_list() -> None:
    db = _db().write("t", [{"k": 1, "f": [_S, _MS]}]).commit()
    assert _field_type(db) == pa.list_(pa.timestamp("ms"))
    assert _values(db) == [[_AT_1S, _AT_2MS]]


def test_units_meet_across_records_lists() -> None:
    db = _db().write("t", [{"k": 1, "f": [_S]}, {"k": 2, "f": [_MS, None]}]).commit()
    assert _field_type(db) == pa.list_(pa.timestamp("ms"))
    assert _values(db) == [[_AT_1S], [_AT_2MS, None]]


def test_a_datetime_meets_nanoseconds_in_a_list() -> None:
    at = datetime.datetime(2020, 1, 1)
    db = _db().write("t", [{"k": 1, "f": [at, _NS]}]).commit()
    assert _field_type(db) == pa.list_(pa.timestamp("ns"))
    stored = db.to_arrow("t").column("f").cast(pa.list_(pa.int64())).to_pylist()
    assert stored == [[1_577_836_800 * 10**9, 5]]


def test_units_meet_in_nested_lists_and_struct_members() -> None:
    db = _db().write(
        "t",
        [
            {"k": 1, "f": {"a": [[_S]], "d": np.timedelta64(3, "h")}},
            {"k": 2, "f": {"a": [[_MS, np.datetime64("NaT")]], "d": datetime.timedelta(0, 1, 3)}},
        ],
    )
    assert _field_type(db) == pa.struct(
        [("a", pa.list_(pa.list_(pa.timestamp("ms")))), ("d", pa.duration("us"))]
    )
    assert _values(db) == [
        {"a": [[_AT_1S]], "d": datetime.timedelta(hours=3)},
        {"a": [[_AT_2MS, None]], "d": datetime.timedelta(0, 1, 3)},
    ]


def test_units_meet_in_a_learned_maps_values() -> None:
    kind = pa.map_(pa.string(), pa.list_(pa.null()))
    db = _typed(kind).write("t", [{"k": 1, "f": {"x": [_S]}}, {"k": 2, "f": [("y", [_MS])]}])
    assert _field_type(db) == pa.map_(pa.string(), pa.list_(pa.timestamp("ms")))
    assert _values(db) == [[("x", [_AT_1S])], [("y", [_AT_2MS])]]


def test_a_unit_finer_than_the_unit_met_is_still_refused_when_not_exact() -> None:
    with pytest.raises(SchemaError, match="field 'f'"):
        _db().write("t", [{"k": 1, "f": [np.datetime64(1, "ps"), _S]}])
