"""Floats are compared and stored as their bits (doc/versions.md, doc/api.md, doc/format.md).

A commit that changes only a float's bits (-0.0 over 0.0, a NaN over a NaN with
another payload) makes a version whose diff shows the update, at every depth
and in every layout; a write of the same bits makes no version; a schema-free
float NaN reads back with its bits, as a typed float64 one does.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import merkle
from merkle.tablets.cbor import _cbor_decode, _cbor_encode
from merkle.tablets.rowequal import as_bits, same_value


def _float(bits: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value


def _bits(value: float) -> int:
    bits: int = struct.unpack("<Q", struct.pack("<d", value))[0]
    return bits


QUIET_NAN = 0x7FF8000000000000
NANS = {
    "payload": 0x7FF8000000000123,
    "negative": 0xFFF8000000000000,
    "signalling": 0x7FF0000000000001,
}


class _Metres(pa.ExtensionType):
    """A user's extension type over float64."""

    def __init__(self) -> None:
        super().__init__(pa.float64(), "test.float-bits.metres")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> _Metres:
        return _Metres()


with contextlib.suppress(pa.ArrowKeyError):  # imported twice in one process
    pa.register_extension_type(_Metres())  # stored tables read back as this type


def _dense(x: float) -> pa.Array:
    children = [pa.array([x], pa.float64()), pa.array([], pa.string())]
    return pa.UnionArray.from_dense(
        pa.array([0], pa.int8()), pa.array([0], pa.int32()), children, ["f", "s"]
    )


def _sparse(x: float) -> pa.Array:
    children = [pa.array([x], pa.float64()), pa.array([None], pa.string())]
    return pa.UnionArray.from_sparse(pa.array([0], pa.int8()), children, ["f", "s"])


def _metres(x: float) -> pa.Array:
    return pa.ExtensionArray.from_storage(_Metres(), pa.array([x], pa.float64()))


#: One-cell columns holding the float x somewhere inside.
LAYOUTS: dict[str, Callable[[float], pa.Array]] = {
    "list_view": lambda x: pa.array([[x]], pa.list_view(pa.float64())),
    "large_list_view": lambda x: pa.array([[x]], pa.large_list_view(pa.float64())),
    "struct of list_view": lambda x: pa.array(
        [{"l": [x]}], pa.struct([("l", pa.list_view(pa.float64()))])
    ),
    "map to list_view": lambda x: pa.array(
        [[("a", [x])]], pa.map_(pa.string(), pa.list_view(pa.float64()))
    ),
    "dense union": _dense,
    "sparse union": _sparse,
    "list of dense union": lambda x: pa.ListArray.from_arrays([0, 1], _dense(x)),
    "extension": _metres,
    "list of extension": lambda x: pa.ListArray.from_arrays([0, 1], _metres(x)),
}


def _typed(conn: Any, name: str, column: pa.Array) -> Any:
    schema = pa.schema([("k", pa.int64()), ("v", column.type)])
    db = conn.create_db(name).create_table("t", key="k", schema=schema)
    return db.write("t", pa.table({"k": [1], "v": column}, schema=schema)).commit(), schema


def _arrow_bits(db: Any) -> list[Any]:
    values: list[Any] = as_bits(db.to_arrow("t").column("v")).to_pylist()
    return values


# -- -0.0 over 0.0 in every nested layout (the commit took it for no change) ------------


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_negative_zero_over_zero_in_a_nested_layout_is_a_change(layout: str) -> None:
    conn = merkle.connect("memory://")
    make = LAYOUTS[layout]
    db1, schema = _typed(conn, "d", make(0.0))
    db2 = db1.write("t", pa.table({"k": [1], "v": make(-0.0)}, schema=schema)).commit()

    assert db2.version == db1.version + 1
    assert _arrow_bits(conn.open_db("d")) == as_bits(pa.chunked_array([make(-0.0)])).to_pylist()
    changes = db2.diff(db1)["t"]
    assert changes.counts().updated == 1


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_same_nested_floats_written_again_make_no_version(layout: str) -> None:
    conn = merkle.connect("memory://")
    make = LAYOUTS[layout]
    nan = _float(NANS["payload"])
    for i, x in enumerate((-0.0, nan)):
        db1, schema = _typed(conn, f"d{i}", make(x))
        db2 = db1.write("t", pa.table({"k": [1], "v": make(x)}, schema=schema)).commit()
        assert db2.version == db1.version


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_as_bits_views_the_floats_of_every_layout(layout: str) -> None:
    column = pa.chunked_array([LAYOUTS[layout](-0.0)])
    assert column.equals(pa.chunked_array([LAYOUTS[layout](0.0)]))  # Arrow: as numbers
    assert not as_bits(column).equals(as_bits(pa.chunked_array([LAYOUTS[layout](0.0)])))


# -- a NaN over a NaN with other bits (a version whose diff was empty) -----------------


def _nan_payload_column(kind: str, bits: int) -> pa.Array:
    if kind == "float32 in a list":
        single = np.array([bits], dtype=np.uint32).view(np.float32)
        return pa.ListArray.from_arrays([0, 1], pa.array(single, pa.float32()))
    x = _float(bits)
    if kind == "float64":
        return pa.array([x], pa.float64())
    if kind == "list<double>":
        return pa.array([[x]], pa.list_(pa.float64()))
    if kind == "struct":
        return pa.array([{"f": x}], pa.struct([("f", pa.float64())]))
    assert kind == "list_view"
    return pa.array([[x]], pa.list_view(pa.float64()))


