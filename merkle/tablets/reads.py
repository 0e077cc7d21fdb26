"""Reading one table version: point reads, ranked windows, scans.

The read half of :class:`merkle.tablets.table.Table` (mixed into it): point
reads route keys through the pending batches and then to the pages that may
hold them, each page read, searched and picked in one task on the workers
(its decoded blocks cached only when the read is small beside the cache);
scans are planned by rank (each subtree's count plus the overlay's delta
over its key range), so bounds, offsets and limits skip whole subtrees, and
fetch the pages of a few leaves at a time, only those that hold the rows
wanted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.errors import UsageError
from merkle.lazy import compute as pc
from merkle.tablets.batch import BatchContent, Overlay, lookup_pending
from merkle.tablets.keyindex import combine
from merkle.tablets.keys import KeyCodec
from merkle.tablets.leaves import Block
from merkle.tablets.nodes import ChildRef, TableRoot
from merkle.tablets.patches import apply_patches
from merkle.tablets.rows import SortedRows, merge_changes
from merkle.tablets.segment import concat_segments, project
from merkle.tablets.settings import scan_bounds
from merkle.tablets.store import TableStore
from merkle.tablets.tree import LeafSlice, TableSpec, Tree

__all__ = ["TableReads"]

_PREFETCH = 8  # leaves whose blocks a scan fetches at once (at most)
_DECODED_PER_STORED = 3  # about how much bigger rows are decoded than stored (LZ4)
T = TypeVar("T")


class TableReads:
    """Point reads, windows and scans of one table version (mixed into ``Table``)."""

    if TYPE_CHECKING:
        ts: TableStore
        root: TableRoot
        _overlay: Overlay | None

        @property
        def codec(self) -> KeyCodec | None: ...
        @property
        def spec(self) -> TableSpec: ...
        @property
        def count(self) -> int: ...
        def data_ref(self) -> ChildRef | None: ...
        def overlay(self) -> Overlay: ...
        def _tree(self) -> Tree: ...
        def present(self, raw: pa.Table, fields: Sequence[str] | None = None) -> pa.Table: ...

    def _empty(self, fields: Sequence[str] | None) -> pa.Table:
        codec = self.codec
        key_type = codec.arrow_type if codec is not None else pa.null()
        return pa.table({self.root.key_field: pa.array([], type=key_type)})

    def empty(self, fields: Sequence[str] | None = None) -> pa.Table:
        """No rows, with the columns a read of ``fields`` gives."""
        return self.present(self._empty(fields), fields)

    def get(self, keys: Sequence[Any], fields: Sequence[str] | None = None) -> pa.Table:
        """The records of the keys that exist (in no particular order), projected to ``fields``."""
        codec = self.codec
        if codec is None or not keys:
            return self._empty(fields)
        return self.get_encoded(codec.encode_unique(keys), fields)

    def get_arrow(self, keys: Sequence[Any], fields: Sequence[str] | None = None) -> pa.Table:
        """The records of the keys that exist, in key order, as the user's table."""
        codec = self.codec
        if codec is None or not keys:
            return self.empty(fields)
        rows = self.get_encoded(codec.encode_unique(keys), fields)
        if self.root.pending and rows.num_rows > 1:  # found in batches, then merged
            encoded = combine(codec.encode_array(rows.column(self.root.key_field)))
            rows = rows.take(pc.sort_indices(encoded))
        return self.present(rows, fields)

    def get_encoded(self, wanted: list[bytes], fields: Sequence[str] | None = None) -> pa.Table:
        """:meth:`get` of encoded keys, sorted and unique."""
        codec = self.codec
        if codec is None or not wanted:
            return self._empty(fields)
        key_field = self.root.key_field
        found, rest, patches = lookup_pending(self.ts, self.root.pending, wanted, key_field, codec)
        pieces = [project(rows, fields, key_field=key_field) for rows in found]
        merged = self.merged_rows(rest, fields)
        if merged is not None:
            if patches is not None:
                merged = apply_patches(merged, patches.project(fields), key_field)
            pieces.append(merged.table)
        if not pieces:
            return self._empty(fields)
        if len(pieces) == 1:
            return pieces[0]
        return concat_segments(pieces, key_field=key_field)

    def merged_rows(self, keys: list[bytes], fields: Sequence[str] | None) -> SortedRows | None:
        """The merged area's rows of sorted encoded ``keys`` (those it holds), in key
        order, or None when it holds none."""
        tree = self._tree()
        groups = list(tree.locate(self.data_ref(), keys).items())
        leaves = tree.leaves_io
        self.ts.prefetch_nodes([cid for cid, _ in groups])
        # Each candidate page is read, searched and picked in one task; its decoded
        # blocks are cached only if the read is small beside the cache: 1,000 random
        # keys in 10M rows decode ~750 MB of pages, which a 256 MB cache could only
        # churn through (and keeping them cost the read 10%).
        stored = sum(leaves.candidate_bytes(cid, part) for cid, part in groups)
        keep = stored * _DECODED_PER_STORED <= self.ts.cache_bytes // 2
        table = leaves.take_many(groups, fields, keep=keep)
        if table is None:
            return None
        codec = self.codec
        assert codec is not None
        column = table.column(self.root.key_field)
        words = codec.order_words(column)  # encoded keys made only if asked for
        if words is not None:
            return SortedRows(table, words=words)
        return SortedRows(table, combine(codec.encode_array(column)))

    def resolve_patches(self, content: BatchContent) -> BatchContent:
        """``content`` with its patches laid over their records in the merged area, as
        upserts (every patch has its record there: see :mod:`merkle.tablets.patches`)."""
        patches = content.patches
        if patches is None:
            return content
        key_field = self.root.key_field
        base = self.merged_rows(patches.keys.to_pylist(), None)
        if base is None:
            return content.without_patches()
        patched = apply_patches(base, patches, key_field)
        upserts = merge_changes(content.upserts, patched, patched.keys[:0], key_field)
        flags = pc.is_in(upserts.keys, value_set=patched.keys).to_numpy(zero_copy_only=False)
        flags[~flags] = content.upserts_in_merged
        return BatchContent(upserts, flags, content.deletes, content.deletes_in_merged)

    def _ranged_overlay(self, lo: bytes | None, hi: bytes | None) -> Overlay | None:
        """The pending changes with keys in ``[lo, hi)`` (None: unbounded) as an overlay
        (patches resolved against this version's merged area; a new view each call), or
        None when the whole overlay serves as well (this value holds it already, nothing
        is pending, or the range is everything).

        A read bounded by keys folds only each pending batch's slice in its range
        (:meth:`Overlay.load_range`), so it costs its range, not the pending area
        (which may be half the table). Its counts and ranks are exact inside the
        range and ignore every change outside it.
        """
        if self._overlay is not None or not self.root.pending or (lo is None and hi is None):
            return None
        spec = self.spec
        ranged = Overlay.load_range(self.ts, self.root.pending, spec.key_field, spec.codec, lo, hi)
        return ranged.resolving(self.resolve_patches)

    def _window(
        self,
        from_pk: Any,
        to_pk: Any,
        from_index: int | None,
        to_index: int | None,
        offset: int | None,
        limit: int | None,
        reverse: bool,
    ) -> tuple[int, int, Overlay | None]:
        """The effective rows ``[start, stop)`` a scan reads and the overlay that counts them.

        A scan bounded only by keys (offsets and limits count from its bounds) counts
        with the overlay of its key range (:meth:`_ranged_overlay`): its ranks are not
        the table's, but they order the rows in the range exactly as the table's
        do, which is all a plan and its slices need. Index bounds are the table's
        ranks: they take the whole overlay.
        """
        for name, value in (
            ("from_index", from_index),
            ("to_index", to_index),
            ("offset", offset),
            ("limit", limit),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise UsageError(f"{name} must be a non-negative integer, got {value!r}")
        if not isinstance(reverse, bool | np.bool_):  # a truthy "no" would scan backwards
            raise UsageError(f"reverse must be True or False, got {reverse!r}")
        codec = self.codec
        if codec is None:
            return 0, 0, None
        lo, hi = scan_bounds(codec, from_pk, to_pk)
        tree, data = self._tree(), self.data_ref()
        ranged = self._ranged_overlay(lo, hi) if from_index is None and to_index is None else None
        if ranged is not None:
            overlay = ranged
            start, stop = 0, (data.count if data is not None else 0) + ranged.delta()
        else:
            overlay = self.overlay()
            start, stop = 0, self.count

        def rank(key: bytes, inclusive: bool) -> int:
            merged = tree.merged_rank(data, key, inclusive=inclusive)
            return merged + overlay.delta_before(key, inclusive=inclusive)

        if lo is not None:
            start = max(start, rank(lo, False))
        if hi is not None:
            stop = min(stop, rank(hi, False))
        if from_index is not None:
            start = max(start, from_index)
        if to_index is not None:
            stop = min(stop, to_index + 1)
        if not reverse:
            start += offset or 0
            if limit is not None:
                stop = min(stop, start + limit)
        else:
            stop -= offset or 0
            if limit is not None:
                start = max(start, stop - limit)
        return start, max(start, stop), overlay

    def scan(
        self,
        *,
        fields: Sequence[str] | None = None,
        from_pk: Any = None,
        to_pk: Any = None,
        from_index: int | None = None,
        to_index: int | None = None,
        offset: int | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> Iterator[pa.Table]:
        """Record batches in key order (descending with ``reverse``); bounds are inclusive."""
        start, stop, overlay = self._window(
            from_pk, to_pk, from_index, to_index, offset, limit, reverse
        )
        if stop <= start or overlay is None:
            return
        tree = self._tree()
        plan = tree.plan(self.data_ref(), overlay, start, stop)
        if reverse:
            plan.reverse()
        leaves = tree.leaves_io
        # A scan bigger than the cache keeps none of what it decodes: each block would
        # only push out the one read before it (and weighing each for the cache cost a
        # 10M-row scan a tenth of its calling thread's time).
        stored = sum(_stored_size(leaf) for leaf in plan)
        keep = stored * _DECODED_PER_STORED <= self.ts.cache_bytes // 2
        for chunk in self._chunks(plan):
            # Fetch the blocks of several leaves concurrently before materialising them:
            # only the pages that hold the rows wanted, where no pending change falls.
            self.ts.prefetch_nodes([leaf.ref.cid for leaf in chunk if leaf.ref is not None])
            blocks: list[Block] = []
            for leaf in chunk:
                if leaf.ref is None:
                    continue
                if overlay.has_entries(leaf.lo, leaf.hi):
                    blocks += leaves.blocks(leaf.ref.cid, fields)
                else:
                    blocks += leaves.slice_blocks(leaf.ref.cid, leaf.start, leaf.stop, fields)
            with self.ts.holding(blocks, keep=keep):
                for leaf in chunk:
                    rows = tree.materialize(leaf, overlay, fields)
                    if reverse:
                        rows = rows.take(pa.array(np.arange(rows.num_rows - 1, -1, -1)))
                    yield rows

    def _chunks(self, plan: Sequence[LeafSlice]) -> Iterator[list[LeafSlice]]:
        """The plan's leaves in groups fetched at once: at most :data:`_PREFETCH`, and
        no more (decoded) than a part of the cache, so that a group is still cached
        when it is read however small the cache."""
        return _budgeted(plan, _stored_size, self._fetch_budget(), most=_PREFETCH)

    def _fetch_budget(self) -> int:
        """Stored bytes whose decoded blocks a read fetches at once: a third of the cache."""
        return max(1, self.ts.cache_bytes // (3 * _DECODED_PER_STORED))

    def prefetch(
        self, tablets: Sequence[CID], fields: Sequence[str] | None
    ) -> AbstractContextManager[None]:
        """Fetch, verify and decode at once what a read of ``fields`` needs of ``tablets``
        (only the families that hold those fields, and of them only those columns),
        held at hand until the ``with`` block that reads them exits
        (``TableStore.holding``)."""
        leaves = self._tree().leaves_io
        self.ts.prefetch_nodes(list(tablets))
        return self.ts.holding([block for cid in tablets for block in leaves.blocks(cid, fields)])

    def to_arrow(
        self, *, fields: Sequence[str] | None = None, from_pk: Any = None, to_pk: Any = None
    ) -> pa.Table:
        """The whole table (or a key range) as one Arrow table, in the schema's types."""
        parts = list(self.scan(fields=fields, from_pk=from_pk, to_pk=to_pk))
        if not parts:
            return self.empty(fields)
        return self.present(concat_segments(parts, key_field=self.root.key_field), fields)

    def tablets(self) -> list[ChildRef]:
        """The tablets of the merged area in key order (pending changes are not in them)."""
        if not self.root.key_codec:
            return []
        return list(self._tree().leaves(self.data_ref()))

    def read_tablet(self, cid: CID, fields: Sequence[str] | None = None) -> pa.Table:
        """The rows stored in one tablet, projected to ``fields``."""
        return self._tree().read_rows(cid, fields).table


def _stored_size(leaf: LeafSlice) -> int:
    """About the stored bytes a scan reads of a leaf (its share of the tablet's)."""
    ref = leaf.ref
    return 0 if ref is None else ref.size * (leaf.stop - leaf.start) // max(1, ref.count)


def _budgeted(
    items: Sequence[T], size: Callable[[T], int], budget: int, *, most: int | None = None
) -> Iterator[list[T]]:
    """``items`` in order, in runs of at most ``most`` whose sizes add up to at most
    ``budget`` (a run holds at least one item, however big)."""
    run: list[T] = []
    used = 0
    for item in items:
        cost = size(item)
        if run and ((most is not None and len(run) >= most) or used + cost > budget):
            yield run
            run, used = [], 0
        run.append(item)
        used += cost
    if run:
        yield run
