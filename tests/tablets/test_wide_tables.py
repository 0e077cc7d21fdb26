"""Wide tables: reading and writing cost time linear in the number of columns.

Found by an adversarial tester: a 3-row table of 2,000 columns took 4 s to
write, 4 s for ``get_records`` and 8 s for ``to_arrow``; 5,000 columns on
files took 126 s to write and 63 s to read one record. Time grew with the
square of the width: ``present``, ``present_records`` and ``concat_segments``
asked ``name in table.column_names`` once per field (pyarrow builds the whole
list on every access); ``conform_arrow``, ``conform_records`` and
``schema_of_segments`` asked ``name in schema.names`` once per field, counted
each name's duplicates with ``names.count`` and appended new fields to the
schema one by one (each append copies it).

No timing here. The counting tests hand those functions stand-ins for
``pyarrow.Table`` and ``pyarrow.Schema`` that count each *walk*: an operation
whose cost grows with the width (building the list of names, searching it,
iterating the schema, copying it by an append). A call must walk each table a
small number of times however wide it is: the count is the same at 100 and
at 400 columns (before the fix it grew with the columns). The end-to-end
tests check that a table of 3,000 columns reads back exactly as written,
through every read path, a projection and a schema change.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.tablets.conform import (
    KeyLayout,
    conform_arrow,
    conform_records,
    present,
    present_records,
    schema_of_segments,
)
from merkle.tablets.segment import concat_segments

KEY = KeyLayout.of("id")
#: Walks of one table a call may make, whatever its width.
MOST_WALKS = 4


# -- counting stand-ins --------------------------------------------------------------


class Walks:
    """How many times code walked one table's names (work that grows with its width)."""

    def __init__(self) -> None:
        self.count = 0


class CountedNames(list[str]):
    """A table's list of column names whose searches are counted as walks."""

    def __init__(self, names: Iterable[str], walks: Walks) -> None:
        super().__init__(names)
        self._walks = walks

    def __contains__(self, item: object) -> bool:
        self._walks.count += 1
        return super().__contains__(item)

    def count(self, item: Any) -> int:
        self._walks.count += 1
        return super().count(item)

    def index(self, item: Any, start: Any = 0, stop: Any = sys.maxsize) -> int:
        self._walks.count += 1
        return super().index(item, start, stop)


class _Counted:
    """A stand-in that forwards to a pyarrow object and counts the walks it makes."""

    def __init__(self, inner: Any, walks: Walks) -> None:
        self._inner = inner
        self._walks = walks

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class CountedSchema(_Counted):
    """A ``pyarrow.Schema`` stand-in: listing names, iterating and appending are walks."""

    @property
    def names(self) -> CountedNames:
        self._walks.count += 1
        return CountedNames(self._inner.names, self._walks)

    def __iter__(self) -> Iterator[pa.Field]:
        self._walks.count += 1
        return iter(self._inner)

    def equals(self, other: Any, check_metadata: bool = False) -> bool:
        # a native comparison of two schemas, not a walk in Python
        return bool(self._inner.equals(getattr(other, "_inner", other), check_metadata))

    def append(self, field: pa.Field) -> CountedSchema:
        self._walks.count += 1  # a copy of every field
        return CountedSchema(self._inner.append(field), self._walks)


class CountedTable(_Counted):
    """A ``pyarrow.Table`` stand-in: listing its names or columns is a walk."""

    @property
    def column_names(self) -> CountedNames:
        self._walks.count += 1
        return CountedNames(self._inner.column_names, self._walks)

    @property
    def columns(self) -> list[pa.ChunkedArray]:
        self._walks.count += 1
        return list(self._inner.columns)

    @property
    def schema(self) -> CountedSchema:
        return CountedSchema(self._inner.schema, self._walks)


# -- data --------------------------------------------------------------------------


def wide(keys: list[int], width: int) -> pa.Table:
    """Rows of ``width`` fields of four types (some null), the key ``id`` among them.

    Names run backwards, so the user's order is not the segments' (sorted) order.
    """
    columns: dict[str, pa.Array] = {}
    for i in reversed(range(width)):
        if i == width // 2:
            columns["id"] = pa.array(keys, pa.int64())
        kind = i % 4
        if kind == 0:
            columns[f"f{i:04d}"] = pa.array([k * i for k in keys], pa.int64())
        elif kind == 1:
            strings = [f"{k}-{i}" if (k + i) % 3 else None for k in keys]
            columns[f"f{i:04d}"] = pa.array(strings, pa.string())
        elif kind == 2:
            columns[f"f{i:04d}"] = pa.array([k + i / 8 for k in keys], pa.float64())
        else:
            columns[f"f{i:04d}"] = pa.array([(k + i) % 2 == 0 for k in keys])
    return pa.table(columns)


