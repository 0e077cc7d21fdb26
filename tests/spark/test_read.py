"""Reading tables with ``spark.read.format("merkle")``: equal to ``db.to_arrow``, always.

Every test here runs on a file lake and on an S3 lake (moto over HTTP),
through the shared local[2] session.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from pyspark.sql.types import FloatType, LongType, StringType, StructField, StructType

import merkle.spark
import merkle.spark.source as source_module
from merkle.errors import MerkleError
from merkle.spark.source import MerkleDataSource

from .helpers import arrow_rows, reader, spark_rows, straddling_table


def test_pending_changes_anywhere_are_read_exactly_once(
    spark: Any, spark_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(spark_lake)
    db = straddling_table(conn)
    df = reader(spark, spark_lake, "shop", "orders").load()
    got = spark_rows(df, "id")
    assert got == arrow_rows(db.to_arrow("orders"))
    ids = [row["id"] for row in got]
    assert len(ids) == len(set(ids))
    assert {5, 250, 999} <= set(ids)
    assert not {150, 305} & set(ids)
    assert next(r for r in got if r["id"] == 120)["who"] == "updated"
    by_id = {r["id"]: r for r in got}
    assert (by_id[130]["who"], by_id[250]["amount"], by_id[320].get("amount")) == (
        "patched",
        25.0,
        None,
    )


FILTERS = [
    "id = 120",
    "id = 250",
    "id < 120",
    "id <= 120",
    "id > 350",
    "id >= 999",
    "id IN (5, 7, 150, 250, 301, 999, 12345)",
    "id BETWEEN 140 AND 310",
    "id > 100 AND id < 105",
    "id >= 150 AND id <= 150",
    "id > 400 AND id < 300",
    "id = 120 OR id = 999",
    "id <> 120",
    "amount > 200",
]


@pytest.mark.parametrize("where", FILTERS)
def test_key_filters_equal_python_filtering(
    spark: Any, file_lake: Any, lake_conn: Any, where: str
) -> None:
    conn = lake_conn(file_lake)
    db = straddling_table(conn)
    df = reader(spark, file_lake, "shop", "orders").load().where(where)
    expected = [r for r in arrow_rows(db.to_arrow("orders")) if _matches(where, r)]
    assert spark_rows(df, "id") == expected


def _matches(where: str, row: dict[str, Any]) -> bool:
    expr = where.replace("<>", "!=").replace(" AND ", " and ").replace(" OR ", " or ")
    expr = expr.replace(" IN ", " in ").replace(" = ", " == ")
    if "BETWEEN" in expr:
        lo, hi = expr.split("BETWEEN")[1].split(" and ")
        return int(lo) <= row["id"] <= int(hi)
    try:
        return bool(eval(expr, {}, {"amount": None, "who": None, **row}))
    except TypeError:  # a comparison with null: SQL keeps no such row
        return False


def test_key_filters_prune_tablets_where_pyspark_scopes_them_per_scan(
    spark: Any, file_lake: Any, lake_conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = lake_conn(file_lake)
    straddling_table(conn)
    from pyspark.sql.datasource import EqualTo, GreaterThan, LessThanOrEqual

    options = {"lake": file_lake.uri, "db": "shop", "table": "orders", "partition_bytes": "1"}
    filters = [GreaterThan(("id",), 120), LessThanOrEqual(("id",), 160), EqualTo(("who",), "x")]
    source = MerkleDataSource(options)
    reader_ = source.reader(source.schema())
    assert len(reader_.partitions()) == 4  # one per tablet: pending keys go where they belong
    # This pyspark reuses a pruned reader for later queries: every filter goes back to Spark.
    assert list(reader_.pushFilters(filters)) == filters
    assert len(reader_.partitions()) == 4
    monkeypatch.setattr(source_module, "FILTERS_SCOPED_PER_SCAN", True)
    reader_ = source.reader(source.schema())
    assert list(reader_.pushFilters(filters)) == [filters[2]]  # the key filters are the source's
    assert len(reader_.partitions()) == 2  # only the tablets over 100-149 and 150-199
    # A key read as another type: Spark compares the cast values, so it keeps the filters.
    as_float = StructType.fromJson(source.schema().jsonValue())
    as_float.fields[0].dataType = FloatType()
    reader_ = source.reader(StructType(as_float.fields))
    assert list(reader_.pushFilters(filters)) == filters


def test_a_filtered_query_leaves_later_queries_of_the_dataframe_whole(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    """pyspark through 4.3 keeps the read planned for a scan whose filters the source took
    and reuses it for every later scan of the same DataFrame: a count after a filtered
    count saw only the filtered rows, and so did a write of the DataFrame."""
    conn = lake_conn(file_lake)
    db = straddling_table(conn)
    every = arrow_rows(db.to_arrow("orders"))
    df = reader(spark, file_lake, "shop", "orders").load()
    assert df.where("id < 120").count() == sum(1 for r in every if r["id"] < 120)
    assert df.count() == len(every)
    assert df.where("id = 150").count() == sum(1 for r in every if r["id"] == 150)
    assert spark_rows(df, "id") == every


def test_options_key_range_and_fields(spark: Any, spark_lake: Any, lake_conn: Any) -> None:
    conn = lake_conn(spark_lake)
    db = straddling_table(conn)
    df = reader(
        spark, spark_lake, "shop", "orders", from_pk="120", to_pk="310", fields="who"
    ).load()
    assert df.columns == ["id", "who"]
    expected = arrow_rows(db.to_arrow("orders", fields=["who"], from_pk=120, to_pk=310))
    assert spark_rows(df, "id") == expected


def test_versions_and_time_travel(spark: Any, file_lake: Any, lake_conn: Any) -> None:
    conn = lake_conn(file_lake)
    db = straddling_table(conn)
    old = db.version
    when = conn.history("shop")[0].time
    db.write("orders", [{"id": 1, "who": "new"}]).delete("orders", [999]).commit()
    then = reader(spark, file_lake, "shop", "orders", version=str(old)).load()
    assert spark_rows(then, "id") == arrow_rows(db.to_arrow("orders"))
    at = reader(spark, file_lake, "shop", "orders", at=when.isoformat()).load()
    assert spark_rows(at, "id") == arrow_rows(db.to_arrow("orders"))
    now = reader(spark, file_lake, "shop", "orders").load()
    assert {r["id"] for r in spark_rows(now, "id")} >= {1}


def test_types_map_to_spark_types(spark: Any, spark_lake: Any, lake_conn: Any) -> None:
    conn = lake_conn(spark_lake)
    naive = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456)
    aware = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)
    records = [
        {
            "k": "a",
            "i": 1,
            "f": 1.5,
            "b": True,
            "s": "x",
            "y": b"\x00\x01",
            "n": naive,
            "t": aware,
            "l": [1, 2],
            "ls": ["p"],
            "mixed": 1,
        },
        {
            "k": "b",
            "i": -2,
            "f": -0.0,
            "b": False,
            "s": "",
            "y": b"",
            "n": naive,
            "t": aware,
            "l": [],
            "mixed": "two",
        },
        {"k": "c", "mixed": {"deep": [1.5, None, "x"]}},
    ]
    db = conn.create_db("types").create_table("t", key="k", schema_free=["mixed"])
    db = db.write("t", records).commit()
    df = reader(spark, spark_lake, "types", "t").load()
    types = {f.name: f.dataType.simpleString() for f in df.schema}
    assert types == {
        "k": "string",
        "b": "boolean",
        "f": "double",
        "i": "bigint",
        "l": "array<bigint>",
        "ls": "array<string>",
        "mixed": "variant",
        "n": "timestamp_ntz",
        "s": "string",
        "t": "timestamp",
        "y": "binary",
    }
    assert not df.schema["k"].nullable
    rows = {row["k"]: row for row in df.collect()}
    assert rows["a"]["n"] == naive
    assert rows["a"]["t"].replace(tzinfo=datetime.UTC) == aware  # collect() gives session time
    assert rows["a"]["mixed"].toPython() == 1
    assert rows["b"]["mixed"].toPython() == "two"
    assert rows["c"]["mixed"].toPython() == {"deep": [1.5, None, "x"]}
    json_rows = df.selectExpr("k", "to_json(mixed) AS j").orderBy("k").collect()
    assert [r["j"] for r in json_rows] == ["1", '"two"', '{"deep":[1.5,null,"x"]}']
    cbor = reader(spark, spark_lake, "types", "t", mixed="cbor").load()
    assert cbor.schema["mixed"].dataType.simpleString() == "binary"
    assert db.get_records("t", ["a"])["a"]["mixed"] == 1


def test_typed_columns_keep_their_types(spark: Any, file_lake: Any, lake_conn: Any) -> None:
    import decimal

    import pyarrow as pa

    conn = lake_conn(file_lake)
    rows = pa.table(
        {
            "k": pa.array([1, 2], pa.int32()),
            "d": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(10, 2)),
            "day": pa.array([datetime.date(2024, 1, 2), datetime.date(1999, 12, 31)]),
            "s": pa.array([{"a": 1, "b": "x"}, {"a": 2, "b": None}]),
            "t": pa.array([0, 1000], pa.timestamp("ms", tz="Europe/Berlin")),
            "tag": pa.array(["x", "y"]).dictionary_encode(),
        }
    )
    db = conn.create_db("typed").create_table("t", key="k").write("t", rows).commit()
    df = reader(spark, file_lake, "typed", "t").load()
    types = {f.name: f.dataType.simpleString() for f in df.schema}
    assert types == {
        "k": "int",
        "d": "decimal(10,2)",
        "day": "date",
        "s": "struct<a:bigint,b:string>",
        "t": "timestamp",
        "tag": "string",
    }
    got = {r["k"]: r.asDict(recursive=True) for r in df.collect()}
    assert got[1]["d"] == decimal.Decimal("1.25")
    assert got[2]["day"] == datetime.date(1999, 12, 31)
    assert got[1]["s"] == {"a": 1, "b": "x"}
    assert got[2]["tag"] == "y"
    copied = merkle.spark.write(df, file_lake.uri, "typed", "copy", key="k")
    back = copied.to_arrow("copy")
    assert back.drop_columns(["t", "tag"]).to_pylist() == (
        db.to_arrow("t").drop_columns(["t", "tag"]).to_pylist()
    )
    assert back.schema.field("t").type == pa.timestamp("us", tz="UTC")  # Spark's TIMESTAMP
    assert back.column("tag").to_pylist() == ["x", "y"]


def test_user_schema_is_checked_and_projects(spark: Any, file_lake: Any, lake_conn: Any) -> None:
    conn = lake_conn(file_lake)
    db = straddling_table(conn)
    good = StructType([StructField("id", LongType(), False), StructField("who", StringType())])
    df = reader(spark, file_lake, "shop", "orders").schema(good).load()
    assert spark_rows(df, "id") == arrow_rows(db.to_arrow("orders", fields=["who"]))
    unknown = StructType([StructField("id", LongType()), StructField("nope", StringType())])
    with pytest.raises(Exception, match="nope"):
        reader(spark, file_lake, "shop", "orders").schema(unknown).load().collect()
    wrong = StructType([StructField("id", LongType()), StructField("amount", StringType())])
    with pytest.raises(Exception, match="amount"):
        reader(spark, file_lake, "shop", "orders").schema(wrong).load().collect()


def test_an_integer_field_is_read_as_a_decimal_its_values_fit(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    """Arrow refused int32 -> decimal(5, 1) for the type's range (precision 11 needed),
    though every value fits and Spark casts them."""
    import decimal

    import pyarrow as pa

    conn = lake_conn(file_lake)
    rows = pa.table({"id": pa.array(range(10), pa.int64()), "a": pa.array(range(10), pa.int32())})
    conn.create_db("d").create_table("t", key="id").write("t", rows).commit()
    schema = "id long, a decimal(5,1)"
    df = reader(spark, file_lake, "d", "t").schema(schema).load()
    assert [r["a"] for r in df.orderBy("id").collect()] == [decimal.Decimal(i) for i in range(10)]
    conn.open_db("d").write("t", [{"id": 10, "a": 100_000}]).commit()
    with pytest.raises(Exception, match="'a' holds int32 values that do not fit"):
        reader(spark, file_lake, "d", "t").schema(schema).load().collect()


def test_bad_options_say_what_to_do(spark: Any, file_lake: Any, lake_conn: Any) -> None:
    straddling_table(lake_conn(file_lake))
    with pytest.raises(Exception, match="'table'"):
        spark.read.format("merkle").option("lake", file_lake.uri).option("db", "shop").load()
    with pytest.raises(Exception, match="no table 'nope'"):
        reader(spark, file_lake, "shop", "nope").load()
    with pytest.raises(Exception, match="unknown options"):
        reader(spark, file_lake, "shop", "orders", endpoint="x").load()
    # Before: a schema naming 'who' twice, and a JVM error at the first collect().
    with pytest.raises(Exception, match="option 'fields' names 'who' more than once"):
        reader(spark, file_lake, "shop", "orders", fields="who,who").load()
    assert issubclass(MerkleError, Exception)


def test_unsigned_integers_read_as_signed_types_that_hold_them(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    """Spark has no unsigned types; a table with one (a pandas-written Parquet file's uint8)
    could not be read at all, even with the field projected away."""
    import decimal

    import pyarrow as pa

    conn = lake_conn(file_lake)
    rows = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "u8": pa.array([0, 255], pa.uint8()),
            "u16": pa.array([1, 65535], pa.uint16()),
            "u32": pa.array([2, 2**32 - 1], pa.uint32()),
            "u64": pa.array([3, 2**64 - 1], pa.uint64()),
            "bytes": pa.array([[1], [255]], pa.list_(pa.uint8())),  # Spark has no form for it
        }
    )
    conn.create_db("d").create_table("t", key="id").write("t", rows).commit()
    df = reader(spark, file_lake, "d", "t", fields="u8,u16,u32,u64").load()
    assert [f.dataType.simpleString() for f in df.schema] == [
        "bigint", "smallint", "int", "bigint", "decimal(20,0)"
    ]  # fmt: skip
    assert [tuple(r) for r in df.orderBy("id").collect()] == [
        (1, 0, 1, 2, decimal.Decimal(3)),
        (2, 255, 65535, 2**32 - 1, decimal.Decimal(2**64 - 1)),
    ]
    mine = reader(spark, file_lake, "d", "t").schema("id long, u8 int").load()
    assert [tuple(r) for r in mine.orderBy("id").collect()] == [(1, 0), (2, 255)]
    with pytest.raises(Exception, match=r"'bytes'.*option 'fields' or a schema"):
        reader(spark, file_lake, "d", "t").load()
    with pytest.raises(Exception, match=r"'bytes'.*leave it out of option 'fields'"):
        reader(spark, file_lake, "d", "t", fields="u8,bytes").load()
    with pytest.raises(Exception, match=r"'bytes'.*leave it out of the schema"):
        reader(spark, file_lake, "d", "t").schema("id long, bytes binary").load().collect()
