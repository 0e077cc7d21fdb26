"""Helpers of the Spark tests: readers on test lakes, tables with a known shape."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from conftest import Lake

import merkle
from merkle.db.bulk import committed_table
from merkle.tablets import validate


def reader(spark: Any, lake: Lake, db: str, table: str, **options: Any) -> Any:
    """``spark.read.format("merkle")`` on a test lake (its store options passed along)."""
    read = spark.read.format("merkle").option("lake", lake.uri).option("db", db)
    read = read.option("table", table)
    for name, value in {**lake.options, **options}.items():
        read = read.option(name, value)
    return read


def spark_rows(df: Any, key: str) -> list[dict[str, Any]]:
    """A DataFrame's rows as dicts without null fields, in key order."""
    rows = [{k: v for k, v in row.asDict().items() if v is not None} for row in df.collect()]
    return sorted(rows, key=lambda r: r[key])


def arrow_rows(table: pa.Table) -> list[dict[str, Any]]:
    """An Arrow table's rows as dicts without null fields (in its order)."""
    return [{k: v for k, v in row.items() if v is not None} for row in table.to_pylist()]


def check_table(conn: merkle.Connection, db: str, table: str) -> None:
    """The committed head's table passes the structural validator."""
    validate(conn.tables, committed_table(conn.open_db(db), table))


def straddling_table(conn: merkle.Connection) -> merkle.Database:
    """``shop.orders``: tablets over keys 100-199 and 300-399, and pending changes
    before the first tablet, between the two, after the last, and inside both
    (field-level patches of tablet records and of a pending record among them)."""
    db = conn.create_db("shop")
    db = db.create_table(
        "orders", key="id", tablet_size_limit=50, patch_limit=1000, patch_share=1000
    )
    rows = [
        {"id": i, "amount": i * 1.5, "who": f"c{i % 7}"}
        for i in [*range(100, 200), *range(300, 400)]
    ]
    db = db.write("orders", rows).compact("orders").commit()
    db = db.write(
        "orders",
        [
            {"id": 5, "amount": 0.5, "who": "early"},
            {"id": 250, "amount": 2.5, "who": "between"},
            {"id": 999, "amount": 9.5, "who": "late"},
            {"id": 120, "amount": -1.0, "who": "updated"},
        ],
    )
    db = db.delete("orders", [150, 305, 7]).commit()
    patches = {130: {"who": "patched"}, 250: {"amount": 25.0}, 320: {"amount": None}}
    return db.update("orders", patches).commit()