def records_of(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as records read back: the fields that hold a value, in the table's order."""
    return [{n: v for n, v in row.items() if v is not None} for row in table.to_pylist()]


def same_walks(count: Callable[[int], dict[str, int]]) -> None:
    """``count(width)`` (walks per table) is the same at two widths, and small."""
    narrow, broad = count(100), count(400)
    assert narrow == broad, f"walks grow with the width: {narrow} at 100, {broad} at 400"
    assert max(broad.values()) <= MOST_WALKS, broad


# -- reads: each table's names are walked a fixed number of times ---------------------


def test_present_walks_the_segment_a_fixed_number_of_times() -> None:
    def count(width: int) -> dict[str, int]:
        data = wide([1, 2, 3], width)
        done = conform_arrow(data, None, KEY, None)
        walks = Walks()
        got = present(CountedTable(done.rows, walks), done.schema, KEY)
        assert got.equals(data)
        assert got.equals(present(done.rows, done.schema, KEY))
        return {"segment": walks.count}

    same_walks(count)


def test_present_records_walks_the_segment_a_fixed_number_of_times() -> None:
    def count(width: int) -> dict[str, int]:
        data = wide([1, 2, 3], width)
        done = conform_arrow(data, None, KEY, None)
        walks = Walks()
        got = present_records(CountedTable(done.rows, walks), done.schema, KEY, done.codec)
        assert got == records_of(data)
        assert [list(r) for r in got] == [list(r) for r in records_of(data)]  # schema order
        return {"segment": walks.count}

    same_walks(count)


def test_concat_segments_walks_each_table_a_fixed_number_of_times() -> None:
    def count(width: int) -> dict[str, int]:
        first = conform_arrow(wide([1, 2], width), None, KEY, None)
        # Fewer columns, and one of another type: a missing column and a CBOR merge.
        fewer = wide([3], width).drop_columns([f"f{i:04d}" for i in range(0, width, 3)])
        fewer = fewer.set_column(
            fewer.schema.get_field_index("f0001"), "f0001", pa.array([7], pa.int64())
        )
        second = conform_arrow(fewer, None, KEY, None)
        tables = [first.rows, second.rows]
        walks = [Walks(), Walks()]
        counted = [CountedTable(t, w) for t, w in zip(tables, walks, strict=True)]
        got = concat_segments(counted, key_field="id")  # type: ignore[arg-type]
        assert got.equals(concat_segments(tables, key_field="id"))
        assert got.num_rows == 3
        assert got.num_columns == width + 1
        return {"first": walks[0].count, "second": walks[1].count}

    same_walks(count)


# -- writes: the data's names and the table's schema ---------------------------------


def test_conform_arrow_walks_the_data_and_the_schema_a_fixed_number_of_times() -> None:
    def count(width: int) -> dict[str, int]:
        before = conform_arrow(wide([1], width), None, KEY, None)  # the table's schema
        data = wide([2, 3], width).append_column("zz_new", pa.array([1, None], pa.int32()))
        data_walks, schema_walks = Walks(), Walks()
        got = conform_arrow(
            CountedTable(data, data_walks),  # type: ignore[arg-type]
            CountedSchema(before.schema, schema_walks),  # type: ignore[arg-type]
            KEY,
            before.codec,
        )
        want = conform_arrow(data, before.schema, KEY, before.codec)
        assert got.rows.equals(want.rows)
        assert got.schema.equals(want.schema, check_metadata=True)
        assert got.schema.names == [*before.schema.names, "zz_new"]
        return {"data": data_walks.count, "schema": schema_walks.count}

    same_walks(count)


def test_a_first_write_walks_an_empty_schema_a_fixed_number_of_times() -> None:
    def count(width: int) -> dict[str, int]:
        data = wide([1, 2], width)
        empty = pa.schema([]).with_metadata({"owner": "ops"})
        walks = Walks()
        got = conform_arrow(data, CountedSchema(empty, walks), KEY, None)  # type: ignore[arg-type]
        assert got.schema.equals(data.schema.with_metadata({"owner": "ops"}), check_metadata=True)
        return {"schema": walks.count}

    same_walks(count)


def test_conform_records_walks_the_schema_a_fixed_number_of_times() -> None:
    def count(width: int) -> dict[str, int]:
        before = conform_arrow(wide([1], width), None, KEY, None)
        records = records_of(wide([2, 3], width))
        walks = Walks()
        got = conform_records(
            records,
            CountedSchema(before.schema, walks),  # type: ignore[arg-type]
            KEY,
            before.codec,
        )
        want = conform_records(records, before.schema, KEY, before.codec)
        assert got.rows.equals(want.rows)
        assert got.schema.equals(want.schema)
        return {"schema": walks.count}

    same_walks(count)


def test_schema_of_segments_walks_the_schema_a_fixed_number_of_times() -> None:
    def count(width: int) -> dict[str, int]:
        known = conform_arrow(wide([1], width), None, KEY, None)
        data = wide([2], width).append_column("zz_new", pa.array(["x"]))
        segments = [conform_arrow(data, None, KEY, None).rows]
        walks = Walks()
        got = schema_of_segments(CountedSchema(known.schema, walks), segments, KEY)  # type: ignore[arg-type]
        want = [*known.schema, pa.field("zz_new", pa.string())]
        assert got.equals(pa.schema(want))
        first = schema_of_segments(None, segments, KEY)  # every field new: the segment's
        assert first.names == segments[0].column_names
        return {"schema": walks.count}

    same_walks(count)


# -- end to end: 3,000 columns read back exactly -------------------------------------

WIDTH = 3000


@pytest.fixture(scope="module")
def lake() -> Iterator[tuple[merkle.Database, pa.Table]]:
    """A memory lake holding a committed table of WIDTH columns and 3 rows, and its rows."""
    data = wide([1, 2, 3], WIDTH)
    with merkle.connect("memory://") as conn:
        db = conn.create_db("s").create_table("wide", key="id")
        yield db.write("wide", data).commit(), data


def test_a_wide_table_reads_back_as_written(lake: tuple[merkle.Database, pa.Table]) -> None:
    db, data = lake
    got = db.to_arrow("wide")
    assert got.schema.equals(data.schema)
    assert got.equals(data)
    assert db.get_arrow("wide", [3, 1]).equals(data.take([0, 2]))
    assert pa.Table.from_batches(list(db.to_batches("wide"))).equals(data)
    records = records_of(data)
    assert list(db.scan("wide")) == records
    found = db.get_records("wide", [2])
    assert found == {2: records[1]}
    assert list(found[2]) == list(records[1])  # the schema's order


def test_a_projection_of_a_wide_table(lake: tuple[merkle.Database, pa.Table]) -> None:
    db, data = lake
    fields = ["f0002", f"f{WIDTH - 1:04d}", "f1501"]
    want = data.select([n for n in data.column_names if n in {"id", *fields}])
    assert db.to_arrow("wide", fields=fields).equals(want)
    assert pa.Table.from_batches(list(db.to_batches("wide", fields=fields))).equals(want)
    assert list(db.scan("wide", fields=fields)) == records_of(want)
    assert db.get_records("wide", [1, 3], fields=fields) == {
        r["id"]: r for r in records_of(want.take([0, 2]))
    }


def test_a_schema_change_on_a_wide_table() -> None:
    data = wide([1, 2, 3], WIDTH)
    with merkle.connect("memory://") as conn:
        db = conn.create_db("s").create_table("wide", key="id").write("wide", data).commit()
        db = db.alter_schema("wide", add={"zz_new": pa.int64()})
        db = db.write("wide", [{"id": 4, "zz_new": 7, "f0001": "x"}])
        nulls = {n: None for n in data.column_names}
        want = pa.Table.from_pylist(
            [
                *(r | {"zz_new": None} for r in data.to_pylist()),
                nulls | {"id": 4, "zz_new": 7, "f0001": "x"},
            ],
            schema=data.schema.append(pa.field("zz_new", pa.int64())),
        )
        for version in (db, db.commit()):  # rows pending in the writer, then committed
            assert version.to_arrow("wide").equals(want)
            assert list(version.scan("wide")) == records_of(want)
            assert version.get_records("wide", [4, 1], fields=["zz_new"]) == {
                4: {"id": 4, "zz_new": 7},
                1: {"id": 1},
            }
