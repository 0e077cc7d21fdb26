"""Writing with Spark: bulk loads, upserts, overwrites and deletes, committed once.

Each write is compared with the same change made through the Python API,
and the tree it builds must pass the table validator.
"""

from __future__ import annotations

from typing import Any

import pytest

import merkle
import merkle.spark
from merkle.db.bulk import committed_table
from merkle.errors import ConflictError, UsageError

from .helpers import arrow_rows, check_table, reader, spark_rows, straddling_table


def _opts(lake: Any) -> dict[str, Any]:
    return dict(lake.options)


def test_bulk_load_builds_the_table_of_a_python_write(
    spark: Any, spark_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(spark_lake)
    conn.create_db("shop")
    df = spark.range(0, 5000, 1, numPartitions=3).selectExpr(
        "id * 7 % 5000 AS id", "id AS seq", "CAST(id % 13 AS STRING) AS tag"
    )
    db = merkle.spark.write(
        df, spark_lake.uri, "shop", "items", key="id", message="load", **_opts(spark_lake)
    )
    assert db.entry.message == "load"
    check_table(conn, "shop", "items")
    expected = conn.open_db("shop").create_table("py", key="id")
    expected = expected.write("py", [r.asDict() for r in df.collect()])
    assert arrow_rows(db.to_arrow("items")) == arrow_rows(expected.to_arrow("py"))


def test_upsert_rewrites_only_touched_tablets(spark: Any, spark_lake: Any, lake_conn: Any) -> None:
    conn = lake_conn(spark_lake)
    db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=100)
    db = db.write("t", [{"id": i, "v": i} for i in range(1000)]).compact("t").commit()
    before = {t["id"]: t for t in db.list_tablets("t")}
    assert len(before) == 10
    changes = spark.createDataFrame([(5, -5), (6, -6), (955, -955), (2000, 1)], "id long, v long")
    after_db = merkle.spark.write(changes, spark_lake.uri, "shop", "t", **_opts(spark_lake))
    check_table(conn, "shop", "t")
    expected = db.write(
        "t", [{"id": 5, "v": -5}, {"id": 6, "v": -6}, {"id": 955, "v": -955}, {"id": 2000, "v": 1}]
    )
    assert arrow_rows(after_db.to_arrow("t")) == arrow_rows(expected.to_arrow("t"))
    after = {t["id"] for t in after_db.list_tablets("t")}
    kept = set(before) & after
    assert len(kept) == 8  # the tablets holding 5, 6 and 955 were rewritten, no others
    # untouched index subtrees and tablets are shared by link with the previous version
    assert all(before[cid]["start"] not in (0, 900) for cid in kept)


def test_pending_batches_are_folded_in(spark: Any, spark_lake: Any, lake_conn: Any) -> None:
    conn = lake_conn(spark_lake)
    db = straddling_table(conn)
    changes = spark.createDataFrame(
        [(251, 1.0, "x"), (120, 2.0, "y")], "id long, amount double, who string"
    )
    done = merkle.spark.write(changes, spark_lake.uri, "shop", "orders", **_opts(spark_lake))
    check_table(conn, "shop", "orders")
    assert done.describe_table("orders")["patch"]["count"] == 0
    expected = db.write(
        "orders", [{"id": 251, "amount": 1.0, "who": "x"}, {"id": 120, "amount": 2.0, "who": "y"}]
    )
    assert arrow_rows(done.to_arrow("orders")) == arrow_rows(expected.to_arrow("orders"))


def test_overwrite_replaces_the_rows(spark: Any, file_lake: Any, lake_conn: Any) -> None:
    conn = lake_conn(file_lake)
    straddling_table(conn)
    df = spark.createDataFrame([(1, 1.0, "a"), (2, 2.0, "b")], "id long, amount double, who string")
    done = merkle.spark.write(df, file_lake.uri, "shop", "orders", mode="overwrite")
    assert arrow_rows(done.to_arrow("orders")) == [
        {"id": 1, "amount": 1.0, "who": "a"},
        {"id": 2, "amount": 2.0, "who": "b"},
    ]
    check_table(conn, "shop", "orders")


