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

from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack
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
from merkle.tablets.windows import first_budget, next_budget, pending_segments, window_edge

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
        """The effective rows ``[start, stop)`` a scan reads and the overlay that counts them:
        the table's ranks, counted with the whole overlay (a scan that needs no rank of
        the table's reads in windows: :meth:`_scan_windows`)."""
        codec = self.codec
        if codec is None:
            return 0, 0, None
        lo, hi = scan_bounds(codec, from_pk, to_pk)
        tree, data = self._tree(), self.data_ref()
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
        """Record batches in key order (descending with ``reverse``); bounds are inclusive.

        A scan of a pending area bounded by keys (or by nothing), without index
        bounds, folds it a window at a time (:meth:`_scan_windows`); one by
        index, or with an offset and no key bounds, counts by the table's ranks
        with the whole (cached) overlay.
        """
        _check_window(from_index, to_index, offset, limit, reverse)
        codec = self.codec
        if codec is None:
            return
        if (
            self.root.pending
            and self._overlay is None
            and from_index is None
            and to_index is None
            and (from_pk is not None or to_pk is not None or not offset)
        ):
            lo, hi = scan_bounds(codec, from_pk, to_pk)
            yield from self._scan_windows(fields, lo, hi, offset or 0, limit, reverse)
            return
        start, stop, overlay = self._window(
            from_pk, to_pk, from_index, to_index, offset, limit, reverse
        )
        if stop > start and overlay is not None:
            yield from self._read(overlay, start, stop, fields, reverse)

    def _scan_windows(
        self,
        fields: Sequence[str] | None,
        lo: bytes | None,
        hi: bytes | None,
        skip: int,
        limit: int | None,
        reverse: bool,
    ) -> Iterator[pa.Table]:
        """The rows of keys ``[lo, hi)`` after ``skip`` (from the end with ``reverse``), at
        most ``limit`` of them, the pending area folded one key window at a time
        (:mod:`merkle.tablets.windows`).

        Each window's overlay holds only the pending changes in it
        (:meth:`Overlay.load_range`, patches resolved against this version's merged
        area): its ranks are not the table's, but they count and order the rows in
        the window exactly, which is all a plan and its slices need. Whole windows
        are skipped by count. A scan folds about the pending changes among the rows
        it skips and returns, not those of the rest of its range.
        """
        if lo is not None and hi is not None and lo >= hi:
            return
        spec, pending = self.spec, self.root.pending
        tree, data = self._tree(), self.data_ref()
        merged_count = data.count if data is not None else 0
        left = limit
        budget = first_budget(None if limit is None else skip + limit)
        edge, end = (hi, lo) if reverse else (lo, hi)
        stored = 0  # bytes the scan has read so far (what it may keep in the cache)
        held = False
        with ExitStack() as stack:
            while left is None or left > 0:
                far = window_edge(
                    self.ts, pending, spec.key_field, spec.codec, edge, budget, reverse=reverse
                )
                if far is not None and limit is None and data is not None:
                    # A scan that reads on from here ends its window where a tablet does
                    # if that folds at most twice the budget: a tablet cut by a window
                    # is read (and merged) once for each side.
                    further = window_edge(
                        self.ts,
                        pending,
                        spec.key_field,
                        spec.codec,
                        edge,
                        2 * budget,
                        reverse=reverse,
                    )
                    lo_leaf, hi_leaf = tree.leaf_bounds(data, far)
                    aligned = lo_leaf if reverse or lo_leaf == far else hi_leaf
                    if further is None or (
                        aligned is not None
                        and (aligned >= further if reverse else aligned <= further)
                    ):
                        far = aligned
                last = far is None or (end is not None and (far <= end if reverse else far >= end))
                if last:
                    far = end
                a, b = (far, edge) if reverse else (edge, far)
                ranged = Overlay.load_range(self.ts, pending, spec.key_field, spec.codec, a, b)
                overlay = ranged.resolving(self.resolve_patches)

                def rank(key: bytes | None, overlay: Overlay = overlay) -> int:
                    if key is None:
                        return merged_count + overlay.delta()
                    merged = tree.merged_rank(data, key, inclusive=False)
                    return merged + overlay.delta_before(key, inclusive=False)

                start, stop = (0 if a is None else rank(a)), rank(b)
                if skip >= stop - start:
                    skip -= max(0, stop - start)
                else:
                    if reverse:
                        stop -= skip
                        start = start if left is None else max(start, stop - left)
                    else:
                        start += skip
                        stop = stop if left is None else min(stop, start + left)
                    skip = 0
                    if left is not None:
                        left -= stop - start
                    stored = yield from self._read(overlay, start, stop, fields, reverse, stored)
                if last:
                    return
                if not held:  # a second window: hold the batches' segments for the rest
                    held = True
                    stack.enter_context(
                        self.ts.holding([(cid, None) for cid in pending_segments(self.ts, pending)])
                    )
                edge, budget = far, next_budget(budget)

    def _read(
        self,
        overlay: Overlay,
        start: int,
        stop: int,
        fields: Sequence[str] | None,
        reverse: bool,
        stored: int = 0,
    ) -> Generator[pa.Table, None, int]:
        """The effective rows ``[start, stop)`` counted by ``overlay``, in batches (in
        descending order with ``reverse``); returns ``stored`` (the bytes the scan read
        before) plus the bytes these rows are read from."""
        tree = self._tree()
        plan = tree.plan(self.data_ref(), overlay, start, stop)
        if reverse:
            plan.reverse()
        leaves = tree.leaves_io
        # A scan bigger than the cache keeps none of what it decodes: each block would
        # only push out the one read before it (and weighing each for the cache cost a
        # 10M-row scan a tenth of its calling thread's time). A scan read in windows
        # keeps its blocks while all it has read so far is small beside the cache.
        stored += sum(_stored_size(leaf) for leaf in plan)
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
        return stored

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
        """The whole table (or a key range) as one Arrow table, in the schema's types.

        The whole table is read with the whole pending area folded at once, the
        fold cached on this value (:meth:`overlay`): the result holds every row
        anyway, so folding it a window at a time (as a stream does, to bound its
        memory) only made a repeated read fold it again, 25% more CPU for
        230k pending rows. A key range folds only the pending changes in it.
        """
        if from_pk is None and to_pk is None and self.root.pending and self.codec is not None:
            start, stop, overlay = self._window(None, None, None, None, None, None, False)
            parts = []
            if stop > start and overlay is not None:
                parts = list(self._read(overlay, start, stop, fields, False))
        else:
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


def _check_window(
    from_index: int | None,
    to_index: int | None,
    offset: int | None,
    limit: int | None,
    reverse: bool,
) -> None:
    """UsageError unless the indexes, offset and limit are non-negative integers (or
    None) and ``reverse`` a boolean."""
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
