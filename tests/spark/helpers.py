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


def gc_history(conn: merkle.Connection) -> None:
    """Versions that share most blocks, a dropped table, a dropped database, pending batches."""
    db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=40)
    db = db.create_table("u", key="k", patch_limit=5, patch_share=0)
    db = db.write("t", [{"id": i, "v": i} for i in range(400)]).compact("t").commit()
    for step in range(6):
        changed = [{"id": (step * 53 + j * 7) % 500, "v": -step} for j in range(30)]
        db = db.write("t", changed).delete("t", [step * 11]).commit()
        db = db.write("u", [{"k": step, "w": str(step)}]).commit()
    db = db.compact("t").drop_table("u").commit()
    conn.create_db("tmp").create_table("x", key="k").write("x", [{"k": 1}]).commit()
    conn.drop_db("tmp")


def copy_lake(source: Lake, target: Lake) -> None:
    """Every object of ``source`` into the empty ``target`` (the same lake, twice)."""
    with source.open() as a, target.open() as b:
        b.put_many((info.key, a.get(info.key)) for info in a.list(""))


def block_names(conn: merkle.Connection) -> set[str]:
    """The CID of every block stored in the lake, as text."""
    return {str(cid) for cid, _ in conn.blocks.list()}
