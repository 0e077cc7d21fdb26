"""The difference between two versions of a table, reading only what differs.

Equal subtrees have equal CIDs, and a subtree's CID fixes both its rows and
its key range. So two trees are walked side by side in key order and every
pair of subtrees with the same CID is skipped unread; only the tablets left
over (*unmatched*) are read, and only the key ranges they cover are
compared. Pending batches are handled the same way: the batches both sides
share (a common suffix of the pending lists) cancel out, and only the keys
of the other batches are looked up on both sides.

The result streams as :class:`ChangeSet` values in key order, each covering
a few tablets at most, so a diff of two large versions that differ
everywhere still runs in bounded memory. Rows keep their stored (segment)
form, so a merge can write them back as they are.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.lazy import compute as pc
from merkle.tablets.batch import load_batch
from merkle.tablets.keyindex import KeyIndex, as_u64, combine
from merkle.tablets.nodes import ChildRef
from merkle.tablets.rowequal import as_bits, flags, rows_equal  # the first two re-exported
from merkle.tablets.rows import SortedRows, merge_changes
from merkle.tablets.segment import concat_segments, project
from merkle.tablets.table import Table
from merkle.tablets.tree import Tree

__all__ = [
    "ChangeCounts",
    "ChangeSet",
    "as_bits",
    "count_changes",
    "diff_tables",
    "rows_equal",
    "unmatched_subtrees",
]


@dataclass(frozen=True)
class ChangeSet:
    """The changes within one key range, rows in stored form and key order.

    ``updated_old`` and ``updated_new`` hold the same keys in the same order.
    """

    inserted: SortedRows
    deleted: SortedRows
    updated_old: SortedRows
    updated_new: SortedRows

    def __len__(self) -> int:
        return len(self.inserted) + len(self.deleted) + len(self.updated_new)


@dataclass(frozen=True)
class ChangeCounts:
    """How many records a change inserted, updated and deleted."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0

    def __add__(self, other: ChangeCounts) -> ChangeCounts:
        return ChangeCounts(
            self.inserted + other.inserted,
            self.updated + other.updated,
            self.deleted + other.deleted,
        )

    @property
    def total(self) -> int:
        return self.inserted + self.updated + self.deleted


# -- the tree walk -------------------------------------------------------------------


def unmatched_subtrees(
    old: Tree, old_root: ChildRef | None, new: Tree, new_root: ChildRef | None
) -> tuple[list[ChildRef], list[ChildRef]]:
    """The tablets of each tree that the other does not hold under the same CID, in key order.

    Both fronts advance in key order; a pair with one CID is skipped unread,
    a subtree that overlaps nothing on the other side is taken whole, and of
    two overlapping, different subtrees the taller is opened (both when they
    are equally tall). Two overlapping different tablets are both unmatched:
    neither can equal a later subtree of the other side, whose key range
    starts after the current one ends. Only index nodes on paths to changed
    tablets are read.
    """
    left: deque[ChildRef] = deque([old_root] if old_root is not None else [])
    right: deque[ChildRef] = deque([new_root] if new_root is not None else [])
    out_old: list[ChildRef] = []
    out_new: list[ChildRef] = []
    while left and right:
        a, b = left[0], right[0]
        if a.cid == b.cid:
            left.popleft()
            right.popleft()
        elif a.last_key < b.first_key:
            out_old.append(left.popleft())
        elif b.last_key < a.first_key:
            out_new.append(right.popleft())
        elif a.height == 0 and b.height == 0:
            out_old.append(left.popleft())
            out_new.append(right.popleft())
        else:
            if a.height >= b.height:
                left.popleft()
                left.extendleft(reversed(old.ts.index(a.cid).children))
            if b.height >= a.height:
                right.popleft()
                right.extendleft(reversed(new.ts.index(b.cid).children))
    out_old += left
    out_new += right
    return _tablets(old, out_old), _tablets(new, out_new)


def _tablets(tree: Tree, refs: Sequence[ChildRef]) -> list[ChildRef]:
    out: list[ChildRef] = []
    for ref in refs:
        out.extend(tree.leaves(ref))
    return out


@dataclass
class _Region:
    """A maximal key range ``[lo, hi]`` covered by unmatched tablets of either side."""

    lo: bytes
    hi: bytes
    old: list[ChildRef]
    new: list[ChildRef]


