"""Tablets kept in pages: what a read, an existence check and a write touch, and old tablets.

Every test runs on a cold table store over a store that records which blocks
are read, so "a point read fetches one page per family" is checked block by
block, not inferred from timings.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from merkle.blocks import BlockStore
from merkle.blocks.codec import check_node, encode_node
from merkle.errors import IntegrityError
from merkle.gc.mark import Marker
from merkle.storage import ObjectStore
from merkle.storage.memory import MemoryStore
from merkle.tablets import Limits, Table, TableStore, validate
from merkle.tablets import store as store_module
from merkle.tablets.nodes import BASE, PAGED_TABLET_VERSION, TABLET, TabletNode
from merkle.tablets.rows import sort_rows
from merkle.tablets.segment import encode_segment, split_families
from merkle.tablets.tree import Tree
from tests.blocks.spy import SpyStore

ROWS = 5_000
LIMITS = Limits(tablet_size=2_000, branching=8, patch=100, page_size=128)


class _Reads(SpyStore):
    """A store that remembers every key read with ``get``."""

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self.read: list[str] = []
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes:
        with self._lock:
            self.read.append(key)
        return super().get(key)


def _rows(keys: np.ndarray) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "name": pa.array([f"n{k}" for k in keys]),
            "price": pa.array(keys * 0.5),
            "blob": pa.array([f"{k}" * 3 for k in keys]),
        }
    )


@pytest.fixture
def lake() -> tuple[MemoryStore, Table]:
    store = MemoryStore()
    ts = TableStore(BlockStore(store))
    table = Table.new(ts, key_field="id", families={"big": ["blob"]}, limits=LIMITS)
    keys = np.random.default_rng(3).permutation(ROWS) * 2  # even keys: odd ones are absent
    table = table.write(_rows(keys), version=1)
    return store, Table.load(ts, table.save())


def _cold(store: MemoryStore, table: Table) -> tuple[_Reads, Table]:
    reads = _Reads(store)
    ts = TableStore(BlockStore(reads))
    return reads, Table.load(ts, table.save())


def _page_blocks(table: Table) -> tuple[set[str], set[str]]:
    """The object keys of every key block, and of every family block."""
    keys, families = set(), set()
    for ref in table.tablets():
        for page in table.ts.tablet(ref.cid).pages:
            keys.add(BlockStore.key(page.keys))
            families.update(BlockStore.key(c) for c in page.families.values() if c is not None)
    return keys, families


def test_tablets_are_paged(lake: tuple[MemoryStore, Table]) -> None:
    _, table = lake
    validate(table.ts, table)
    tablets = [table.ts.tablet(ref.cid) for ref in table.tablets()]
    assert all(t.paged and len(t.pages) > 1 for t in tablets)
    assert all(page.count <= LIMITS.page_rows for t in tablets for page in t.pages)
    node = table.ts.blocks.get_node(table.tablets()[0].cid)
    assert node["v"] == PAGED_TABLET_VERSION
    assert sorted(node["pages"]["families"]) == ["base", "big"]


def test_point_read_fetches_one_block_per_family(lake: tuple[MemoryStore, Table]) -> None:
    store, table = lake
    key_blocks, family_blocks = _page_blocks(table)
    reads, cold = _cold(store, table)
    rows = cold.get([1234])
    assert rows.column("name").to_pylist() == ["n1234"]
    data = [k for k in reads.read if k in key_blocks | family_blocks]
    assert len([k for k in data if k in key_blocks]) == 1
    assert len([k for k in data if k in family_blocks]) == 2  # base and "big"
    reads.read.clear()
    assert cold.get([8_000], fields=["name"]).column("name").to_pylist() == ["n8000"]
    data = [k for k in reads.read if k in key_blocks | family_blocks]
    assert len(data) == 2  # its key block and its base block: "big" is not needed


def test_a_lookup_of_many_keys_reads_each_page_once_when_they_outgrow_the_cache() -> None:
    """Keys in every page of 20 tablets, a decoded cache that holds a few tablets'
    pages but not all: each page is read (and decoded) once. Fetching every
    tablet's pages first and taking rows after read most of them twice once they
    outgrew the cache (1,000 random keys in 10M rows: ~450 MB of decoded pages
    against a 256 MB cache)."""
    store = MemoryStore()
    ts = TableStore(BlockStore(store))
    limits = Limits(tablet_size=1_000, branching=8, patch=100, page_size=128)
    table = Table.new(ts, key_field="id", families={"big": ["blob"]}, limits=limits)
    rows = 20_000
    table = table.write(_rows(np.random.default_rng(4).permutation(rows) * 2), version=1)
    assert len(table.tablets()) == 20
    key_blocks, family_blocks = _page_blocks(table)
    biggest = max(ref.size for ref in table.tablets())
    reads = _Reads(store)
    cold = Table.load(TableStore(BlockStore(reads), cache_bytes=12 * biggest), table.save())
    wanted = list(range(0, 2 * rows, 100))  # even keys exist: one or two in every page
    found = cold.get(wanted)
    assert sorted(found.column("id").to_pylist()) == wanted
    data = [k for k in reads.read if k in key_blocks | family_blocks]
    assert len(data) == len(set(data)) == len(key_blocks | family_blocks)


def _decoded_blocks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one for every block the table store decodes."""
    decoded: list[int] = []
    real = store_module.decode_segment

    def counting(data: bytes, columns: Any = None) -> pa.Table:
        decoded.append(1)
        return real(data, columns)

    monkeypatch.setattr(store_module, "decode_segment", counting)
    return decoded


