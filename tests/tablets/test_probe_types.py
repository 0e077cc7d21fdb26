"""Types whose stored values outrun what a reader builds from them.

Dictionary fields: segments store them decoded, so writes that each fit the
index type may together hold more distinct values than it numbers; every
committed version must stay readable (as several chunks, each with its own
dictionary), and one write that Arrow itself could not hold is a SchemaError.

Zoned timestamps: an instant that is a valid Arrow value but falls outside
years 1..9999 once in the field's zone has no Python datetime; records name
the field and the key and point to the Arrow reads, which keep the value.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pyarrow as pa
import pytest
from click.testing import CliRunner
from conftest import Lake

import merkle
from merkle.cli.main import cli
from merkle.errors import SchemaError, UsageError

CAPACITY = {pa.int8(): 128, pa.uint8(): 256, pa.int16(): 32768}


@pytest.fixture
def conn(lake: Lake) -> Iterator[merkle.Connection]:
    with merkle.connect(lake.uri, **lake.options) as opened:
        yield opened


def _dict_table(conn: merkle.Connection, kind: pa.DataType, name: str = "t") -> merkle.Database:
    schema = pa.schema([("k", pa.int64()), ("dic", kind)])
    return conn.create_db("d").create_table(name, key="k", schema=schema).commit()


def _rows(start: int, count: int, prefix: str) -> pa.Table:
    return pa.table(
        {
            "k": pa.array(range(start, start + count), pa.int64()),
            "dic": pa.array([f"{prefix}{i}" for i in range(count)]),
        }
    )


def _assert_fits(column: pa.ChunkedArray, kind: pa.DataType) -> None:
    assert column.type == kind
    capacity = CAPACITY[kind.index_type]
    assert all(len(chunk.dictionary) <= capacity for chunk in column.chunks)


# -- dictionaries ------------------------------------------------------------------------


@pytest.mark.parametrize("index", [pa.int8(), pa.uint8()], ids=str)
def test_dictionary_writes_that_together_overflow_the_index_stay_readable(
    conn: merkle.Connection, index: pa.DataType
) -> None:
    """Before: to_arrow, scan and to_batches raised a raw ArrowInvalid."""
    kind = pa.dictionary(index, pa.string())
    half = CAPACITY[index] * 3 // 4  # each write fits; both together do not
    db = _dict_table(conn, kind)
    db = db.write("t", _rows(0, half, "v")).commit()
    db = db.write("t", _rows(half, half, "w")).commit()
    expected = [f"v{i}" for i in range(half)] + [f"w{i}" for i in range(half)]

    db = conn.open_db("d")
    whole = db.to_arrow("t")
    _assert_fits(whole.column("dic"), kind)
    assert whole.column("k").to_pylist() == list(range(2 * half))
    assert whole.column("dic").to_pylist() == expected
    batches = list(db.to_batches("t"))
    assert sum(b.num_rows for b in batches) == 2 * half
    for batch in batches:
        assert batch.schema.field("dic").type == kind
        assert len(batch.column("dic").dictionary) <= CAPACITY[index]
    assert [r["dic"] for r in db.scan("t")] == expected
    assert db.get_records("t", [0, 2 * half - 1]) == {
        0: {"k": 0, "dic": "v0"},
        2 * half - 1: {"k": 2 * half - 1, "dic": f"w{half - 1}"},
    }


@pytest.mark.parametrize("index", [pa.int8(), pa.uint8(), pa.int16()], ids=str)
def test_one_write_the_index_cannot_number_is_a_schema_error(
    conn: merkle.Connection, index: pa.DataType
) -> None:
    """Before: a raw ArrowInvalid. Records and a plain Arrow column alike; nothing stored."""
    kind = pa.dictionary(index, pa.string())
    capacity = CAPACITY[index]
    db = _dict_table(conn, kind)
    records = [{"k": i, "dic": f"x{i}"} for i in range(capacity + 1)]
    for data in (records, _rows(0, capacity + 1, "x")):
        with pytest.raises(SchemaError) as caught:
            db.write("t", data)
        message = str(caught.value)
        assert "'dic'" in message
        assert str(index) in message
        assert f"{capacity + 1} distinct values" in message
        assert "wider index" in message
    assert db.to_arrow("t").num_rows == 0
    # exactly as many values as the index numbers is fine
    db = db.write("t", records[:capacity]).commit()
    assert db.to_arrow("t").column("dic").to_pylist() == [f"x{i}" for i in range(capacity)]


def test_arrow_chunks_each_with_a_dictionary_that_fits_are_one_write(
    conn: merkle.Connection,
) -> None:
    """Arrow built it (one dictionary per chunk): the write is taken, and read back whole."""
    kind = pa.dictionary(pa.int8(), pa.string())
    db = _dict_table(conn, kind)
    chunks = [pa.array([f"{p}{i}" for i in range(100)]).dictionary_encode() for p in "ab"]
    column = pa.chunked_array([c.cast(kind) for c in chunks], kind)
    data = pa.table({"k": pa.array(range(200), pa.int64()), "dic": column})
    db.write("t", data).commit()
    whole = conn.open_db("d").to_arrow("t")  # as stored: one segment, one chunk
    _assert_fits(whole.column("dic"), kind)
    assert whole.column("dic").to_pylist() == column.to_pylist()


def test_an_overflowing_dictionary_field_can_be_widened(conn: merkle.Connection) -> None:
    """Before: alter_schema refused every change of a dictionary field: no way out."""
    kind = pa.dictionary(pa.int8(), pa.string())
    db = _dict_table(conn, kind)
    db = db.write("t", _rows(0, 100, "v")).commit()
    db = db.write("t", _rows(100, 100, "w")).commit()
    expected = db.to_arrow("t").column("dic").to_pylist()
    with pytest.raises(SchemaError, match="cannot widen field 'dic'"):
        db.alter_schema("t", widen={"dic": pa.dictionary(pa.int8(), pa.int64())})
    wider = pa.dictionary(pa.int16(), pa.large_string())
    widened = db.alter_schema("t", widen={"dic": wider}).commit()
    column = widened.to_arrow("t").column("dic")
    assert column.type == wider
    assert column.num_chunks == 1
    assert column.to_pylist() == expected
    with pytest.raises(SchemaError, match="cannot widen field 'dic'"):
        widened.alter_schema("t", widen={"dic": kind})  # back to a narrower index
    plain = widened.alter_schema("t", widen={"dic": pa.large_string()}).commit()
    assert plain.to_arrow("t").column("dic").type == pa.large_string()
    assert plain.to_arrow("t").column("dic").to_pylist() == expected


def test_a_nested_dictionary_that_overflows_stays_readable(conn: merkle.Connection) -> None:
    kind = pa.list_(pa.dictionary(pa.int8(), pa.string()))
    db = _dict_table(conn, kind)
    for start in (0, 50):
        rows = [{"k": start + i, "dic": [f"{start}-{i}-a", f"{start}-{i}-b"]} for i in range(50)]
        db = db.write("t", rows).commit()  # 100 distinct values each
    column = db.to_arrow("t").column("dic")
    assert column.type == kind
    assert column.to_pylist() == [
        [f"{k // 50 * 50}-{k % 50}-{s}" for s in "ab"] for k in range(100)
    ]
    assert len(list(db.scan("t"))) == 100
    with pytest.raises(SchemaError, match=r"'dic'.*int8"):
        db.write("t", [{"k": 500, "dic": [f"y{i}" for i in range(200)]}])


# -- zoned timestamps without a Python datetime -------------------------------------------

_UTC = datetime.UTC
_FIRST = datetime.datetime(1, 1, 1, tzinfo=_UTC)
_LAST_HOUR = datetime.datetime(9999, 12, 31, 23, tzinfo=_UTC)


@pytest.mark.parametrize(
    ("tz", "instant"),
    [
        ("America/New_York", _FIRST),  # year 0 in New York
        ("-01:00", _FIRST),
        ("Asia/Tokyo", _LAST_HOUR),  # year 10000 in Tokyo
        ("+05:30", _LAST_HOUR),
    ],
)
def test_a_zoned_time_with_no_python_datetime_names_field_and_key(
    conn: merkle.Connection, tz: str, instant: datetime.datetime
) -> None:
    """Before: scan and get_records raised a raw OverflowError from pyarrow."""
    kind = pa.timestamp("us", tz=tz)
    good = datetime.datetime(2020, 1, 1, tzinfo=_UTC)
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "ts": pa.array([good, instant], kind)})
    db = conn.create_db("d").create_table("t", key="id").write("t", data).commit()
    for read in (lambda: list(db.scan("t")), lambda: db.get_records("t", [2])):
        with pytest.raises(UsageError) as caught:
            read()
        message = str(caught.value)
        assert "field 'ts'" in message
        assert "key 2" in message
        assert "to_arrow" in message
    column = db.to_arrow("t").column("ts")  # Arrow keeps them
    assert column.type == kind
    assert (
        column.cast(pa.int64()).to_pylist()
        == pa.array([good, instant], kind).cast(pa.int64()).to_pylist()
    )
    assert db.get_records("t", [1])[1]["ts"] == good  # other records read as before


@pytest.mark.parametrize("kind", [pa.timestamp("us"), pa.timestamp("us", tz="UTC")], ids=str)
def test_a_time_after_year_9999_names_field_and_key(
    conn: merkle.Connection, kind: pa.DataType
) -> None:
    late = 253402300800 * 10**6  # 10000-01-01T00:00, a valid Arrow timestamp
    data = pa.table(
        {"id": pa.array([7], pa.int64()), "ts": pa.array([late], pa.int64()).cast(kind)}
    )
    db = conn.create_db("d").create_table("t", key="id").write("t", data).commit()
    with pytest.raises(UsageError, match=r"field 'ts'.*key 7"):
        db.get_records("t", [7])


def test_the_cli_gives_one_error_line(lake: Lake, conn: merkle.Connection) -> None:
    if lake.options:
        pytest.skip("the CLI opens a lake by its URI alone: S3 here needs endpoint options")
    kind = pa.timestamp("us", tz="America/New_York")
    data = pa.table({"id": pa.array([2], pa.int64()), "ts": pa.array([_FIRST], kind)})
    conn.create_db("d").create_table("t", key="id").write("t", data).commit()
    env = {"MERKLE_LAKE": None, "MERKLE_AUTHOR": None}
    for args in (["scan", "d", "t", "-f", "jsonl"], ["get", "d", "t", "2"]):
        result = CliRunner().invoke(cli, ["--lake", lake.uri, *args], env=env)
        assert result.exit_code == 1, result.output
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("error: "), result.stderr
        assert "field 'ts'" in lines[0]
        assert "to_arrow" in lines[0]


def test_a_nested_field_that_cannot_hold_a_value_advises_what_works(
    conn: merkle.Connection,
) -> None:
    """The advice was to widen the field, which alter_schema refuses for a struct."""
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("o", pa.struct([("a", pa.int64())]))])
    db = conn.create_db("nested").create_table("t", key="k", schema=schema).commit()
    with pytest.raises(SchemaError) as raised:
        db.write("t", [{"k": 1, "o": {"a": 1, "b": "x"}}]).commit()
    message = str(raised.value)
    assert "widen" not in message
    assert "free=['o']" in message
    db.alter_schema("t", free=["o"]).write("t", [{"k": 1, "o": {"a": 1, "b": "x"}}]).commit()
    assert conn.open_db("nested").get_records("t", [1])[1]["o"] == {"a": 1, "b": "x"}


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (pa.struct([("a", pa.int64())]), {"a": 1, "b": "x"}),
        (pa.list_(pa.struct([("a", pa.int64())])), [{"a": 1}, {"a": 2, "b": "x"}]),
        (pa.struct([("s", pa.struct([("a", pa.int64())]))]), {"s": {"a": 1, "b": 2}}),
        (pa.list_(pa.float32()), [0.5, 0.1]),
    ],
    ids=["struct", "list-of-struct", "struct-in-struct", "list-of-float32"],
)
def test_a_record_member_a_nested_field_would_drop_is_refused(
    conn: merkle.Connection, kind: pa.DataType, value: object
) -> None:
    """pyarrow drops a dict member a struct type does not name, without a word: a record
    write stored {'a': 1} for {'a': 1, 'b': 'x'} (the same data as Arrow was refused)."""
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("o", kind)])
    db = conn.create_db("nested").create_table("t", key="k", schema=schema).commit()
    with pytest.raises(SchemaError, match="field 'o'"):
        db.write("t", [{"k": 1, "o": value}]).commit()
    assert conn.open_db("nested").to_arrow("t").num_rows == 0


def test_a_dictionary_of_string_views_is_written_and_read(conn: merkle.Connection) -> None:
    """Polars exports a Categorical as dictionary<string_view>, for which Arrow has no cast
    kernel: the write raised a raw ArrowNotImplementedError."""
    values = pa.array(["x", "y"], pa.string_view())
    column = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.uint32()), values)
    rows = pa.table({"k": pa.array([1, 2, 3], pa.int64()), "c": column})
    db = conn.create_db("views").create_table("t", key="k").write("t", rows).commit()
    read = db.to_arrow("t")
    assert read.column("c").type == pa.dictionary(pa.uint32(), pa.string())
    assert read.column("c").to_pylist() == ["x", "y", "x"]
    assert [r["c"] for r in conn.open_db("views").scan("t")] == ["x", "y", "x"]
