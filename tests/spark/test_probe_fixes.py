"""Spark writes and reads on inputs an adversarial probe found broken, each as Python has it.

What these guard, and what broke before:

- a table with pending batches, written by ``merkle.spark.write`` in a
  session with ``spark.sql.execution.arrow.useLargeVarTypes=true``: the
  marker rows (one per write group) had ``string`` columns where the data
  had ``large_string``, and the task failed with ArrowInvalid "Tried to
  write record batch with different schema";
- a collated string key (``k COLLATE UTF8_LCASE``): the bulk load
  range-partitioned in collation order, not in the byte order of the
  ``str`` codec, and failed with an overlap error telling the user to call
  ``merkle.spark.write``, which they had called;
- the ``from_pk``/``to_pk`` read options on a ``reverse(int)`` key (refused:
  "7 is not a key of codec reverse(int)") and with a key prefix of a
  composite key (refused: "expected a tuple of 2"), both of which
  ``db.scan`` takes;
- a column named ``a.b`` (or holding a backtick), a key field too:
  ``merkle.spark.write`` and ``delete`` failed with Spark's
  UNRESOLVED_COLUMN, since Spark parsed the name as a struct path.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import Column, DataFrame
from pyspark.sql.functions import col

import merkle
import merkle.spark
import merkle.spark.bulk as bulk
from merkle.errors import UsageError
from merkle.spark.options import parse_key
from merkle.tablets.keys import key_codec

from .helpers import arrow_rows, check_table, reader

LARGE_VAR_TYPES = "spark.sql.execution.arrow.useLargeVarTypes"


@pytest.mark.parametrize("first_partition", ["rows", "empty"])
def test_pending_batches_fold_in_with_large_var_types(
    spark: Any, file_lake: Any, lake_conn: Any, first_partition: str
) -> None:
    conn = lake_conn(file_lake)
    db = conn.create_db("d").create_table("t", key="id")
    db = db.write("t", [{"id": 1, "s": "a", "b": b"x"}]).commit()
    assert db.describe_table("t")["patch"]["count"] == 1
    schema = "id long, s string, b binary"
    df = spark.createDataFrame([(2, "b", b"y"), (3, "c", None)], schema).coalesce(1)
    if first_partition == "empty":  # partition 0 sends only the marker rows
        df = spark.createDataFrame([], schema).coalesce(1).union(df)
    spark.conf.set(LARGE_VAR_TYPES, "true")
    try:
        done = merkle.spark.write(df, file_lake.uri, "d", "t")
    finally:
        spark.conf.unset(LARGE_VAR_TYPES)
    check_table(conn, "d", "t")
    assert done.describe_table("t")["patch"]["count"] == 0
    expected = db.write("t", [{"id": 2, "s": "b", "b": b"y"}, {"id": 3, "s": "c"}])
    assert arrow_rows(done.to_arrow("t")) == arrow_rows(expected.to_arrow("t"))


@pytest.mark.parametrize("collation", ["UTF8_LCASE", "UNICODE_CI"])
def test_collated_string_key_is_bulk_loaded_as_given(
    spark: Any, file_lake: Any, lake_conn: Any, monkeypatch: pytest.MonkeyPatch, collation: str
) -> None:
    conn = lake_conn(file_lake)
    conn.create_db("d")
    rows = [(("a" if i % 2 else "A") + f"{i:03d}", i) for i in range(40)] + [("b", 100), ("B", 101)]
    df = spark.createDataFrame(rows, "k string, v int").selectExpr(
        f"k COLLATE {collation} AS k", "v"
    )
    overlaps: list[bool] = []
    checked = getattr(bulk, "_overlapping", lambda results: False)

    def spy(results: Any) -> bool:
        overlaps.append(checked(results))
        return overlaps[-1]

    monkeypatch.setattr(bulk, "_overlapping", spy, raising=False)
    done = merkle.spark.write(df.coalesce(1), file_lake.uri, "d", "t", key="k")
    assert overlaps == [False]  # the bulk load's ranges were disjoint: no second try
    check_table(conn, "d", "t")
    got = done.to_arrow("t").to_pylist()
    assert got == [{"k": k, "v": v} for k, v in sorted(rows)]  # byte order, case kept
    again = merkle.spark.write(df.repartition(2), file_lake.uri, "d", "t", mode="overwrite")
    assert again.to_arrow("t").to_pylist() == got


def test_bulk_load_whose_ranges_overlap_routes_the_rows(
    spark: Any, file_lake: Any, lake_conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should Spark's range order not be the codec's, the write routes rows, not fails."""
    conn = lake_conn(file_lake)
    conn.create_db("d")

    def interleaved(df: DataFrame, position: int) -> Column:
        return col(df.columns[position]) % 3  # ranges of id % 3 interleave in id order

    monkeypatch.setattr(bulk, "_range_column", interleaved)
    df = spark.range(0, 60, 1, numPartitions=2).selectExpr("id", "id * 2 AS v")
    done = merkle.spark.write(df, file_lake.uri, "d", "t", key="id", rows_per_task=10)
    check_table(conn, "d", "t")
    assert done.to_arrow("t").to_pylist() == [{"id": i, "v": 2 * i} for i in range(60)]