@pytest.mark.parametrize("cache_bytes", [1, 2_000, 1 << 30])
def test_a_scan_decodes_every_block_once_whatever_the_cache_size(
    lake: tuple[MemoryStore, Table], monkeypatch: pytest.MonkeyPatch, cache_bytes: int
) -> None:
    """A scan fetches a run of leaves ahead and then reads them page by page; with a
    cache smaller than what it fetched, every block was decoded three times (the
    scan's fetch, the run of pages' fetch, the page read; a 10M-row scan with a 4 MB
    cache took 0.9-1.5 s against ~0.4 s with 12 MB)."""
    store, table = lake
    decoded: list[bytes] = []
    real = store_module.decode_segment

    def counting(data: bytes, columns: Any = None) -> pa.Table:
        decoded.append(data)
        return real(data, columns)

    monkeypatch.setattr(store_module, "decode_segment", counting)
    cold = Table.load(TableStore(BlockStore(store), cache_bytes=cache_bytes), table.save())
    rows = cold.to_arrow()
    assert rows.column("id").to_pylist() == list(range(0, 2 * ROWS, 2))
    assert rows.column("blob").to_pylist() == [f"{k}" * 3 for k in range(0, 2 * ROWS, 2)]
    key_blocks, family_blocks = _page_blocks(table)
    assert len(decoded) == len(key_blocks | family_blocks)
    decoded.clear()
    assert sum(batch.num_rows for batch in cold.scan(fields=["name"])) == ROWS
    # A projection: each page's key block and base family block ("name"), unless cached.
    assert len(decoded) == (0 if cache_bytes == 1 << 30 else 2 * len(key_blocks))


