"""Tablets read and written page by page.

A version 2 tablet keeps its rows in pages (:mod:`merkle.tablets.pages`), and
the tablet node records each page's first key, row count, bytes and blocks.
So a point read routes its keys to pages by their first keys and fetches one
key block and one block per family it needs; an existence check fetches key
blocks only; a rank (for offsets and key-range scans) reads one key block;
and a write rewrites only the pages its changes fall in, reusing every other
page by link. Tablets that split or merge are cut at page boundaries, so
their pages are reused too.

Version 1 tablets (one segment per family, written before pages) are read
as whole units, as they always were; a write that touches one rewrites it
as pages.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.tablets.keycodec import KeyCodec
from merkle.tablets.keyindex import KeyIndex, array_bytes, combine
from merkle.tablets.nodes import BASE, ChildRef, PageRef, TabletNode
from merkle.tablets.pages import (
    KEYS,
    check_counts,
    concat_pages,
    cut_pages,
    encode_page,
    join_page,
    join_pages,
    join_picked,
    pick_page,
)
from merkle.tablets.rows import SortedRows, concat_sorted, cut_points, merge_changes
from merkle.tablets.segment import concat_segments, join_families, project
from merkle.tablets.spec import TableSpec
from merkle.tablets.store import Columns, TableStore

__all__ = ["Block", "Leaves", "split_ranks"]

#: A write of at least this many rows is a bulk write: its pages may go to the lake
#: as they are made (``TableStore.store_encoded(bulk=True)``) and are not cached.
_BULK_ROWS = 50_000


@dataclass(frozen=True, slots=True)
class _NewPage:
    """A page encoded but not stored yet: its key range, rows and blocks."""

    first_key: bytes
    last_key: bytes
    count: int
    blocks: list[tuple[str, pa.Table, bytes]]


_Page = PageRef | _NewPage
#: Rows a lookup picked from one page: its family names, then the rows of its key
#: block and of each family's block (:func:`~merkle.tablets.pages.pick_page`).
_Picked = tuple[list[str], list[pa.Table]]
#: A block a read needs and the columns it decodes of it (None: all): what
#: ``TableStore.segment_columns`` takes, so a read can fetch ahead exactly what it uses.
Block = tuple[CID, Columns]


def split_ranks(keys: pa.Array, separators: Sequence[bytes]) -> list[int]:
    """Split points of sorted ``keys`` at each separator: ``[0, r1, ..., len]``."""
    if not len(keys):
        return [0] * (len(separators) + 2)
    index = KeyIndex(keys)
    return [0, *(index.rank(s) for s in separators), len(keys)]


def _index_of(codec: KeyCodec, column: pa.Array | pa.ChunkedArray) -> pa.Array | KeyIndex:
    """The key index of a native key column: from its order words where the codec has them
    (no binary encodings made), else from the encoded keys."""
    words = codec.order_words(column)
    if words is None:
        return combine(codec.encode_array(column))
    encode = lambda: combine(codec.encode_array(column))  # noqa: E731
    return KeyIndex.of_words(words, encode, holds=array_bytes(column))


class Leaves:
    """Reading and writing one table's tablets (stateless apart from the caches in ``ts``)."""

    def __init__(self, ts: TableStore, spec: TableSpec) -> None:
        self.ts = ts
        self.spec = spec

    # -- reading ---------------------------------------------------------------------

    def node(self, cid: CID) -> TabletNode:
        return self.ts.tablet(cid)

    def page_keys(self, page: PageRef) -> KeyIndex:
        """The sorted encoded keys of one page (from its key block, cached)."""
        codec = self.spec.codec

        def build() -> pa.Array | KeyIndex:
            return _index_of(codec, self.ts.segment(page.keys).column(0))

        return self.ts.key_index(page.keys, build, encoding=codec.spec, part="page")

    def keys(self, cid: CID) -> KeyIndex:
        """The sorted encoded keys of a whole tablet (cached)."""
        tablet = self.node(cid)
        codec, key_field = self.spec.codec, self.spec.key_field

        def build() -> pa.Array | KeyIndex:
            if not tablet.pages:  # the key column of the base segment, decoded alone
                (base,) = self.ts.segment_columns([self._key_column(tablet)])
                return _index_of(codec, base.column(key_field))
            with self.ts.holding([(page.keys, None) for page in tablet.pages]):  # at once
                return KeyIndex.joined([self.page_keys(page) for page in tablet.pages])

        return self.ts.key_index(cid, build, encoding=codec.spec)

    def columns(self, fields: Sequence[str] | None) -> Columns:
        """The columns a read of ``fields`` decodes of a segment (None: all)."""
        return None if fields is None else frozenset([self.spec.key_field, *fields])

    def _key_column(self, tablet: TabletNode) -> Block:
        """The key column of a version 1 tablet's base segment."""
        return (tablet.segments[BASE], frozenset([self.spec.key_field]))

    def _page_families(self, page: PageRef, fields: Sequence[str] | None) -> list[tuple[str, CID]]:
        """The families (and their blocks) of a page that a read of ``fields`` (None: all)
        needs: the base family always (a tablet given to ``build_table`` may keep
        there a field the table puts in a family), and those holding ``fields``."""
        families = self.spec.families_for(fields)
        return [
            (name, cid)
            for name, cid in page.families.items()
            if cid is not None and (families is None or name in families)
        ]

    def page_blocks(self, page: PageRef, fields: Sequence[str] | None) -> list[Block]:
        """The blocks (and columns) a read of ``fields`` (None: all) needs from one page:
        its key block whole, and the wanted columns of the families that hold them."""
        columns = self.columns(fields)
        return [
            (page.keys, None),
            *((cid, columns) for _, cid in self._page_families(page, fields)),
        ]

    def blocks(self, cid: CID, fields: Sequence[str] | None = None) -> list[Block]:
        """The blocks (and columns) a read of ``fields`` (None: all) needs from a tablet."""
        tablet = self.node(cid)
        if not tablet.pages:
            families = self.spec.families_for(fields)
            columns = self.columns(fields)
            return [
                (c, columns)
                for name, c in tablet.segments.items()
                if families is None or name in families
            ]
        return [block for page in tablet.pages for block in self.page_blocks(page, fields)]

    def page_table(self, page: PageRef, fields: Sequence[str] | None = None) -> pa.Table:
        """One page's rows: the key column and ``fields`` (None: every field)."""
        names = [name for name, _ in self._page_families(page, fields)]
        tables = self.ts.segment_columns(self.page_blocks(page, fields))
        table = join_page(tables[0], dict(zip(names, tables[1:], strict=True)), page.count)
        if fields is not None:
            table = project(table, fields, key_field=self.spec.key_field)
        return table

    def pages_table(self, pages: Sequence[PageRef], fields: Sequence[str] | None) -> pa.Table:
        """The rows of consecutive pages, their blocks fetched concurrently.

        Pages whose blocks agree (the same families, each with one schema) are
        joined once, family by family, instead of page by page: a scan of 10M
        rows joins ~100 tablets rather than ~600 pages, and that joining ran on
        the calling thread while the workers waited.
        """
        if len(pages) == 1:
            return self.page_table(pages[0], fields)
        blocks = [self.page_blocks(page, fields) for page in pages]
        tables = self.ts.segment_columns([block for page_blocks in blocks for block in page_blocks])
        split: list[tuple[pa.Table, dict[str, pa.Table]]] = []
        at = 0
        for page, page_blocks in zip(pages, blocks, strict=True):
            names = [name for name, _ in self._page_families(page, fields)]
            here = tables[at : at + len(page_blocks)]
            at += len(page_blocks)
            parts = dict(zip(names, here[1:], strict=True))
            check_counts(here[0], parts, page.count)
            split.append((here[0], parts))
        joined = join_pages(split)
        if joined is None:  # the pages differ in families or schemas: page by page
            return concat_pages(
                [join_page(keys, parts, len(keys)) for keys, parts in split], self.spec.key_field
            )
        return joined if fields is None else project(joined, fields, key_field=self.spec.key_field)

    def table(self, cid: CID, fields: Sequence[str] | None = None) -> pa.Table:
        """A tablet's rows (all fields, or the key plus ``fields``), in key order.

        Only the families ``fields`` needs are read, and of them only its
        columns are decompressed (every block is still verified whole).
        """
        tablet = self.node(cid)
        if tablet.pages:
            return self.pages_table(tablet.pages, fields)
        wanted = self.spec.families_for(fields)
        names = [f for f in tablet.segments if wanted is None or f in wanted]
        if BASE in names:
            names.remove(BASE)
        names.insert(0, BASE)
        columns = self.columns(fields)
        tables = self.ts.segment_columns([(tablet.segments[name], columns) for name in names])
        if len(tables) == 1:
            table = tables[0]  # the base segment alone is already the whole row
        else:
            table = join_families(dict(zip(names, tables, strict=True)))
        if fields is not None:
            table = project(table, fields, key_field=self.spec.key_field)
        return table

    def rows(self, cid: CID, fields: Sequence[str] | None = None) -> SortedRows:
        """A tablet's rows with their encoded keys."""
        return SortedRows(self.table(cid, fields), self.keys(cid).keys)

    def _route(self, tablet: TabletNode, keys: Sequence[bytes]) -> dict[int, list[int]]:
        """Page index -> positions in sorted ``keys`` of the keys that page's range holds."""
        firsts = [page.first_key for page in tablet.pages]
        groups: dict[int, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(max(0, bisect.bisect_right(firsts, key) - 1), []).append(i)
        return groups

    def key_blocks(self, cid: CID, keys: Sequence[bytes]) -> list[Block]:
        """The blocks (and columns) :meth:`find` of these sorted keys reads."""
        tablet = self.node(cid)
        if not tablet.pages:
            return [self._key_column(tablet)]
        return [(tablet.pages[p].keys, None) for p in self._route(tablet, keys)]

    def find(self, cid: CID, keys: Sequence[bytes]) -> list[int]:
        """The row of each sorted key in the tablet, or -1: reads only the key blocks it needs."""
        tablet = self.node(cid)
        if not tablet.pages:
            return self.keys(cid).find(keys)
        groups = self._route(tablet, keys)
        offsets = list(itertools.accumulate((page.count for page in tablet.pages), initial=0))
        out = [-1] * len(keys)
        with self.ts.holding([(tablet.pages[p].keys, None) for p in groups]):
            for p, positions in groups.items():
                found = self.page_keys(tablet.pages[p]).find([keys[i] for i in positions])
                for i, row in zip(positions, found, strict=True):
                    if row >= 0:
                        out[i] = offsets[p] + row
        return out

    def candidate_bytes(self, cid: CID, keys: Sequence[bytes]) -> int:
        """The stored bytes of the pages :meth:`take` of these keys reads (all families)."""
        tablet = self.node(cid)
        if not tablet.pages:
            return tablet.size
        return sum(tablet.pages[p].size for p in self._route(tablet, keys))

    def take(
        self, cid: CID, keys: Sequence[bytes], fields: Sequence[str] | None
    ) -> pa.Table | None:
        """The rows of the sorted keys the tablet holds (key order), or None if it holds none."""
        return self.take_many([(cid, keys)], fields)

    def take_many(
        self,
        groups: Sequence[tuple[CID, Sequence[bytes]]],
        fields: Sequence[str] | None,
        *,
        keep: bool = True,
    ) -> pa.Table | None:
        """The rows of sorted keys in several tablets (in the order of ``groups`` and
        of the keys), or None when none is held.

        A key's page is known from the tablet node, so its key block and its
        family blocks are fetched together (a hit costs no second round trip),
        and each page is one task on the workers: fetched, verified, decoded,
        searched and picked there, so only the rows wanted outlive the task,
        and the picks are joined once. Fetching every page first and taking
        rows page by page on the calling thread made a 1,000-key lookup in 10M
        rows 15-20% slower. ``keep``: whether the decoded blocks and key
        indexes go to the caches.
        """
        tasks: list[tuple[PageRef | CID, Sequence[bytes]]] = []
        for cid, keys in groups:
            tablet = self.node(cid)
            if not tablet.pages:
                tasks.append((cid, keys))
                continue
            for p, positions in sorted(self._route(tablet, keys).items()):
                tasks.append((tablet.pages[p], [keys[i] for i in positions]))

        def run(task: tuple[PageRef | CID, Sequence[bytes]]) -> _Picked | pa.Table | None:
            unit, keys = task
            if isinstance(unit, CID):
                return self._take_whole(unit, keys, fields)
            return self._take_page(unit, keys, fields, keep)

        found = [part for part in self.ts.map_local(run, tasks) if part is not None]
        if not found:
            return None
        key_field = self.spec.key_field
        if all(isinstance(part, tuple) for part in found):
            table = join_picked(found)
        else:  # version 1 tablets among them (read whole, taken as tables)
            tables = [part if isinstance(part, pa.Table) else join_picked([part]) for part in found]
            table = concat_segments(tables, key_field=key_field) if len(tables) > 1 else tables[0]
        return table if fields is None else project(table, fields, key_field=key_field)

    def _take_page(
        self, page: PageRef, keys: Sequence[bytes], fields: Sequence[str] | None, keep: bool
    ) -> _Picked | None:
        """The rows of sorted keys in one page, picked from each of its blocks, or None."""
        tables = self.ts.segment_columns(self.page_blocks(page, fields), keep=keep)
        codec = self.spec.codec
        index = self.ts.key_index(
            page.keys,
            lambda: _index_of(codec, tables[0].column(0)),
            encoding=codec.spec,
            part="page",
            keep=keep,
        )
        rows = [row for row in index.find(keys) if row >= 0]
        if not rows:
            return None
        names = [name for name, _ in self._page_families(page, fields)]
        return pick_page(tables[0], dict(zip(names, tables[1:], strict=True)), page.count, rows)

    def _take_whole(
        self, cid: CID, keys: Sequence[bytes], fields: Sequence[str] | None
    ) -> pa.Table | None:
        """:meth:`take` of a version 1 tablet (read whole)."""
        positions = [p for p in self.keys(cid).find(keys) if p >= 0]
        if not positions:
            return None
        return self.table(cid, fields).take(pa.array(positions, type=pa.int64()))

    def rank(self, cid: CID, key: bytes, *, inclusive: bool) -> int:
        """How many of the tablet's rows have keys ``< key`` (``<=`` with ``inclusive``)."""
        tablet = self.node(cid)
        if not tablet.pages:
            return self.keys(cid).rank(key, inclusive=inclusive)
        firsts = [page.first_key for page in tablet.pages]
        p = max(0, bisect.bisect_right(firsts, key) - 1)
        before = sum(page.count for page in tablet.pages[:p])
        return before + self.page_keys(tablet.pages[p]).rank(key, inclusive=inclusive)

    def _covering(self, tablet: TabletNode, start: int, stop: int) -> tuple[list[PageRef], int]:
        """The pages holding rows ``[start, stop)`` of a paged tablet, and the first's row."""
        chosen: list[PageRef] = []
        offset = first = 0
        for page in tablet.pages:
            if offset + page.count > start and offset < stop:
                if not chosen:
                    first = offset
                chosen.append(page)
            offset += page.count
        return chosen, first

    def slice_blocks(
        self, cid: CID, start: int, stop: int, fields: Sequence[str] | None
    ) -> list[Block]:
        """The blocks (and columns) :meth:`slice` reads."""
        tablet = self.node(cid)
        if not tablet.pages:
            return self.blocks(cid, fields)
        chosen, _ = self._covering(tablet, start, stop)
        return [block for page in chosen for block in self.page_blocks(page, fields)]

    def slice(self, cid: CID, start: int, stop: int, fields: Sequence[str] | None) -> pa.Table:
        """Rows ``[start, stop)`` of a tablet: reads only the pages that hold them."""
        tablet = self.node(cid)
        if not tablet.pages:
            return self.table(cid, fields).slice(start, stop - start)
        chosen, first = self._covering(tablet, start, stop)
        if not chosen:
            return self.page_table(tablet.pages[0], fields).slice(0, 0)
        return self.pages_table(chosen, fields).slice(start - first, stop - start)

    # -- writing ---------------------------------------------------------------------

    def write(self, rows: SortedRows) -> list[ChildRef]:
        """Cut sorted rows into tablets of at most ``tablet_size`` rows, in pages; store them."""
        n = len(rows)
        if not n:
            return []
        cuts = cut_points(n, self.spec.limits.tablet_size)
        bulk = n >= _BULK_ROWS

        def make(span: tuple[int, int]) -> TabletNode:
            # The slice is made here, not beforehand: a slice of lazily gathered rows keeps
            # its gathered table, and a list of slices would hold every tablet's rows at
            # once (the whole table again in a bulk load) until the last was stored.
            return self._tablet_node(self._encode_rows(rows.slice(*span)), {}, bulk=bulk)

        # Each worker gathers, encodes, hashes and hands on whole tablets: the row gather
        # of a bulk load runs on every core, beside the compression of other tablets,
        # while their blocks are written (see StagedBlocks.writing_early).
        return self._put_tablets(self.ts.map(make, list(itertools.pairwise(cuts))))

    def _encode_rows(self, rows: SortedRows) -> list[_Page]:
        """Sorted rows cut into even pages of at most ``page_rows``, each encoded."""
        table = rows.table
        keys = rows.keys
        spec = self.spec
        cuts = cut_points(len(rows), spec.limits.page_rows)
        pages: list[_Page] = []
        for a, b in itertools.pairwise(cuts):
            blocks = encode_page(table.slice(a, b - a), spec.key_field, spec.families)
            pages.append(_NewPage(keys[a].as_py(), keys[b - 1].as_py(), b - a, blocks))
        return pages

    def rewrite(self, ref: ChildRef, upserts: SortedRows, deletes: pa.Array) -> list[ChildRef]:
        """The tablet with ``upserts`` written, ``deletes`` removed: touched pages rewritten."""
        tablet = self.node(ref.cid)
        key_field = self.spec.key_field
        if not tablet.pages:
            return self.write(merge_changes(self.rows(ref.cid), upserts, deletes, key_field))
        pages = tablet.pages
        firsts = [page.first_key for page in pages[1:]]
        up_at, del_at = split_ranks(upserts.keys, firsts), split_ranks(deletes, firsts)
        touched = [
            i for i in range(len(pages)) if up_at[i + 1] > up_at[i] or del_at[i + 1] > del_at[i]
        ]
        items: list[PageRef | SortedRows] = list(pages)
        with self.ts.holding([(block, None) for i in touched for block in pages[i].blocks()]):
            for i in touched:
                page = pages[i]
                stored = SortedRows(self.page_table(page), self.page_keys(page).keys)
                items[i] = merge_changes(
                    stored,
                    upserts.slice(up_at[i], up_at[i + 1]),
                    deletes.slice(del_at[i], del_at[i + 1] - del_at[i]),
                    key_field,
                )
        return self._assemble(items, {pages[-1].keys: tablet.last_key})

    def merge(self, refs: Sequence[ChildRef]) -> list[ChildRef]:
        """Adjacent tablets as one run of rows, cut again into tablets (pages reused)."""
        nodes = [self.node(ref.cid) for ref in refs]
        if not all(node.pages for node in nodes):
            rows = concat_sorted([self.rows(ref.cid) for ref in refs], self.spec.key_field)
            return self.write(rows)
        items: list[PageRef | SortedRows] = [page for node in nodes for page in node.pages]
        return self._assemble(items, {node.pages[-1].keys: node.last_key for node in nodes})

    def _page_rows(self, page: PageRef) -> SortedRows:
        return SortedRows(self.page_table(page), self.page_keys(page).keys)

    def _assemble(
        self, items: list[PageRef | SortedRows], last_keys: dict[CID, bytes]
    ) -> list[ChildRef]:
        """Stored pages and runs of new rows, in key order, as tablets of pages.

        Runs of rows (and stored pages below the page minimum) merge with a
        neighbour until every new page can hold at least the minimum; then
        runs are cut into pages and the pages into tablets at page boundaries.
        """
        limits, key_field = self.spec.limits, self.spec.key_field
        least = limits.min_page
        if len(items) > 1:
            items = [
                self._page_rows(item) if isinstance(item, PageRef) and item.count < least else item
                for item in items
            ]
        runs: list[PageRef | SortedRows] = []
        for item in items:
            if isinstance(item, SortedRows):
                if not len(item):
                    continue
                if runs and isinstance(runs[-1], SortedRows):
                    runs[-1] = concat_sorted([runs[-1], item], key_field)
                    continue
            runs.append(item)
        i = 0
        while i < len(runs):
            run = runs[i]
            if isinstance(run, SortedRows) and len(run) < least and len(runs) > 1:
                j = i + 1 if i + 1 < len(runs) else i - 1
                other = runs[j]
                other_rows = other if isinstance(other, SortedRows) else self._page_rows(other)
                lo = min(i, j)
                pair = [run, other_rows] if j > i else [other_rows, run]
                runs[lo : lo + 2] = [concat_sorted(pair, key_field)]
                i = lo
                continue
            i += 1
        pages: list[_Page] = []
        for run in runs:
            pages += [run] if isinstance(run, PageRef) else self._encode_rows(run)
        if not pages:
            return []
        cuts = cut_pages([page.count for page in pages], limits.tablet_size, limits.min_tablet)
        if cuts is None:  # pages too big to cut between: re-cut the rows
            rows = [run if isinstance(run, SortedRows) else self._page_rows(run) for run in runs]
            return self.write(concat_sorted(rows, key_field))
        return self._put_tablets(
            [
                self._tablet_node(pages[a:b], last_keys, bulk=False)
                for a, b in itertools.pairwise(cuts)
            ]
        )

    def _last_key(self, page: _Page, last_keys: dict[CID, bytes]) -> bytes:
        if isinstance(page, _NewPage):
            return page.last_key
        known = last_keys.get(page.keys)
        if known is not None:
            return known
        keys = self.page_keys(page).keys
        return bytes(keys[len(keys) - 1].as_py())

    def _tablet_node(
        self, pages: list[_Page], last_keys: dict[CID, bytes], *, bulk: bool
    ) -> TabletNode:
        """Store the new pages' blocks; the node of a tablet holding ``pages``."""
        fresh = [
            (table, data)
            for page in pages
            if isinstance(page, _NewPage)
            for _, table, data in page.blocks
        ]
        stored = iter(self.ts.store_encoded(fresh, bulk=bulk))
        refs: list[PageRef] = []
        for page in pages:
            if isinstance(page, PageRef):
                refs.append(page)
                continue
            keys: CID | None = None
            families: dict[str, CID | None] = {}
            size = 0
            for slot, _, _ in page.blocks:
                cid, nbytes = next(stored)
                size += nbytes
                if slot == KEYS:
                    keys = cid
                else:
                    families[slot] = cid
            assert keys is not None
            refs.append(PageRef(page.first_key, page.count, size, keys, families))
        return TabletNode(
            count=sum(page.count for page in refs),
            size=sum(page.size for page in refs),
            first_key=refs[0].first_key,
            last_key=self._last_key(pages[-1], last_keys),
            pages=tuple(refs),
        )

    def _put_tablets(self, nodes: Sequence[TabletNode]) -> list[ChildRef]:
        """Store tablet nodes in one round; their refs."""
        cids = self.ts.put_nodes([node.to_node() for node in nodes])
        return [
            ChildRef(cid, 0, node.count, node.size, node.first_key, node.last_key)
            for cid, node in zip(cids, nodes, strict=True)
        ]
