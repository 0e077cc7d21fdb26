"""``cache_bytes`` bounds what the caches hold: every entry is charged its objects too.

A probe found the key-index cache charged a small pending batch's index its numpy words
only (8 bytes a key) while the index, its Arrow array and numpy array and the cache's
entry held ~1-2 KB: a process committing one row at a time and reading kept one per
commit, and a key-index budget of 1 MB counted as full only at ~30,000 of them (~31 MB).
Each test fills a cache with many small entries through its real code path and checks,
with tracemalloc and Arrow's memory pool, that emptying it frees at most twice what it
was charged (objects made in C++ are seen by neither, so the real ratio is higher).
"""

from __future__ import annotations

import functools
import gc
import random
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import merkle
from merkle.blocks import BlockStore
from merkle.blocks.cache import ByteLRU
from merkle.blocks.cid import CID
from merkle.storage import open_store
from merkle.tablets import Table, TableStore
from merkle.tablets.batch import Overlay
from merkle.tablets.keycodecs import IntCodec, StrCodec
from merkle.tablets.keyindex import INDEX_OVERHEAD, KeyIndex, combine
from merkle.tablets.leaves import _index_of

#: The budget of every cache in these tests (each is at least 1 MB whatever cache_bytes).
_BUDGET = 1 << 20


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def _freed(lru: ByteLRU[Any], keep: Callable[[object], bool] = lambda _: False) -> int:
    """The bytes freed by dropping the entries of ``lru`` whose value ``keep`` refuses:
    Python's heap (tracemalloc) plus Arrow's pool."""
    gc.collect()
    heap, pool = tracemalloc.get_traced_memory()[0], pa.total_allocated_bytes()
    for key in [key for key, (value, _) in lru._items.items() if not keep(value)]:
        lru.discard(key)
    gc.collect()
    freed = heap - tracemalloc.get_traced_memory()[0] + pool - pa.total_allocated_bytes()
    return int(freed)


def _charged(lru: ByteLRU[Any], kind: type | None = None) -> tuple[int, int]:
    """How many entries ``lru`` holds (of values of ``kind``) and the bytes charged for them."""
    sizes = [size for value, size in lru._items.values() if kind is None or isinstance(value, kind)]
    return len(sizes), sum(sizes)


def _commit_and_read(key_type: str, commits: int, *, scan: bool = True) -> merkle.Connection:
    """A long-lived connection committing one row at a time, each commit read back."""
    conn = merkle.connect("memory://", cache_bytes=_BUDGET)
    conn.create_db("x").create_table("t", key="k").commit()
    rnd = random.Random(1)

    def key() -> int | str:
        number = rnd.randint(0, 10**6)
        return number if key_type == "int" else f"key-{number}"

    for i in range(commits):
        db = conn.open_db("x")
        db.get_records("t", [key()])
        if scan:  # a scan folds the pending batches (an overlay, cached with the segments)
            next(iter(db.scan("t", limit=1)), None)
        db.write("t", [{"k": key(), "v": i}]).commit()
    return conn


@pytest.mark.parametrize("key_type", ["int", "str"])
def test_small_pending_batches_key_indexes_stay_within_the_budget(
    traced: None, key_type: str
) -> None:
    conn = _commit_and_read(key_type, 700)
    lru = conn.tables._shared.key_indexes
    entries, charged = _charged(lru)
    assert lru.capacity == _BUDGET
    assert charged <= _BUDGET
    assert entries >= 300  # one index (or two) per small batch: many small entries
    freed = _freed(lru)
    assert freed <= 2 * charged, (entries, charged, freed)
    assert freed <= 2 * _BUDGET
    conn.close()


def test_segments_of_small_batches_stay_within_the_budget(traced: None) -> None:
    conn = _commit_and_read("int", 300, scan=False)
    lru = conn.tables._shared.segments
    entries, charged = _charged(lru)
    assert entries >= 100  # the decoded one-row segments
    freed = _freed(lru)
    assert freed <= 2 * charged, (entries, charged, freed)
    conn.close()


def test_overlays_of_small_pending_areas_stay_within_the_budget(traced: None) -> None:
    store = TableStore(BlockStore(open_store("memory://")), cache_bytes=_BUDGET)
    codec = IntCodec()
    for i in range(600):  # tables of one pending row each, each read through its overlay
        table = Table.new(store, key_field="k", key_codec="int")
        table = table.write(pa.table({"k": [i], "v": [i]}), 1)
        assert len(Overlay.load(store, table.root.pending, "k", codec)) == 1
    lru = store._shared.segments
    _freed(lru, keep=lambda value: isinstance(value, Overlay))  # the batches' segments
    entries, charged = _charged(lru, Overlay)
    assert entries >= 50
    assert charged <= _BUDGET
    freed = _freed(lru)
    assert freed <= 2 * charged, (entries, charged, freed)
    assert freed <= 2 * _BUDGET


def test_node_caches_of_small_batches_stay_within_the_budget(traced: None) -> None:
    conn = _commit_and_read("int", 300)
    for lru in (conn.tables._shared.nodes, conn.tables.blocks.node_cache):
        entries, charged = _charged(lru)
        assert entries >= 100
        assert charged <= lru.capacity
        freed = _freed(lru)
        assert freed <= 2 * charged, (entries, charged, freed)
    conn.close()


def _int_keys(i: int) -> KeyIndex:
    return KeyIndex(combine(IntCodec().encode_array(pa.array([i], pa.int64()))))


def _words(i: int) -> KeyIndex:  # a page's index: its order words, encodings made if asked
    index = _index_of(IntCodec(), pa.array([i], pa.int64()))
    assert isinstance(index, KeyIndex)
    return index


def _joined(i: int) -> KeyIndex:  # a tablet's index over its pages
    return KeyIndex.joined([_words(i), _words(i + 1)])


def _str_keys(i: int) -> KeyIndex:
    return KeyIndex(combine(StrCodec().encode_array(pa.array([f"key-{i}"]))))


def _deletes(i: int) -> KeyIndex:  # a batch's deleted keys, stored encoded
    return KeyIndex(pa.array([i.to_bytes(8, "big")], type=pa.binary()))


@pytest.mark.parametrize("build", [_int_keys, _words, _joined, _str_keys, _deletes])
def test_every_kind_of_key_index_is_charged_what_it_holds(
    traced: None, build: Callable[[int], KeyIndex]
) -> None:
    conn = merkle.connect("memory://", cache_bytes=_BUDGET)
    store = conn.tables
    for i in range(3_000):  # more than the budget holds
        owner = CID.of(i.to_bytes(8, "big"))
        store.key_index(owner, functools.partial(build, i), encoding="e", part="page")
    lru = store._shared.key_indexes
    entries, charged = _charged(lru)
    assert charged <= _BUDGET < charged + 4 * INDEX_OVERHEAD  # full: evicting
    freed = _freed(lru)
    assert freed <= 2 * charged, (entries, charged, freed)
    conn.close()


def test_a_key_index_counts_the_whole_buffers_of_a_slice() -> None:
    keys = combine(IntCodec().encode_array(pa.array(np.arange(10_000), pa.int64())))
    whole, one = KeyIndex(keys), KeyIndex(keys.slice(0, 1))
    # The slice keeps the whole array's buffers (160 KB) alive: it is charged for them.
    assert one.nbytes >= keys.get_total_buffer_size() + INDEX_OVERHEAD
    assert whole.nbytes >= one.nbytes
