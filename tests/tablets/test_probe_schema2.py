"""Tests of dataset() filters, reverse(tuple) prefix bounds and schema changes the probes broke.

What the adversarial probes found (each test below would have caught one):

- ``db.dataset(t)``: any filter on a timestamp key that is naive, not UTC or not in
  microseconds raised ArrowInvalid / ArrowNotImplementedError (pyarrow, DuckDB, Polars):
  a fragment's key range was compared as a UTC microsecond timestamp;
- ``db.dataset(t)`` of a dictionary field whose tablet (or tablets) hold several
  dictionaries raised "Dictionary replacement detected when writing IPC file format";
- ``reverse(tuple(int,str))`` keys refused prefix bounds (``from_pk=(1,)``);
- ``alter_schema(widen={key: pa.float64()})`` on an int key was accepted, leaving a
  double schema over ``int``-encoded keys: later writes failed;
- ``alter_schema(add=...)`` before the first write made a schema without the key field
  (no key column in reads, the key written last);
- ``alter_schema(add=[field with merkle.encoding metadata])`` was accepted; every later
  write of the field failed with a raw ArrowInvalid;
- an Arrow column of type null in a write was silently left out of the schema; a null
  field could not be widened, and a write of values into it was refused;
- ``alter_schema(free=[...])`` moved a zoned timestamp's values to UTC, and named a
  value it cannot keep by row number instead of key.
"""

from __future__ import annotations

import datetime

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import merkle
from merkle.errors import SchemaError

# -- dataset(): key ranges in the key field's Arrow type ----------------------------------


def _keyed(kind: pa.DataType, values: pa.Array, key: str | list[str] = "k") -> merkle.Database:
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("t", key=key, tablet_size_limit=4)
    columns = {"k": values.cast(kind), "v": pa.array(range(len(values)), pa.int64())}
    if not isinstance(key, str):
        columns["j"] = pa.array([i % 2 for i in range(len(values))], pa.int64())
    db = db.write("t", pa.table(columns)).commit()
    return db.compact("t").commit()


TIMESTAMPS = [
    pa.timestamp("us"),
    pa.timestamp("s", "Asia/Tokyo"),
    pa.timestamp("ns"),
    pa.timestamp("ms", "America/New_York"),
]


@pytest.mark.parametrize("kind", TIMESTAMPS, ids=str)
def test_a_dataset_filters_on_a_timestamp_key_of_any_unit_and_zone(kind: pa.DataType) -> None:
    step = 1000 if kind.unit == "ns" else 1  # keys are whole microseconds
    db = _keyed(kind, pa.array(range(0, 40 * step, step), pa.int64()))
    dataset = db.dataset("t")
    every = db.to_arrow("t")
    x = pa.scalar(5 * step, pa.int64()).cast(kind)
    for expression in [pc.field("k") == x, pc.field("k") >= x, pc.field("k") < x]:
        assert dataset.to_table(filter=expression).equals(every.filter(expression))
    assert len(list(dataset.get_fragments(filter=pc.field("k") == x))) == 1
    assert db.describe_table("t")["tablets"] > 1


