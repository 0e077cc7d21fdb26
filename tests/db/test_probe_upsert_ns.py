"""Nanosecond values through record reads and upsert, and delete_where's row column.

The probe found: record reads (get_records, scan) gave a time64[ns] of 7 ns
inside a list or struct as time(0, 0), and timestamps or durations inside a
list or map as pandas objects, where a top-level field of the same type is
the documented UsageError; upsert rewrote matched records from that rounded
Python form (an upsert of an unrelated field zeroed the stored nanoseconds),
cut an Arrow time64[ns] to microseconds (write kept it), and refused every
call on a table holding a nanosecond value ("read it as Arrow"); and
delete_where(Expression) failed with a raw KeyError on a field named
"\\x00row", the name of the row-number column it added.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import merkle
from merkle.errors import UsageError

NS_TIME = pa.time64("ns")
_KEY = pa.field("k", pa.int64(), nullable=False)

# A field type holding a nanosecond time inside it, and a value of it holding 7 ns.
NESTED: dict[str, tuple[pa.DataType, Any]] = {
    "list-time64": (pa.list_(NS_TIME), [7]),
    "struct-time64": (pa.struct([("x", NS_TIME)]), {"x": 7}),
    "map-duration": (pa.map_(pa.string(), pa.duration("ns")), [("a", 7)]),
    "map-time64": (pa.map_(pa.string(), NS_TIME), [("a", 7)]),
    "list-timestamp": (pa.list_(pa.timestamp("ns")), [7]),
    "list-timestamp-utc": (pa.list_(pa.timestamp("ns", "UTC")), [7]),
    "large-list-duration": (pa.large_list(pa.duration("ns")), [7]),
    "list-of-lists": (pa.list_(pa.list_(NS_TIME)), [[1000, 7]]),
    "struct-in-list": (pa.list_(pa.struct([("t", pa.timestamp("ns"))])), [{"t": 7}]),
}
# Those pyarrow cut to microseconds in Python (the others came back as pandas objects,
# which an upsert wrote back whole).
TIME64 = {
    name: NESTED[name] for name in ("list-time64", "struct-time64", "map-time64", "list-of-lists")
}


@pytest.fixture
def conn() -> Iterator[merkle.Connection]:
    """A connection to a fresh in-memory lake (the behaviour is the same on every backend)."""
    connection = merkle.connect("memory://")
    yield connection
    connection.close()


def _nested(conn: merkle.Connection, kind: pa.DataType, value: Any) -> merkle.Database:
    """Table ``t``: key ``k``, the nested field ``n`` (record 1 holds ``value``), int ``x``."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("n", kind), ("x", pa.int64())])
    rows = pa.table({"k": [1, 2], "n": pa.array([value, None], kind), "x": [1, 2]}, schema=schema)
    return conn.create_db("d").create_table("t", key="k", schema=schema).write("t", rows).commit()


@pytest.mark.parametrize(("kind", "value"), NESTED.values(), ids=NESTED.keys())
@pytest.mark.parametrize("read", ["get_records", "scan"])
def test_a_nested_nanosecond_value_is_refused_by_record_reads(
    conn: merkle.Connection, kind: pa.DataType, value: Any, read: str
) -> None:
    """Before: a rounded value (time(0, 0)) or a pandas Timestamp / Timedelta."""
    db = _nested(conn, kind, value)
    reads = {"get_records": lambda: db.get_records("t", [1]), "scan": lambda: list(db.scan("t"))}
    with pytest.raises(UsageError, match=r"field 'n' .*nanosecond \(e\.g\. 7 ns\).*as Arrow"):
        reads[read]()
    assert db.get_records("t", [2]) == {2: {"k": 2, "x": 2}}  # a record without one reads


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        (
            pa.map_(pa.string(), pa.duration("ns")),
            [("a", 7000)],
            [("a", datetime.timedelta(0, 0, 7))],
        ),
        (pa.list_(pa.timestamp("ns")), [7000], [datetime.datetime(1970, 1, 1, 0, 0, 0, 7)]),
    ],
    ids=["map-duration", "list-timestamp"],
)
def test_nested_whole_microseconds_read_as_exact_python_values(
    conn: merkle.Connection, kind: pa.DataType, value: Any, expected: Any
) -> None:
    """Before: pandas objects for nanosecond timestamps and durations inside a list or map."""
    got = _nested(conn, kind, value).get_records("t", [1])[1]["n"]
    assert got == expected
    assert all(
        type(v) in (datetime.time, datetime.timedelta, datetime.datetime) for v in _leaves(got)
    )


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, str):
        return []
    return [value]


@pytest.mark.parametrize(("kind", "value"), TIME64.values(), ids=TIME64.keys())
@pytest.mark.parametrize("given", ["records", "arrow"])
def test_an_upsert_of_another_field_keeps_the_stored_nanoseconds(
    conn: merkle.Connection, kind: pa.DataType, value: Any, given: str
) -> None:
    """Before: the record was rewritten from its rounded Python form (7 ns became 0), or
    the upsert was refused ("read it as Arrow")."""
    db = _nested(conn, kind, value)
    before = db.to_arrow("t").column("n")
    rows: Any = [{"k": 1, "x": 5}] if given == "records" else pa.table({"k": [1], "x": [5]})
    after = db.upsert("t", rows).commit().to_arrow("t")
    assert after.column("n").equals(before)
    assert after.column("x").to_pylist() == [5, 2]