def _regions(old: list[ChildRef], new: list[ChildRef]) -> list[_Region]:
    tagged = sorted(
        [(ref.first_key, 0, ref) for ref in old] + [(ref.first_key, 1, ref) for ref in new],
        key=lambda item: (item[0], item[1]),
    )
    regions: list[_Region] = []
    for first, side, ref in tagged:
        if regions and first <= regions[-1].hi:
            region = regions[-1]
            region.hi = max(region.hi, ref.last_key)
        else:
            region = _Region(first, ref.last_key, [], [])
            regions.append(region)
        (region.new if side else region.old).append(ref)
    return regions


# -- one side of a diff ----------------------------------------------------------------


class _Side:
    """One table version as the diff reads it: its tree, its overlay, a one-tablet cache."""

    def __init__(self, table: Table, fields: Sequence[str] | None) -> None:
        self.table = table
        self.fields = fields
        self.spec = table.spec
        self.tree = Tree(table.ts, self.spec)
        self.key_field = self.spec.key_field
        self._pending = bool(table.root.pending)
        self._overlay_index: tuple[SortedRows, KeyIndex, pa.Array, KeyIndex] | None = None
        self._cached: tuple[CID, SortedRows] | None = None

    def _overlay(self) -> tuple[SortedRows, KeyIndex, pa.Array, KeyIndex]:
        if self._overlay_index is None:
            content = self.table.overlay().content
            upserts = content.upserts
            if self.fields is not None:
                upserts = SortedRows(
                    project(upserts.table, self.fields, key_field=self.key_field), upserts.keys
                )
            deletes = combine(content.deletes)
            self._overlay_index = (upserts, KeyIndex(upserts.keys), deletes, KeyIndex(deletes))
        return self._overlay_index

    def overlay_changes(
        self, lo: bytes, hi: bytes, *, from_lo: bool
    ) -> tuple[SortedRows, pa.Array]:
        """Pending upserts and deletes with keys in ``(lo, hi]`` (``[lo, hi]`` with ``from_lo``)."""
        if not self._pending:
            empty = self._empty()
            return empty, empty.keys
        upserts, up_index, deletes, del_index = self._overlay()
        ui = up_index.rank(lo, inclusive=not from_lo)
        uj = up_index.rank(hi, inclusive=True)
        di = del_index.rank(lo, inclusive=not from_lo)
        dj = del_index.rank(hi, inclusive=True)
        return upserts.slice(ui, max(ui, uj)), deletes.slice(di, max(0, dj - di))

    def _empty(self) -> SortedRows:
        codec = self.spec.codec
        table = pa.table({self.key_field: pa.array([], type=codec.arrow_type)})
        return SortedRows(table, codec.encode_array(table.column(self.key_field)))

    def tablet_rows(self, ref: ChildRef) -> SortedRows:
        if self._cached is None or self._cached[0] != ref.cid:
            rows = SortedRows(
                self.tree.read_table(ref.cid, self.fields), self.tree.tablet_keys(ref.cid).keys
            )
            self._cached = (ref.cid, rows)
        return self._cached[1]

    def window(
        self, leaves: Sequence[ChildRef], lo: bytes, hi: bytes, *, from_lo: bool
    ) -> SortedRows:
        """The effective rows (tablets with the overlay laid on) with keys in ``(lo, hi]``.

        With ``from_lo`` the range is ``[lo, hi]``.
        """
        parts = []
        for ref in leaves:
            if ref.last_key < lo or (ref.last_key == lo and not from_lo):
                continue
            if ref.first_key > hi:
                break
            rows = self.tablet_rows(ref)
            index = KeyIndex(rows.keys)
            i = index.rank(lo, inclusive=not from_lo)
            j = index.rank(hi, inclusive=True)
            if j > i:
                parts.append(rows.slice(i, j))
        base = _concat(parts, self.key_field) if parts else self._empty()
        upserts, deletes = self.overlay_changes(lo, hi, from_lo=from_lo)
        return merge_changes(base, upserts, deletes, self.key_field)

    def lookup(self, keys: pa.Array) -> SortedRows:
        """The effective rows of sorted, unique encoded ``keys`` (absent keys left out)."""
        wanted: list[bytes] = keys.to_pylist()
        found: list[SortedRows] = []
        rest = wanted
        if self._pending:
            upserts, up_index, deletes, del_index = self._overlay()
            rows = up_index.find(wanted)
            gone = del_index.find(wanted) if len(deletes) else [-1] * len(wanted)
            hits = [r for r in rows if r >= 0]
            if hits:
                take = pa.array(hits, type=pa.int64())
                found.append(SortedRows(upserts.table.take(take), upserts.keys.take(take)))
            rest = [k for k, r, d in zip(wanted, rows, gone, strict=True) if r < 0 and d < 0]
        leaves = self.tree.leaves_io
        for ref, part in _locate(self.tree, self.table.data_ref(), rest):
            # Only the pages that hold the keys are read (key block, then the fields').
            taken = leaves.take(ref.cid, part, self.fields)
            if taken is None:
                continue
            held = [k for k, r in zip(part, leaves.find(ref.cid, part), strict=True) if r >= 0]
            found.append(SortedRows(taken, pa.array(held, type=keys.type)))
        if not found:
            return self._empty()
        merged = _concat(found, self.key_field)
        order = pc.sort_indices(merged.keys)
        return SortedRows(merged.table.take(order), merged.keys.take(order))

    def changed_keys(self, other: _Side) -> pa.Array:
        """Keys of this side's pending batches that ``other`` does not share (sorted, unique)."""
        mine, theirs = self.table.root.pending, other.table.root.pending
        common = 0
        while common < min(len(mine), len(theirs)) and mine[-1 - common] == theirs[-1 - common]:
            common += 1
        keys: list[pa.Array] = []
        for cid in mine[: len(mine) - common]:
            content = load_batch(self.table.ts, cid, self.key_field, self.spec.codec)
            keys += [content.upserts.keys, content.deletes.cast(content.upserts.keys.type)]
            if content.patches is not None:
                keys.append(content.patches.keys)
        if not keys:
            return self._empty().keys
        return pc.unique(pa.concat_arrays(keys)).sort()


