"""A column written back as it was read, and a timestamp column into a date field.

``to_pandas`` then ``write`` of a table with a ``json_``, ``bool8``,
``fixed_shape_tensor``, ``list<bool8>`` or ``list_view`` field was a
SchemaError: pandas holds a top-level extension type's values as ``str``,
numbers or numpy arrays, which inference types as string, int or list (only
maps and extension types inside another type were typed by the field), a
``bool8`` was read as its ``int8`` storage numbers (which a write refuses for
it), and no list column fitted a ``list_view`` field (nor a list view a list
field), though a string column fits a ``string_view`` one. A frame read now
writes back with no new version and the values read; a changed one stores the
change exactly.

A timestamp column into a ``date32``/``date64`` field was refused whatever its
values, while records (``datetime(2024, 5, 1)``) and ``merkle load`` took
midnights: now a column of midnights is stored (a zoned one at its wall time,
as an aware datetime is), and a value with a time of day is refused naming it
and its record, as a record's is.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError

U = uuid.UUID(int=7).bytes


class _Cents(pa.ExtensionType):
    """A user's extension type (int64 storage), registered for the tests that use it."""

    def __init__(self) -> None:
        super().__init__(pa.int64(), "merkle.test.writeback_cents")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> _Cents:
        return cls()

    def __hash__(self) -> int:  # pyarrow leaves it unhashable; merkle caches by type
        return hash(self.extension_name)


@pytest.fixture
def conn(tmp_path: Path) -> Any:
    return merkle.connect(str(tmp_path / "lake"))


@pytest.fixture
def cents() -> Iterator[None]:
    pa.register_extension_type(_Cents())
    try:
        yield
    finally:
        pa.unregister_extension_type("merkle.test.writeback_cents")


def _bool8(values: list[int | None]) -> pa.Array:
    return pa.array(values, pa.int8()).cast(pa.bool8())


def _tensor(rows: list[list[int] | None]) -> pa.Array:
    kind = pa.fixed_shape_tensor(pa.int32(), [2])
    return pa.ExtensionArray.from_storage(kind, pa.array(rows, pa.list_(pa.int32(), 2)))


def _columns() -> dict[str, pa.Array]:
    """A column of each type whose ``to_pandas`` frame could not be written back."""
    return {
        "json": pa.array(['{"a": 1}', None], pa.json_()),
        "json_full": pa.array(['{"a": 1}', "[2]"], pa.json_()),
        "bool8": _bool8([1, None]),
        "bool8_full": _bool8([1, 0]),
        "tensor": pa.FixedShapeTensorArray.from_numpy_ndarray(
            np.arange(8, dtype=np.float32).reshape(2, 2, 2)
        ),
        "tensor_null": _tensor([[1, 2], None]),
        "list_bool8": pa.ListArray.from_arrays(pa.array([0, 2, 2], pa.int32()), _bool8([1, None])),
        "list_bool8_full": pa.ListArray.from_arrays(
            pa.array([0, 2, 3], pa.int32()), _bool8([1, 0, 1])
        ),
        "struct_bool8": pa.StructArray.from_arrays([_bool8([1, 0])], ["x"]),
        "list_view": pa.array([[1, 2], None], pa.list_view(pa.int8())),
        "list_view_null_item": pa.array([[1, None], [3]], pa.list_view(pa.int8())),
        "large_list_view": pa.array([["a"], []], pa.large_list_view(pa.string())),
        "list_of_list_view": pa.array([[[1]], None], pa.list_(pa.list_view(pa.int32()))),
        "struct_list_view": pa.array(
            [{"a": [1]}, None], pa.struct([("a", pa.list_view(pa.int32()))])
        ),
        "uuid": pa.array([U, None], pa.binary(16)).cast(pa.uuid()),
        "list_uuid": pa.array([[U], None], pa.list_(pa.binary(16))).cast(pa.list_(pa.uuid())),
    }


COLUMNS = _columns()


def _table(conn: Any, column: pa.Array, name: str = "c") -> Any:
    data = pa.table({"id": list(range(1, len(column) + 1)), name: column})
    return conn.create_db("d").create_table("t", key="id").write("t", data).commit()


@pytest.mark.parametrize("kind", list(COLUMNS))
def test_to_pandas_writes_back_unchanged(conn: Any, kind: str) -> None:
    db = _table(conn, COLUMNS[kind])
    before = db.to_arrow("t")
    again = db.write("t", db.to_pandas("t")).commit()
    assert again.version == db.version  # nothing new to commit
    after = again.to_arrow("t")
    assert after.schema == before.schema
    assert after.equals(before)


