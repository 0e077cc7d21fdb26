"""Leftovers of the type probes: naive timestamp keys written as records, and DataFrames
given to every call that takes rows (not only ``write``).

* A first write of records whose key datetimes are naive makes a naive
  ``timestamp[us]`` key field, as an Arrow ``timestamp[us]`` key column does and
  as a naive datetime in any other field does; reads give naive datetimes back.
  Aware keys (and tables whose key field is already UTC) keep the UTC field.
* ``upsert`` converts a DataFrame as ``write`` does, with the table's types (a
  map field as ``to_pandas`` gives it); ``delete`` and ``get_records`` refuse a
  DataFrame instead of taking its column names as keys; a missing key in a
  DataFrame (NaN) is named as such.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError, UsageError

_NAIVE = [dt.datetime(2020, 1, 1, 12), dt.datetime(2020, 1, 2, 8, 30)]
_ZONE = dt.timezone(dt.timedelta(hours=2))


def _db() -> merkle.Database:
    return merkle.connect("memory://").create_db("x")


# -- naive timestamp keys ----------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "key_codec", "records", "keys"),
    [
        ("t", None, [{"t": t, "v": i} for i, t in enumerate(_NAIVE)], _NAIVE),
        ("t", "reverse(timestamp)", [{"t": t, "v": i} for i, t in enumerate(_NAIVE)], _NAIVE),
        (
            ["g", "t"],
            None,
            [{"g": 1, "t": t, "v": i} for i, t in enumerate(_NAIVE)],
            [(1, t) for t in _NAIVE],
        ),
    ],
    ids=["single", "reversed", "composite"],
)
def test_naive_datetime_keys_from_records_stay_naive(
    key: Any, key_codec: str | None, records: list[dict[str, Any]], keys: list[Any]
) -> None:
    db = _db().create_table("ts", key=key, key_codec=key_codec).write("ts", records).commit()
    assert db.to_arrow("ts").schema.field("t").type == pa.timestamp("us")
    assert sorted(db.scan("ts"), key=lambda r: r["v"]) == records
    assert db.get_records("ts", keys) == {k: r for k, r in zip(keys, records, strict=True)}
    bounded = list(db.scan("ts", from_pk=keys[1], to_pk=keys[1]))
    assert bounded == [records[1]]
    # Later naive writes, upserts, updates and deletes find the same keys.
    db = db.upsert("ts", [{**records[0], "v": 10}]).update("ts", {keys[1]: {"v": 11}})
    assert [r["v"] for r in db.get_records("ts", keys).values()] == [10, 11]
    assert db.delete("ts", keys[:1]).get_records("ts", keys) == {keys[1]: {**records[1], "v": 11}}


def test_naive_key_records_read_as_an_arrow_naive_key_column_does() -> None:
    records = [{"t": t, "v": i} for i, t in enumerate(_NAIVE)]
    db = _db().create_table("r", key="t").write("r", records)
    db = db.create_table("a", key="t").write("a", pa.Table.from_pylist(records))
    assert db.to_arrow("r").equals(db.to_arrow("a"))
    assert list(db.scan("r")) == list(db.scan("a")) == records


def test_key_field_zone_follows_the_first_write() -> None:
    db = _db().create_table("n", key="t").write("n", [{"t": _NAIVE[0]}])
    db = db.create_table("z", key="t").write("z", [{"t": _NAIVE[0].replace(tzinfo=_ZONE)}])
    assert db.to_arrow("n").schema.field("t").type == pa.timestamp("us")
    # Aware keys keep today's UTC field: the instant, as datetime.UTC.
    assert db.to_arrow("z").schema.field("t").type == pa.timestamp("us", tz="UTC")
    assert list(db.scan("z")) == [{"t": dt.datetime(2020, 1, 1, 10, tzinfo=dt.UTC)}]


def test_a_utc_key_field_keeps_its_meaning_beside_a_naive_one() -> None:
    utc = pa.schema([("t", pa.timestamp("us", tz="UTC")), ("v", pa.int64())])
    db = _db().create_table("u", key="t", schema=utc).write("u", [{"t": _NAIVE[0], "v": 1}])
    db = db.create_table("n", key="t").write("n", [{"t": _NAIVE[0], "v": 1}]).commit()
    # A table whose key field is UTC (any table written from records before) reads a
    # naive key written into it as UTC, as it always did.
    assert list(db.scan("u")) == [{"t": _NAIVE[0].replace(tzinfo=dt.UTC), "v": 1}]
    assert db.to_arrow("u").schema == utc
    assert list(db.scan("n")) == [{"t": _NAIVE[0], "v": 1}]


@pytest.mark.parametrize("composite", [False, True], ids=["single", "composite"])
def test_naive_and_aware_keys_in_a_first_write_are_a_schema_error(composite: bool) -> None:
    key: Any = ["g", "t"] if composite else "t"
    rows = [{"g": 1, "t": _NAIVE[0]}, {"g": 1, "t": _NAIVE[1].replace(tzinfo=dt.UTC)}]
    db = _db().create_table("m", key=key)
    with pytest.raises(SchemaError, match=r"key field 't' holds naive datetime .* aware"):
        db.write("m", rows)


# -- DataFrames --------------------------------------------------------------------

_MAP = pa.map_(pa.string(), pa.int64())


def _map_table() -> merkle.Database:
    rows = pa.table({"k": [1, 2], "mm": pa.array([[("a", 1)], [("b", 2)]], _MAP), "v": [1, 2]})
    return _db().create_table("m", key="k").write("m", rows).commit()


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"when_matched": "replace"},
        {"when_matched": "skip"},
        {"when_not_matched": "skip"},
        {"condition": lambda current, new: current["v"] < 10},
    ],
    ids=["update", "replace", "skip", "no-insert", "condition"],
)
def test_upsert_takes_the_dataframes_write_takes(options: dict[str, Any]) -> None:
    db = _map_table()
    frame = db.to_pandas("m")
    frame["k"] = [2, 3]
    frame["mm"] = [[("z", 9)], [("y", 8)]]
    written = db.upsert("m", frame, **options)
    assert written.to_arrow("m").schema.field("mm").type == _MAP
    arrow = pa.Table.from_pandas(frame, schema=db.to_arrow("m").schema)
    expected = db.upsert("m", arrow, **options)
    assert written.to_arrow("m").equals(expected.to_arrow("m"))


def test_upsert_of_a_dataframe_replays_on_a_moved_head() -> None:
    db = _map_table()
    frame = db.to_pandas("m")
    db.write("m", [{"k": 5, "v": 5}]).commit()  # the head moves on
    done = db.upsert("m", frame.assign(v=[7, 8])).commit()
    assert [r["v"] for r in done.scan("m")] == [7, 8, 5]
    assert done.to_arrow("m").column("mm").to_pylist()[:2] == [[("a", 1)], [("b", 2)]]


@pytest.mark.parametrize("call", ["delete", "get_records"])
def test_a_dataframe_is_not_a_list_of_keys(call: str) -> None:
    rows = [{"k": "k", "v": 1}, {"k": "v", "v": 2}, {"k": "z", "v": 3}]
    db = _db().create_table("s", key="k").write("s", rows).commit()
    frame = db.to_pandas("s")  # its column names are keys of the table
    with pytest.raises(UsageError, match=r"got a DataFrame .*tolist\(\)"):
        getattr(db, call)("s", frame)
    assert len(list(db.scan("s"))) == 3


@pytest.mark.parametrize("call", ["write", "upsert"])
@pytest.mark.parametrize("missing", [float("nan"), None])
def test_a_missing_key_in_a_dataframe_is_named(call: str, missing: Any) -> None:
    db = _db().create_table("f", key="k").write("f", [{"k": 1.0}])
    frame = pd.DataFrame({"k": [2.0, missing], "v": [1, 2]})
    with pytest.raises(UsageError, match=r"key field 'k' .* row 1 .*NaN, None and NaT"):
        getattr(db, call)("f", frame)