def _timed(conn: merkle.Connection) -> merkle.Database:
    """Table ``t``: ``k``, ``t`` (time64[ns]), ``x``; record 1 holds t = 7 ns, x = 10."""
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("t", NS_TIME), ("x", pa.int64())]
    )
    rows = pa.table({"k": [1], "t": pa.array([7], NS_TIME), "x": [10]}, schema=schema)
    return conn.create_db("d").create_table("t", key="k", schema=schema).write("t", rows).commit()


def _ticks(db: merkle.Database) -> dict[int, tuple[int | None, int | None]]:
    table = db.to_arrow("t")
    ticks = table.column("t").cast(pa.int64()).to_pylist()
    pairs = zip(ticks, table.column("x").to_pylist(), strict=True)
    return dict(zip(table.column("k").to_pylist(), pairs, strict=True))


# Rows of keys 1 (stored) and 5 (new), twice each, with nanoseconds; what each mode leaves.
ROWS = pa.table({"k": [1, 5, 1, 5], "t": pa.array([1, 3, 2, 4], NS_TIME)})
MODES = {
    ("update", "insert"): {1: (2, 10), 5: (4, None)},  # the last row of a key wins, x kept
    ("replace", "insert"): {1: (2, None), 5: (4, None)},
    ("skip", "insert"): {1: (7, 10), 5: (3, None)},  # 5's second row finds it: skipped
    ("update", "skip"): {1: (2, 10)},
    ("replace", "skip"): {1: (2, None)},
}


@pytest.mark.parametrize(("matched", "not_matched"), MODES.keys(), ids="/".join)
@pytest.mark.parametrize("frame", ["arrow", "polars"])
def test_an_arrow_upsert_keeps_nanoseconds_in_every_mode(
    conn: merkle.Connection, matched: str, not_matched: str, frame: str
) -> None:
    """Before: the Arrow rows went through Python, which cut time64[ns] to microseconds
    (3 ns stored as 0), where write() keeps every nanosecond."""
    rows: Any = ROWS
    if frame == "polars":
        pl = pytest.importorskip("polars")
        rows = pl.from_arrow(ROWS)  # Polars' times are always nanoseconds
    db = _timed(conn).upsert("t", rows, when_matched=matched, when_not_matched=not_matched)
    assert _ticks(db) == MODES[matched, not_matched]
    assert _ticks(db.commit()) == MODES[matched, not_matched]


def test_an_upsert_into_a_table_holding_nanoseconds_is_accepted(conn: merkle.Connection) -> None:
    """Before: every upsert was refused, telling the user (who writes) to read as Arrow."""
    db = _timed(conn)
    db = db.upsert("t", [{"k": 1, "x": 5}, {"k": 2, "x": 6}])
    db = db.upsert("t", pa.table({"k": [3], "t": pa.array([9], NS_TIME), "x": [7]}))
    assert _ticks(db.commit()) == {1: (7, 5), 2: (None, 6), 3: (9, 7)}


def test_a_condition_tests_dicts_and_the_rows_it_writes_keep_nanoseconds(
    conn: merkle.Connection,
) -> None:
    """Only rows a condition tests become dicts: an inserted row keeps its nanoseconds."""
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("t", NS_TIME), ("x", pa.int64())]
    )
    db = conn.create_db("d").create_table("t", key="k", schema=schema)
    db = db.write("t", [{"k": 1, "x": 10}]).commit()
    rows = pa.table({"k": [1, 5], "t": pa.array([None, 3], NS_TIME), "x": [11, 1]}, schema=schema)
    db = db.upsert("t", rows, condition=lambda old, new: new["x"] > old["x"]).commit()
    assert _ticks(db) == {1: (None, 11), 5: (3, 1)}


@pytest.mark.parametrize(
    ("rows", "seen"),
    [
        ([{"k": 1, "x": 11}], "the stored records"),
        (pa.table({"k": [1], "x": [11]}), "the stored records"),
        (pa.table({"k": [1, 1], "t": pa.array([5, 6], NS_TIME)}), "the rows given"),
    ],
    ids=["records", "arrow", "arrow-rows"],
)
def test_a_condition_that_would_see_nanoseconds_is_refused_saying_why(
    conn: merkle.Connection, rows: Any, seen: str
) -> None:
    """Before: "read it as Arrow" (stored record) or a silently rounded value (rows given)."""
    db = _timed(conn)
    with pytest.raises(
        UsageError, match=f"condition sees {seen} as dicts: field 't' .*without a condition"
    ):
        db.upsert("t", rows, condition=lambda old, new: True)
    assert _ticks(db) == {1: (7, 10)}


@pytest.mark.parametrize("names", [["\x00row"], ["\x00row", "\x00row\x00"]], ids=["one", "two"])
def test_delete_where_works_whatever_the_fields_are_named(
    conn: merkle.Connection, names: list[str]
) -> None:
    """Before: KeyError 'Field "\\x00row" exists 2 times in schema'."""
    db = conn.create_db("d").create_table("t", key="k")
    db = db.write("t", [{"k": k, "x": k, **{n: k * 10 for n in names}} for k in (1, 2)]).commit()
    left = db.delete_where("t", pc.field("x") == 1).commit().to_arrow("t").to_pylist()
    assert left == [{"k": 2, **{n: 20 for n in names}, "x": 2}]
    with pytest.raises(UsageError, match="cannot evaluate") as error:
        db.delete_where("t", pc.field("nope") == 1)
    assert "x" in str(error.value)
