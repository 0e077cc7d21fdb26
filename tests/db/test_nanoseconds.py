"""Nanosecond times: kept exactly, and never rounded or half-read as records.

Python's datetime, time and timedelta stop at microseconds. pyarrow turns
nanoseconds into pandas objects when pandas is importable, raises a
ValueError when it is not (which reads reported as a damaged segment), and
cuts a time64 to whole microseconds without a word. Records now hold
Python's own types for every value that fits them, whatever is installed,
and a value with nanoseconds is a UsageError naming the field, while Arrow
reads keep every nanosecond.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pyarrow as pa
import pytest

import merkle
from merkle.errors import UsageError

UTC = datetime.UTC


@pytest.fixture
def conn() -> Iterator[merkle.Connection]:
    with merkle.connect("memory://") as c:
        yield c


def _table(values: dict[str, pa.Array]) -> pa.Table:
    return pa.table({"k": pa.array([1, 2], pa.int64()), **values})


WHOLE = {
    "ts": pa.array([1_000, None], pa.timestamp("ns")),
    "utc": pa.array([2_000_000, 3_000], pa.timestamp("ns", "UTC")),
    "tokyo": pa.array([5_000, 6_000], pa.timestamp("ns", "Asia/Tokyo")),
    "t": pa.array([7_000, 8_000], pa.time64("ns")),
    "d": pa.array([-9_000, 10_000], pa.duration("ns")),
}


def test_nanosecond_fields_of_whole_microseconds_read_as_python_types(
    conn: merkle.Connection,
) -> None:
    db = conn.create_db("d").create_table("t", key="k").write("t", _table(WHOLE)).commit()
    first, second = db.scan("t")
    assert first == {
        "k": 1,
        "ts": datetime.datetime(1970, 1, 1, 0, 0, 0, 1),
        "utc": datetime.datetime(1970, 1, 1, 0, 0, 0, 2000, tzinfo=UTC),
        "tokyo": datetime.datetime(1970, 1, 1, 0, 0, 0, 5, tzinfo=UTC),
        "t": datetime.time(0, 0, 0, 7),
        "d": datetime.timedelta(microseconds=-9),
    }
    assert "ts" not in second
    for record in (first, db.get_records("t", [1])[1]):
        assert all(
            type(v) in (int, datetime.datetime, datetime.time, datetime.timedelta)
            for v in record.values()
        )
    assert db.to_arrow("t").equals(_table(WHOLE))


@pytest.mark.parametrize("name", ["ts", "utc", "tokyo", "t", "d"])
def test_a_nanosecond_value_is_kept_in_arrow_and_refused_as_a_record(
    conn: merkle.Connection, name: str
) -> None:
    exact = dict(WHOLE)
    kind = exact[name].type
    exact[name] = pa.array([1_000, 1_234_567], kind)
    db = conn.create_db("d").create_table("t", key="k").write("t", _table(exact)).commit()
    assert db.to_arrow("t").column(name).to_pylist()[0] is not None
    assert db.to_arrow("t").equals(_table(exact))
    assert db.get_arrow("t", [2]).column(name).cast(pa.int64()).to_pylist() == [1_234_567]
    for read in (lambda: list(db.scan("t")), lambda: db.get_records("t", [2])):
        with pytest.raises(UsageError, match=rf"field '{name}' .* to the nanosecond .*1234567 ns"):
            read()
    # A projection without the field reads as records.
    assert list(db.scan("t", fields=["k"])) == [{"k": 1}, {"k": 2}]
