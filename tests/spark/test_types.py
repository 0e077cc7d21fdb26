"""Values between merkle and Spark: VARIANT encoding, mixed fields through a Spark write,
and the hash that places write groups on partitions."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import merkle.spark
from merkle.spark.shuffle import pack_groups, partition_tags, spark_hash_long
from merkle.spark.variant import VariantError, from_variant, to_variant

from .helpers import reader

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.floats(allow_nan=False),
    st.text(max_size=80),
    st.binary(max_size=20),
    st.datetimes(timezones=st.none()),
    st.datetimes(min_value=datetime.datetime(1900, 1, 1), timezones=st.just(datetime.UTC)),
    st.dates(),
    st.decimals(
        allow_nan=False, allow_infinity=False, places=3, max_value=10**20, min_value=-(10**20)
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_variant_round_trips(value: Any) -> None:
    assert from_variant(*to_variant(value)) == value


def test_values_variant_cannot_hold_are_refused() -> None:
    for value in (1 << 64, {1: "a"}, {1, 2}, decimal.Decimal("NaN")):
        with pytest.raises(VariantError):
            to_variant(value)


def test_spark_reads_our_variants(spark: Any) -> None:
    value = {"b": [1, 2.5, "x", None, True], "a": {"z": b"\x01"}, "é": 10**12}
    blob, meta = to_variant(value)
    from pyspark.sql.types import VariantVal

    df = spark.createDataFrame([(VariantVal(blob, meta),)], "v variant")
    row = df.selectExpr(
        "variant_get(v, '$.b[1]', 'double') AS d",
        "variant_get(v, '$.é', 'long') AS n",
        "to_json(v) AS j",
    ).collect()[0]
    assert row["d"] == 2.5
    assert row["n"] == 10**12
    assert row["j"].startswith('{"a":{"z":')


MIXED = [
    {"k": 1, "m": 1, "x": "a"},
    {"k": 2, "m": "two", "x": "b"},
    {"k": 3, "m": 2.5},
    {"k": 4, "m": [1, "x", None, [2.0]]},
    {"k": 5, "m": {"p": 1, "q": ["r"]}},
    {"k": 6, "m": b"\x00\xff"},
    {"k": 7, "m": datetime.datetime(2020, 1, 2, 3, 4, 5)},
    {"k": 8, "m": True},
    {"k": 9, "m": decimal.Decimal("12.345")},
    {"k": 10},
]


@pytest.mark.parametrize("mixed", ["variant", "cbor"])
def test_mixed_fields_round_trip_through_a_spark_write(
    spark: Any, file_lake: Any, lake_conn: Any, mixed: str
) -> None:
    conn = lake_conn(file_lake)
    db = conn.create_db("d").create_table("src", key="k", schema_free=["m"])
    db = db.write("src", MIXED).commit()
    df = reader(spark, file_lake, "d", "src", mixed=mixed).load()
    done = merkle.spark.write(df, file_lake.uri, "d", "copy", key="k")
    copied = done.get_records("copy", range(1, 11))
    assert copied == db.get_records("src", range(1, 11))
    if mixed == "cbor":  # CBOR bytes carry what VARIANT cannot, exactly
        db = db.write("src", [{"k": 11, "m": 1 << 70}, {"k": 12, "m": {1: "int key"}}]).commit()
        df = reader(spark, file_lake, "d", "src", mixed="cbor").load()
        done = merkle.spark.write(df, file_lake.uri, "d", "copy2", key="k")
        assert done.get_records("copy2", [11, 12]) == db.get_records("src", [11, 12])
    else:
        db = db.write("src", [{"k": 11, "m": 1 << 70}]).commit()
        with pytest.raises(Exception, match="mixed"):
            reader(spark, file_lake, "d", "src").load().collect()


def test_hash_matches_spark(spark: Any) -> None:
    values = [0, 1, -1, 42, 2**31, -(2**31) - 1, 2**62 + 12345, -(2**63), 2**63 - 1]
    ours = [spark_hash_long(v) for v in values]
    df = spark.createDataFrame([(v,) for v in values], "v long")
    theirs = [row["h"] for row in df.selectExpr("hash(v) AS h").collect()]
    assert ours == theirs


def test_partition_tags_land_where_planned(spark: Any) -> None:
    from pyspark.sql.functions import spark_partition_id

    tags = partition_tags(7)
    df = spark.createDataFrame([(t, p) for p, t in enumerate(tags)], "tag long, want long")
    placed = df.repartition(7, "tag").withColumn("got", spark_partition_id()).collect()
    assert all(row["got"] == row["want"] for row in placed)
    assert pack_groups([5, 5, 5, 20, 1, 1], 10) == [0, 0, 1, 2, 3, 3]
