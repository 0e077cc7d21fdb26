"""Spark writes match column names to fields as Spark does: without case, unless told.

Found in a probe: with ``spark.sql.caseSensitive`` off (Spark's default) a
DataFrame column ``Name`` written to a table with a field ``name`` became a
new field ``Name``, and every later Spark read of the table failed with
``[AMBIGUOUS_REFERENCE]``; a ``key`` option or a key column spelled ``ID``
for the key ``id`` was refused. With the setting on, names stay exact.
"""

from __future__ import annotations

from typing import Any

import pytest

import merkle
import merkle.spark
from merkle.errors import UsageError

from .helpers import check_table, reader

CASE = "spark.sql.caseSensitive"


@pytest.fixture
def table(file_lake: Any, lake_conn: Any) -> merkle.Connection:
    conn = lake_conn(file_lake)
    conn.create_db("s").create_table("t", key="id").write("t", [{"id": 1, "name": "a"}]).commit()
    return conn


@pytest.mark.parametrize("how", ["write", "source"])
def test_a_column_in_other_case_is_the_field(
    spark: Any, file_lake: Any, table: merkle.Connection, how: str
) -> None:
    df = spark.createDataFrame([(2, "b")], "ID long, Name string")
    if how == "write":
        merkle.spark.write(df, file_lake.uri, "s", "t", key="Id")
    else:
        options = {"lake": file_lake.uri, "db": "s", "table": "t"}
        df.write.format("merkle").options(**options).mode("append").save()
    check_table(table, "s", "t")
    db = table.open_db("s")
    assert db.to_arrow("t").to_pylist() == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    read = reader(spark, file_lake, "s", "t").load().select("NAME").collect()
    assert sorted(row[0] for row in read) == ["a", "b"]


def test_a_new_table_takes_the_key_as_the_dataframe_spells_it(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    lake_conn(file_lake).create_db("s")
    df = spark.createDataFrame([(1, "x")], "Id long, v string")
    done = merkle.spark.write(df, file_lake.uri, "s", "n", key="ID")
    assert done.describe_table("n")["key"] in ("Id", ["Id"])
    merkle.spark.delete(spark, file_lake.uri, "s", "n", spark.createDataFrame([(1,)], "iD long"))
    assert merkle.connect(file_lake.uri).open_db("s").to_arrow("n").num_rows == 0


def test_columns_spark_cannot_tell_apart_are_refused(
    spark: Any, file_lake: Any, table: merkle.Connection
) -> None:
    df = spark.createDataFrame([(2, "b", "c")], "id long, name string, NAME string")
    with pytest.raises(UsageError, match="'name' and 'NAME'"):
        merkle.spark.write(df, file_lake.uri, "s", "t")
    assert table.open_db("s").version == 1  # nothing committed


@pytest.mark.parametrize("how", ["write", "source"])
def test_case_sensitive_sessions_keep_names_exact(
    spark: Any, file_lake: Any, table: merkle.Connection, how: str
) -> None:
    """Both write paths follow the session's setting. ``df.write.format`` is planned in a
    process that sees no session: it took the setting for off, wrote a column ``Name``
    into the field ``name`` and refused ``name`` beside ``NAME``, saying the setting was
    off."""

    def put(df: Any) -> None:
        if how == "write":
            merkle.spark.write(df, file_lake.uri, "s", "t")
        else:
            options = {"lake": file_lake.uri, "db": "s", "table": "t"}
            df.coalesce(1).write.format("merkle").options(**options).mode("append").save()

    twins = spark.createDataFrame([(3, "x", "X")], "id long, name string, NAME string")
    spark.conf.set(CASE, "true")
    try:
        put(spark.createDataFrame([(2, "b")], "id long, Name string"))
        put(twins)
    finally:
        spark.conf.unset(CASE)
    db = table.open_db("s")
    assert db.to_arrow("t").to_pylist() == [
        {"id": 1, "name": "a", "Name": None, "NAME": None},
        {"id": 2, "name": None, "Name": "b", "NAME": None},
        {"id": 3, "name": "x", "Name": None, "NAME": "X"},
    ]
    with pytest.raises(Exception, match="'name' and 'NAME'"):
        put(twins)  # the setting off again: Spark takes them for one name
    assert table.open_db("s").version == db.version
