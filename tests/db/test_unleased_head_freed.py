"""A head opened without a lease, freed by a collection after newer commits, says why.

operations.md: a version opened without a lease and freed by a collection while
it was read raises MissingBlockError naming the block, the version and the
remedy. A value opened by ``version=`` did; a head opened by name (the common
long-lived reader) gave only "never written or has been garbage-collected"
(threads probe of the twenty-third session).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from aging import settle

import merkle
from merkle.blocks.cid import CID
from merkle.blocks.store import MissingBlockError

N = 5_000


def _rows(tag: str) -> pa.Table:
    return pa.table({"k": list(range(N)), "v": [f"{tag}{i}" for i in range(N)]})


def test_a_freed_head_value_names_its_version_and_the_remedy(tmp_path: Path) -> None:
    with merkle.connect(f"file://{tmp_path}", cache_bytes=1 << 16) as conn:
        conn.create_db("x").create_table("t", key="k").write("t", _rows("a")).commit()
        old = conn.open_db("x")  # the head, no lease
        for tag in "bcd":
            conn.open_db("x").write("t", _rows(tag)).compact("t").commit()
        settle(conn)  # every block older than the grace, on any clock granularity
        report = merkle.gc(conn, keep_versions=1, grace="0s")
        assert report.blocks_freed > 0
        with pytest.raises(MissingBlockError, match=r"version 1 of database 'x' was opened") as e:
            old.to_arrow("t")
        assert "lease=True" in str(e.value)


def test_a_block_missing_from_the_head_is_still_plain_damage(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}"
    with merkle.connect(uri) as conn:
        db = conn.create_db("x").create_table("t", key="k")
        db = db.write("t", _rows("a")).compact("t").commit()
        tablet = CID.parse(str(db.list_tablets("t")[0]["id"]))
        conn.store.delete(conn.blocks.key(tablet))  # damage: not a collection
    with merkle.connect(uri) as conn:
        head = conn.open_db("x")
        with pytest.raises(MissingBlockError) as e:
            head.to_arrow("t")
        assert str(tablet) in str(e.value)
        assert "lease" not in str(e.value)