def test_a_dataset_filters_on_a_composite_key_led_by_a_naive_timestamp() -> None:
    db = _keyed(pa.timestamp("us"), pa.array([i // 2 for i in range(40)]), key=["k", "j"])
    dataset = db.dataset("t")
    x = pa.scalar(7, pa.int64()).cast(pa.timestamp("us"))
    got = dataset.to_table(filter=pc.field("k") == x)
    assert got.equals(db.to_arrow("t").filter(pc.field("k") == x))
    assert got.num_rows == 2
    assert len(list(dataset.get_fragments(filter=pc.field("k") == x))) < len(
        list(dataset.get_fragments())
    )


@pytest.mark.parametrize(
    "kind",
    [pa.int8(), pa.uint16(), pa.uint64(), pa.float32(), pa.large_string(), pa.large_binary()],
    ids=str,
)
def test_a_dataset_filters_on_keys_of_narrow_and_large_types(kind: pa.DataType) -> None:
    if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        values = pa.array([f"{i:03}" for i in range(40)])
        x = pa.scalar("017").cast(kind)
    else:
        values = pa.array(range(40), pa.int64())
        x = pa.scalar(17).cast(kind)
    db = _keyed(kind, values)
    dataset = db.dataset("t")
    expression = pc.field("k") >= x
    assert dataset.to_table(filter=expression).equals(db.to_arrow("t").filter(expression))
    assert len(list(dataset.get_fragments(filter=pc.field("k") == x))) == 1


def test_duckdb_and_polars_filter_a_dataset_on_a_pandas_timestamp_key() -> None:
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    db = _keyed(pa.timestamp("ns"), pa.array(range(40), pa.int64()) * 3_600_000_000_000)
    data = db.dataset("t")
    assert duckdb.sql(
        "select count(*) from data where k >= TIMESTAMP '1970-01-01 10:00:00'"
    ).fetchall() == [(30,)]
    frame = pl.scan_pyarrow_dataset(data).filter(pl.col("k") >= datetime.datetime(1970, 1, 1, 10))
    assert frame.collect().height == 30


# -- dataset(): one dictionary per fragment ---------------------------------------------

DICT = pa.dictionary(pa.int8(), pa.string())


def _with_tags(tags_per_write: list[list[str]], tablet_size: int = 16) -> merkle.Database:
    schema = pa.schema([("k", pa.int64()), ("tag", DICT)])
    db = merkle.connect("memory://").create_db("d")
    db = db.create_table("t", key="k", schema=schema, tablet_size_limit=tablet_size)
    start = 0
    for tags in tags_per_write:
        tag = pa.array(tags).dictionary_encode().cast(DICT)
        rows = pa.table({"k": range(start, start + len(tags)), "tag": tag}, schema=schema)
        db = db.write("t", rows).commit()
        start += len(tags)
    return db


def test_a_dataset_reads_a_dictionary_field_whose_tablets_hold_several_dictionaries() -> None:
    db = _with_tags([[f"t{i % 5}" for i in range(100)]]).compact("t").commit()
    assert db.describe_table("t")["tablets"] > 1
    got = db.dataset("t").to_table()
    assert got.schema == db.to_arrow("t").schema
    assert got.column("tag").to_pylist() == db.to_arrow("t").column("tag").to_pylist()


def test_a_dataset_reads_one_tablet_whose_pages_hold_several_dictionaries() -> None:
    db = _with_tags([[f"t{i // 1000}" for i in range(30_000)]], tablet_size=100_000)
    db = db.compact("t").commit()
    assert db.describe_table("t")["tablets"] == 1
    got = db.dataset("t").to_table()
    assert got.schema.field("tag").type == DICT
    assert got.column("tag").to_pylist() == [f"t{i // 1000}" for i in range(30_000)]


def test_a_dataset_of_more_values_than_a_fragment_dictionary_numbers_says_to_widen() -> None:
    db = _with_tags([[f"w{w}v{i}" for i in range(100)] for w in range(3)], tablet_size=1000)
    db = db.compact("t").commit()
    with pytest.raises(SchemaError, match=r"'tag'.*int8.*widen"):
        db.dataset("t").to_table()
    widened = db.alter_schema("t", widen={"tag": pa.dictionary(pa.int16(), pa.string())})
    assert widened.dataset("t").to_table().num_rows == 300


# -- prefix bounds of reverse(tuple(...)) -------------------------------------------------


@pytest.mark.parametrize("spec", ["reverse(tuple(int,str))", "reverse(reverse(tuple(int,str)))"])
def test_reverse_tuple_keys_take_prefix_bounds(spec: str) -> None:
    db = merkle.connect("memory://").create_db("d")
    db = db.create_table("t", key=["a", "b"], key_codec=spec)
    db = db.write("t", [{"a": a, "b": b} for a in range(4) for b in "xy"]).commit()
    order = [(r["a"], r["b"]) for r in db.scan("t")]

    def run(lo: object, hi: object, **kw: object) -> list[tuple[int, str]]:
        return [(r["a"], r["b"]) for r in db.scan("t", from_pk=lo, to_pk=hi, **kw)]

    expected = [k for k in order if k[0] == 1]
    assert len(expected) == 2
    assert run((1,), (1,)) == expected
    assert run((1,), (1,), reverse=True) == expected[::-1]
    first, last = order.index(expected[0]), order.index(expected[-1])
    assert run((1,), None) == order[first:]
    assert run(None, (1,)) == order[: last + 1]
    lo, hi = order[0][0], order[-1][0]
    assert run((lo,), (hi,)) == order
    table = db.to_arrow("t", from_pk=(1,), to_pk=(1,))
    assert (
        list(zip(table.column("a").to_pylist(), table.column("b").to_pylist(), strict=True))
        == expected
    )


# -- key fields widen only within their key codec --------------------------------------


@pytest.mark.parametrize("key", [["k"], ["k", "j"]], ids=["single", "composite"])
def test_a_key_field_cannot_widen_to_another_key_codec(key: list[str]) -> None:
    schema = pa.schema([("k", pa.int32()), ("j", pa.int32()), ("v", pa.int32())])
    db = merkle.connect("memory://").create_db("d")
    db = db.create_table("t", key=key, schema=schema)
    db = db.write("t", [{"k": 1, "j": 1, "v": 1}]).commit()
    with pytest.raises(SchemaError, match=r"key field 'k'.*int.*float"):
        db.alter_schema("t", widen={"k": pa.float64()})
    wider = db.alter_schema("t", widen={"k": pa.int64()}).commit()
    wider = wider.write("t", [{"k": 2**40, "j": 2, "v": 2}]).commit()
    assert [r["k"] for r in wider.scan("t")] == [1, 2**40]
    assert wider.to_arrow("t").schema.field("k").type == pa.int64()


def test_a_string_key_widens_to_large_string() -> None:
    schema = pa.schema([("k", pa.string()), ("v", pa.int32())])
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k", schema=schema)
    db = db.write("t", [{"k": "a", "v": 1}]).commit()
    db = db.alter_schema("t", widen={"k": pa.large_string()}).commit()
    db = db.write("t", pa.table({"k": pa.array(["b"], pa.large_string()), "v": [2]})).commit()
    assert [r["k"] for r in db.scan("t")] == ["a", "b"]


# -- add before the first write --------------------------------------------------------


def test_add_before_the_first_write_keeps_the_key_first() -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="id")
    db = db.alter_schema("t", add={"x": pa.int64()})
    empty = db.to_arrow("t")
    assert empty.column_names == ["id", "x"]
    assert empty.schema.field("id").type == pa.null()
    db = db.write("t", [{"id": 1, "x": 2}]).commit()
    assert db.describe_table("t")["schema"].names == ["id", "x"]
    assert db.to_arrow("t").schema.field("id").type == pa.int64()


def test_add_before_the_first_write_of_a_composite_key() -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key=["a", "b"])
    db = db.alter_schema("t", add={"x": pa.int64()})
    assert db.to_arrow("t").column_names == ["a", "b", "x"]
    db = db.write("t", pa.table({"x": [3], "b": ["q"], "a": [1]})).commit()
    assert db.describe_table("t")["schema"].names == ["a", "b", "x"]
    assert db.get_records("t", [(1, "q")]) == {(1, "q"): {"a": 1, "b": "q", "x": 3}}


def test_add_of_a_key_field_before_the_first_write_declares_its_type() -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="id")
    db = db.alter_schema("t", add={"x": pa.int64(), "id": pa.int16()})
    assert db.describe_table("t")["schema"].names == ["id", "x"]
    db = db.write("t", [{"id": 7, "x": 1}]).commit()
    assert db.to_arrow("t").schema.field("id").type == pa.int16()


