"""``db.dataset(t)`` of a table with string/binary views or run-end encoded fields.

Arrow's dataset scanner has no filter or take kernel for views or run-end
encoding, so such a field (a Polars string is a ``string_view``) made every
filter of the dataset (even on an int key), ``take`` and the documented
``pl.scan_pyarrow_dataset(ds).filter(...)`` raise ArrowNotImplementedError.
The dataset serves those fields in their plain type (``string``, ``binary``,
the run-end encoding's value type, at any depth); every other type as
``to_arrow`` gives it.
"""

from __future__ import annotations

from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import merkle

ROWS = 300
TABLET = 40  # several tablets: key-range pruning is in play

NESTED = pa.struct([("name", pa.string_view()), ("runs", pa.int64())])


def _database(schema: pa.Schema, key: str, data: pa.Table) -> merkle.Database:
    db = merkle.connect("memory://").create_db("d")
    db = db.create_table("t", key=key, schema=schema, tablet_size_limit=TABLET, patch_limit=50)
    db = db.write("t", data).commit()
    # a pending change on top of the tablets, which the fragments lay on
    return db.write("t", data.slice(0, 1)).commit()


def _wide() -> merkle.Database:
    ids = list(range(ROWS))
    columns: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "sv": pa.array([f"s{i % 5}" for i in ids], pa.string_view()),
        "bv": pa.array([bytes([i % 4]) * 3 for i in ids], pa.binary_view()),
        "ri": pc.run_end_encode(pa.array([i // 10 for i in ids], pa.int64()), run_end_type="int32"),
        "rs": pc.run_end_encode(pa.array([f"r{i // 7}" for i in ids]), run_end_type="int16"),
        "nested": pa.array([{"name": f"n{i % 3}", "runs": i % 2} for i in ids], NESTED),
        "items": pa.array([[f"i{i}"] for i in ids], pa.list_(pa.string_view())),
        "cat": pa.array([f"c{i % 2}" for i in ids]).dictionary_encode(),
    }
    data = pa.table(columns)
    return _database(data.schema, "id", data)


def _keyed(kind: pa.DataType) -> merkle.Database:
    make = str if kind == pa.string_view() else (lambda s: s.encode())
    data = pa.table(
        {
            "k": pa.array([make(f"k{i:04d}") for i in range(ROWS)], kind),
            "v": pa.array(range(ROWS), pa.int64()),
            "sv": pa.array([f"s{i % 5}" for i in range(ROWS)], pa.string_view()),
        }
    )
    return _database(data.schema, "k", data)


def served_type(kind: pa.DataType) -> pa.DataType:
    """What the docs say the dataset serves a field of type ``kind`` as (the types used here)."""
    if kind == pa.string_view():
        return pa.string()
    if kind == pa.binary_view():
        return pa.binary()
    if pa.types.is_run_end_encoded(kind):
        return served_type(kind.value_type)
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(served_type(f.type)) for f in kind])
    if pa.types.is_list(kind):
        return pa.list_(served_type(kind.value_type))
    return kind


def _plain(rows: pa.Table) -> pa.Table:
    """``rows`` with each field of its served type, values unchanged."""
    columns = []
    for field, column in zip(rows.schema, rows.columns, strict=True):
        columns.append(_plain_column(column, served_type(field.type)))
    return pa.Table.from_arrays(columns, names=rows.column_names)


def _plain_column(column: pa.ChunkedArray, kind: pa.DataType) -> pa.ChunkedArray:
    if pa.types.is_run_end_encoded(column.type):
        column = pc.run_end_decode(column)
    if pa.types.is_struct(column.type):
        chunks = []
        for chunk in column.chunks:
            children = [
                _plain_column(
                    pa.chunked_array([chunk.field(i)]), kind.field(i).type
                ).combine_chunks()
                for i in range(kind.num_fields)
            ]
            chunks.append(pa.StructArray.from_arrays(children, fields=list(kind)))
        return pa.chunked_array(chunks, type=kind)
    return column.cast(kind)


def _expected(db: merkle.Database, mask: Any = None) -> pa.Table:
    rows = _plain(db.to_arrow("t"))
    return rows if mask is None else rows.filter(mask)


def _same(got: pa.Table, want: pa.Table, key: str = "id") -> None:
    assert got.schema == want.schema
    assert got.sort_by(key).to_pylist() == want.sort_by(key).to_pylist()


def test_served_types_are_plain_only_where_views_or_run_ends() -> None:
    db = _wide()
    arrow = db.to_arrow("t").schema
    served = db.dataset("t").schema
    assert served.names == arrow.names
    plain = {
        "sv": pa.string(),
        "bv": pa.binary(),
        "ri": pa.int64(),
        "rs": pa.string(),
        "nested": pa.struct([("name", pa.string()), ("runs", pa.int64())]),
        "items": pa.list_(pa.string()),
    }
    for field in arrow:
        assert served.field(field.name).type == plain.get(field.name, field.type), field.name
    assert served.field("cat").type == arrow.field("cat").type  # a dictionary stays one


def test_run_ends_inside_a_struct() -> None:
    kind = pa.struct(
        [("name", pa.string_view()), ("runs", pa.run_end_encoded(pa.int32(), pa.int64()))]
    )
    db = merkle.connect("memory://").create_db("d")
    db = db.create_table("t", key="id", schema=pa.schema([("id", pa.int64()), ("x", kind)]))
    records = [{"id": i, "x": {"name": f"n{i % 3}", "runs": i % 2}} for i in range(20)]
    db = db.write("t", records).commit()
    assert db.to_arrow("t").schema.field("x").type == kind
    dataset = db.dataset("t")
    assert dataset.schema.field("x").type == pa.struct(
        [("name", pa.string()), ("runs", pa.int64())]
    )
    predicate = (pc.field("x", "runs") == 1) & (pc.field("x", "name") != "n0")
    _same(dataset.to_table(filter=predicate), _expected(db, predicate))
    assert dataset.take([3]).to_pylist() == [records[3]]


