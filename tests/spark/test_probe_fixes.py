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
  UNRESOLVED_COLUMN, since Spark parsed the name as a struct path;
- the writer lease of ``merkle.spark.write`` lived ``lease_ttl`` (900 s)
  past its last renewal, so a killed driver held every garbage collection
  of the next 15 minutes up for 60 s and let it free nothing;
- fields of type ``date64``, ``float16`` and ``string_view`` were refused as
  "Spark cannot represent", and a ``tag`` read option as an unknown store
  option; a ``decimal256`` wider than 38 digits failed in the JVM
  (DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION), a read schema naming a field
  twice with 134 lines of Java stack.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import threading
import time
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Column, DataFrame
from pyspark.sql.functions import col

import merkle
import merkle.spark
import merkle.spark.bulk as bulk
import merkle.spark.lake as lake_module
from merkle.errors import UsageError
from merkle.refs import LeaseExpiredError
from merkle.refs.leases import _encode
from merkle.refs.writer import DEFAULT_WRITER_TTL
from merkle.spark.lake import renewed_lease
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


@pytest.mark.parametrize("lapse", [False, True])
def test_a_write_holds_a_short_lease_its_driver_renews(
    spark: Any, file_lake: Any, lake_conn: Any, monkeypatch: pytest.MonkeyPatch, lapse: bool
) -> None:
    """The job's writer lease lives an ordinary writer's TTL past its last renewal, and the
    driver renews it until the commit; a lease that lapsed anyway lands no commit."""
    conn = lake_conn(file_lake)
    conn.create_db("d")
    gate, stopped = threading.Lock(), []
    renew = lake_module._renew

    def driver_renews(*args: Any) -> Any:
        with gate:  # once stopped, no renewal is under way or starts
            if stopped:
                raise UsageError("the driver stalled")
            return renew(*args)

    monkeypatch.setattr(lake_module, "_renew", driver_renews)
    commit_job, commit, seen = bulk.commit_job, merkle.Database.commit, {}

    def checked_commit_job(job: Any, *args: Any, **kwargs: Any) -> Any:
        stored = conn.leases.current(job.lease)
        seen.update(key=job.lease.key, ttl=job.lease_ttl, left=stored.expires - time.time())
        seen["kept"] = renewed_lease(job.lease).expires > job.lease.expires  # by the driver
        return commit_job(job, *args, **kwargs)

    def lapsed_commit(db: Any, *args: Any, ticket: Any = None, **kwargs: Any) -> Any:
        if ticket is not None:  # the job's commit: the driver stopped renewing, time ran out
            with gate:
                stopped.append(True)
            expired = dataclasses.replace(ticket.current(), expires=time.time() - 60)
            conn.store.put(ticket.lease.key, _encode(expired))
        return commit(db, *args, ticket=ticket, **kwargs)

    monkeypatch.setattr(bulk, "commit_job", checked_commit_job)
    if lapse:
        monkeypatch.setattr(merkle.Database, "commit", lapsed_commit)
    df = spark.range(0, 50, 1, numPartitions=2).selectExpr("id", "id * 2 AS v")
    if lapse:
        with pytest.raises(LeaseExpiredError, match="nothing was committed: run the write again"):
            merkle.spark.write(df, file_lake.uri, "d", "t", key="id")
        assert conn.open_db("d").list_tables() == []
    else:
        done = merkle.spark.write(df, file_lake.uri, "d", "t", key="id")
        assert done.to_arrow("t").num_rows == 50
    assert seen["ttl"] == DEFAULT_WRITER_TTL  # before: lease_ttl, 900 s
    assert 0 < seen["left"] <= DEFAULT_WRITER_TTL
    assert seen["kept"]
    assert not conn.store.exists(seen["key"])  # released at the end, landed or not


