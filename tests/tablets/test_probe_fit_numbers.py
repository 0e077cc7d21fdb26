"""Values a type probe found changed or refused with a raw error: each test failed
before its fix.

A pandas ``Timestamp`` key with nanoseconds was floored to microseconds by the
timestamp key codec (a write of 1001 ns replaced the record at 1000 ns, a lookup of
1001 ns found it, a scan from 1001 ns included it); a decimal was stored in a float
field it does not hold exactly (``Decimal("1.234")`` into float32 by ``update``, 0.1
of a decimal(5, 1) column into float32), and a float in a decimal field; and a lossy
cast check of a column with values beyond Python's date range raised a raw
OverflowError instead of a SchemaError.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError, UsageError
from merkle.tablets.keys import key_codec

# -- timestamp keys with nanoseconds -------------------------------------------------------

_ZONED_NS = pa.timestamp("ns", tz="UTC")
_NS_KEY = pd.Timestamp(1001, unit="ns", tz="UTC")
_WHOLE = "timestamp key codec stores whole microseconds"


def _ns_keyed() -> merkle.Database:
    """A table keyed by timestamp[ns] with records at 1000 ns and 2000 ns."""
    schema = pa.schema([pa.field("k", _ZONED_NS, nullable=False), ("v", pa.int64())])
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k", schema=schema)
    rows = pa.table({"k": pa.array([1000, 2000], _ZONED_NS), "v": [1, 2]}, schema=schema)
    return db.write("t", rows).commit()


_NS_CALLS: dict[str, Callable[[merkle.Database], Any]] = {
    "write": lambda db: db.write("t", [{"k": _NS_KEY, "v": 9}]).commit(),
    "upsert": lambda db: db.upsert("t", [{"k": _NS_KEY, "v": 9}]).commit(),
    "update": lambda db: db.update("t", {_NS_KEY: {"v": 9}}).commit(),
    "update-many": lambda db: db.update(
        "t", {_NS_KEY: {"v": 9}, pd.Timestamp(2000, unit="ns", tz="UTC"): {"v": 8}}
    ).commit(),
    "delete": lambda db: db.delete("t", [_NS_KEY]).commit(),
    "get_records": lambda db: db.get_records("t", [_NS_KEY]),
    "scan-from": lambda db: list(db.scan("t", from_pk=_NS_KEY)),
    "scan-to": lambda db: list(db.scan("t", to_pk=_NS_KEY)),
}


@pytest.mark.parametrize("call", list(_NS_CALLS), ids=list(_NS_CALLS))
def test_nanosecond_timestamp_key_is_refused(call: str) -> None:
    """A key with nanoseconds names no record the codec can store: every call refuses
    it (as an Arrow key column of it is refused), and the table is unchanged."""
    db = _ns_keyed()
    with pytest.raises(UsageError, match=_WHOLE) as error:
        _NS_CALLS[call](db)
    assert "00:00:00.000001001" in str(error.value)  # the key at fault
    assert db.to_arrow("t").column("v").to_pylist() == [1, 2]


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        pytest.param("timestamp", pd.Timestamp(1001, unit="ns"), id="naive"),
        pytest.param(
            "timestamp", pd.Timestamp("2026-01-31 09:00:00.000000001", tz="Asia/Tokyo"), id="zoned"
        ),
        pytest.param("reverse(timestamp)", pd.Timestamp(1001, unit="ns"), id="reverse"),
        pytest.param("tuple(timestamp,int)", (pd.Timestamp(-1, unit="ns"), 1), id="tuple"),
    ],
)
def test_codec_refuses_sub_microsecond_values(spec: str, key: Any) -> None:
    """The codec itself refuses the value (encode, prefixes and Arrow columns alike);
    whole microseconds of the same types still encode, and a numpy datetime64, at any
    unit, is no key of the codec at all."""
    codec = key_codec(spec)
    with pytest.raises(UsageError, match=_WHOLE):
        codec.encode(key)
    with pytest.raises(UsageError, match=_WHOLE):
        codec.to_arrow([key])
    whole = (key[0].floor("us"), key[1]) if isinstance(key, tuple) else key.floor("us")
    assert codec.decode(codec.encode(whole)) == codec.normalize(whole)
    for value in (np.datetime64(1001, "ns"), np.datetime64(5, "ps"), np.datetime64(1, "us")):
        with pytest.raises(UsageError, match="expected a datetime"):
            key_codec("timestamp").encode(value)


# -- decimals and floats -------------------------------------------------------------------


def _typed(kind: pa.DataType) -> merkle.Database:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", kind)])
    return merkle.connect("memory://").create_db("d").create_table("t", key="k", schema=schema)


_D = Decimal
_DEC51 = pa.decimal128(5, 1)

DECIMAL_FLOAT = [
    pytest.param(_DEC51, pa.float32(), _D("0.5"), _D("0.1"), id="decimal-into-float32"),
    pytest.param(_DEC51, pa.float64(), _D("-2.5"), _D("0.1"), id="decimal-into-float64"),
    pytest.param(
        pa.decimal128(15, -20), pa.float64(), _D("3E+22"), _D("1E+30"), id="negative-scale"
    ),
    pytest.param(pa.float64(), _DEC51, 2.5, 0.1, id="float-into-decimal"),
    pytest.param(
        pa.list_(_DEC51),
        pa.list_(pa.float32()),
        [_D("0.5"), None],
        [_D("0.5"), _D("0.1")],
        id="in-list",
    ),
    pytest.param(
        pa.struct([("a", _DEC51)]),
        pa.struct([("a", pa.float32())]),
        {"a": _D("1.5")},
        {"a": _D("0.1")},
        id="in-struct",
    ),
    pytest.param(
        pa.map_(pa.string(), _DEC51),
        pa.map_(pa.string(), pa.float32()),
        [("x", _D("0.5"))],
        [("x", _D("0.5")), ("y", _D("0.1"))],
        id="in-map",
    ),
]


@pytest.mark.parametrize(("source", "field", "fits", "misfit"), DECIMAL_FLOAT)
def test_decimal_and_float_must_be_the_same_number(
    source: pa.DataType, field: pa.DataType, fits: Any, misfit: Any
) -> None:
    """A decimal goes into a float field (and a float into a decimal field) only when the
    two are one number: 0.5 is, 0.1 is not (float32 holds 0.10000000149...), though the
    float casts back to the decimal's digits as 0.1."""
    db = _typed(field)
    rows = pa.table({"k": [1, 2], "v": pa.array([fits, None], source)})
    db = db.write("t", rows).commit()
    assert db.get_records("t", [1])[1]["v"] == (pa.array([fits], source).cast(field).to_pylist()[0])
    bad = pa.table({"k": [3], "v": pa.array([misfit], source)})
    with pytest.raises(SchemaError, match=r"field 'v' is .*record with key 3 does not fit"):
        db.write("t", bad)
    assert db.to_arrow("t").num_rows == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param(pa.float32(), _D("1.234"), id="float32"),
        pytest.param(pa.float64(), _D("0.1"), id="float64"),
    ],
)
def test_update_refuses_a_decimal_a_float_field_does_not_hold(
    field: pa.DataType, value: Decimal
) -> None:
    """``update`` holds a value to the rule ``write`` and ``upsert`` do."""
    db = _typed(field).write("t", [{"k": 1, "v": 0.5}]).commit()
    for call in (
        lambda: db.write("t", [{"k": 1, "v": value}]),
        lambda: db.upsert("t", [{"k": 1, "v": value}]),
        lambda: db.update("t", {1: {"v": value}}),
    ):
        with pytest.raises(SchemaError, match="field 'v'"):
            call()
    assert db.get_records("t", [1])[1]["v"] == 0.5


