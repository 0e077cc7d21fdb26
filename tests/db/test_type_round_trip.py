"""Every Arrow type round-trips exactly (issue 11, "What must show it").

Hypothesis makes tables of random columns of every type the issue lists
(integer widths, decimals, structs, lists, maps, dictionaries, fixed-size
binary, timestamps with unit and zone, dates, durations, large types) in a
random column order, writes them, commits, reopens the lake with a fresh
connection and reads them back three ways: ``to_arrow``, ``to_batches`` and
``scan``. Schema and values must equal the input (rows in key order).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from conftest import Lake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import Connect

Values = Callable[[int], st.SearchStrategy[list[Any]]]

_TEXT = st.text(max_size=8)
_BYTES = st.binary(max_size=8)


def _ints(bits: int, signed: bool = True) -> st.SearchStrategy[int]:
    if signed:
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return st.integers(0, (1 << bits) - 1)


_DATES = st.dates(datetime.date(1900, 1, 1), datetime.date(2200, 12, 31))
_TIMES = st.datetimes(datetime.datetime(1900, 1, 1), datetime.datetime(2200, 1, 1))
_DECIMAL = st.decimals(min_value=-(10**7), max_value=10**7, places=2, allow_nan=False)

#: Each Arrow type of the issue, with a strategy for one of its values.
TYPES: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "int8": (pa.int8(), _ints(8)),
    "int16": (pa.int16(), _ints(16)),
    "int32": (pa.int32(), _ints(32)),
    "int64": (pa.int64(), _ints(64)),
    "uint8": (pa.uint8(), _ints(8, False)),
    "uint32": (pa.uint32(), _ints(32, False)),
    "uint64": (pa.uint64(), _ints(64, False)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "float64": (pa.float64(), st.floats(allow_nan=False)),
    "bool": (pa.bool_(), st.booleans()),
    "decimal": (pa.decimal128(10, 2), _DECIMAL),
    "string": (pa.string(), _TEXT),
    "large_string": (pa.large_string(), _TEXT),
    "binary": (pa.binary(), _BYTES),
    "large_binary": (pa.large_binary(), _BYTES),
    "fixed_binary": (pa.binary(4), st.binary(min_size=4, max_size=4)),
    "date32": (pa.date32(), _DATES),
    "date64": (pa.date64(), _DATES),
    "ts_s_naive": (pa.timestamp("s"), _TIMES.map(lambda t: t.replace(microsecond=0))),
    "ts_us_utc": (
        pa.timestamp("us", tz="UTC"),
        _TIMES.map(lambda t: t.replace(tzinfo=datetime.UTC)),
    ),
    "ts_ms_berlin": (
        pa.timestamp("ms", tz="Europe/Berlin"),
        _TIMES.map(
            lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000, tzinfo=datetime.UTC)
        ),
    ),
    "ts_ns_tokyo": (
        pa.timestamp("ns", tz="Asia/Tokyo"),
        _TIMES.map(lambda t: t.replace(tzinfo=datetime.UTC)),
    ),
    "duration_us": (
        pa.duration("us"),
        st.timedeltas(datetime.timedelta(days=-9999), datetime.timedelta(days=9999)),
    ),
    "duration_s": (
        pa.duration("s"),
        st.integers(-(10**9), 10**9).map(lambda s: datetime.timedelta(seconds=s)),
    ),
    "list": (pa.list_(pa.int32()), st.lists(st.one_of(st.none(), _ints(32)), max_size=4)),
    "large_list": (pa.large_list(pa.string()), st.lists(_TEXT, max_size=3)),
    "struct": (
        pa.struct([("a", pa.int16()), ("b", pa.string())]),
        st.fixed_dictionaries({"a": st.one_of(st.none(), _ints(16)), "b": _TEXT}),
    ),
    "map": (
        pa.map_(pa.string(), pa.int64()),
        st.lists(st.tuples(_TEXT, _ints(64)), max_size=3),
    ),
    "dictionary": (
        pa.dictionary(pa.int32(), pa.string()),
        st.sampled_from(["red", "green", "blue"]),
    ),
    "list_of_struct": (
        pa.list_(pa.struct([("x", pa.float64())])),
        st.lists(st.fixed_dictionaries({"x": st.floats(allow_nan=False)}), max_size=3),
    ),
}


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    names = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=1, max_size=8, unique=True))
    names = draw(st.permutations(names))  # the column order is part of what must come back
    rows = draw(st.integers(1, 12))
    keys = draw(st.lists(_ints(32), min_size=rows, max_size=rows, unique=True))
    columns: dict[str, pa.Array] = {"key": pa.array(keys, pa.int32())}
    for name in names:
        kind, values = TYPES[name]
        cells = draw(st.lists(st.one_of(st.none(), values), min_size=rows, max_size=rows))
        if pa.types.is_dictionary(kind):
            columns[name] = pa.array(cells, pa.string()).dictionary_encode()
        else:
            columns[name] = pa.array(cells, kind)
    key_at = draw(st.integers(0, len(names)))
    order = [*names[:key_at], "key", *names[key_at:]]
    return pa.table({n: columns[n] for n in order})


def _records(table: pa.Table) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if v is not None} for row in table.to_pylist()]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=tables())
def test_every_arrow_type_round_trips(lake: Lake, connect: Connect, data: pa.Table) -> None:
    writer = connect(lake)
    name = f"db{len(writer.list_dbs())}"
    writer.create_db(name).create_table("t", key="key", tablet_size_limit=4).write(
        "t", data
    ).commit()
    expected = data.sort_by("key")
    db = connect(lake).open_db(name)

    back = db.to_arrow("t")
    assert back.schema.equals(data.schema), (back.schema, data.schema)
    assert back.to_pylist() == expected.to_pylist()

    reader = db.to_batches("t")
    assert reader.schema.equals(data.schema)
    streamed = pa.Table.from_batches(list(reader), schema=reader.schema)
    assert streamed.to_pylist() == expected.to_pylist()

    assert list(db.scan("t")) == _records(expected)