def _concat(parts: Sequence[SortedRows], key_field: str) -> SortedRows:
    if len(parts) == 1:
        return parts[0]
    table = concat_segments([p.table for p in parts], key_field=key_field)
    return SortedRows(table, pa.concat_arrays([combine(p.keys) for p in parts]))


def _locate(
    tree: Tree, data: ChildRef | None, keys: Sequence[bytes]
) -> list[tuple[ChildRef, list[bytes]]]:
    """Sorted keys grouped by the tablet whose ``[first, last]`` holds them; others dropped."""
    out: list[tuple[ChildRef, list[bytes]]] = []
    if data is not None and keys:
        _descend(tree, data, keys, out)
    return out


def _descend(
    tree: Tree, ref: ChildRef, part: Sequence[bytes], out: list[tuple[ChildRef, list[bytes]]]
) -> None:
    """:func:`_locate` in the subtree ``ref``: a function of its own, since a nested
    function that calls itself is a reference cycle that keeps everything it reaches
    (the connection's caches) alive until the next garbage collection."""
    part = [k for k in part if ref.first_key <= k <= ref.last_key]
    if not part:
        return
    if ref.height == 0:
        out.append((ref, list(part)))
        return
    for child in tree.ts.index(ref.cid).children:
        _descend(tree, child, part, out)


# -- the diff --------------------------------------------------------------------------


def _member(keys: pa.Array, others: pa.Array) -> np.ndarray:
    """Whether each of sorted unique ``keys`` is among sorted unique ``others``."""
    a, b = as_u64(combine(keys)), as_u64(combine(others))
    if a is not None and b is not None:  # 8-byte keys: a numpy search, no hashing
        pos = np.searchsorted(b, a)
        inside = pos < len(b)
        found = np.zeros(len(a), dtype=bool)
        found[inside] = b[pos[inside]] == a[inside]
        return found
    if not len(keys) or not len(others):
        return np.zeros(len(keys), dtype=bool)
    return flags(pc.is_in(keys, value_set=others))