#: kind -> (old bits, new bits): two NaNs whose stored bits differ.
NAN_PAIRS = {
    "float64": (QUIET_NAN, NANS["payload"]),
    "list<double>": (QUIET_NAN, NANS["negative"]),
    "struct": (NANS["signalling"], QUIET_NAN),
    "list_view": (QUIET_NAN, NANS["payload"]),
    # Python's float of a float32 NaN is quiet: these two read as one value there.
    "float32 in a list": (0x7F800001, 0x7FC00001),
}


@pytest.mark.parametrize("kind", list(NAN_PAIRS))
def test_a_nan_over_a_nan_of_other_bits_shows_in_the_diff(kind: str) -> None:
    old, new = NAN_PAIRS[kind]
    conn = merkle.connect("memory://")
    db1, schema = _typed(conn, "d", _nan_payload_column(kind, old))
    db2 = db1.write("t", pa.table({"k": [1], "v": _nan_payload_column(kind, new)}, schema=schema))
    db2 = db2.commit()

    assert db2.version == db1.version + 1
    changes = db2.diff(db1)["t"]
    assert changes.counts().updated == 1
    assert [(r["key"], r["change"]) for r in changes.records()] == [(1, "update")]
    assert db2.diff(db1).summary()["rows"]["t"]["updated"] == 1


def test_a_nan_payload_change_in_a_schema_free_field_shows_in_the_diff() -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("t", key="k", schema_free=["v"])
    db1 = db.write("t", [{"k": 1, "v": {"a": [float("nan")]}}]).commit()
    db2 = db1.write("t", [{"k": 1, "v": {"a": [_float(NANS["payload"])]}}]).commit()

    assert db2.version == db1.version + 1
    assert db2.diff(db1)["t"].counts().updated == 1
    stored = conn.open_db("d").get_records("t", [1])[1]["v"]["a"][0]
    assert _bits(stored) == NANS["payload"]


def test_same_value_tells_nans_apart_by_their_bits() -> None:
    payload = _float(NANS["payload"])
    assert same_value(float("nan"), float("nan"))
    assert same_value([payload], [_float(NANS["payload"])])
    assert not same_value(float("nan"), payload)
    assert not same_value({"a": [float("nan")]}, {"a": [payload]})


def test_a_merge_carries_a_nan_payload_change() -> None:
    conn = merkle.connect("memory://")
    schema = pa.schema([("k", pa.int64()), ("v", pa.float64())])
    main = conn.create_db("main").create_table("t", key="k", schema=schema)
    main = main.write("t", pa.table({"k": [1, 2], "v": [float("nan"), 1.0]}, schema=schema))
    main = main.commit()
    dev = conn.create_db("dev", root=main)
    dev.write("t", pa.table({"k": [1], "v": [_float(NANS["payload"])]}, schema=schema)).commit()
    main.write("t", pa.table({"k": [2], "v": [2.0]}, schema=schema)).commit()
    conn.merge("dev", "main")

    merged = conn.open_db("main").to_arrow("t")
    assert _bits(merged.column("v")[0].as_py()) == NANS["payload"]


# -- a schema-free NaN keeps its bits (it read back as the quiet NaN) -------------------


@pytest.mark.parametrize("nan", list(NANS))
@pytest.mark.parametrize(
    "place",
    ["alone", "in a list", "in a dict", "numpy in a list"],
)
def test_a_schema_free_nan_reads_back_with_its_bits(nan: str, place: str) -> None:
    x = _float(NANS[nan])
    value: Any = {
        "alone": x,
        "in a list": [x, "s"],
        "in a dict": {"a": x, "b": 1},
        "numpy in a list": [np.float64(x), "s"],
    }[place]
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("t", key="k", schema_free=True)
    db.write("t", [{"k": 1, "v": value}]).commit()

    got = conn.open_db("d").get_records("t", [1])[1]["v"]
    inner = got if place == "alone" else got["a"] if place == "in a dict" else got[0]
    assert _bits(inner) == NANS[nan]


def test_a_field_made_schema_free_keeps_its_nan_bits() -> None:
    conn = merkle.connect("memory://")
    x = _float(NANS["payload"])
    db, _ = _typed(conn, "d", pa.array([x], pa.float64()))
    db.alter_schema("t", free=["v"]).commit()

    got = conn.open_db("d").get_records("t", [1])[1]["v"]
    assert _bits(got) == NANS["payload"]


def test_floats_cbor_stored_before_keep_their_bytes() -> None:
    # Every float but a NaN of other bits is written as before (a guard: passes on
    # the old code too), so a value stored earlier is no change when written again.
    before = {
        1.5: "fb3ff8000000000000",
        -0.0: "fb8000000000000000",
        float("inf"): "f97c00",
        float("-inf"): "f9fc00",
        float("nan"): "f97e00",
    }
    for value, data in before.items():
        assert _cbor_encode(value).hex() == data
        assert _cbor_encode([value, "s"]).hex() == "82" + data + "6173"
    assert _bits(_cbor_decode(bytes.fromhex("f97e00"), "v")) == QUIET_NAN


def test_the_same_schema_free_nan_written_again_makes_no_version() -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("t", key="k", schema_free=["v"])
    value = {"a": [_float(NANS["payload"]), float("nan")]}
    db1 = db.write("t", [{"k": 1, "v": value}]).commit()
    db2 = db1.write("t", [{"k": 1, "v": {"a": [_float(NANS["payload"]), float("nan")]}}]).commit()
    assert db2.version == db1.version