def test_user_extension_writes_back_unchanged(conn: Any, cents: None) -> None:
    column = pa.ExtensionArray.from_storage(_Cents(), pa.array([150, 7], pa.int64()))
    db = _table(conn, column)
    frame = db.to_pandas("t")
    again = db.write("t", frame).commit()
    assert again.version == db.version
    assert again.to_arrow("t").equals(db.to_arrow("t"))


def test_to_pandas_reads_bool8_as_bools(conn: Any) -> None:
    db = _table(conn, _bool8([1, None]), "b")
    db = db.write("t", pa.table({"id": [3], "b": _bool8([0])})).commit()
    frame = db.to_pandas("t")
    assert frame["b"].tolist() == [True, None, False]
    full = conn.create_db("e").create_table("t", key="id")
    full = full.write("t", pa.table({"id": [1, 2], "b": _bool8([1, 0])})).commit()
    assert full.to_pandas("t")["b"].dtype == bool
    nested = conn.create_db("f").create_table("t", key="id")
    lists = pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()), _bool8([1, 0]))
    nested = nested.write("t", pa.table({"id": [1], "l": lists})).commit()
    assert [list(v) for v in nested.to_pandas("t")["l"]] == [[True, False]]


def test_a_changed_frame_stores_the_change_exactly(conn: Any) -> None:
    columns = {
        "j": pa.array(['{"a": 1}', None], pa.json_()),
        "b8": _bool8([1, None]),
        "lv": pa.array([[1, 2], None], pa.list_view(pa.int8())),
        "ten": _tensor([[1, 2], [3, 4]]),
    }
    db = conn.create_db("d").create_table("t", key="id")
    db = db.write("t", pa.table({"id": [1, 2], **columns})).commit()
    frame = db.to_pandas("t")
    frame.at[1, "j"] = '{"b": 2}'
    frame.at[0, "b8"] = False
    frame["lv"] = [frame["lv"][0], np.array([5], dtype=np.int8)]  # .at would unpack it
    frame["ten"] = [np.array([9, 8], dtype=np.int32), frame["ten"][1]]
    changed = db.write("t", frame).commit()
    assert changed.version != db.version
    got = changed.to_arrow("t")
    assert got.schema == db.to_arrow("t").schema
    assert got.column("j").to_pylist() == ['{"a": 1}', '{"b": 2}']
    assert got.column("b8").to_pylist() == [False, None]
    assert got.column("lv").to_pylist() == [[1, 2], [5]]
    assert got.column("ten").to_pylist() == [[9, 8], [3, 4]]


def test_storage_numbers_into_bool8_stay_refused(conn: Any) -> None:
    db = conn.create_db("d").create_table(
        "t", key="id", schema=pa.schema([("id", pa.int64()), ("b", pa.bool8())])
    )
    db = db.commit()
    with pytest.raises(SchemaError, match=r"field 'b' is extension<arrow\.bool8>"):
        db.write("t", pd.DataFrame({"id": [1], "b": pd.array([1], dtype="int8")}))


def _declared(conn: Any, kind: pa.DataType, name: str = "d") -> Any:
    schema = pa.schema([("id", pa.int64()), ("c", kind)])
    return conn.create_db(name).create_table("t", key="id", schema=schema).commit()


@pytest.mark.parametrize(
    ("kind", "column"),
    [
        (pa.list_view(pa.int32()), pa.array([[1, 2], None], pa.list_(pa.int64()))),
        (pa.large_list_view(pa.int8()), pa.array([[1], []], pa.large_list(pa.int8()))),
        (pa.list_(pa.int8()), pa.array([[1, 2], None], pa.list_view(pa.int64()))),
        (pa.list_view(pa.int8()), pa.array([[1], [2]], pa.large_list_view(pa.int8()))),
    ],
)
def test_list_and_list_view_columns_fit_each_other(
    conn: Any, kind: pa.DataType, column: pa.Array
) -> None:
    db = _declared(conn, kind).write("t", pa.table({"id": [1, 2], "c": column})).commit()
    got = db.to_arrow("t").column("c")
    assert got.type == kind
    assert got.to_pylist() == column.to_pylist()


