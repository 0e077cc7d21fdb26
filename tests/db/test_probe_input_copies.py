"""What a write keeps of its input holds none of the caller's mutable memory.

An adversarial probe found that ``db.write(t, df)`` kept the pandas
DataFrame's own numpy buffers: pyarrow's ``Table.from_pandas`` wraps a
numeric, datetime, masked (``Int64``) or categorical column without copying
it, and the write kept that table (in the value returned, then in the
committed value). ``df.loc[0, "v"] = 999`` after the write changed what an
immutable Database value read -- a committed version too, while a fresh
connection read the stored value -- and an edit made between ``write`` and
``commit`` was stored unless something had been read first. The same held
for ``upsert`` (the operation kept for a replay) and for a named index level
written as a field.

The other input forms are checked here too: records (dicts, a mapping key
-> dict) with numpy arrays as values, ``update``, ``delete`` given a numpy
array of keys, a merge resolver's records, and Polars frames were already
copied (or immutable); these tests keep them so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import Lake

import merkle

from .conftest import Connect


def _values(db: merkle.Database, table: str = "t", field: str = "v") -> list[Any]:
    return db.to_arrow(table).column(field).to_pylist()


def _stored(connect: Connect, lake: Lake, version: int | None = None) -> list[Any]:
    """What the lake holds, read by a connection of its own (no cache of the writer's)."""
    db = connect(lake).open_db("d", version=version)
    return _values(db)


def _empty(conn: merkle.Connection, schema: pa.Schema | None = None) -> merkle.Database:
    return conn.create_db("d").create_table("t", key="k", schema=schema).commit()


# (a column of two values, a value of its kind to put in row 0 in place)
_COLUMNS: dict[str, tuple[Callable[[], Any], Any]] = {
    "int64": (lambda: np.array([10, 20]), 999),
    "uint8": (lambda: np.array([10, 20], dtype=np.uint8), 99),
    "float64 with NaN": (lambda: np.array([1.5, np.nan]), 9.5),
    "Int64 with NA": (lambda: pd.array([10, None], dtype="Int64"), 999),
    "Float64": (lambda: pd.array([1.5, 2.5], dtype="Float64"), 9.5),
    "category": (lambda: pd.Categorical(["a", "b"]), "b"),
    "datetime64": (
        lambda: np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[ns]"),
        pd.Timestamp("1999-01-01"),
    ),
    "datetime64 UTC": (
        lambda: pd.date_range("2020-01-01", periods=2, tz="UTC"),
        pd.Timestamp("1999-01-01", tz="UTC"),
    ),
    "timedelta64": (lambda: np.array([1, 2], dtype="timedelta64[ns]"), pd.Timedelta(9)),
    "bool": (lambda: np.array([True, False]), False),
    "object strings": (lambda: np.array(["a", "b"], dtype=object), "z"),
    "string[python]": (lambda: pd.array(["a", "b"], dtype="string[python]"), "z"),
    "int64[pyarrow]": (lambda: pd.array([10, 20], dtype="int64[pyarrow]"), 999),
}


@pytest.mark.parametrize("kind", list(_COLUMNS))
def test_a_frame_changed_after_write_changes_no_value(
    conn: merkle.Connection, connect: Connect, lake: Lake, kind: str
) -> None:
    make, new = _COLUMNS[kind]
    df = pd.DataFrame({"k": np.array([1, 2]), "v": make()})
    written = _empty(conn).write("t", df)
    given = _values(written)
    df.loc[0, "v"] = new
    assert _values(written) == given  # the value write returned
    committed = written.commit()
    df.loc[1, "v"] = new
    assert _values(committed) == given  # the committed value
    assert _stored(connect, lake, committed.version) == given


def test_an_edit_between_write_and_commit_is_not_stored(
    conn: merkle.Connection, connect: Connect, lake: Lake
) -> None:
    df = pd.DataFrame({"k": np.array([3]), "v": np.array([30])})
    written = _empty(conn).write("t", df)
    df.loc[0, "v"] = -1  # nothing read before the edit
    written.commit()
    assert _stored(connect, lake) == [30]


def test_a_numpy_index_written_as_the_key_is_copied(
    conn: merkle.Connection, connect: Connect, lake: Lake
) -> None:
    keys, values = np.array([1, 2]), np.array([10, 20])
    df = pd.DataFrame({"v": values}, index=pd.Index(keys, name="k"))
    written = _empty(conn).write("t", df)
    keys[0], values[0] = 5, 999  # pandas shares both arrays with the caller
    assert written.to_arrow("t").column("k").to_pylist() == [1, 2]
    committed = written.commit()
    assert _values(committed) == [10, 20] == _stored(connect, lake)


def test_a_frame_converted_column_by_column_is_copied(
    conn: merkle.Connection, connect: Connect, lake: Lake
) -> None:
    """A map column as ``to_pandas`` gives it is typed by its field, the frame's other
    columns converted one at a time: those are copied as well."""
    schema = pa.schema(
        [("k", pa.int64()), ("v", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))]
    )
    df = pd.DataFrame({"k": np.array([1, 2]), "v": np.array([10, 20])})
    df["m"] = pd.Series([[("a", 1)], [("b", 2)]], dtype=object)
    written = _empty(conn, schema).write("t", df)
    df.loc[0, "v"] = 999
    committed = written.commit()
    assert _values(written) == _values(committed) == [10, 20] == _stored(connect, lake)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda db, df: db.write("t", df), id="write"),
        pytest.param(lambda db, df: db.upsert("t", df), id="upsert"),
        pytest.param(
            lambda db, df: db.upsert(
                "t", df, when_matched="update", condition=lambda old, new: new["v"] > old["v"]
            ),
            id="conditional upsert",
        ),
    ],
)
def test_a_replay_writes_the_frame_as_given(
    lake: Lake, connect: Connect, call: Callable[[merkle.Database, Any], merkle.Database]
) -> None:
    """The operation kept for a replay holds a copy: a commit that rebases over a
    concurrent one writes what the call was given."""
    first = connect(lake)
    _empty(first).write("t", [{"k": 1, "v": 1}, {"k": 2, "v": 2}]).commit()
    mine = first.open_db("d")
    df = pd.DataFrame({"k": np.array([1, 2]), "v": np.array([10, 20])})
    pending = call(mine, df)
    df.loc[0, "v"] = 999
    connect(lake).open_db("d").create_table("other", key="k").commit()  # moves the head
    committed = pending.commit()
    assert committed.version == mine.version + 2  # replayed over the concurrent commit
    assert _values(committed) == [10, 20] == _stored(connect, lake)


