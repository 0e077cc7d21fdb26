"""``merkle.spark.gc`` runs the protocol of ``merkle.gc``: same blocks kept, same freed.

Two lakes get the same history (the same commits, so the same blocks and
CIDs); one is collected by ``merkle.gc``, the other by ``merkle.spark.gc``
with its marking fanned out at once (frontier 1), listing and deleting in
tasks. The reports and what is left must be the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Lake, make_lake

import merkle
import merkle.spark
from merkle.spark.gc import listing_prefixes

pytestmark = pytest.mark.slow


def _history(conn: merkle.Connection) -> None:
    """Versions that share most blocks, a dropped table, a dropped database, pending batches."""
    db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=40)
    db = db.create_table("u", key="k", patch_limit=5, patch_share=0)
    db = db.write("t", [{"id": i, "v": i} for i in range(400)]).compact("t").commit()
    for step in range(6):
        changed = [{"id": (step * 53 + j * 7) % 500, "v": -step} for j in range(30)]
        db = db.write("t", changed).delete("t", [step * 11]).commit()
        db = db.write("u", [{"k": step, "w": str(step)}]).commit()
    db = db.compact("t").drop_table("u").commit()
    conn.create_db("tmp").create_table("x", key="k").write("x", [{"k": 1}]).commit()
    conn.drop_db("tmp")


def _copy(source: Lake, target: Lake) -> None:
    """Every object of ``source`` into the empty ``target`` (the same lake, twice)."""
    with source.open() as a, target.open() as b:
        b.put_many((info.key, a.get(info.key)) for info in a.list(""))


def _blocks(conn: merkle.Connection) -> set[str]:
    return {str(cid) for cid, _ in conn.blocks.list()}


@pytest.mark.parametrize("kind", ["file", pytest.param("s3", marks=pytest.mark.s3)])
def test_spark_gc_keeps_and_frees_what_merkle_gc_does(
    spark: Any, tmp_path: Path, request: pytest.FixtureRequest, lake_conn: Any, kind: str
) -> None:
    lakes: list[Lake] = [
        make_lake(kind, tmp_path / "a", request),
        make_lake(kind, tmp_path / "b", request),
    ]
    conn = lake_conn(lakes[0])
    _history(conn)
    conn.close()  # no writer lease left for the collector to wait for
    _copy(lakes[0], lakes[1])
    assert _blocks(lake_conn(lakes[0])) == _blocks(lake_conn(lakes[1]))
    here = merkle.gc(lake_conn(lakes[0]), keep_versions=2, grace="0s")
    there = merkle.spark.gc(
        spark, lakes[1].uri, keep_versions=2, grace="0s", frontier=1, tasks=3, **lakes[1].options
    )
    assert there.blocks_freed > 0
    assert sorted(there.freed) == sorted(here.freed)
    assert (there.blocks_kept, there.blocks_listed) == (here.blocks_kept, here.blocks_listed)
    assert there.databases == here.databases
    assert _blocks(lake_conn(lakes[0])) == _blocks(lake_conn(lakes[1]))
    assert {"mark", "list", "sweep"} <= set(there.phases)
    assert any("Spark tasks" in note for note in there.notes)
    check = lake_conn(lakes[1])
    assert merkle.verify(check).missing == []
    after = check.open_db("shop")
    assert after.to_arrow("t").equals(lake_conn(lakes[0]).open_db("shop").to_arrow("t"))


def test_dry_run_frees_nothing(spark: Any, file_lake: Lake, lake_conn: Any) -> None:
    conn = lake_conn(file_lake)
    _history(conn)
    conn.close()
    before = _blocks(lake_conn(file_lake))
    report = merkle.spark.gc(spark, file_lake.uri, keep_versions=1, grace="0s", dry_run=True)
    assert report.blocks_freed > 0
    assert _blocks(lake_conn(file_lake)) == before


def test_listing_prefixes_cover_every_cid_start() -> None:
    prefixes = listing_prefixes()
    assert len(set(prefixes)) == len(prefixes)
    for text in (
        "bafyr4iabc",
        "bafkreizz",
        "bafyreib",
        "QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG",
        "zb2rhe5P4",
        "bagaaiera",
    ):
        assert sum(text.startswith(p) for p in prefixes) == 1, text
