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
from aging import settle
from conftest import Lake, make_lake

import merkle
import merkle.spark
from merkle.spark.gc import listing_prefixes

from .helpers import block_names, copy_lake, gc_history

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["file", pytest.param("s3", marks=pytest.mark.s3)])
def test_spark_gc_keeps_and_frees_what_merkle_gc_does(
    spark: Any, tmp_path: Path, request: pytest.FixtureRequest, lake_conn: Any, kind: str
) -> None:
    lakes: list[Lake] = [
        make_lake(kind, tmp_path / "a", request),
        make_lake(kind, tmp_path / "b", request),
    ]
    conn = lake_conn(lakes[0])
    gc_history(conn)
    conn.close()  # no writer lease left for the collector to wait for
    copy_lake(lakes[0], lakes[1])
    assert block_names(lake_conn(lakes[0])) == block_names(lake_conn(lakes[1]))
    for lake in lakes:  # S3's whole-second timestamps: a block of this second is new
        settle(lake_conn(lake))
    here = merkle.gc(lake_conn(lakes[0]), keep_versions=2, grace="0s")
    there = merkle.spark.gc(
        spark, lakes[1].uri, keep_versions=2, grace="0s", frontier=1, tasks=3, **lakes[1].options
    )
    assert there.blocks_freed > 0
    assert sorted(there.freed) == sorted(here.freed)
    assert (there.blocks_kept, there.blocks_listed) == (here.blocks_kept, here.blocks_listed)
    assert there.databases == here.databases
    assert block_names(lake_conn(lakes[0])) == block_names(lake_conn(lakes[1]))
    assert {"mark", "list", "sweep"} <= set(there.phases)
    assert any("Spark tasks" in note for note in there.notes)
    check = lake_conn(lakes[1])
    assert merkle.verify(check).missing == []
    after = check.open_db("shop")
    assert after.to_arrow("t").equals(lake_conn(lakes[0]).open_db("shop").to_arrow("t"))


def test_dry_run_frees_nothing(spark: Any, file_lake: Lake, lake_conn: Any) -> None:
    conn = lake_conn(file_lake)
    gc_history(conn)
    conn.close()
    before = block_names(lake_conn(file_lake))
    report = merkle.spark.gc(spark, file_lake.uri, keep_versions=1, grace="0s", dry_run=True)
    assert report.blocks_freed > 0
    assert block_names(lake_conn(file_lake)) == before


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
