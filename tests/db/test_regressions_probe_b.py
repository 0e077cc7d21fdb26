"""Regressions of this session's changes that a probe found (compared with the code before).

- Writing back a ``to_pandas`` frame with a map column (or a uuid inside a list) computed
  the key of every row, through a pandas ``iloc`` per call, though keys only go into
  errors: ``nestedvalues.prepared_values`` asked ``key_of(position)`` for every value
  up front (a 200k-row write-back took ~2 s instead of ~0.3 s).
- ``merkle load`` of ``0001-01-01T00:00:00+01:00`` or ``9999-12-31T23:30:00-01:00`` into a
  naive timestamp field died with a raw ``OverflowError``: ``isoticks.timestamp_ticks``
  subtracted the UTC offset from a Python datetime, past the years it holds.
- Reading a map field holding a value Python cannot hold raised pyarrow's raw
  ``ArrowNotImplementedError`` (``list_flatten`` has no kernel for maps) instead of the
  UsageError naming the field: ``pylimits._children`` flattened the MapArray.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import merkle
import merkle.db.frames as frames
from merkle.cli.isoticks import timestamp_ticks
from merkle.errors import SchemaError, UsageError
from merkle.tablets.conform import KeyLayout
from merkle.tablets.nestedvalues import prepared_values
from merkle.tablets.pylimits import failing_kind
from tests.cli.helpers import Run

MAP = pa.map_(pa.string(), pa.int64())
#: Day 2**30 in milliseconds: a date64 of year ~2.9 million, which no Python date holds.
FAR = 2**30 * 86_400_000


@pytest.fixture
def mem() -> Iterator[merkle.Connection]:
    conn = merkle.connect("memory://")
    yield conn
    conn.close()


def _table(conn: merkle.Connection, kind: pa.DataType, column: pa.Array) -> merkle.Database:
    db = conn.create_db("d")
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", kind)])
    db = db.create_table("t", key="k", schema=schema)
    return db.write("t", pa.table({"k": pa.array(range(len(column)), pa.int64()), "v": column}))


# --- keys are computed only for an error ---------------------------------------------


class _Counter:
    """Counts the keys asked of the ``key_of`` functions frames makes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = frames._key_of

        def counting(data: Any, key: Any) -> Callable[[int], Any]:
            inner = original(data, key)

            def key_of(position: int) -> Any:
                self.calls += 1
                return inner(position)

            return key_of

        monkeypatch.setattr(frames, "_key_of", counting)


def _uuids(n: int) -> pa.Array:
    storage = pa.array([uuid.UUID(int=i + 1).bytes for i in range(n)], pa.binary(16))
    items = pa.ExtensionArray.from_storage(pa.uuid(), storage)
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1), pa.int32()), items)


@pytest.mark.parametrize(
    "column",
    [pa.array([[("a", i), ("b", -i)] for i in range(300)], MAP), _uuids(300)],
    ids=["map", "list-of-uuid"],
)
def test_frame_write_back_asks_no_key(
    mem: merkle.Connection, monkeypatch: pytest.MonkeyPatch, column: pa.Array
) -> None:
    db = _table(mem, column.type, column)
    frame = db.to_pandas("t")
    counter = _Counter(monkeypatch)
    db = db.write("t", frame)
    assert counter.calls == 0
    assert db.to_arrow("t").column("v").combine_chunks().equals(column)


def test_frame_error_still_names_the_key(
    mem: merkle.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _table(mem, MAP, pa.array([[("a", i)] for i in range(20)], MAP))
    frame = db.to_pandas("t")
    frame["k"] = frame["k"] + 100
    frame.at[7, "v"] = [("a", 1), None]  # a map entry None: refused, naming the record
    counter = _Counter(monkeypatch)
    with pytest.raises(SchemaError, match="the record with key 107 holds a map entry None"):
        db.write("t", frame)
    assert counter.calls == 1


def test_prepared_values_asks_keys_only_for_an_error() -> None:
    asked: list[int] = []

    def key_of(position: int) -> int:
        asked.append(position)
        return position * 10

    values: list[Any] = [[("a", i)] for i in range(50)]
    values[3] = [("a", np.int64(3))]  # walked by the preparer too
    prepared_values("v", values, MAP, key_of)
    assert asked == []
    values[40] = [("a", 1), None]
    with pytest.raises(SchemaError, match="key 400 holds a map entry None"):
        prepared_values("v", values, MAP, key_of)
    assert asked == [40]


def test_frame_key_of_reads_python_values() -> None:
    data = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    single = frames._key_of(data, KeyLayout.of("a"))
    composite = frames._key_of(data, KeyLayout.of(["a", "b"]))
    assert single(2) == 3
    assert type(single(2)) is int
    assert composite(1) == (2, "y")
    assert frames._key_of(data, KeyLayout.of("c"))(1) == 1


# --- merkle load of a UTC offset at the ends of Python's range -------------------------


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("0001-01-01T00:00:00+01:00", "s", -62135596800 - 3600),
        ("9999-12-31T23:30:00-01:00", "s", 253402300799 - 1799 + 3600),
        ("0001-01-01T00:00:00.5+01:00", "us", (-62135596800 - 3600) * 10**6 + 500_000),
        ("0001-01-01T00:00:00+00:00:01", "ms", (-62135596800 - 1) * 1000),
        ("2020-01-01T00:00:00.123456789-05:30", "ns", 1577856600_123456789),
    ],
)
def test_timestamp_ticks_past_python_range(text: str, unit: str, expected: int) -> None:
    assert timestamp_ticks(text, unit) == expected


