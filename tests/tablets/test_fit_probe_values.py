"""Python values that do not fit their field, found by a probe: maps, float16, bools.

A value must fit its field exactly (doc/api.md, "A value must fit its
field"): pyarrow cuts or rounds some Python values without a word, so such a
value is a SchemaError, by every way of writing it (``write``, ``upsert``,
``update`` of one field, and an update whose records set different fields,
which conforms records rather than an Arrow column), at the top level and
inside lists, structs and maps alike. The probe found three gaps: values
inside a map were not checked at all; float16 rounded (0.1, 2049, 70000.0
into inf); and True or False into a float field became 1.0 or 0.0. Values
that do fit still read back exactly.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError

WAYS = ("write", "upsert", "update", "update-mixed")


def _table(kind: pa.DataType) -> Any:
    """A database whose table ``t`` has field ``v`` of ``kind``, with records 1 and 2."""
    schema = pa.schema([("k", pa.int64()), ("v", kind), ("w", pa.int64())])
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k", schema=schema)
    return db.write("t", [{"k": 1}, {"k": 2}]).commit()


def _put(db: Any, way: str, value: Any) -> Any:
    """``db`` with record 1's field ``v`` set to ``value`` the given way, committed."""
    if way == "write":
        return db.write("t", [{"k": 1, "v": value}]).commit()
    if way == "upsert":
        return db.upsert("t", [{"k": 1, "v": value}]).commit()
    if way == "update":
        return db.update("t", {1: {"v": value}}).commit()
    # Changes setting different fields: conformed as records, not as one Arrow column.
    return db.update("t", {1: {"v": value}, 2: {"w": 0}}).commit()


def _unrefused(kind: pa.DataType, value: Any) -> list[str]:
    """The ways (of :data:`WAYS`) that accept ``value`` into a ``kind`` field, each with
    what reads back, or that refuse it without naming the field."""
    db = _table(kind)
    accepted = []
    for way in WAYS:
        try:
            stored = _put(db, way, value).get_records("t", [1])[1].get("v")
        except SchemaError as exc:
            if "field 'v'" not in str(exc):
                accepted.append(f"{way} refused it without naming the field: {exc}")
            continue
        accepted.append(f"{way} stored {stored!r}")
    return accepted


def _same(a: Any, b: Any) -> bool:
    return a == b or (
        isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    )


MAP_CASES = [
    pytest.param(pa.map_(pa.string(), pa.int64()), [("a", 1.5)], id="int64-fraction"),
    pytest.param(pa.map_(pa.string(), pa.int64()), {"a": 1.5}, id="int64-fraction-dict"),
    pytest.param(
        pa.map_(pa.string(), pa.int64()), [{"key": "a", "value": 1.5}], id="int64-entry-dicts"
    ),
    pytest.param(
        pa.map_(pa.string(), pa.int64()),
        [{"key": "a", "value": 1, "other": 2}],
        id="entry-member-dropped",
    ),
    pytest.param(pa.map_(pa.string(), pa.float32()), [("a", 0.1)], id="float32-rounded"),
    pytest.param(
        pa.map_(pa.string(), pa.date32()), [("a", dt.datetime(2020, 1, 1, 12))], id="date-time"
    ),
    pytest.param(
        pa.map_(pa.string(), pa.timestamp("s")),
        [("a", dt.datetime(2020, 1, 1, 0, 0, 0, 7))],
        id="timestamp-fraction",
    ),
    pytest.param(pa.map_(pa.int8(), pa.string()), [(1.5, "x"), (1.25, "y")], id="int8-keys"),
    pytest.param(
        pa.map_(pa.string(), pa.struct([("x", pa.int8())])),
        [("a", {"x": 1, "y": 2})],
        id="struct-member-dropped",
    ),
    pytest.param(
        pa.list_(pa.map_(pa.string(), pa.float32())), [[("a", 0.1)]], id="in-list-float32"
    ),
    pytest.param(pa.large_list(pa.map_(pa.string(), pa.int64())), [{"a": 2.5}], id="in-large-list"),
    pytest.param(
        pa.struct([("m", pa.map_(pa.string(), pa.int64()))]),
        {"m": {"a": 0.5}},
        id="in-struct",
    ),
]


@pytest.mark.parametrize(("kind", "value"), MAP_CASES)
def test_map_value_that_does_not_fit_is_refused(kind: pa.DataType, value: Any) -> None:
    assert _unrefused(kind, value) == []


FLOAT16_CASES = [
    pytest.param(pa.float16(), 0.1, id="rounded"),
    pytest.param(pa.float16(), 2049, id="int-rounded"),
    pytest.param(pa.float16(), np.int64(2049), id="numpy-int-rounded"),
    pytest.param(pa.float16(), 70000.0, id="beyond-range-inf"),
    pytest.param(pa.float16(), 65519.0, id="beyond-largest"),
    pytest.param(pa.float16(), 1e-8, id="underflow-zero"),
    pytest.param(pa.list_(pa.float16()), [0.5, 0.1], id="in-list"),
    pytest.param(pa.list_(pa.float16(), 2), [0.5, 0.1], id="in-fixed-size-list"),
    pytest.param(pa.struct([("h", pa.float16())]), {"h": 0.1}, id="in-struct"),
    pytest.param(pa.map_(pa.string(), pa.float16()), {"a": 2049}, id="in-map"),
]


