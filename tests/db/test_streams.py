"""Streaming reads, DuckDB and Polars scans, DataFrames in and out (issue 11, points 3 and 6)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import Lake

import merkle

from .conftest import Connect

ROWS = 2_000
TABLET = 100


def _table(lake: Lake, connect: Connect) -> merkle.Database:
    conn = connect(lake)
    data = pa.table(
        {
            "id": pa.array(range(ROWS), pa.int32()),
            "qty": pa.array([i % 7 for i in range(ROWS)], pa.int16()),
            "name": [f"n{i}" for i in range(ROWS)],
        }
    )
    db = conn.create_db("s").create_table("t", key="id", tablet_size_limit=TABLET, patch_limit=50)
    db.write("t", data).commit().write("t", [{"id": 5000, "qty": 1, "name": "pending"}]).commit()
    return connect(lake).open_db("s")


def test_to_batches_streams_in_key_order(lake: Lake, connect: Connect) -> None:
    db = _table(lake, connect)
    reader = db.to_batches("t", fields=["name"], from_pk=150, to_pk=1249)
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.schema.names == ["id", "name"]
    batches = list(reader)
    assert len(batches) > 5  # a tablet at a time, not one table
    ids = [i for b in batches for i in b.column("id").to_pylist()]
    assert ids == list(range(150, 1250))
    filtered = db.to_batches("t", filter=pc.field("qty") == 0, fields=["qty"]).read_all()
    assert filtered.column("id").to_pylist() == [i for i in range(ROWS) if i % 7 == 0]
    assert filtered.column_names == ["id", "qty"]


def _pruned(dataset: object) -> list[int]:
    return dataset.filesystem.handler.reads  # type: ignore[attr-defined,no-any-return]


def test_duckdb_scans_with_key_range_and_projection_pushdown(lake: Lake, connect: Connect) -> None:
    db = _table(lake, connect)
    ds = db.dataset("t")
    total = db.describe_table("t")["tablets"]
    assert total >= ROWS // TABLET
    con = duckdb.connect()
    con.register("orders", ds)
    got = con.sql(
        "select count(*), sum(qty), min(id), max(id) from orders where id between 1210 and 1389"
    )
    assert got.fetchall() == [(180, sum(i % 7 for i in range(1210, 1390)), 1210, 1389)]
    read = _pruned(ds)
    assert 2 <= len(set(read)) <= 3, read  # the tablets holding 1210..1389, no others
    assert con.sql("select name from orders where id = 5000").fetchall() == [("pending",)]


def test_polars_scans_lazily_with_pushdown(lake: Lake, connect: Connect) -> None:
    db = _table(lake, connect)
    ds = db.dataset("t")
    frame = pl.scan_pyarrow_dataset(ds).filter(pl.col("id") >= 1950).select("name").collect()
    assert frame.shape == (51, 1)  # 1950..1999 and the pending 5000
    assert 1 <= len(set(_pruned(ds))) <= 2


def test_to_pandas_keeps_integers_with_nulls_exact(conn: merkle.Connection) -> None:
    """pyarrow's default gave an integer column holding nulls as float64: a nullable
    Int64 written from pandas came back rounded (2**53 + 1 -> 2**53)."""
    big = 2**53 + 1
    frame = pd.DataFrame(
        {
            "id": [1, 2, 3],
            "n": pd.array([big, None, -big], dtype="Int64"),
            "u": pd.array([255, None, 0], dtype="UInt8"),
            "full": [big, 2, 3],
        }
    )
    db = conn.create_db("df").create_table("t", key="id").write("t", frame).commit()
    back = db.to_pandas("t")
    assert list(back.columns) == ["id", "n", "u", "full"]
    assert [str(back[c].dtype) for c in back.columns] == ["int64", "Int64", "UInt8", "int64"]
    assert back["n"].tolist()[0] == big
    assert back["n"].tolist()[2] == -big
    assert back["n"].isna().tolist() == [False, True, False]
    assert back["u"].tolist()[0] == 255
    assert back["full"].tolist() == [big, 2, 3]


def test_dataframes_in_and_out(conn: merkle.Connection) -> None:
    """Before: db.write refused a DataFrame ("record 0 ... is a str, not a dict")."""
    db = conn.create_db("df").create_table("t", key="id")
    frame = pd.DataFrame({"id": [3, 1, 2], "v": [0.5, 1.5, 2.5], "s": ["a", "b", "c"]})
    db = db.write("t", frame).commit()
    back = db.to_pandas("t")
    assert back["id"].tolist() == [1, 2, 3]
    assert back["v"].tolist() == [1.5, 2.5, 0.5]
    indexed = pd.DataFrame({"v": [9.5]}, index=pd.Index([7], name="id"))
    db = db.write("t", indexed)  # a named index is data: the key here
    assert db.get_records("t", [7]) == {7: {"id": 7, "v": 9.5}}
    db = db.write("t", pl.DataFrame({"id": [8], "v": [8.5], "s": ["p"]}))
    polars_back = db.to_polars("t")
    assert isinstance(polars_back, pl.DataFrame)
    assert polars_back.filter(pl.col("id") == 8).to_dicts() == [{"id": 8, "v": 8.5, "s": "p"}]

    class Stream:  # anything with the Arrow PyCapsule stream interface
        def __arrow_c_stream__(self, requested_schema: object = None) -> object:
            table = pa.table({"id": [9], "v": [1.0]})
            return table.__arrow_c_stream__(requested_schema)

    assert db.write("t", Stream()).get_records("t", [9]) == {9: {"id": 9, "v": 1.0}}


_MEMORY_PROBE = textwrap.dedent(
    """
    import json, sys
    import pyarrow as pa
    import merkle
    lake, mode, cache = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conn = merkle.connect(lake, cache_bytes=cache, workers=2)
    db = conn.open_db("big")
    def peak():
        with open("/proc/self/status") as status:
            line = next(l for l in status if l.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024
    before = peak()
    rows = 0
    if mode == "stream":
        for batch in db.to_batches("t"):
            rows += batch.num_rows
    else:
        rows = db.to_arrow("t").num_rows
    after = peak()
    print(json.dumps({"rows": rows, "growth": after - before, "before": before,
                      "arrow_peak": pa.default_memory_pool().max_memory()}))
    conn.close()
    """
)


@pytest.mark.slow
def test_to_batches_reads_a_table_ten_times_the_cache_in_bounded_memory(tmp_path: Path) -> None:
    lake = (tmp_path / "lake").as_uri()
    rows, cache = 3_000_000, 12 << 20
    with merkle.connect(lake) as conn:
        data = pa.table(
            {
                "id": pa.array(range(rows), pa.int64()),
                "payload": pa.array([f"{i:032d}" for i in range(rows)]),
                "x": pa.array(range(rows), pa.float64()),
            }
        )
        size = data.nbytes
        assert size > 10 * cache
        conn.create_db("big").create_table("t", key="id").write("t", data).commit()
        del data

    def probe(mode: str) -> dict[str, int]:
        out = subprocess.run(
            [sys.executable, "-c", _MEMORY_PROBE, lake, mode, str(cache)],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
        result: dict[str, int] = json.loads(out.stdout)
        assert result["rows"] == rows
        return result

    streamed, whole = probe("stream"), probe("whole")
    # The stream holds the cache and a few tablets; to_arrow holds the whole table.
    assert streamed["arrow_peak"] < size / 2, (streamed, size)
    # Peak RSS, not Arrow's pool: uncompressed key blocks decode zero-copy, so the key
    # column of the whole table sits in the blocks' bytes, outside Arrow's pool.
    assert whole["growth"] > size, (whole, size)
    assert streamed["growth"] < whole["growth"] / 2, (streamed, whole)  # peak RSS (VmHWM)
