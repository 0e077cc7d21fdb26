"""The byte-bounded LRU cache and the BlockStore node cache built on it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from merkle.blocks import BlockStore, ByteLRU, encode_node
from merkle.blocks.store import node_weight
from merkle.storage.memory import MemoryStore


def test_least_recently_used_entries_are_evicted_first() -> None:
    cache: ByteLRU[str] = ByteLRU(100)
    cache.put("a", "A", 40)
    cache.put("b", "B", 40)
    assert cache.get("a") == "A"  # "a" is now the most recently used
    cache.put("c", "C", 40)
    assert cache.get("b") is None
    assert cache.get("a") == "A"
    assert cache.get("c") == "C"
    assert cache.nbytes == 80
    assert len(cache) == 2
    assert (cache.hits, cache.misses) == (3, 1)


def test_oversized_values_are_skipped_and_evict_nothing() -> None:
    cache: ByteLRU[str] = ByteLRU(100)
    cache.put("small", "s", 10)
    cache.put("huge", "h", 101)
    assert cache.get("huge") is None
    assert cache.get("small") == "s"


def test_replacing_discarding_and_clearing_keep_the_byte_count() -> None:
    cache: ByteLRU[int] = ByteLRU(100)
    cache.put("k", 1, 30)
    cache.put("k", 2, 50)
    assert cache.get("k") == 2
    assert cache.nbytes == 50
    cache.discard("k")
    cache.discard("absent")
    assert cache.nbytes == 0
    cache.put("x", 3, 10)
    cache.clear()
    assert (len(cache), cache.nbytes) == (0, 0)


def test_a_zero_budget_caches_nothing() -> None:
    cache: ByteLRU[int] = ByteLRU(0)
    cache.put("k", 1, 1)
    assert cache.get("k") is None


@settings(deadline=None)  # no timing thresholds on a shared machine
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 60)), max_size=60))
def test_the_budget_always_holds(operations: list[tuple[int, int]]) -> None:
    cache: ByteLRU[int] = ByteLRU(100)
    for key, size in operations:
        cache.put(key, key, size)
        assert cache.nbytes <= 100
        assert cache.nbytes == sum(cache._items[k][1] for k in cache._items)
        if size <= 100:
            assert cache.get(key) == key  # what was just put is always kept


def test_block_store_node_cache_is_bounded_in_bytes() -> None:
    nodes = [{"i": 1000 + i, "pad": bytes(500)} for i in range(50)]  # equal sizes
    weight = node_weight(len(encode_node(nodes[0])))  # what a decoded node costs in memory
    blocks = BlockStore(MemoryStore(), cache_bytes=10 * weight)
    cids = [blocks.put_node(node) for node in nodes]
    assert blocks.node_cache.nbytes <= 10 * weight
    assert len(blocks.node_cache) == 10
    blocks.node_cache.clear()
    for cid, node in zip(cids, nodes, strict=True):
        assert blocks.get_node(cid) == node
    assert blocks.node_cache.nbytes <= 10 * weight
    assert blocks.get_node(cids[-1]) is blocks.get_node(cids[-1])
