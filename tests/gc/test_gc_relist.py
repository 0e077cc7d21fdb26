"""The sweep's last look at the candidates' timestamps: one listing or one ``stat`` each.

A collection lists the blocks before it takes its lock, so every candidate's
timestamp is read again under the lock before it is deleted (a writer at
work then may have refreshed a block it reused). It used to take one
``stat`` per candidate: on S3 one HEAD request per block freed (194 of a
small collection's ~300 requests). Where a store lists a page of objects
per request (S3: 1,000) and there are more candidates than pages, one
listing taken under the lock does the same. Either way a block refreshed
after the first listing is spared.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import Lake
from gc_helpers import backdate, connect, reachable

import merkle
from merkle.blocks.store import BLOCK_PREFIX


def _garbage_history(conn: merkle.Connection) -> tuple[set[str], str]:
    """A database whose head no longer reaches its first version's blocks (backdated two
    hours, so all are older than the grace); (those blocks, the head's root)."""
    db = conn.create_db("shop").create_table("t", key="k", patch_limit=0)
    v1 = db.write("t", [{"k": i, "v": "old"} for i in range(40)]).commit()
    head = v1.write("t", [{"k": i, "v": "new"} for i in range(40)]).commit()
    only_v1 = reachable(conn.store, [v1.root]) - reachable(conn.store, [head.root])
    backdate(conn.store, [BLOCK_PREFIX + cid for cid in only_v1], time.time() - 7200)
    return only_v1, head.root


@pytest.mark.parametrize("page", [1, 1000], ids=["stat-each", "relist"])
def test_a_block_refreshed_after_the_listing_is_spared_and_the_rest_freed(
    lake: Lake, page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect(lake) as conn:
        garbage, head = _garbage_history(conn)
        assert len(garbage) >= 3  # more candidates than listing pages: the relist path
        monkeypatch.setattr(conn.store, "list_page_size", page)  # S3's own is 1,000
        refreshed = sorted(garbage)[0]
        stats: list[str] = []
        real_stat, real_live = conn.store.stat, conn.leases.live

        def stat(key: str) -> Any:
            stats.append(key)
            return real_stat(key)

        def live(kind: str | None = None) -> Any:
            if kind == "writer":  # the lock is held and the first listing taken
                conn.store.touch(BLOCK_PREFIX + refreshed)
            return real_live(kind)

        monkeypatch.setattr(conn.store, "stat", stat)
        monkeypatch.setattr(conn.leases, "live", live)
        report = merkle.gc(conn, keep_versions=1, grace="1h")

        blocks_statted = [key for key in stats if key.startswith(BLOCK_PREFIX)]
        stored = {info.key[len(BLOCK_PREFIX) :] for info in conn.store.list(BLOCK_PREFIX)}
        assert refreshed in stored
        assert stored & garbage == {refreshed}
        assert reachable(conn.store, [head]) <= stored
        assert report.blocks_freed == len(garbage) - 1
        assert report.blocks_rechecked_spared == 1
        # A file store reads each timestamp inside its conditional delete (no stat); the
        # others stat each candidate before its batch, unless they listed again.
        each = page == 1 and lake.kind != "file"
        assert len(blocks_statted) == (len(garbage) if each else 0)
        assert merkle.verify(conn).ok