def test_an_upsert_reads_the_frame_once(conn: merkle.Connection) -> None:
    """What an upsert decides (here: the condition) and what it writes come from one
    copy, taken when it is called."""
    db = _empty(conn).write("t", [{"k": 1, "v": 15}]).commit()
    df = pd.DataFrame({"k": np.array([1]), "v": np.array([10])})
    pending = db.upsert(
        "t", df, when_matched="update", condition=lambda old, new: new["v"] > old["v"]
    )
    df.loc[0, "v"] = 999
    assert _values(pending.commit()) == [15]


def test_records_with_numpy_values_are_copied(
    conn: merkle.Connection, connect: Connect, lake: Lake
) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.list_(pa.int64()))])
    db = _empty(conn, schema)
    listed, mapped, patched = np.array([1, 2]), np.array([3, 4]), np.array([5, 6])
    db = db.write("t", [{"k": 1, "v": listed}]).write("t", {2: {"v": mapped}})
    db = db.update("t", {1: {"v": patched}})
    listed[0] = mapped[0] = patched[0] = 99
    committed = db.commit()
    assert _values(committed) == [[5, 6], [3, 4]] == _stored(connect, lake)


def test_a_numpy_array_of_keys_is_copied(lake: Lake, connect: Connect) -> None:
    first = connect(lake)
    _empty(first).write("t", [{"k": 1, "v": 1}, {"k": 2, "v": 2}]).commit()
    keys = np.array([1])
    pending = first.open_db("d").delete("t", keys)
    keys[0] = 2
    connect(lake).open_db("d").create_table("other", key="k").commit()  # a replay
    pending.commit()
    assert connect(lake).open_db("d").to_arrow("t").column("k").to_pylist() == [2]


def test_a_merge_resolvers_record_is_copied(lake: Lake, connect: Connect) -> None:
    conn = connect(lake)
    schema = pa.schema([("k", pa.int64()), ("v", pa.list_(pa.int64()))])
    base = _empty(conn, schema).write("t", [{"k": 1, "v": [0]}]).commit()
    conn.create_db("b", root=base)
    base.update("t", {1: {"v": [1]}}).commit()
    conn.open_db("b").update("t", {1: {"v": [2]}}).commit()
    chosen = np.array([7, 8])
    merged = conn.merge("b", "d", resolve=lambda conflict: {"v": chosen})
    chosen[0] = 99
    assert _values(merged) == [[7, 8]] == _stored(connect, lake)


def test_a_polars_frame_changed_after_write_changes_no_value(
    conn: merkle.Connection, connect: Connect, lake: Lake
) -> None:
    pl = pytest.importorskip("polars")
    df = pl.DataFrame({"k": [1, 2], "v": [10, 20]})
    written = _empty(conn).write("t", df)
    df[0, "v"] = 999
    committed = written.commit()
    assert _values(written) == _values(committed) == [10, 20] == _stored(connect, lake)