@pytest.mark.parametrize(("kind", "value"), FLOAT16_CASES)
def test_float16_value_that_does_not_fit_is_refused(kind: pa.DataType, value: Any) -> None:
    assert _unrefused(kind, value) == []


BOOL_CASES = [
    pytest.param(pa.float64(), True, id="float64-true"),
    pytest.param(pa.float64(), False, id="float64-false"),
    pytest.param(pa.float32(), True, id="float32-true"),
    pytest.param(pa.float16(), False, id="float16-false"),
    pytest.param(pa.list_(pa.float64()), [1.5, True], id="in-list-float64"),
    pytest.param(pa.struct([("x", pa.float32())]), {"x": False}, id="in-struct-float32"),
    pytest.param(pa.map_(pa.string(), pa.float64()), {"a": True}, id="in-map-float64"),
    pytest.param(pa.list_(pa.int64()), [np.True_], id="numpy-bool-in-list-int64"),
]


@pytest.mark.parametrize(("kind", "value"), BOOL_CASES)
def test_bool_into_a_number_field_is_refused(kind: pa.DataType, value: Any) -> None:
    assert _unrefused(kind, value) == []


FITTING_CASES = [
    pytest.param(pa.int64(), 1.0, 1, id="int64-whole-float"),
    pytest.param(pa.map_(pa.string(), pa.int64()), {"a": 1.0}, [("a", 1)], id="map-whole-float"),
    pytest.param(pa.map_(pa.string(), pa.float32()), [("a", 0.5)], [("a", 0.5)], id="map-float32"),
    pytest.param(
        pa.map_(pa.string(), pa.date32()),
        [("a", dt.date(2020, 1, 1))],
        [("a", dt.date(2020, 1, 1))],
        id="map-date",
    ),
    pytest.param(
        pa.map_(pa.string(), pa.timestamp("s")),
        [("a", dt.datetime(2020, 1, 1, 3))],
        [("a", dt.datetime(2020, 1, 1, 3))],
        id="map-timestamp",
    ),
    pytest.param(
        pa.map_(pa.int8(), pa.string()),
        [(1, "x"), (2.0, "y")],
        [(1, "x"), (2, "y")],
        id="map-int8-keys",
    ),
    pytest.param(
        pa.map_(pa.string(), pa.struct([("x", pa.int8())])),
        {"a": {"x": 1}},
        [("a", {"x": 1})],
        id="map-struct",
    ),
    pytest.param(
        pa.map_(pa.string(), pa.int64()),
        [{"key": "a", "value": 3}],
        [("a", 3)],
        id="map-entry-dicts",
    ),
    pytest.param(pa.float16(), 0.5, 0.5, id="float16-half"),
    pytest.param(pa.float16(), 2048, 2048.0, id="float16-int"),
    pytest.param(pa.float16(), 65504.0, 65504.0, id="float16-largest"),
    pytest.param(pa.float16(), float("nan"), float("nan"), id="float16-nan"),
    pytest.param(pa.float16(), float("-inf"), float("-inf"), id="float16-inf"),
    pytest.param(pa.list_(pa.float16()), [0.25, 1.5], [0.25, 1.5], id="float16-in-list"),
    pytest.param(pa.float64(), 3, 3.0, id="float64-int"),
    pytest.param(pa.float32(), np.float32(0.1), float(np.float32(0.1)), id="float32-numpy"),
    pytest.param(pa.bool_(), True, True, id="bool-field"),
    pytest.param(pa.list_(pa.bool_()), [True, False], [True, False], id="bool-list"),
]


@pytest.mark.parametrize(("kind", "value", "expected"), FITTING_CASES)
def test_value_that_fits_reads_back_exactly(kind: pa.DataType, value: Any, expected: Any) -> None:
    db = _table(kind)
    for way in WAYS:
        stored = _put(db, way, value).get_records("t", [1])[1]["v"]
        assert _same(stored, expected), (way, stored)


def test_refusal_names_the_field_value_and_what_was_lost() -> None:
    db = _table(pa.map_(pa.string(), pa.float32()))
    with pytest.raises(SchemaError) as caught:
        db.write("t", [{"k": 1, "v": {"a": 0.1}}])
    message = str(caught.value)
    assert "field 'v'" in message
    assert "{'a': 0.1}" in message
    assert "key 1" in message
    assert "its value for key 'a': float32 holds it only as 0.10000000149011612" in message
    db = _table(pa.float16())
    with pytest.raises(SchemaError, match=r"float16 holds it only as 2048\.0"):
        db.write("t", [{"k": 1, "v": 2049}])
    with pytest.raises(SchemaError, match="beyond the range of float16"):
        db.write("t", [{"k": 1, "v": 70000.0}])
    with pytest.raises(SchemaError, match="field 'v'"):
        db.write("t", [{"k": 1, "v": 10**400}])  # refused before as well, by pyarrow
    with pytest.raises(SchemaError, match="it is a bool, not a number"):
        db.upsert("t", [{"k": 1, "v": True}])