# -- values beyond Python's range in a lossy cast --------------------------------------------

BEYOND = [
    pytest.param(pa.timestamp("us"), pa.timestamp("s"), 2**62, "17036-07-06", id="timestamp"),
    pytest.param(
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("s", tz="UTC"),
        2**62,
        "17036-07-06",
        id="zoned-timestamp",
    ),
    pytest.param(
        pa.duration("ms"), pa.duration("s"), 2**62 + 1, "4611686018427387905 ms", id="duration"
    ),
    pytest.param(
        pa.list_(pa.timestamp("us")),
        pa.list_(pa.timestamp("s")),
        [0, 2**62],
        "17036-07-06",
        id="timestamp-in-list",
    ),
    pytest.param(  # no cast kernel (a NOT NULL member the data lacks): value by value
        pa.struct([("a", pa.timestamp("us"))]),
        pa.struct([("a", pa.timestamp("s")), pa.field("c", pa.int64(), nullable=False)]),
        {"a": 2**62},
        "17036-07-06",
        id="struct-without-cast-kernel",
    ),
]


@pytest.mark.parametrize(("source", "field", "value", "shown"), BEYOND)
def test_lossy_value_beyond_python_range_is_a_schema_error(
    source: pa.DataType, field: pa.DataType, value: Any, shown: str
) -> None:
    """A value that does not fit names the field and the value (as Arrow renders it),
    not a raw OverflowError; NaN still equals NaN in the check, and values that fit
    are stored."""
    db = _typed(field)
    bad = pa.table({"k": [1, 2], "v": pa.array([None, value], source)})
    with pytest.raises(SchemaError, match=r"field 'v' is .*record with key 2") as error:
        db.write("t", bad)
    assert shown in str(error.value)
    floats = _typed(pa.float64()).write(
        "t", pa.table({"k": [1, 2], "v": pa.array([float("nan"), 1.5], pa.float32())})
    )
    stored = floats.to_arrow("t").column("v").to_pylist()
    assert np.isnan(stored[0])
    assert stored[1] == 1.5