# -- merkle's own metadata is not the user's ------------------------------------------


def test_a_field_with_merkle_metadata_is_refused_by_add_and_create_table() -> None:
    marked = pa.field("q", pa.int8(), metadata={"merkle.encoding": "cbor"})
    db = merkle.connect("memory://").create_db("d")
    schema = pa.schema([("id", pa.int64()), ("a", pa.int32())])
    db = db.create_table("t", key="id", schema=schema).write("t", [{"id": 1, "a": 1}]).commit()
    with pytest.raises(SchemaError, match=r"'q'.*merkle.encoding.*free"):
        db.alter_schema("t", add=[marked])
    with pytest.raises(SchemaError, match=r"'q'.*merkle.encoding.*free"):
        db.create_table("u", key="id", schema=pa.schema([("id", pa.int64()), marked]))
    other = pa.field("r", pa.binary(), metadata={"merkle.other": "x"})
    with pytest.raises(SchemaError, match=r"'r'.*merkle.other"):
        db.alter_schema("t", add=[other])


def test_a_free_field_is_still_accepted_by_add_and_create_table() -> None:
    db = merkle.connect("memory://").create_db("d")
    schema = pa.schema([("id", pa.int64()), merkle.free_field("p")])
    db = db.create_table("t", key="id", schema=schema)
    db = db.alter_schema("t", add=[merkle.free_field("q")])
    db = db.write("t", [{"id": 1, "p": {"x": [1]}, "q": "s"}, {"id": 2, "q": 3}]).commit()
    assert list(db.scan("t")) == [{"id": 1, "p": {"x": [1]}, "q": "s"}, {"id": 2, "q": 3}]


