"""Values a type probe found stored wrongly, or crashing the process: each test failed
before its fix.

numpy floats (np.float32, np.float16) and other objects pyarrow takes through
``int()`` (a Fraction, a numpy complex, a UUID) were truncated into integer fields,
at the top and inside lists and structs; a numpy array given as a list value skipped
the checks a Python list's items get and was read from its buffer (datetime64 ticks
in the field's unit whatever the array's, floats truncated or rounded, bools made 1
and 0, bytes decoded); a map entry of None aborted the interpreter; and a null was
kept inside a list whose items, or a map whose values, the schema marks NOT NULL.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError

Call = Callable[[merkle.Database, dict[str, Any], dict[str, Any]], merkle.Database]

#: Each write path, given the fields of records 1 and 2 (which exist: update needs them).
_MODES: dict[str, Call] = {
    "write": lambda db, one, two: db.write("t", [{"k": 1, **one}, {"k": 2, **two}]),
    "update": lambda db, one, two: db.update("t", {1: one, 2: two}),
    "upsert": lambda db, one, two: db.upsert("t", [{"k": 1, **one}, {"k": 2, **two}]),
}


def _table(*fields: tuple[str, pa.DataType] | pa.Field) -> merkle.Database:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), *fields])
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k", schema=schema)
    return db.write("t", [{"k": 1}, {"k": 2}]).commit()


def _refused_at_key_2(db: merkle.Database, mode: str, good: Any, bad: Any) -> None:
    """Record 1 gets ``good``, record 2 ``bad``: the error names record 2 (record 1
    fits), and nothing is written."""
    with pytest.raises(SchemaError, match=r"key 2\b"):
        _MODES[mode](db, good, bad).commit()
    assert db.get_records("t", [1, 2]) == {1: {"k": 1}, 2: {"k": 2}}


# -- numbers into integer fields -----------------------------------------------------

_INT_FIELDS = (
    ("v", pa.int64()),
    ("li", pa.list_(pa.int64())),
    ("st", pa.struct([("a", pa.int8())])),
)

#: name -> (a value that fits, one pyarrow truncated, the modes that stored it).
_ALL, _RECORDS = tuple(_MODES), ("write", "upsert")  # update refused these already
_NOT_WHOLE: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]] = {
    "np.float32": ({"v": np.float32(2.0)}, {"v": np.float32(0.5)}, _RECORDS),
    "np.float16": ({"v": np.float16(2.0)}, {"v": np.float16(2.5)}, _RECORDS),
    "uuid": ({"v": 1}, {"v": uuid.UUID(int=1)}, _RECORDS),
    "np.longdouble": ({"v": np.longdouble(3)}, {"v": np.longdouble(2.5)}, _ALL),
    "Fraction": ({"v": Fraction(4, 2)}, {"v": Fraction(1, 2)}, _ALL),
    "np.complex64": ({"v": 1}, {"v": np.complex64(1 + 1j)}, _ALL),
    "float-array-as-list": ({"li": np.array([1.0, 2.0])}, {"li": np.array([0.5, 1.5])}, _ALL),
    "np.float32-in-list": ({"li": [np.float32(3.0)]}, {"li": [np.float32(0.5)]}, _ALL),
    "np.float16-in-list": ({"li": [np.float16(1.0)]}, {"li": [np.float16(1.5)]}, _ALL),
    "np.float32-in-struct": (
        {"st": {"a": np.float32(1.0)}},
        {"st": {"a": np.float32(1.5)}},
        _ALL,
    ),
    "uuid-in-list": ({"li": [1]}, {"li": [uuid.UUID(int=1)]}, _ALL),
}


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.parametrize(
    ("case", "mode"), [(case, mode) for case, (*_, modes) in _NOT_WHOLE.items() for mode in modes]
)
def test_no_whole_number_into_an_integer_field_is_refused(case: str, mode: str) -> None:
    """Refused as a Python float 0.5 is, on every write path: pyarrow would truncate it
    (a whole number of the same kind still fits)."""
    good, bad, _ = _NOT_WHOLE[case]
    _refused_at_key_2(_table(*_INT_FIELDS), mode, good, bad)


# -- numpy arrays as list values -----------------------------------------------------

_LIST_FIELDS = (
    ("ts", pa.list_(pa.timestamp("s"))),
    ("tms", pa.list_(pa.timestamp("ms"))),
    ("dur", pa.list_(pa.duration("us"))),
    ("f", pa.list_(pa.float32())),
    ("i", pa.list_(pa.int8())),
    ("s", pa.list_(pa.string())),
    ("b", pa.list_(pa.binary())),
    ("st", pa.struct([("l", pa.list_(pa.int8()))])),
    ("mp", pa.map_(pa.string(), pa.list_(pa.timestamp("ms")))),
)

#: name -> (an array that fits, one pyarrow stored wrongly).
_ARRAY_MISFITS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "datetime64[ms]-fraction-into-timestamp[s]": (
        {"ts": np.array([2000], "datetime64[ms]")},
        {"ts": np.array([1500], "datetime64[ms]")},
    ),
    "float64-into-float32": ({"f": np.array([0.25])}, {"f": np.array([0.1])}),
    "bools-into-int8": ({"i": np.array([1, 0])}, {"i": np.array([True, False])}),
    "bytes-into-string": ({"s": np.array(["x"])}, {"s": np.array([b"x"])}),
    "str-into-binary": ({"b": np.array([b"x"])}, {"b": np.array(["x"])}),
    "floats-into-int8": ({"i": np.array([1.0])}, {"i": np.array([0.5])}),
    "in-struct": ({"st": {"l": np.array([1.0])}}, {"st": {"l": np.array([1.5])}}),
    "in-map": (
        {"mp": {"a": np.array([1000], "datetime64[us]")}},
        {"mp": {"a": np.array([1500], "datetime64[us]")}},
    ),
}


@pytest.mark.parametrize("mode", list(_MODES))
@pytest.mark.parametrize("case", list(_ARRAY_MISFITS))
def test_numpy_array_as_list_refused_as_a_python_list_is(mode: str, case: str) -> None:
    good, bad = _ARRAY_MISFITS[case]
    _refused_at_key_2(_table(*_LIST_FIELDS), mode, good, bad)


_NEW_YEAR = dt.datetime(2020, 1, 1)
_ARRAY_FITS = {
    "datetime64[s]-into-timestamp[ms]": (
        {"tms": np.array(["2020-01-01"], "datetime64[s]")},
        [_NEW_YEAR],
    ),
    "datetime64[ms]-whole-into-timestamp[s]": (
        {"ts": np.array([2000, "NaT"], "datetime64[ms]")},
        [dt.datetime(1970, 1, 1, 0, 0, 2), None],
    ),
    "timedelta64[s]-into-duration[us]": (
        {"dur": np.array([1], "timedelta64[s]")},
        [dt.timedelta(seconds=1)],
    ),
    "in-map": (
        {"mp": {"a": np.array(["2020-01-01"], "datetime64[s]")}},
        [("a", [_NEW_YEAR])],
    ),
}


@pytest.mark.parametrize("mode", list(_MODES))
@pytest.mark.parametrize("case", list(_ARRAY_FITS))
def test_numpy_array_as_list_stored_exactly(mode: str, case: str) -> None:
    """An array's values are kept with their units honoured (pyarrow read its ticks
    in the field's unit)."""
    fields, expected = _ARRAY_FITS[case]
    db = _MODES[mode](_table(*_LIST_FIELDS), fields, {}).commit()
    assert db.get_records("t", [1])[1][next(iter(fields))] == expected