@pytest.mark.parametrize(
    ("column", "predicate"),
    [
        ("id", pc.field("id") >= 250),
        ("sv", pc.field("sv") == "s3"),
        ("bv", pc.field("bv") == b"\x02\x02\x02"),
        ("ri", pc.field("ri") == 7),
        ("rs", pc.field("rs") == "r4"),
        ("nested", pc.field("nested", "name") == "n1"),
        ("cat", pc.field("cat") == "c1"),
    ],
)
def test_pyarrow_filters_each_field(column: str, predicate: pc.Expression) -> None:
    db = _wide()
    got = db.dataset("t").to_table(filter=predicate)
    want = _expected(db, predicate)
    assert 0 < want.num_rows < ROWS, column
    _same(got, want)


def test_pyarrow_take_count_head_and_projection() -> None:
    db = _wide()
    dataset = db.dataset("t")
    assert dataset.count_rows() == ROWS
    assert dataset.count_rows(filter=pc.field("sv") == "s0") == ROWS // 5
    whole = dataset.to_table()
    _same(whole, _expected(db))
    taken = dataset.take([0, 5, ROWS - 1])
    assert taken.to_pylist() == whole.take([0, 5, ROWS - 1]).to_pylist()
    assert dataset.head(3, filter=pc.field("ri") >= 20).to_pylist() == (
        _expected(db, pc.field("ri") >= 20).sort_by("id").slice(0, 3).to_pylist()
    )
    picked = dataset.to_table(columns=["id", "rs"], filter=pc.field("id") < 20)
    assert picked.schema == pa.schema([("id", pa.int64()), ("rs", pa.string())])
    _same(picked, _expected(db, pc.field("id") < 20).select(["id", "rs"]))


def test_polars_filters_and_selects() -> None:
    db = _wide()
    frame = (
        pl.scan_pyarrow_dataset(db.dataset("t"))
        .filter((pl.col("id") >= 100) & (pl.col("sv") == "s1"))
        .select("id", "sv", "bv", "ri", "rs")
        .collect()
    )
    want = _expected(db, (pc.field("id") >= 100) & (pc.field("sv") == "s1"))
    want = want.select(["id", "sv", "bv", "ri", "rs"]).sort_by("id")
    assert frame.sort("id").to_dict(as_series=False) == want.to_pydict()


def test_polars_frame_written_then_scanned_with_the_documented_filter() -> None:
    frame = pl.DataFrame(
        {"order_id": list(range(ROWS)), "status": [f"s{i % 3}" for i in range(ROWS)]}
    )
    db = merkle.connect("memory://").create_db("d")
    db = db.create_table("orders", key="order_id", tablet_size_limit=TABLET, patch_limit=50)
    db = db.write("orders", frame).commit()
    assert db.to_arrow("orders").schema.field("status").type == pa.string_view()
    orders = db.dataset("orders")
    got = pl.scan_pyarrow_dataset(orders).filter(pl.col("order_id") >= 250).collect()
    assert got.sort("order_id").to_dict(as_series=False) == frame.filter(
        pl.col("order_id") >= 250
    ).to_dict(as_series=False)
    read = orders.filesystem.handler.reads  # type: ignore[attr-defined]
    assert 0 < len(set(read)) < db.describe_table("orders")["tablets"]  # the key range pruned


def test_duckdb_where_on_views_and_run_ends() -> None:
    db = _wide()
    orders = db.dataset("t")
    con = duckdb.connect()
    con.register("orders", orders)
    got = con.sql(
        "select id, sv, bv, ri, rs from orders where sv = 's2' and ri < 20 and id >= 50"
    ).arrow()
    if isinstance(got, pa.RecordBatchReader):
        got = got.read_all()
    want = _expected(
        db, (pc.field("sv") == "s2") & (pc.field("ri") < 20) & (pc.field("id") >= 50)
    ).select(["id", "sv", "bv", "ri", "rs"])
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == want.sort_by("id").to_pylist()


@pytest.mark.parametrize("kind", [pa.string_view(), pa.binary_view()])
def test_view_key_filters_take_and_prunes(kind: pa.DataType) -> None:
    db = _keyed(kind)
    make = str if kind == pa.string_view() else (lambda s: s.encode())
    dataset = db.dataset("t")
    assert dataset.schema.field("k").type == served_type(kind)
    bound = make("k0250")
    got = dataset.to_table(filter=pc.field("k") >= bound)
    _same(got, _expected(db, pc.field("k") >= bound), key="k")
    assert got.num_rows == ROWS - 250
    read = dataset.filesystem.handler.reads  # type: ignore[attr-defined]
    assert 0 < len(set(read)) < db.describe_table("t")["tablets"]  # the key range pruned
    assert dataset.take([0, 1]).column("k").to_pylist() == [make("k0000"), make("k0001")]
    got = dataset.to_table(filter=pc.field("sv") == "s4")
    _same(got, _expected(db, pc.field("sv") == "s4"), key="k")
    frame = pl.scan_pyarrow_dataset(dataset).filter(pl.col("v") < 10).select("k").collect()
    assert frame.get_column("k").to_list() == [make(f"k{i:04d}") for i in range(10)]
    con = duckdb.connect()
    con.register("t", dataset)
    count = con.sql("select count(*) from t where k < ?", params=[bound]).fetchall()
    assert count == [(250,)]
