"""Spark writes and reads a second probe found broken.

What these guard, and what broke before:

- a decimal too large for the table's decimal field (123456789012.5 into
  decimal(10, 2)) was committed, and every later read of the table failed
  (Arrow's unchecked cast keeps the digits, and casts back equal);
- a struct written from Spark with a null row (or a null array element)
  could not be read back by Spark: Spark marks the struct's children NOT
  NULL and writes nulls in them under a null parent, which the read's cast
  refused;
- in a session whose time zone is not UTC, a TIMESTAMP written into a
  TIMESTAMP_NTZ field (and the other way) was converted by UTC wall time,
  where Spark's CAST uses the session zone;
- a read schema of the user's that leaves the key field out failed with
  Spark's KeyError;
- a key value that does not fit the key field was reported "of the record
  with key 'row 0'" with the advice to declare the key field schema-free
  (which a key field cannot be), and ``mode="Overwrite"`` was refused
  though Spark takes modes in any case.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

import merkle
import merkle.spark
from merkle.errors import SchemaError

from .helpers import reader

ZONE = "spark.sql.session.timeZone"


MISFITS = [
    ("CAST(123456789012.5 AS DECIMAL(20,1)) AS d", r"field 'd' is decimal128\(10, 2\).*key 2"),
    # Spark marks named_struct members NOT NULL: before, pyarrow's raw ArrowTypeError
    ("named_struct('a', 1L, 'b', 2L) AS st", r"table 't'.*field 'st'.*key 2.*member 'b'"),
]


@pytest.mark.parametrize(("column", "says"), MISFITS)
def test_a_value_beyond_the_field_is_refused(
    spark: Any, file_lake: Any, lake_conn: Any, column: str, says: str
) -> None:
    conn = lake_conn(file_lake)
    rows = pa.table(
        {
            "k": pa.array([1], pa.int64()),
            "d": pa.array([Decimal("1.25")], pa.decimal128(10, 2)),
            "st": pa.array([{"a": 1}], pa.struct([("a", pa.int64())])),
        }
    )
    db = conn.create_db("d").create_table("t", key="k").write("t", rows).commit()
    big = spark.sql(f"SELECT 2L AS k, {column}")
    with pytest.raises(SchemaError, match=says):
        merkle.spark.write(big, file_lake.uri, "d", "t", **file_lake.options)
    writer = big.coalesce(1).write.format("merkle").option("lake", file_lake.uri)
    with pytest.raises(Exception, match=says):
        writer.option("db", "d").option("table", "t").mode("append").save()
    assert conn.open_db("d").version == db.version
    read = reader(spark, file_lake, "d", "t").load().collect()
    assert [r.asDict(recursive=True) for r in read] == db.to_arrow("t").to_pylist()


def test_structs_with_null_rows_read_back(spark: Any, file_lake: Any, lake_conn: Any) -> None:
    lake_conn(file_lake).create_db("d")
    df = spark.sql(
        "SELECT 1 AS k, named_struct('a', 1, 'b', 'x') AS st, "
        "array(named_struct('a', 2), NULL) AS arr "
        "UNION ALL SELECT 2 AS k, NULL AS st, NULL AS arr"
    )
    merkle.spark.write(df, file_lake.uri, "d", "t", key="k", **file_lake.options)
    expected = [
        {"k": 1, "st": {"a": 1, "b": "x"}, "arr": [{"a": 2}, None]},
        {"k": 2, "st": None, "arr": None},
    ]
    read = reader(spark, file_lake, "d", "t").load().orderBy("k").collect()
    assert [r.asDict(recursive=True) for r in read] == expected
    asked = reader(spark, file_lake, "d", "t").schema(df.schema).load().orderBy("k").collect()
    assert [r.asDict(recursive=True) for r in asked] == expected


def test_a_schema_without_the_key_is_a_projection(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(file_lake)
    db = conn.create_db("d").create_table("t", key="id")
    db.write("t", [{"id": i, "v": 10 * i} for i in range(3)]).commit()
    read = reader(spark, file_lake, "d", "t").schema("v long").load().collect()
    assert sorted(r.v for r in read) == [0, 10, 20]


def test_timestamps_of_the_other_kind_convert_in_the_session_zone(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(file_lake)
    conn.create_db("d")
    uri, options = file_lake.uri, file_lake.options
    spark.conf.set(ZONE, "America/Los_Angeles")
    try:
        first = spark.sql(
            "SELECT 1L AS k, TIMESTAMP_NTZ'2024-01-01 10:00:00' AS ntz, "
            "TIMESTAMP'2024-01-01 10:00:00' AS ts"
        )
        merkle.spark.write(first, uri, "d", "t", key="k", **options)
        swapped = (
            "SELECT {k}L AS k, TIMESTAMP'2024-01-01 10:00:00' AS ntz, "
            "TIMESTAMP_NTZ'{day} 10:00:00' AS ts"
        )
        merkle.spark.write(spark.sql(swapped.format(k=2, day="2024-01-01")), uri, "d", "t")
        # The data source's writer, and a wall time of a repeated hour (the earlier offset).
        repeated = spark.sql(swapped.format(k=3, day="2024-11-03").replace("10:00", "01:30"))
        writer = repeated.coalesce(1).write.format("merkle").option("lake", uri)
        writer.option("db", "d").option("table", "t").mode("append").save()
        cast = spark.sql(swapped.format(k=2, day="2024-01-01")).selectExpr(
            "CAST(CAST(ntz AS TIMESTAMP_NTZ) AS STRING) AS ntz",
            "CAST(CAST(ts AS TIMESTAMP) AS STRING) AS ts",
        )
        back = reader(spark, file_lake, "d", "t").load().where("k = 2")
        shown = back.selectExpr("CAST(ntz AS STRING) AS ntz", "CAST(ts AS STRING) AS ts")
        assert shown.collect() == cast.collect()
    finally:
        spark.conf.unset(ZONE)
    utc = datetime.UTC
    stored = conn.open_db("d").get_records("t", [2, 3])
    assert stored[2]["ntz"] == datetime.datetime(2024, 1, 1, 10)
    assert stored[2]["ts"] == datetime.datetime(2024, 1, 1, 18, tzinfo=utc)
    assert stored[3]["ntz"] == datetime.datetime(2024, 1, 1, 1, 30)
    assert stored[3]["ts"] == datetime.datetime(2024, 11, 3, 8, 30, tzinfo=utc)


def test_key_errors_name_the_row_and_modes_take_any_case(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(file_lake)
    conn.create_db("d")
    uri = file_lake.uri
    start = spark.sql("SELECT 1 AS k, 1L AS v")
    db = merkle.spark.write(start, uri, "d", "t", key="k", mode="Overwrite")
    with pytest.raises(SchemaError, match=r"key field 'k' is int32: the value 3000000000 of row 0"):
        merkle.spark.write(spark.sql("SELECT 3000000000L AS k, 2L AS v"), uri, "d", "t")
    strings = spark.createDataFrame([("3",)], "k string")
    with pytest.raises(SchemaError, match="key field 'k' is int32") as raised:
        merkle.spark.delete(spark, uri, "d", "t", strings)
    assert "free=" not in str(raised.value)
    assert conn.open_db("d").version == db.version
