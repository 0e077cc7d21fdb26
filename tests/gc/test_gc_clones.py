"""Clones share their source's blocks, and keep them alive when the source is dropped."""

from __future__ import annotations

import pytest
from conftest import Lake
from gc_helpers import (
    block_keys,
    build_history,
    connect,
    dump,
    missing_blocks,
    reachable,
    same_dump,
    settle,
)

import merkle
from merkle.errors import NotFoundError


def test_clones_keep_shared_blocks_after_the_source_is_dropped(lake: Lake) -> None:
    with connect(lake) as conn:
        src = build_history(conn, "src", commits=4)
        old_clone = conn.create_db("old-clone", root=src[2])  # from a past version
        head_clone = conn.create_db("head-clone", root=src[-1])
        by_root = conn.create_db("by-root", root=src[3].root)  # from a root CID string
        # The source moves on after the clones, then is dropped.
        moved = src[-1].write("orders", [{"id": 999, "qty": 1}]).commit()
        conn.drop_db("src")
        expected = {
            "old-clone": dump(src[2]),
            "head-clone": dump(src[-1]),
            "by-root": dump(src[3]),
        }
        clone_roots = [old_clone.root, head_clone.root, by_root.root]
        assert clone_roots == [src[2].root, src[-1].root, src[3].root]  # O(1): shared roots
        settle(conn)
    with connect(lake) as conn:
        everything = block_keys(conn.store)
        shared = reachable(conn.store, clone_roots)
        report = merkle.gc(conn, keep_versions=1, grace="0s")
        # Only the blocks no clone reaches went: the source's own later changes.
        assert set(report.freed) == everything - shared
        assert report.blocks_freed > 0
        assert reachable(conn.store, [moved.root]) - shared <= set(report.freed)
        assert block_keys(conn.store) == shared
    with connect(lake) as conn:
        for name, want in expected.items():
            db = conn.open_db(name)
            assert same_dump(dump(db), want), name
            assert missing_blocks(conn.store, db.root) == []
        with pytest.raises(NotFoundError, match="dropped"):
            conn.open_db("src")
        with pytest.raises(NotFoundError, match="removed by retention"):
            conn.open_db("src", version=2)
        assert merkle.verify(conn).ok


def test_a_clone_changed_after_gc_still_reads_its_shared_blocks(lake: Lake) -> None:
    with connect(lake) as conn:
        src = build_history(conn, "src", commits=3)
        clone = conn.create_db("dev", root=src[-1])
        conn.drop_db("src")
    with connect(lake) as conn:
        merkle.gc(conn, keep_versions=1, grace="0s")
        merkle.gc(conn, keep_versions=1, grace="0s")
    with connect(lake) as conn:
        dev = conn.open_db("dev")
        dev = dev.write("orders", [{"id": 5000, "qty": 5}]).delete("orders", [2]).commit()
        rows = {r["id"]: r for r in dev.scan("orders")}
        before = {r["id"]: r for r in clone.scan("orders")}
        assert rows.keys() == (before.keys() - {2}) | {5000}
        assert all(rows[k] == before[k] for k in before.keys() - {2})
    with connect(lake) as conn:
        merkle.gc(conn, keep_versions=1, grace="0s")
        assert missing_blocks(conn.store, conn.open_db("dev").root) == []
        assert merkle.verify(conn).ok