def _compare(old: SortedRows, new: SortedRows, key_field: str) -> ChangeSet:
    """The changes from ``old`` to ``new`` (both sorted and unique by key)."""
    in_new = _member(old.keys, new.keys)
    in_old = _member(new.keys, old.keys)
    deleted = _filter(old, ~in_new)
    inserted = _filter(new, ~in_old)
    both_old, both_new = _filter(old, in_new), _filter(new, in_old)
    if len(both_old):
        same = rows_equal(both_old.table, both_new.table, key_field)
        both_old, both_new = _filter(both_old, ~same), _filter(both_new, ~same)
    return ChangeSet(inserted, deleted, both_old, both_new)


def _filter(rows: SortedRows, mask: np.ndarray) -> SortedRows:
    if mask.all():
        return rows
    keep = pa.array(mask, type=pa.bool_())
    return SortedRows(rows.table.filter(keep), rows.keys.filter(keep))


def _whole(side: _Side, as_insert: bool) -> Iterator[ChangeSet]:
    empty = side._empty()
    codec, key_field = side.spec.codec, side.key_field
    for batch in side.table.scan(fields=side.fields):
        rows = SortedRows(batch, combine(codec.encode_array(batch.column(key_field))))
        if as_insert:
            yield ChangeSet(rows, empty, empty, empty)
        else:
            yield ChangeSet(empty, rows, empty, empty)


def diff_tables(
    old: Table | None, new: Table | None, *, fields: Sequence[str] | None = None
) -> Iterator[ChangeSet]:
    """The changes that turn ``old`` into ``new``, in key order (None: no such table).

    Both tables must have the same key field and codec. With ``fields``,
    only those fields are read and compared (an update is a change of one
    of them) and shown.
    """
    old = old if old is not None and old.root.key_codec and old.count else None
    new = new if new is not None and new.root.key_codec and new.count else None
    if old is None and new is None:
        return
    if old is None or new is None:
        yield from _whole(_Side(new if old is None else old, fields), as_insert=old is None)  # type: ignore[arg-type]
        return
    if old.root == new.root:
        return
    a, b = _Side(old, fields), _Side(new, fields)
    old_leaves, new_leaves = unmatched_subtrees(a.tree, old.data_ref(), b.tree, new.data_ref())
    regions = _regions(old_leaves, new_leaves)
    keys = pc.unique(pa.concat_arrays([a.changed_keys(b), b.changed_keys(a)])).sort()
    key_list: list[bytes] = keys.to_pylist()
    k = 0
    for region in regions:
        # Pending changes to keys before this region: looked up on both sides.
        start = k
        while k < len(key_list) and key_list[k] < region.lo:
            k += 1
        if k > start:
            yield from _lookups(a, b, keys.slice(start, k - start))
        while k < len(key_list) and key_list[k] <= region.hi:
            k += 1  # covered by the region's windows
        yield from _region(a, b, region)
    if k < len(key_list):
        yield from _lookups(a, b, keys.slice(k))


def _lookups(a: _Side, b: _Side, keys: pa.Array) -> Iterator[ChangeSet]:
    step = 65_536
    for i in range(0, len(keys), step):
        part = keys.slice(i, step)
        change = _compare(a.lookup(part), b.lookup(part), a.key_field)
        if len(change):
            yield change


def _region(a: _Side, b: _Side, region: _Region) -> Iterator[ChangeSet]:
    """The region window by window: each window ends at the end of a tablet of either side."""
    cuts = sorted({ref.last_key for ref in region.old} | {ref.last_key for ref in region.new})
    lo, from_lo = region.lo, True  # the first window starts at the region's first key
    for cut in cuts:
        change = _compare(
            a.window(region.old, lo, cut, from_lo=from_lo),
            b.window(region.new, lo, cut, from_lo=from_lo),
            a.key_field,
        )
        if len(change):
            yield change
        lo, from_lo = cut, False


def count_changes(old: Table | None, new: Table | None) -> ChangeCounts:
    """How many records the change from ``old`` to ``new`` inserts, updates and deletes.

    A table created, dropped or emptied is counted from its stored counts
    without reading its rows; otherwise the differing part is compared.
    """
    old_count = old.count if old is not None and old.root.key_codec else 0
    new_count = new.count if new is not None and new.root.key_codec else 0
    if not old_count or not new_count:
        return ChangeCounts(inserted=new_count, deleted=old_count)
    total = ChangeCounts()
    for change in diff_tables(old, new):
        total += ChangeCounts(len(change.inserted), len(change.updated_new), len(change.deleted))
    return total
