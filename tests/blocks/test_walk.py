"""walk_levels: breadth-first, each block once, raw leaves never read, caches optional."""

from __future__ import annotations

import pytest

from merkle.blocks import CID, BlockStore, walk_levels
from merkle.errors import NotFoundError
from merkle.storage.memory import MemoryStore

from .spy import SpyStore


def small_dag(blocks: BlockStore) -> tuple[CID, CID, list[CID], list[CID]]:
    """root -> (a, b); a -> (leaf0, leaf1); b -> (leaf1, leaf2): leaf1 is shared."""
    leaves = [blocks.put(f"leaf {i}".encode(), "raw") for i in range(3)]
    a = blocks.put_node({"kids": [leaves[0], leaves[1]]})
    b = blocks.put_node({"kids": [leaves[1], leaves[2]], "name": "b"})
    root = blocks.put_node({"a": a, "b": b})
    return root, a, [a, b], leaves


def test_levels_come_breadth_first_and_each_block_once() -> None:
    blocks = BlockStore(MemoryStore())
    root, _, middle, leaves = small_dag(blocks)
    levels = list(walk_levels(blocks, [root, root], set()))
    assert levels == [[root], middle, leaves]


def test_seen_blocks_are_skipped_and_seen_grows() -> None:
    blocks = BlockStore(MemoryStore())
    root, a, middle, leaves = small_dag(blocks)
    seen = {a.bytes}
    levels = list(walk_levels(blocks, [root], seen))
    assert levels == [[root], [middle[1]], [leaves[1], leaves[2]]]  # nothing under a
    assert seen == {cid.bytes for cid in (a, root, middle[1], leaves[1], leaves[2])}


def test_raw_leaves_are_never_read() -> None:
    spy = SpyStore(MemoryStore())
    blocks = BlockStore(spy, cache_bytes=0)
    root, _, _, _ = small_dag(blocks)
    spy.reset()
    for _ in walk_levels(blocks, [root], set()):
        pass
    read = spy.calls["get"] + spy.calls["get_many"]
    assert read == 3  # root, a, b: the three nodes, no leaf


def test_a_missing_node_is_not_found_and_use_cache_false_reads_the_store() -> None:
    blocks = BlockStore(MemoryStore())
    root, a, _, _ = small_dag(blocks)
    list(walk_levels(blocks, [root], set()))  # every node is cached now
    blocks.store.delete(blocks.key(a))  # behind the cache's back
    assert len(list(walk_levels(blocks, [root], set()))) == 3  # the cache still knows a
    with pytest.raises(NotFoundError, match=str(a)):
        list(walk_levels(blocks, [root], set(), use_cache=False))
