"""``merkle gc`` and ``merkle verify`` on a file lake, checked against the Python API."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import merkle

from .helpers import Run


def _history(lake_uri: str) -> None:
    """Six versions of 'shop' and a dropped 'scratch', written by a connection that then
    closes (an open writer's lease would rightly make GC spare what it wrote)."""
    with merkle.connect(lake_uri) as conn:
        db = conn.create_db("shop").create_table("t", key="k", patch_limit=4)
        for i in range(6):
            db = db.write("t", [{"k": j, "v": i} for j in range(10)]).commit()
        conn.create_db("scratch").create_table("x", key="k").write("x", [{"k": 1}]).commit()
        conn.drop_db("scratch")


def _block_count(lake_uri: str) -> int:
    """Blocks in the lake: files in blocks/, not hidden names (the move-aside directory
    a collection makes there, blocks/.tmp-aside, is no block)."""
    names = os.listdir(Path(lake_uri.removeprefix("file://")) / "blocks")
    return sum(not name.startswith(".") for name in names)


def test_gc_dry_run_then_real_run(run: Run, lake_uri: str) -> None:
    _history(lake_uri)
    blocks = _block_count(lake_uri)
    args = ("--keep-versions", "1", "--grace", "0s", "-f", "json")
    dry = json.loads(run.ok("gc", "--dry-run", *args).stdout)
    assert dry["dry_run"] is True
    assert dry["blocks_freed"] > 0
    assert _block_count(lake_uri) == blocks  # a dry run deletes nothing
    real = json.loads(run.ok("gc", *args).stdout)
    assert real["blocks_freed"] == dry["blocks_freed"]
    assert _block_count(lake_uri) == blocks - real["blocks_freed"]
    again = json.loads(run.ok("gc", *args).stdout)
    assert again["blocks_freed"] == 0
    with merkle.connect(lake_uri) as conn:
        assert [r["k"] for r in conn.open_db("shop").scan("t")] == list(range(10))


def test_gc_summary_and_grace(run: Run, lake_uri: str) -> None:
    _history(lake_uri)
    out = run.ok("gc", "--keep-versions", "1", "-f", "table").stdout
    # The default grace (1 h) spares everything this test just wrote.
    assert "freed 0 blocks" in out
    assert "shop: head v6, 1 versions kept, 6 trimmed" in out


def test_gc_bad_input_is_one_line(run: Run, conn: merkle.Connection) -> None:
    """``conn`` makes the lake exist."""
    assert "bad duration '7x'" in run.fails("gc", "--keep-within", "7x")
    assert "keep_versions" in run.fails("gc", "--keep-versions", "0")
    assert run("gc", "--keep-versions", "many").exit_code == 2  # click's usage error


def test_gc_spark_without_pyspark_is_one_line(
    run: Run, lake_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where pyspark is not installed (a None in sys.modules makes its import fail)."""
    _history(lake_uri)
    blocks = _block_count(lake_uri)
    for name in ("pyspark", "pyspark.errors", "pyspark.sql", "py4j", "py4j.protocol"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "merkle.spark", raising=False)
    error = run.fails("gc", "--spark", "local[2]", "--grace", "0s")
    assert "merkle gc --spark needs pyspark: pip install 'merkle-db[spark]'" in error
    assert _block_count(lake_uri) == blocks


def test_gc_on_a_missing_lake(tmp_path: Path) -> None:
    assert "no merkle lake" in Run((tmp_path / "nothing").as_uri()).fails("gc")


def test_verify_clean_and_damaged(run: Run, conn: merkle.Connection, lake_uri: str) -> None:
    _history(lake_uri)
    report = json.loads(run.ok("verify", "-f", "json").stdout)
    assert report["ok"] is True
    assert report["blocks_checked"] > 0
    assert json.loads(run.ok("verify", "shop", "-f", "json").stdout)["ok"] is True
    tablet = conn.open_db("shop").compact().commit().list_tablets("t")[0]["id"]
    node = conn.blocks.get_node(merkle.blocks.CID.parse(tablet))
    block = node["pages"]["families"]["base"][0]  # a page of the tablet
    segment = Path(lake_uri.removeprefix("file://")) / "blocks" / str(block)
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 1
    segment.write_bytes(bytes(data))
    line = run.fails("verify", "shop")
    assert "1 corrupt" in line
    assert str(block) in line


def test_gc_that_leaves_its_lock_held_says_so_on_its_one_line(
    run: Run, lake_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error that stopped GC, and a note that writers wait for the lock it could not
    release (the note was an exception note, which the CLI's one line left out)."""
    from merkle.errors import StorageError
    from merkle.gc import collect
    from merkle.refs import GCLock

    _history(lake_uri)

    def stops(*args: object, **kwargs: object) -> None:
        raise StorageError("cannot write 'refs/shop/x': [Errno 28] No space left on device")

    def unreleasable(self: GCLock) -> None:
        raise StorageError("cannot write 'gc/lock/x': [Errno 28] No space left on device")

    monkeypatch.setattr(collect, "_collect", stops)
    monkeypatch.setattr(GCLock, "release", unreleasable)
    line = run.fails("gc", "--keep-versions", "1")
    assert "refs/shop/x" in line
    assert "could not be released" in line
    assert "--break-lock" in line