def test_delete_by_a_dataframe_of_keys(spark: Any, spark_lake: Any, lake_conn: Any) -> None:
    conn = lake_conn(spark_lake)
    db = straddling_table(conn)
    keys = spark.createDataFrame([(5,), (120,), (121,), (250,), (399,), (4242,)], "k long")
    done = merkle.spark.delete(
        spark, spark_lake.uri, "shop", "orders", keys, message="gone", **_opts(spark_lake)
    )
    check_table(conn, "shop", "orders")
    expected = db.delete("orders", [5, 120, 121, 250, 399, 4242])
    assert arrow_rows(done.to_arrow("orders")) == arrow_rows(expected.to_arrow("orders"))


def test_dataframe_writer_appends_and_overwrites(
    spark: Any, spark_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(spark_lake)
    conn.create_db("shop")

    def save(df: Any, mode: str, **extra: str) -> None:
        write = df.write.format("merkle").option("lake", spark_lake.uri).option("db", "shop")
        write = write.option("table", "t").option("message", "via source")
        for name, value in {**spark_lake.options, **extra}.items():
            write = write.option(name, value)
        write.mode(mode).save()

    ranged = spark.range(0, 3000, 1, numPartitions=3).selectExpr("id", "id * 2 AS v")
    save(ranged, "append", key="id")  # a new table from partitions of disjoint key ranges
    head = conn.open_db("shop")
    assert head.entry.message == "via source"
    assert head.describe_table("t")["count"] == 3000
    check_table(conn, "shop", "t")
    one = spark.createDataFrame([(7, -7), (5000, 1)], "id long, v long").coalesce(1)
    save(one, "append")  # one partition: it owns every tablet it touches
    expected = head.write("t", [{"id": 7, "v": -7}, {"id": 5000, "v": 1}])
    assert arrow_rows(conn.open_db("shop").to_arrow("t")) == arrow_rows(expected.to_arrow("t"))
    save(ranged.where("id < 10"), "overwrite")
    assert conn.open_db("shop").describe_table("t")["count"] == 10
    check_table(conn, "shop", "t")


def test_dataframe_writer_refuses_overlapping_partitions(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(file_lake)
    straddling_table(conn)
    head = conn.open_db("shop")
    mixed = spark.range(0, 400, 1, numPartitions=2).selectExpr("(id * 37) % 400 AS id")
    write = mixed.write.format("merkle").option("lake", file_lake.uri).option("db", "shop")
    with pytest.raises(Exception, match=r"merkle\.spark\.write"):
        write.option("table", "orders").mode("append").save()
    assert conn.open_db("shop").version == head.version  # nothing committed


def test_concurrent_change_to_the_table_is_a_conflict(
    spark: Any, file_lake: Any, lake_conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = lake_conn(file_lake)
    db = straddling_table(conn)
    import merkle.spark.bulk as bulk

    original = bulk.commit_job

    def racing(*args: Any, **kwargs: Any) -> Any:
        db.write("orders", [{"id": 1, "who": "racer"}]).commit()  # lands first
        return original(*args, **kwargs)

    monkeypatch.setattr(bulk, "commit_job", racing)
    df = spark.createDataFrame([(2, 2.0, "spark")], "id long, amount double, who string")
    with pytest.raises(ConflictError, match=rf"version {db.version}\b.*version {db.version + 1}"):
        merkle.spark.write(df, file_lake.uri, "shop", "orders")
    head = conn.open_db("shop")
    assert head.version == db.version + 1
    assert 2 not in head.get_records("orders", [2])


def test_concurrent_change_elsewhere_is_rebased(
    spark: Any, file_lake: Any, lake_conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = lake_conn(file_lake)
    db = straddling_table(conn).create_table("other", key="k").commit()
    import merkle.spark.bulk as bulk

    original = bulk.commit_job

    def racing(*args: Any, **kwargs: Any) -> Any:
        db.write("other", [{"k": 1}]).commit()
        return original(*args, **kwargs)

    monkeypatch.setattr(bulk, "commit_job", racing)
    df = spark.createDataFrame([(2, 2.0, "spark")], "id long, amount double, who string")
    done = merkle.spark.write(df, file_lake.uri, "shop", "orders")
    assert done.version == db.version + 2
    assert done.get_records("orders", [2])[2]["who"] == "spark"
    assert done.get_records("other", [1]) == {1: {"k": 1}}


def test_a_failed_job_leaves_the_head_and_only_garbage(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    builder = lake_conn(file_lake)
    db = straddling_table(builder)
    rows_before = arrow_rows(db.to_arrow("orders"))
    builder.close()  # gives up its own writer lease
    conn = lake_conn(file_lake)
    blocks_before = {str(cid) for cid, _ in conn.blocks.list()}
    bad = spark.range(0, 2000, 1, numPartitions=2).selectExpr(
        "id", "assert_true(id < 1990) AS check"
    )
    with pytest.raises(Exception, match=r"assert_true|1990"):
        merkle.spark.write(
            bad.selectExpr("id", "CAST(check AS STRING) AS who"), file_lake.uri, "shop", "orders"
        )
    head = conn.open_db("shop")
    assert head.version == db.version
    assert arrow_rows(head.to_arrow("orders")) == rows_before
    assert not conn.leases.live("writer")  # the job's lease was given up
    report = merkle.gc(conn, grace="0s")
    assert not {str(cid) for cid, _ in conn.blocks.list()} - blocks_before - set(report.freed)
    check_table(conn, "shop", "orders")


def test_write_errors_are_clear(spark: Any, file_lake: Any, lake_conn: Any) -> None:
    conn = lake_conn(file_lake)
    straddling_table(conn)
    df = spark.createDataFrame([(1, "x")], "id long, who string")
    with pytest.raises(UsageError, match='pass the option "key"'):
        merkle.spark.write(df, file_lake.uri, "shop", "new_table")
    with pytest.raises(UsageError, match="keyed by 'id'"):
        merkle.spark.write(df, file_lake.uri, "shop", "orders", key="who")
    with pytest.raises(UsageError, match="no column 'id'"):
        merkle.spark.write(df.selectExpr("who"), file_lake.uri, "shop", "orders")
    # Keys are checked in the tasks: a task's error comes back as itself, one message
    # (before: a PythonException holding the worker's traceback).
    nulls = spark.createDataFrame([(None, "x"), (2, "y")], "id long, who string")
    for call in (
        lambda: merkle.spark.write(nulls, file_lake.uri, "shop", "orders"),
        lambda: merkle.spark.delete(spark, file_lake.uri, "shop", "orders", nulls.select("id")),
    ):
        with pytest.raises(UsageError) as raised:
            call()
        assert "Traceback" not in str(raised.value)
        assert "\n" not in str(raised.value)
    assert committed_table(conn.open_db("shop"), "orders").count == 201
    assert isinstance(spark_rows(reader(spark, file_lake, "shop", "orders").load(), "id"), list)


def test_a_table_keyed_by_a_timestamp_is_written_every_way(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    """pyspark's Arrow type of a TIMESTAMP needs a time zone: without one, a new table
    keyed by a timestamp and an overwrite of one failed with a bare AssertionError."""
    import datetime

    conn = lake_conn(file_lake)
    conn.create_db("d")
    start = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    rows = [(start + datetime.timedelta(hours=i), i) for i in range(5)]
    df = spark.createDataFrame(rows, "k timestamp, v int")
    merkle.spark.write(df, file_lake.uri, "d", "bulk", key="k")
    df.coalesce(1).write.format("merkle").option("lake", file_lake.uri).option("db", "d").option(
        "table", "source"
    ).option("key", "k").mode("append").save()
    merkle.spark.write(df.where("v < 2"), file_lake.uri, "d", "bulk", mode="overwrite")
    db = conn.open_db("d")
    assert db.describe_table("bulk")["key_codec"] == "timestamp"
    assert [r["v"] for r in db.scan("source")] == [0, 1, 2, 3, 4]
    assert db.get_records("source", [start])[start]["v"] == 0
    assert [r["v"] for r in db.scan("bulk")] == [0, 1]
    check_table(conn, "d", "bulk")
