"""The reader leases of Spark reads can be given up once the reading is done.

A Spark read's reader lease lives ``lease_ttl`` (900 s) past its last task: a
data source is not told when a query ends. examples/spark_pipeline.py read
old versions and collected right after with ``keep_versions=1, grace=0s``
("keep the newest version of each database"), and the collection kept the
blocks of the versions its own reads had leased. Reads named with option
``lease_holder`` are now given up by ``merkle.spark.release_reads``, which
the example calls before its collection. (The CLI half of this change is in
tests/cli/test_trim_command_and_pipeline_gc.py; this half needs Spark.)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

import merkle
import merkle.spark
from merkle.errors import UsageError

from .helpers import reader

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


def _two_versions(conn: merkle.Connection) -> merkle.Database:
    """``shop.t`` at version 1 and, sharing no block with it, version 2 (the head)."""
    db = conn.create_db("shop").create_table("t", key="id")
    db = db.write("t", [{"id": i, "v": f"old-{i}"} for i in range(50)]).commit()
    db = db.drop_table("t").create_table("t", key="id").write("t", [{"id": 1, "v": "new"}])
    return db.commit()


def _holders(conn: merkle.Connection) -> list[str | None]:
    return sorted(lease.holder for lease in conn.leases.lease_holders("reader"))


def test_released_reads_let_a_collection_free_the_versions_they_read(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(file_lake)
    _two_versions(conn)
    old = reader(spark, file_lake, "shop", "t", version=1, lease_holder="nightly").load()
    head = reader(spark, file_lake, "shop", "t", lease_holder="nightly").load()
    other = reader(spark, file_lake, "shop", "t", version=1).load()  # not named
    assert (old.count(), head.count(), other.count()) == (50, 1, 50)
    named = [h for h in _holders(conn) if h == "nightly"]
    assert len(named) == 2
    assert len(_holders(conn)) == 3
    leased = merkle.gc(conn, dry_run=True, keep_versions=1, grace="0s")

    assert merkle.spark.release_reads(file_lake.uri, "nightly", **file_lake.options) == 2
    assert "nightly" not in _holders(conn)
    assert len(_holders(conn)) == 1
    assert merkle.spark.release_reads(file_lake.uri, "nightly", **file_lake.options) == 0

    # pyspark keeps a DataFrame's planned read, lease included: a released one says so
    with pytest.raises(Exception, match=r"lost its reader lease.*release_reads"):
        head.count()
    again = reader(spark, file_lake, "shop", "t", lease_holder="nightly").load()
    assert again.count() == 1  # loaded again: a new lease
    assert merkle.spark.release_reads(file_lake.uri, "nightly", **file_lake.options) == 1
    for lease in conn.leases.lease_holders("reader"):
        conn.leases.release(lease)  # the unnamed read's, as its ttl ending would
    freed = merkle.gc(conn, keep_versions=1, grace="0s")
    assert freed.blocks_freed > leased.blocks_freed  # the leases had kept version 1
    assert merkle.verify(conn).unreachable_blocks == 0
    with pytest.raises(Exception, match="lost its reader lease"):
        old.count()  # version 1 is gone: the read says so, never a missing block


def test_lease_holder_and_release_refuse_an_empty_name(
    spark: Any, file_lake: Any, lake_conn: Any
) -> None:
    conn = lake_conn(file_lake)
    _two_versions(conn)
    with pytest.raises(Exception, match="lease_holder"):
        reader(spark, file_lake, "shop", "t", lease_holder=" ").load().count()
    with pytest.raises(UsageError, match="holder"):
        merkle.spark.release_reads(file_lake.uri, "")


def test_pipeline_collection_keeps_only_the_newest_versions(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """examples/spark_pipeline.py, small, on the tests' session: step 5 frees every
    block the kept versions do not reach, and leaves no reader lease."""
    spec = importlib.util.spec_from_file_location("spark_pipeline", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.setattr(merkle.spark, "local_session", lambda: spark)
    monkeypatch.setattr(spark, "stop", lambda: None)  # the session is the whole run's
    lake = tmp_path / "lake"
    monkeypatch.setattr(sys, "argv", ["spark_pipeline.py", "--lake", str(lake)])
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--orders", "3000"])
    try:
        example.main()
    finally:
        spark.sparkContext.setLogLevel("WARN")
    with merkle.connect(lake.as_uri()) as conn:
        assert merkle.verify(conn).unreachable_blocks == 0
        assert conn.leases.lease_holders("reader") == []
        assert [len(conn.history(name)) for name in ("shop", "shop-experiment")] == [1, 1]
    assert "gc: released 8 reader leases;" in capsys.readouterr().out