def _odd_types(conn: merkle.Connection) -> merkle.Database:
    rows = pa.table(
        {
            "k": pa.array([1, 2], pa.int64()),
            "d": pa.array([datetime.date(2024, 1, 2), None], pa.date32()),
            "f": pa.array([1.5, None], pa.float16()),
            "s": pa.array(["x", None], pa.string_view()),
            "l": pa.array([[0.25, None], None], pa.list_(pa.float16())),
            "w": pa.array([decimal.Decimal("2.50"), None], pa.decimal256(20, 2)),
            "big": pa.array([decimal.Decimal("1.5"), None], pa.decimal256(40, 2)),
        }
    )
    db = conn.create_db("d").create_table("t", key="k").write("t", rows).commit()
    conn.tag("d", "rel", version=db.version)
    return db.alter_schema("t", widen={"d": pa.date64()}).write("t", [{"k": 3}]).commit()


def test_types_spark_lacks_read_as_types_holding_them_and_a_tag_opens_its_version(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(file_lake)
    db = _odd_types(conn)
    fields = "d,f,s,l,w"
    df = reader(spark, file_lake, "d", "t", fields=fields).load()
    assert df.schema.simpleString() == (
        "struct<k:bigint,d:date,f:float,s:string,l:array<float>,w:decimal(20,2)>"
    )
    got = [r.asDict() for r in df.orderBy("k").collect()]
    assert got == db.to_arrow("t", fields=fields.split(",")).to_pylist()
    tagged = reader(spark, file_lake, "d", "t", fields=fields, tag="rel").load()
    assert [r["k"] for r in tagged.collect()] == [1, 2]  # the version the tag names
    copied = df.selectExpr("k + 10 AS k", "d", "f", "s", "l", "w")
    merkle.spark.write(copied, file_lake.uri, "d", "t")  # back into the same fields
    after = conn.open_db("d")
    assert after.describe_table("t")["schema"] == db.describe_table("t")["schema"]
    again = after.to_arrow("t", from_pk=11, fields=fields.split(",")).to_pylist()
    assert [{**r, "k": r["k"] - 10} for r in again] == got


READ_ERRORS = [  # before: read as Spark's DECIMAL(40,2), then failed in the JVM
    ({}, None, r"'big'.*decimal256\(40, 2\).*at most 38.*option 'fields' or a schema"),
    ({"fields": "big"}, None, r"'big'.*at most 38.*leave it out of option 'fields'"),
    ({}, "k long, big decimal(38,2)", r"'big'.*at most 38.*leave it out of the schema"),
    ({}, "k long, f float, f float", "names field 'f' more than once"),  # before: 134 lines
    ({"tag": "rel", "version": "0"}, None, "one of the options 'version', 'at' and 'tag'"),
    ({"tag": "nope"}, None, "nope"),
]


@pytest.mark.parametrize(("options", "schema", "says"), READ_ERRORS)
def test_reads_that_cannot_work_say_why(
    spark: Any, file_lake: Any, lake_conn: Any, options: dict[str, str], schema: Any, says: str
) -> None:
    _odd_types(lake_conn(file_lake))
    read = reader(spark, file_lake, "d", "t", **options)
    with pytest.raises(Exception, match=says) as caught:
        (read.schema(schema) if schema else read).load().collect()
    assert "merkle.errors" in str(caught.value)


@pytest.mark.parametrize("how", ["write", "source"])
def test_a_key_given_twice_is_refused_and_nothing_is_committed(
    spark: Any, file_lake: Any, lake_conn: Any, how: str
) -> None:
    """Before: the row Spark happened to put last was stored (``a.union(b)`` kept b's,
    ``b.union(a)`` a's), with no word."""
    conn = lake_conn(file_lake)
    db = conn.create_db("d").create_table("t", key="id").write("t", [{"id": 1, "v": "x"}]).commit()
    df = spark.createDataFrame([(2, "a"), (3, "c"), (2, "b")], "id long, v string").coalesce(1)
    options = {"lake": file_lake.uri, "db": "d", "table": "t"}

    def write() -> None:
        if how == "write":
            merkle.spark.write(df, file_lake.uri, "d", "t")
        else:
            df.write.format("merkle").options(**options).mode("append").save()

    with pytest.raises(Exception, match=r"hold key 2 more than once.*dropDuplicates\(\['id'\]\)"):
        write()
    assert conn.open_db("d").version == db.version