def _load(tmp_path: Path, kind: pa.DataType, text: str, suffix: str) -> tuple[Run, str]:
    lake = (tmp_path / "lake").as_uri()
    with merkle.connect(lake) as conn:
        schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", kind)])
        conn.create_db("d").create_table("t", key="k", schema=schema).commit()
    path = tmp_path / f"in.{suffix}"
    if suffix == "csv":
        path.write_text(f"k,v\n1,{text}\n")
    else:
        path.write_text(json.dumps({"k": 1, "v": text}) + "\n")
    return Run(lake), str(path)


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0001-01-01T00:00:00+01:00", -62135600400), ("9999-12-31T23:30:00-01:00", 253402302600)],
)
@pytest.mark.parametrize("tz", [None, "UTC"])
def test_load_offset_at_python_range_ends(
    tmp_path: Path, suffix: str, text: str, seconds: int, tz: str | None
) -> None:
    run, path = _load(tmp_path, pa.timestamp("s", tz), text, suffix)
    run.ok("load", "d", "t", path, "--key", "k")
    with merkle.connect((tmp_path / "lake").as_uri()) as conn:
        column = conn.open_db("d").to_arrow("t").column("v")
    assert column.cast(pa.int64()).to_pylist() == [seconds]


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_load_offset_beyond_the_field_is_one_line(tmp_path: Path, suffix: str) -> None:
    run, path = _load(tmp_path, pa.timestamp("ns"), "9999-12-31T23:30:00-01:00", suffix)
    line = run.fails("load", "d", "t", path, "--key", "k")
    assert "field 'v'" in line
    assert "does not fit timestamp[ns]" in line


# --- a map value Python cannot hold is named, not a raw Arrow error ------------------------


@pytest.mark.parametrize(
    ("kind", "rows"),
    [
        (pa.map_(pa.string(), pa.date64()), [[("a", 86_400_000)], [("b", 0), ("c", FAR)], []]),
        (pa.map_(pa.date64(), pa.int64()), [[(86_400_000, 1)], [(FAR, 2)], None]),
        (pa.list_(pa.map_(pa.string(), pa.date64())), [[[("a", 0)]], [[], [("b", FAR)]], None]),
    ],
    ids=["item", "key", "inside-list"],
)
def test_map_value_beyond_python_is_named(
    mem: merkle.Connection, kind: pa.DataType, rows: list[Any]
) -> None:
    db = _table(mem, kind, pa.array(rows, kind)).commit()
    assert set(db.get_records("t", [0, 2])) == {0, 2}
    for read in (lambda: db.get_records("t", [1]), lambda: list(db.scan("t"))):
        with pytest.raises(UsageError) as caught:
            read()
        message = str(caught.value)
        assert "field 'v'" in message
        assert "record with key 1" in message
        assert "date64[ms] value beyond that" in message
        assert "years 1 to 9999" in message


def test_failing_kind_of_one_map_record_reads_its_slice() -> None:
    kind = pa.map_(pa.date32(), pa.date64())
    far_day = 2**30  # a date32 of year ~2.9 million
    rows = [[(far_day, 0)], [(1, FAR)], [(2, 0)]]  # far key, far item, all in range
    column = pa.array(rows, kind)
    assert failing_kind(column.slice(0, 1)) == pa.date32()
    assert failing_kind(column.slice(1, 1)) == pa.date64()  # not the key of record 0
    assert failing_kind(column.slice(2, 1)) is None
