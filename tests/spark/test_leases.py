"""Garbage collection during a Spark read: the read's reader lease keeps its version whole.

A read of an old version is stopped inside its first tasks (a gate that
waits for a file the test creates), ``merkle gc --keep-versions 1`` runs in
another process meanwhile, and then the read goes on: every tablet the
remaining tasks read must still be there, although no kept version reaches
them any more.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.blocks.cid import CID

from .helpers import arrow_rows, reader, spark_rows

pytestmark = pytest.mark.slow


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout}s")
        time.sleep(0.05)


def _reachable(conn: merkle.Connection, root: str) -> set[str]:
    from merkle.blocks.walk import walk_levels

    seen: set[bytes] = set()
    for _ in walk_levels(conn.blocks, [CID.parse(root)], seen, use_cache=False):
        pass
    return {str(CID.from_bytes(b)) for b in seen}


def test_gc_during_a_read_keeps_what_the_read_needs(
    spark: Any, spark_lake: Any, lake_conn: Any, tmp_path: Path
) -> None:
    conn = lake_conn(spark_lake)
    db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=20)
    db = db.write("t", [{"id": i, "v": f"old-{i}"} for i in range(400)]).compact("t").commit()
    old = db
    old_blocks = _reachable(conn, old.root)
    db = db.drop_table("t").create_table("t", key="id").write("t", [{"id": 1, "v": "new"}])
    db = db.commit()
    assert not old_blocks & _reachable(conn, db.root)
    would = merkle.gc(conn, dry_run=True, keep_versions=1, grace="0s")
    assert old_blocks <= set(would.freed)  # without a lease, all of version 1 would go

    started, go = tmp_path / "started", tmp_path / "go"

    def gate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pathlib
        import time as clock

        first = True
        for batch in batches:
            if first:
                pathlib.Path(started).touch()
                while not pathlib.Path(go).exists():  # the test decides when to go on
                    clock.sleep(0.05)
                first = False
            yield batch

    df = reader(spark, spark_lake, "shop", "t", version=str(old.version), partition_bytes="1")
    df = df.load()
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["rows"] = spark_rows(df.mapInArrow(gate, df.schema), "id")
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    try:
        _wait_for(started)
        code = (
            "import merkle, sys; "
            f"conn = merkle.connect({spark_lake.uri!r}, **{spark_lake.options!r}); "
            "report = merkle.gc(conn, keep_versions=1, grace='0s'); "
            "print(report.reader_leases, report.blocks_freed)"
        )
        gc_run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
        )
    finally:
        go.touch()
        thread.join(timeout=300)
    assert "error" not in result, result.get("error")
    leases, freed = map(int, gc_run.stdout.split())
    assert leases >= 1
    assert freed > 0  # the collection ran and deleted what nothing needs (version 0's root)
    assert result["rows"] == arrow_rows(old.to_arrow("t"))
    present = {str(cid) for cid, _ in conn.blocks.list()}
    assert old_blocks <= present
    assert conn.history("shop")[-1].version == db.version  # version 1 itself was trimmed


def test_gc_during_a_write_spares_the_tasks_blocks(
    spark: Any, spark_lake: Any, lake_conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection that starts after the tasks wrote their tablets but before the commit
    waits for the job's writer lease; the commit lands under that lease, and the sweep
    that follows keeps every block of the new version."""
    import merkle.spark.bulk as bulk
    from merkle.refs.gclock import read_lock

    conn = lake_conn(spark_lake)
    conn.create_db("shop")
    original = bulk.commit_job
    collector: dict[str, Any] = {}

    def commit_during_gc(*args: Any, **kwargs: Any) -> Any:
        code = (
            "import merkle; "
            f"conn = merkle.connect({spark_lake.uri!r}, **{spark_lake.options!r}); "
            "report = merkle.gc(conn, keep_versions=1, grace='0s'); "
            "print(report.writer_leases_waited, report.blocks_freed, report.sweep_skipped)"
        )
        collector["process"] = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while True:  # go on once the collector holds the lock and waits for this job
            lock = read_lock(conn.store)
            if lock is not None and lock.held(conn.leases.timing):
                break
            assert time.monotonic() < deadline, "the collection did not take the GC lock"
            time.sleep(0.05)
        committed = original(*args, **kwargs)
        after = read_lock(conn.store)
        collector["held_after_commit"] = after is not None and after.held(conn.leases.timing)
        return committed

    monkeypatch.setattr(bulk, "commit_job", commit_during_gc)
    df = spark.range(0, 3000, 1, numPartitions=2).selectExpr("id", "id % 10 AS v")
    done = merkle.spark.write(df, spark_lake.uri, "shop", "t", key="id", **spark_lake.options)
    out, _ = collector["process"].communicate(timeout=300)
    _, _, skipped = out.split(maxsplit=2)
    assert collector["held_after_commit"]  # the commit landed while the collector waited
    assert skipped.strip() == "None"  # and the collector swept after it
    present = {str(cid) for cid, _ in conn.blocks.list()}
    assert _reachable(conn, done.root) <= present
    assert spark_rows(reader(spark, spark_lake, "shop", "t").load(), "id") == arrow_rows(
        done.to_arrow("t")
    )