def test_a_lookup_bigger_than_the_cache_does_not_fill_it(
    lake: tuple[MemoryStore, Table], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read whose pages would take more than half the decoded cache leaves the
    cache to other reads (it could only churn through it); a smaller read
    keeps its pages, so reading the same keys again decodes nothing."""
    store, table = lake
    wanted = list(range(0, 2 * ROWS, 50))  # one or two keys in every page
    decoded = _decoded_blocks(monkeypatch)
    biggest = max(ref.size for ref in table.tablets())
    small = TableStore(BlockStore(store), cache_bytes=3 * biggest)
    cold = Table.load(small, table.save())
    assert sorted(cold.get(wanted).column("id").to_pylist()) == wanted
    first = len(decoded)
    assert first
    assert small._segments.nbytes == 0
    cold.get(wanted)
    assert len(decoded) == 2 * first  # nothing kept: decoded again
    roomy = Table.load(TableStore(BlockStore(store)), table.save())
    decoded.clear()
    assert sorted(roomy.get(wanted).column("id").to_pylist()) == wanted
    assert len(decoded) == first
    assert sorted(roomy.get(wanted, fields=["name"]).column("name").to_pylist()) == sorted(
        f"n{k}" for k in wanted
    )
    assert len(decoded) == first  # kept: the second read (a projection of it) decodes none


def test_a_lookup_refuses_a_page_whose_blocks_disagree_on_its_rows(
    lake: tuple[MemoryStore, Table],
) -> None:
    """A family block of another page (with another row count) linked into a page is
    an IntegrityError naming the family, never rows of one page joined to the
    keys of another."""
    _, table = lake
    ts = table.ts
    ref = table.tablets()[0]
    node = ts.blocks.get_node(ref.cid)
    counts = node["pages"]["counts"]
    other = next(i for i, c in enumerate(counts) if c != counts[0])
    big = list(node["pages"]["families"]["big"])
    big[0] = big[other]
    damaged = {
        **node,
        "pages": {**node["pages"], "families": {**node["pages"]["families"], "big": big}},
    }
    cid = ts.put_node(damaged)
    first_key = ts.tablet(ref.cid).pages[0].first_key
    row = ts.segment(ts.tablet(ref.cid).pages[0].keys).column(0)[0].as_py()
    assert first_key == table.codec.encode(row)
    tree = Tree(ts, table.spec)
    with pytest.raises(IntegrityError, match="family 'big' of a page holds"):
        tree.leaves_io.take(cid, [first_key], None)
    with pytest.raises(IntegrityError, match="family 'big' of a page holds"):
        tree.leaves_io.take_many([(cid, [first_key])], None, keep=False)


class _PagePairs(SpyStore):
    """A remote store (not ``local``) whose reads of one page's key block and family
    block wait for each other: a page read that fetched them one after the other
    breaks the barrier instead of returning."""

    bulk_workers = 4

    def __init__(self, inner: MemoryStore, pairs: dict[str, threading.Barrier]) -> None:
        super().__init__(inner)
        self.pairs = pairs

    def get(self, key: str) -> bytes:
        barrier = self.pairs.get(key)
        if barrier is not None:
            barrier.wait(timeout=30)
        return super().get(key)


def test_a_lookup_on_a_remote_store_fetches_each_pages_blocks_together() -> None:
    """Each page of a multi-key lookup is a task on the workers; on a remote store its
    key block and family block are two requests, sent at once (on the store's I/O
    threads: a worker cannot fan out on the workers again), not one after the
    other: that would double the latency of a lookup of a few pages."""
    store = MemoryStore()
    ts = TableStore(BlockStore(store))
    keys = np.random.default_rng(6).permutation(ROWS) * 2
    table = Table.new(ts, key_field="id", limits=LIMITS).write(_rows(keys), version=1).flush()
    pages = [page for ref in table.tablets() for page in ts.tablet(ref.cid).pages]
    first, last = pages[0], pages[-1]
    wanted = [
        ts.segment(page.keys).column(0)[0].as_py() for page in (first, last)
    ]  # one key in each of two pages
    pairs: dict[str, threading.Barrier] = {}
    for page in (first, last):
        (family,) = [cid for cid in page.families.values() if cid is not None]
        barrier = threading.Barrier(2)
        pairs[BlockStore.key(page.keys)] = pairs[BlockStore.key(family)] = barrier
    remote = _PagePairs(store, pairs)
    try:
        cold = Table.load(TableStore(BlockStore(remote), workers=2), table.save())
        found = cold.get_arrow(wanted, fields=["name"])
    finally:
        ObjectStore.close(remote)  # its I/O threads
    assert found.column("name").to_pylist() == [f"n{k}" for k in wanted]
    assert not any(barrier.broken for barrier in pairs.values())


def test_a_projection_reads_its_families_and_decodes_only_its_columns(
    lake: tuple[MemoryStore, Table], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, table = lake
    family: dict[str, set[str]] = {}
    for ref in table.tablets():
        for page in table.ts.tablet(ref.cid).pages:
            for name, cid in page.families.items():
                if cid is not None:
                    family.setdefault(name, set()).add(BlockStore.key(cid))
    decoded: list[list[str]] = []
    real = store_module.decode_segment

    def recording(data: bytes, columns: Any = None) -> pa.Table:
        out = real(data, columns)
        decoded.append(out.column_names)
        return out

    monkeypatch.setattr(store_module, "decode_segment", recording)
    reads, cold = _cold(store, table)
    rows = cold.to_arrow(fields=["blob"])  # base (none of its columns decoded) and "big"
    assert rows.column_names == ["id", "blob"]
    assert rows.column("blob").to_pylist()[:2] == ["000", "222"]
    assert family["big"] <= set(reads.read)
    assert decoded
    assert all(names in (["id"], ["blob"], []) for names in decoded)
    reads.read.clear()
    decoded.clear()
    rows = cold.to_arrow(fields=["name"])
    assert rows.column_names == ["id", "name"]
    assert rows.column("name").to_pylist() == [f"n{k}" for k in range(0, 2 * ROWS, 2)]
    assert not set(reads.read) & family["big"]
    assert family[BASE] <= set(reads.read)  # read and verified whole...
    assert decoded
    assert all("price" not in names for names in decoded)  # ...but "price" never decoded


def test_existence_check_reads_key_blocks_only(lake: tuple[MemoryStore, Table]) -> None:
    store, table = lake
    key_blocks, family_blocks = _page_blocks(table)
    reads, cold = _cold(store, table)
    wanted = sorted(cold.codec.encode(k) for k in (10, 11, 4_000, 9_998, 20_000))
    found = Tree(cold.ts, cold.spec).exists(cold.data_ref(), wanted)
    assert found == [True, False, True, True, False]
    assert not set(reads.read) & family_blocks
    assert set(reads.read) & key_blocks


def test_an_existence_check_decodes_each_key_block_once_with_a_tiny_cache(
    lake: tuple[MemoryStore, Table], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key blocks are fetched at once, then searched: with a cache too small to keep
    them in between, each was decoded three times (the check's fetch, the tablet's
    fetch, the search)."""
    store, table = lake
    decoded = _decoded_blocks(monkeypatch)
    cold = Table.load(TableStore(BlockStore(store), cache_bytes=1), table.save())
    keys = list(range(0, 2 * ROWS, 97))  # keys in many pages of every tablet
    wanted = sorted(cold.codec.encode(k) for k in keys)
    found = Tree(cold.ts, cold.spec).exists(cold.data_ref(), wanted)
    assert found == [cold.codec.decode(k) % 2 == 0 for k in wanted]
    pages = [page for ref in table.tablets() for page in table.ts.tablet(ref.cid).pages]
    assert 1 < len(decoded) <= len(pages)  # at most once each (three times without holding)


def test_small_commit_checks_existence_on_key_blocks(lake: tuple[MemoryStore, Table]) -> None:
    store, table = lake
    _, family_blocks = _page_blocks(table)
    reads, cold = _cold(store, table)
    written = cold.write(_rows(np.array([4, 5, 7_000])), version=2)  # two updates, one insert
    assert written.count == ROWS + 1
    assert not set(reads.read) & family_blocks


def test_flush_rewrites_only_the_touched_pages(lake: tuple[MemoryStore, Table]) -> None:
    _, table = lake
    changed = table.write(_rows(np.array([1_001, 1_003, 1_005])), version=2).flush()
    validate(changed.ts, changed)
    before = {p.keys for ref in table.tablets() for p in table.ts.tablet(ref.cid).pages}
    after = {p.keys for ref in changed.tablets() for p in changed.ts.tablet(ref.cid).pages}
    assert len(after - before) == 1  # the one page that holds keys 1,000 to 1,006
    assert changed.get([1_003]).column("name").to_pylist() == ["n1003"]


def test_a_growing_tablet_splits_at_page_boundaries(lake: tuple[MemoryStore, Table]) -> None:
    _, table = lake
    last = table.tablets()[-1]
    old_pages = {p.keys for p in table.ts.tablet(last.cid).pages}
    grown = table
    for version, start in enumerate(range(ROWS * 2, ROWS * 2 + 1_500, 100), start=2):
        grown = grown.write(_rows(np.arange(start, start + 100)), version=version).flush()
    validate(grown.ts, grown)
    assert len(grown.tablets()) > len(table.tablets())
    pages = {p.keys for ref in grown.tablets() for p in grown.ts.tablet(ref.cid).pages}
    # Every page of the old last tablet is reused but the one that took the appended rows.
    assert len(old_pages - pages) <= 1


def test_gc_marking_reaches_every_page(lake: tuple[MemoryStore, Table]) -> None:
    _, table = lake
    marker = Marker(table.ts.blocks)
    marker.mark([table.save()], "the table")
    key_blocks, family_blocks = _page_blocks(table)
    marked = {BlockStore.key(c) for c in map(_cid, marker.marked)}
    assert key_blocks | family_blocks <= marked


def _cid(raw: bytes):  # type: ignore[no-untyped-def]
    from merkle.blocks.cid import CID

    return CID.from_bytes(raw)


def _legacy(table: Table, keys: np.ndarray) -> list[str]:
    """Version 1 tablets (one segment per family), as merkle-db wrote them before pages."""
    spec = table.spec
    rows = sort_rows(_rows(keys), "id", spec.codec)
    ids = []
    for start in range(0, len(rows), 1_000):
        piece = rows.slice(start, min(start + 1_000, len(rows)))
        parts = split_families(piece.table, key_field="id", families=spec.families)
        segments = {}
        size = 0
        for name, part in parts.items():
            if name == BASE or part.num_columns:
                data = encode_segment(part)
                segments[name] = table.ts.blocks.put(data, "raw")
                size += len(data)
        node = TabletNode(
            len(piece), size, piece.keys[0].as_py(), piece.keys[len(piece) - 1].as_py(), segments
        )
        ids.append(table.ts.put_node(node.to_node()))
    return ids


def test_key_blocks_of_fixed_width_keys_are_uncompressed(lake: tuple[MemoryStore, Table]) -> None:
    """Sorted integer keys decode ~13x faster uncompressed (pages.encode_page); family
    blocks and key blocks of string keys stay LZ4 (the default segment codec)."""
    _, table = lake
    ts = table.ts
    page = ts.tablet(table.tablets()[0].cid).pages[0]
    keys = ts.segment(page.keys)
    assert ts.blocks.get(page.keys) == encode_segment(keys, compression=None)
    base = ts.segment(page.families[BASE])
    assert ts.blocks.get(page.families[BASE]) == encode_segment(base)
    named = Table.new(ts, key_field="name", limits=LIMITS).write(_rows(np.arange(300)), version=1)
    page = ts.tablet(named.flush().tablets()[0].cid).pages[0]
    assert ts.blocks.get(page.keys) == encode_segment(ts.segment(page.keys))


def test_lz4_key_blocks_of_earlier_writers_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Key blocks were LZ4 before: a lake written so reads, finds, scans and takes writes."""
    from merkle.tablets import pages

    store = MemoryStore()
    monkeypatch.setattr(pages, "_key_block_codec", lambda table, slot: pages.SEGMENT_CODEC)
    ts = TableStore(BlockStore(store))
    keys = np.random.default_rng(5).permutation(ROWS) * 2
    written = Table.new(ts, key_field="id", limits=LIMITS).write(_rows(keys), version=1)
    saved = written.flush().save()
    page = ts.tablet(written.flush().tablets()[0].cid).pages[0]
    assert ts.blocks.get(page.keys) == encode_segment(ts.segment(page.keys))  # LZ4
    monkeypatch.undo()
    _, cold = _cold(store, Table.load(ts, saved))
    validate(cold.ts, cold)
    assert cold.get([1234, 1235]).column("name").to_pylist() == ["n1234"]
    assert cold.to_arrow().num_rows == ROWS
    changed = cold.write(_rows(np.array([1235])), version=2).flush()
    validate(cold.ts, changed)
    assert changed.get([1234, 1235]).column("name").to_pylist() == ["n1234", "n1235"]


def test_version_1_tablets_read_and_turn_into_pages_when_written() -> None:
    ts = TableStore(BlockStore(MemoryStore()))
    families = {"big": ["blob"]}
    empty = Table.new(ts, key_field="id", key_codec="int", families=families, limits=LIMITS)
    table = empty.build_from(_legacy(empty, np.arange(0, 6_000, 2)))
    validate(ts, table)
    assert not any(ts.tablet(ref.cid).paged for ref in table.tablets())
    assert table.get([10]).column("blob").to_pylist() == ["101010"]
    assert table.to_arrow().num_rows == 3_000
    assert [t.column("id")[0].as_py() for t in table.scan(from_pk=2_001, limit=1)] == [2_002]
    changed = table.write(_rows(np.array([11])), version=2).flush()
    validate(ts, changed)
    paged = [ts.tablet(ref.cid).paged for ref in changed.tablets()]
    assert paged == [True, False, False]  # only the tablet the write touched was rewritten
    assert changed.get([11, 12]).column("name").to_pylist() == ["n11", "n12"]
    # One lookup across the paged tablet and both version 1 tablets.
    found = changed.get_arrow([11, 2_500, 2_502, 5_998, 6_000], fields=["blob"])
    assert found.column("id").to_pylist() == [11, 2_500, 2_502, 5_998]
    assert found.column("blob").to_pylist() == [
        "111111",
        *(f"{k}" * 3 for k in (2_500, 2_502, 5_998)),
    ]


def test_a_reader_of_version_1_refuses_a_paged_tablet_asking_for_an_upgrade(
    lake: tuple[MemoryStore, Table],
) -> None:
    _, table = lake
    node = table.ts.blocks.get_node(table.tablets()[0].cid)
    with pytest.raises(IntegrityError, match="upgrade merkle-db"):
        check_node(node, TABLET)  # what a merkle-db from before pages does with it
    future = {**node, "v": PAGED_TABLET_VERSION + 1}
    with pytest.raises(IntegrityError, match="upgrade merkle-db"):
        TabletNode.from_node(future)


def test_damaged_page_layouts_are_integrity_errors(lake: tuple[MemoryStore, Table]) -> None:
    _, table = lake
    node = table.ts.blocks.get_node(table.tablets()[0].cid)
    pages = node["pages"]
    for damaged in (
        {**pages, "counts": pages["counts"][:-1]},
        {**pages, "families": {"big": pages["families"]["big"]}},
        {**pages, "keys": ["not a link", *pages["keys"][1:]]},
        {**pages, "first_keys": [b"\x00", *pages["first_keys"][1:]]},
    ):
        with pytest.raises(IntegrityError, match="malformed"):
            TabletNode.from_node({**node, "pages": damaged})
    assert encode_node(TabletNode.from_node(node).to_node()) == encode_node(node)


@pytest.mark.parametrize("wanted", [1, 2, 7, 40, 300])
def test_lookups_through_a_wide_index_node_find_every_key(wanted: int) -> None:
    """Few keys are routed by a bisect each (Tree.locate), many by cutting the keys at every
    separator: both give the records of the keys that exist, and nothing else."""
    ts = TableStore(BlockStore(MemoryStore()))
    limits = Limits(tablet_size=8, branching=128, patch=4, page_size=4)
    keys = np.random.default_rng(7).permutation(600) * 2
    table = Table.new(ts, key_field="id", limits=limits).write(_rows(keys), version=1).flush()
    root = ts.index(table.data_ref().cid)
    assert len(root.keys) > 8 * 7  # wide enough that up to 7 keys take the bisect route
    rng = np.random.default_rng(wanted)
    for _ in range(5):
        asked = sorted({int(k) for k in rng.integers(-5, 1_205, wanted)})
        found = table.get(asked).column("id").to_pylist()
        assert sorted(found) == [k for k in asked if k % 2 == 0 and 0 <= k < 1_200]