def _pk_tables(conn: merkle.Connection) -> merkle.Database:
    db = conn.create_db("d")
    db = db.create_table("rev", key="id", key_codec="reverse(int)")
    db = db.write("rev", [{"id": i, "v": i} for i in range(10)])
    db = db.create_table("comp", key=["u", "s"])
    db = db.write("comp", [{"u": u, "s": s, "v": 1.0} for u in "xyz" for s in (1, 2)])
    return db.commit()


PK_CASES = [
    ("rev", "7", "3", 7, 3),
    ("rev", "7", None, 7, None),
    ("rev", None, "3", None, 3),
    ("comp", '["x"]', '["x"]', ("x",), ("x",)),
    ("comp", '["x", 2]', '["y"]', ("x", 2), ("y",)),
    ("comp", '["y"]', None, ("y",), None),
    ("comp", None, '["y", 1]', None, ("y", 1)),
]


@pytest.mark.parametrize(("table", "from_text", "to_text", "from_pk", "to_pk"), PK_CASES)
def test_pk_options_read_what_db_scan_reads(
    spark: Any,
    file_lake: Any,
    lake_conn: Any,
    table: str,
    from_text: str | None,
    to_text: str | None,
    from_pk: Any,
    to_pk: Any,
) -> None:
    db = _pk_tables(lake_conn(file_lake))
    options = {
        name: text
        for name, text in (("from_pk", from_text), ("to_pk", to_text))
        if text is not None
    }
    got = [row.asDict() for row in reader(spark, file_lake, "d", table, **options).load().collect()]
    expected = list(db.scan(table, from_pk=from_pk, to_pk=to_pk))
    assert expected  # the case selects something
    key = ["id"] if table == "rev" else ["u", "s"]
    assert sorted(got, key=lambda r: [r[k] for k in key]) == sorted(
        expected, key=lambda r: [r[k] for k in key]
    )


def test_pk_option_that_is_no_key_names_the_option() -> None:
    with pytest.raises(UsageError, match=r"option 'to_pk'.*reverse\(int\)"):
        parse_key(key_codec("reverse(int)"), "seven", "to_pk")
    with pytest.raises(UsageError, match="option 'from_pk'"):
        parse_key(key_codec("tuple(str,int)"), '["x", 1, 2]', "from_pk")


def test_dotted_and_backticked_column_names_write_and_delete(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(file_lake)
    db = conn.create_db("d").create_table("t", key="k.x")
    db = db.write("t", [{"k.x": 0, "a.b": 0, "c`d": "zero"}]).commit()  # a pending batch
    schema = "`k.x` long, `a.b` int, `c``d` string"
    rows = [(i, i * 10, f"r{i}") for i in range(1, 6)]
    df = spark.createDataFrame(rows, schema)
    expected = db.write("t", [{"k.x": k, "a.b": a, "c`d": c} for k, a, c in rows])
    done = merkle.spark.write(df, file_lake.uri, "d", "t")  # upsert: sample, route, markers
    assert arrow_rows(done.to_arrow("t")) == arrow_rows(expected.to_arrow("t"))
    fresh = merkle.spark.write(df, file_lake.uri, "d", "new", key="k.x")  # a bulk load
    assert arrow_rows(fresh.to_arrow("new")) == arrow_rows(expected.delete("t", [0]).to_arrow("t"))
    keys = spark.createDataFrame([(2, "x"), (4, "y")], "`k.x` long, `o.p` string")
    merkle.spark.delete(spark, file_lake.uri, "d", "t", keys)  # the key-named column
    gone = merkle.spark.delete(
        spark, file_lake.uri, "d", "t", spark.createDataFrame([(5,)], "`q.r` long")
    )
    check_table(conn, "d", "t")
    assert arrow_rows(gone.to_arrow("t")) == arrow_rows(
        expected.delete("t", [2, 4, 5]).to_arrow("t")
    )
