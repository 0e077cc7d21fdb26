"""User columns named like the columns ``merkle.spark.write`` adds to route rows.

A write that routes rows (an upsert or delete into an existing table, the
first load of a composite-key table) adds ``_merkle_group``,
``_merkle_marker`` and ``_merkle_tag`` after the rows' columns. The write
task gave the rows their own names back and then read and dropped the
routing columns by name, so a user column of one of those names was taken
for a routing column: ``_merkle_tag`` was stored as null (and the commit
succeeded), ``_merkle_group`` and ``_merkle_marker`` failed the job with a
raw pyarrow KeyError ("exists 2 times in schema"). doc/spark.md takes column
names as given: these names are written as any other.
"""

from __future__ import annotations

from typing import Any

import pytest

import merkle.spark

from .helpers import check_table

ROUTING_NAMES = ["_merkle_group", "_merkle_marker", "_merkle_tag"]


@pytest.mark.parametrize("name", ROUTING_NAMES)
def test_an_upsert_stores_a_column_named_like_a_routing_column(
    spark: Any, file_lake: Any, lake_conn: Any, name: str
) -> None:
    conn = lake_conn(file_lake)
    db = conn.create_db("d").create_table("t", key="id", tablet_size_limit=4)
    db = db.write("t", [{"id": i, name: i * 10} for i in range(10)]).compact("t").commit()
    db = db.write("t", [{"id": 20, name: 200}]).commit()  # pending: marker rows too
    rows = [(1, 11), (3, None), (15, 150)]
    df = spark.createDataFrame(rows, f"id long, `{name}` long")
    done = merkle.spark.write(df, file_lake.uri, "d", "t")
    expected = db.write("t", [{"id": i, name: v} for i, v in rows])
    check_table(conn, "d", "t")
    assert done.to_arrow("t").to_pylist() == expected.to_arrow("t").to_pylist()
    assert {r["id"]: r[name] for r in done.to_arrow("t").to_pylist()}[15] == 150


def test_a_composite_key_load_keeps_every_routing_name_a_key_field_too(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    """The first load of a composite-key table routes its rows; here the key fields and
    the value column all bear routing names, in an order unlike the routing columns'."""
    lake = file_lake
    lake_conn(lake).create_db("d")
    schema = "`_merkle_tag` string, `_merkle_marker` long, `_merkle_group` long"
    rows = [("b", 2, 20), ("a", 1, 10), ("a", 2, None)]
    df = spark.createDataFrame(rows, schema)
    done = merkle.spark.write(df, lake.uri, "d", "c", key="_merkle_tag,_merkle_marker")
    assert done.to_arrow("c").to_pylist() == [
        {"_merkle_tag": "a", "_merkle_marker": 1, "_merkle_group": 10},
        {"_merkle_tag": "a", "_merkle_marker": 2, "_merkle_group": None},
        {"_merkle_tag": "b", "_merkle_marker": 2, "_merkle_group": 20},
    ]


def test_a_delete_by_a_key_field_named_like_a_routing_column(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(file_lake)
    db = conn.create_db("d").create_table("t", key="_merkle_group")
    db = db.write("t", [{"_merkle_group": i, "_merkle_tag": -i} for i in range(6)]).commit()
    keys = spark.createDataFrame([(1, "x"), (4, "y")], "`_merkle_group` long, `_merkle_tag` string")
    done = merkle.spark.delete(spark, file_lake.uri, "d", "t", keys)
    check_table(conn, "d", "t")
    assert done.to_arrow("t").to_pylist() == db.delete("t", [1, 4]).to_arrow("t").to_pylist()