def test_a_list_view_value_that_does_not_fit_is_refused(conn: Any) -> None:
    db = _declared(conn, pa.list_view(pa.int8()))
    column = pa.array([[1], [2, 300]], pa.list_(pa.int64()))
    with pytest.raises(SchemaError, match=r"field 'c' is list_view<item: int8>.*key 2"):
        db.write("t", pa.table({"id": [1, 2], "c": column}))
    back = _declared(conn, pa.list_(pa.int8()), "e")
    with pytest.raises(SchemaError, match=r"field 'c' is list<item: int8>.*300"):
        back.write("t", pa.table({"id": [1], "c": pa.array([[300]], pa.list_view(pa.int64()))}))


MIDNIGHT = dt.datetime(2024, 5, 1)


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("target", [pa.date32(), pa.date64()])
def test_midnight_timestamp_column_into_a_date_field(
    conn: Any, unit: str, target: pa.DataType
) -> None:
    db = _declared(conn, target)
    column = pa.array([MIDNIGHT, None, dt.datetime(1960, 2, 29)], pa.timestamp(unit))
    db = db.write("t", pa.table({"id": [1, 2, 3], "c": column})).commit()
    got = db.to_arrow("t").column("c")
    assert got.type == target
    assert got.to_pylist() == [dt.date(2024, 5, 1), None, dt.date(1960, 2, 29)]


def test_timestamp_column_as_records_give_it(conn: Any) -> None:
    by_records = _declared(conn, pa.date32(), "r").write("t", [{"id": 1, "c": MIDNIGHT}]).commit()
    by_arrow = _declared(conn, pa.date32(), "a")
    column = pa.array([MIDNIGHT], pa.timestamp("us"))
    by_arrow = by_arrow.write("t", pa.table({"id": [1], "c": column})).commit()
    by_pandas = _declared(conn, pa.date32(), "p")
    frame = pd.DataFrame({"id": [1], "c": pd.to_datetime(["2024-05-01"])})  # datetime64[ns]
    by_pandas = by_pandas.write("t", frame).commit()
    want = by_records.to_arrow("t")
    assert by_arrow.to_arrow("t").equals(want)
    assert by_pandas.to_arrow("t").equals(want)


def test_zoned_timestamp_column_counts_its_wall_time(conn: Any) -> None:
    db = _declared(conn, pa.date32())
    paris = pa.timestamp("us", "Europe/Paris")
    local_midnight = pa.array([dt.datetime(2024, 4, 30, 22)], paris)  # UTC instant
    db = db.write("t", pa.table({"id": [1], "c": local_midnight})).commit()
    assert db.to_arrow("t").column("c").to_pylist() == [dt.date(2024, 5, 1)]
    utc_midnight = pa.array([dt.datetime(2024, 5, 1)], paris)  # 02:00 in Paris
    with pytest.raises(SchemaError, match="it has a time of day, which a date drops"):
        db.write("t", pa.table({"id": [2], "c": utc_midnight}))


@pytest.mark.parametrize(
    ("value", "unit"),
    [
        (dt.datetime(2024, 5, 2, 0, 1), "us"),
        (dt.datetime(1960, 5, 1, 0, 0, 1), "s"),
        (1714521600000000001, "ns"),  # one nanosecond past a midnight
    ],
)
def test_a_time_of_day_is_refused_naming_the_value(conn: Any, value: Any, unit: str) -> None:
    db = _declared(conn, pa.date32())
    column = pa.array([MIDNIGHT, None, value], pa.timestamp(unit))
    with pytest.raises(SchemaError) as caught:
        db.write("t", pa.table({"id": [1, 2, 3], "c": column}))
    text = str(caught.value)
    assert "field 'c' is date32[day]" in text
    assert "of the record with key 3" in text
    assert "it has a time of day, which a date drops" in text
    assert db.to_arrow("t").num_rows == 0  # nothing written


def test_a_time_of_day_in_a_frame_is_refused(conn: Any) -> None:
    db = _declared(conn, pa.date32())
    frame = pd.DataFrame(
        {"id": [1, 2], "c": pd.to_datetime(["2024-05-01", "2024-05-01 10:00"], format="ISO8601")}
    )
    with pytest.raises(SchemaError, match=r"Timestamp\('2024-05-01 10:00:00'\).*key 2"):
        db.write("t", frame)


def test_a_midnight_past_a_dates_range_is_refused(conn: Any) -> None:
    db = _declared(conn, pa.date32())
    column = pa.array([86_400 * 2**40], pa.timestamp("s"))  # a midnight, 2**40 days on
    with pytest.raises(SchemaError, match=r"its day is outside the range of date32\[day\]"):
        db.write("t", pa.table({"id": [1], "c": column}))
