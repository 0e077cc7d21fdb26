"""``cache_bytes`` bounds the memory of the decoded caches, not only of their buffers.

A probe found a connection with ``cache_bytes=1_000_000`` holding 19 MB after one scan
of a table of one-row pages: a decoded page was charged its Arrow buffers (16 bytes for
two int64 values) but holds ~2 KB of objects, and a decoded node its encoded size (a
quarter of what it takes as Python objects).
"""

from __future__ import annotations

import merkle


def test_a_cache_of_tiny_pages_holds_about_cache_bytes() -> None:
    conn = merkle.connect("memory://", cache_bytes=1_000_000)
    db = conn.create_db("d").create_table("t", key="k", tablet_size_limit=8)
    db = db.write("t", [{"k": i, "v": i} for i in range(1_000)]).compact("t").commit()
    shared = conn.tables._shared
    shared.segments.clear()
    assert sum(1 for _ in db.scan("t")) == 1_000  # 2,000 blocks of one row: key and values
    # Each decoded one-row, one-column block is charged at least the ~1.4 KB it holds.
    assert len(shared.segments) <= shared.segments.capacity // 1_400
    assert shared.segments.nbytes <= shared.segments.capacity


def test_a_decoded_node_weighs_more_than_its_bytes() -> None:
    from merkle.blocks.store import node_weight

    assert node_weight(891) >= 3_800  # a tablet node of a few pages, decoded: ~3.8 KB