# -- fields of type null ------------------------------------------------------------------


def _with_null_field() -> merkle.Database:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k")
    data = pa.table({"k": [1, 2], "n": pa.array([None, None], pa.null()), "v": ["a", "b"]})
    return db.write("t", data).commit()


def test_a_written_null_column_is_kept_as_a_field_of_type_null() -> None:
    db = _with_null_field()
    schema = db.to_arrow("t").schema
    assert schema.names == ["k", "n", "v"]
    assert schema.field("n").type == pa.null()
    assert list(db.scan("t")) == [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]


def test_a_pandas_column_of_none_is_kept() -> None:
    pd = pytest.importorskip("pandas")
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k")
    db = db.write("t", pd.DataFrame({"k": [1, 2], "n": [None, None]})).commit()
    assert db.describe_table("t")["schema"].names == ["k", "n"]


@pytest.mark.parametrize("kind", [pa.int64(), pa.string(), pa.list_(pa.int8()), DICT], ids=str)
def test_a_null_field_widens_to_any_type(kind: pa.DataType) -> None:
    db = _with_null_field()
    db = db.alter_schema("t", widen={"n": kind}).commit()
    table = db.to_arrow("t")
    assert table.schema.field("n").type == kind
    assert table.column("n").to_pylist() == [None, None]


def test_a_declared_null_field_widens() -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k")
    db = db.write("t", [{"k": 1}]).commit().alter_schema("t", add={"n": pa.null()}).commit()
    db = db.alter_schema("t", widen={"n": pa.int32()}).commit()
    db = db.write("t", [{"k": 2, "n": 5}]).commit()
    assert db.to_arrow("t").column("n").to_pylist() == [None, 5]


def test_a_write_of_values_gives_a_null_field_their_type_in_its_place() -> None:
    db = _with_null_field()
    by_records = db.write("t", [{"k": 3, "n": 5}]).commit()
    assert by_records.to_arrow("t").schema.field("n").type == pa.int64()
    assert by_records.describe_table("t")["schema"].names == ["k", "n", "v"]
    assert by_records.to_arrow("t").column("n").to_pylist() == [None, None, 5]
    by_arrow = _with_null_field().write("t", pa.table({"k": [4], "n": ["s"]})).commit()
    assert by_arrow.to_arrow("t").schema.field("n").type == pa.string()
    assert list(by_arrow.scan("t", from_pk=4)) == [{"k": 4, "n": "s"}]
    with pytest.raises(SchemaError, match="'n'"):
        by_arrow.write("t", [{"k": 5, "n": 1}])


# -- free keeps a zoned timestamp's zone offset, and names keys ---------------------------


def test_free_keeps_a_zoned_timestamps_wall_time_and_names_the_key() -> None:
    zone = pytest.importorskip("zoneinfo").ZoneInfo("America/New_York")
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="America/New_York"))])
    db = merkle.connect("memory://").create_db("d").create_table("t", key="id", schema=schema)
    when = datetime.datetime(2024, 3, 10, 1, 30, tzinfo=zone)
    db = db.write("t", [{"id": 1, "ts": when}]).commit()
    freed = db.alter_schema("t", free=["ts"]).commit()
    value = next(iter(freed.scan("t")))["ts"]
    assert value == when
    assert (value.hour, value.utcoffset()) == (1, datetime.timedelta(hours=-5))
    schema = pa.schema([("id", pa.int64()), ("t", pa.time64("us"))])
    db = db.create_table("u", key="id", schema=schema)
    db = db.write("u", [{"id": 7, "t": datetime.time(1, 2, 3)}]).commit()
    with pytest.raises(merkle.errors.UsageError, match="key 7"):
        db.alter_schema("u", free=["t"])