# -- a map entry of None -------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys, merkle, pyarrow as pa
    from merkle.errors import SchemaError
    mode, nested = sys.argv[1], sys.argv[2] == "1"
    typ = pa.map_(pa.string(), pa.int8())
    if nested:
        typ = pa.list_(typ)
    s = pa.schema([pa.field("k", pa.int64(), nullable=False), ("m", typ)])
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k", schema=s)
    db = db.write("t", [{"k": 1}])
    value = [[("a", 1), None]] if nested else [("a", 1), None]
    try:
        if mode == "write":
            db.write("t", [{"k": 1, "m": value}])
        elif mode == "update":
            db.update("t", {1: {"m": value}})
        else:
            db.upsert("t", [{"k": 1, "m": value}])
    except SchemaError as exc:
        assert "'m'" in str(exc), exc
        print("refused")
    """
)


@pytest.mark.parametrize("nested", ["0", "1"], ids=["map", "list-of-maps"])
@pytest.mark.parametrize("mode", list(_MODES))
def test_map_entry_none_is_refused_not_a_crash(mode: str, nested: str) -> None:
    """pyarrow aborts the process on it (SIGABRT): run in a child process."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, nested], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.strip() == "refused"


# -- nulls inside NOT NULL list items and map values ---------------------------------

_NOT_NULL_FIELDS = (
    pa.field("li", pa.list_(pa.field("item", pa.int8(), nullable=False))),
    pa.field("mp", pa.map_(pa.string(), pa.field("value", pa.int8(), nullable=False))),
    pa.field(
        "ls",
        pa.list_(pa.struct([pa.field("x", pa.list_(pa.field("i", pa.int8(), nullable=False)))])),
    ),
)
#: name -> (a record 1 that fits: a NOT NULL item constrains the items, not the list,
#: map or struct around them; a record 2 with a null item).
_NULL_INSIDE: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "list-item": ({"li": [1, 2]}, {"li": [1, None]}),
    "map-value": ({"mp": [("a", 1)]}, {"mp": [("a", None)]}),
    "map-value-dict": ({"mp": [("a", 1)]}, {"mp": {"a": 1, "b": None}}),
    "deep-list-item": (
        {"ls": [{"x": [1]}, None, {"x": None}]},
        {"ls": [{"x": [1]}, {"x": [None]}]},
    ),
}


def _arrow_call(mode: str) -> Call:
    """Write or upsert the two records as an Arrow table of the declared types."""

    def call(db: merkle.Database, one: dict[str, Any], two: dict[str, Any]) -> merkle.Database:
        declared = {f.name: f for f in _NOT_NULL_FIELDS}
        fields = [pa.field("k", pa.int64(), nullable=False), *(declared[n] for n in one)]
        rows = pa.Table.from_pylist([{"k": 1, **one}, {"k": 2, **two}], schema=pa.schema(fields))
        return db.write("t", rows) if mode == "write" else db.upsert("t", rows)

    return call


_NULL_MODES: dict[str, Call] = {
    **_MODES,
    "write-arrow": _arrow_call("write"),
    "upsert-arrow": _arrow_call("upsert"),
}


@pytest.mark.parametrize("mode", list(_NULL_MODES))
@pytest.mark.parametrize("case", list(_NULL_INSIDE))
def test_null_inside_a_not_null_item_is_refused(mode: str, case: str) -> None:
    db = _table(*_NOT_NULL_FIELDS)
    good, bad = _NULL_INSIDE[case]
    name = next(iter(bad))
    with pytest.raises(SchemaError, match=f"field '{name}'.*key 2 holds a null.*NOT NULL"):
        _NULL_MODES[mode](db, good, bad).commit()
    assert db.get_records("t", [1, 2]) == {1: {"k": 1}, 2: {"k": 2}}
    assert _NULL_MODES[mode](db, good, good).commit().get_records("t", [1])[1] == {
        "k": 1,
        **good,
    }
