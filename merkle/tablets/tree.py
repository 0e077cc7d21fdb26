"""The merged area: a B+-tree of tablets under index nodes, persistent and shared.

Updates never modify a block. Changes are routed down to the tablets whose
key ranges they fall in; only those tablets are rewritten (in parallel), and
only the index nodes on their paths are rebuilt. Every other subtree is
reused by link. Tablets split above ``tablet_size`` and merge with a
neighbour below a quarter of it; index nodes hold at most ``branching``
children and at least half of that (the root: at least two).

Reads are planned by rank: each subtree's row count is its stored count plus
the pending overlay's delta over its key range, so offsets, index bounds and
limits skip whole subtrees without reading them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.tablets.batch import Overlay
from merkle.tablets.keyindex import KeyIndex
from merkle.tablets.leaves import Leaves, split_ranks
from merkle.tablets.nodes import ChildRef, IndexNode
from merkle.tablets.rows import SortedRows, cut_points, merge_changes
from merkle.tablets.segment import project
from merkle.tablets.spec import TableSpec
from merkle.tablets.store import TableStore

__all__ = ["LeafSlice", "TableSpec", "Tree", "node_ref"]


@dataclass(frozen=True, slots=True)
class LeafSlice:
    """Rows ``[start, stop)`` of one leaf's effective rows (its tablet with the overlay laid on)."""

    ref: ChildRef | None  # None: the table has no merged area; the overlay is everything
    lo: bytes | None
    hi: bytes | None
    start: int
    stop: int


def node_ref(ts: TableStore, cid: CID) -> ChildRef:
    """The ChildRef of a stored tablet or index node."""
    node = ts.child(cid)
    if isinstance(node, IndexNode):
        return ChildRef(cid, node.height, node.count, node.size, node.first_key, node.last_key)
    return ChildRef(cid, 0, node.count, node.size, node.first_key, node.last_key)


@dataclass(frozen=True, slots=True)
class _Window:
    """What :meth:`Tree.plan` looks for: effective rows ``[start, stop)``, and where the
    leaves holding them go."""

    overlay: Overlay
    start: int
    stop: int
    out: list[LeafSlice]


class Tree:
    """Operations on one table's merged area (stateless apart from caches in ``ts``)."""

    def __init__(self, ts: TableStore, spec: TableSpec) -> None:
        self.ts = ts
        self.spec = spec
        # Nodes made by the running operation: only they can be underfull.
        self._fresh: dict[bytes, int] = {}

    # -- reading tablets ---------------------------------------------------------

    @property
    def leaves_io(self) -> Leaves:
        """Tablet reads and writes, page by page."""
        return Leaves(self.ts, self.spec)

    def tablet_keys(self, cid: CID) -> KeyIndex:
        """The sorted encoded keys of a tablet (cached)."""
        return self.leaves_io.keys(cid)

    def read_rows(self, cid: CID, fields: Sequence[str] | None = None) -> SortedRows:
        """A tablet's rows (all fields, or the key plus ``fields``) with their encoded keys."""
        return self.leaves_io.rows(cid, fields)

    def read_table(self, cid: CID, fields: Sequence[str] | None = None) -> pa.Table:
        """A tablet's rows (all fields, or the key plus ``fields``), in key order."""
        return self.leaves_io.table(cid, fields)

    # -- writing tablets and index nodes -----------------------------------------

    def write_tablets(self, rows: SortedRows) -> list[ChildRef]:
        """Cut sorted rows into tablets of at most ``tablet_size`` (in pages) and store them."""
        return self._made(self.leaves_io.write(rows))

    def _made(self, refs: list[ChildRef]) -> list[ChildRef]:
        for ref in refs:
            self._fresh[ref.cid.bytes] = ref.count
        return refs

    def pack(self, refs: Sequence[ChildRef], height: int) -> list[ChildRef]:
        """Group refs (of height ``height - 1``) evenly under as few index nodes as fit."""
        if not refs:
            return []
        cuts = cut_points(len(refs), self.spec.limits.branching)
        out = []
        for i in range(len(cuts) - 1):
            group = tuple(refs[cuts[i] : cuts[i + 1]])
            node = IndexNode(height, group)
            cid = self.ts.put_node(node.to_node())  # few per operation: not worth batching
            self._fresh[cid.bytes] = len(group)
            out.append(
                ChildRef(cid, height, node.count, node.size, group[0].first_key, group[-1].last_key)
            )
        return out

    def mark_fresh(self, refs: Sequence[ChildRef]) -> None:
        """Count ``refs`` as made by this operation (``finish`` merges them if underfull)."""
        self._fresh.update({ref.cid.bytes: ref.count for ref in refs if ref.height == 0})

    def _underfull(self, ref: ChildRef, check_all: bool) -> bool:
        fill = self._fresh.get(ref.cid.bytes)
        if fill is None:
            if not check_all:
                return False
            fill = ref.count if ref.height == 0 else len(self.ts.index(ref.cid))
        limits = self.spec.limits
        return fill < (limits.min_tablet if ref.height == 0 else limits.min_children)

    def fix_underfull(self, refs: list[ChildRef], *, check_all: bool = False) -> list[ChildRef]:
        """Merge underfull siblings with a neighbour until none is left (or one ref remains)."""
        refs = list(refs)
        while len(refs) > 1:
            j = next((i for i, r in enumerate(refs) if self._underfull(r, check_all)), None)
            if j is None:
                break
            a = j if j + 1 < len(refs) else j - 1
            refs[a : a + 2] = self._merge_pair(refs[a], refs[a + 1], check_all)
        return refs

    def _merge_pair(self, a: ChildRef, b: ChildRef, check_all: bool) -> list[ChildRef]:
        if a.height == 0:
            return self._made(self.leaves_io.merge([a, b]))
        children = list(self.ts.index(a.cid).children) + list(self.ts.index(b.cid).children)
        return self.pack(self.fix_underfull(children, check_all=check_all), a.height)

    def finish(self, refs: list[ChildRef], *, check_all: bool = False) -> ChildRef | None:
        """Stack refs of one height into a single root, collapsing single-child roots."""
        if not refs:
            return None
        refs = self.fix_underfull(refs, check_all=check_all)
        while len(refs) > 1:
            refs = self.pack(refs, refs[0].height + 1)
        root = refs[0]
        while root.height > 0:
            children = self.ts.index(root.cid).children
            if len(children) > 1:
                break
            root = children[0]
        return root

    # -- updates -----------------------------------------------------------------

    def apply(
        self, data: ChildRef | None, upserts: SortedRows, deletes: pa.Array
    ) -> ChildRef | None:
        """The merged area with ``upserts`` written and ``deletes`` removed."""
        self._fresh = {}
        if data is None:
            return self.finish(self.write_tablets(upserts))
        leaves: dict[CID, tuple[ChildRef, SortedRows, pa.Array]] = {}
        touched: set[CID] = set()
        self._route(data, upserts, deletes, leaves, touched)
        jobs = list(leaves.values())
        results = self.ts.map(self._rewrite_leaf, jobs)
        rewritten = {}
        for (ref, _, _), new_refs in zip(jobs, results, strict=True):
            rewritten[ref.cid] = new_refs
            for new in new_refs:
                self._fresh[new.cid.bytes] = new.count
        return self.finish(self._splice(data, rewritten, touched))

    def _route(
        self,
        ref: ChildRef,
        upserts: SortedRows,
        deletes: pa.Array,
        leaves: dict[CID, tuple[ChildRef, SortedRows, pa.Array]],
        touched: set[CID],
    ) -> None:
        if not len(upserts) and not len(deletes):
            return
        if ref.height == 0:
            leaves[ref.cid] = (ref, upserts, deletes)
            return
        touched.add(ref.cid)
        node = self.ts.index(ref.cid)
        seps = node.keys
        up_at = split_ranks(upserts.keys, seps)
        del_at = split_ranks(deletes, seps)
        for i, child in enumerate(node.children):
            self._route(
                child,
                upserts.slice(up_at[i], up_at[i + 1]),
                deletes.slice(del_at[i], del_at[i + 1] - del_at[i]),
                leaves,
                touched,
            )

    def _rewrite_leaf(self, job: tuple[ChildRef, SortedRows, pa.Array]) -> list[ChildRef]:
        ref, upserts, deletes = job
        return self.leaves_io.rewrite(ref, upserts, deletes)

    def _splice(
        self, ref: ChildRef, rewritten: dict[CID, list[ChildRef]], touched: set[CID]
    ) -> list[ChildRef]:
        if ref.height == 0:
            return rewritten.get(ref.cid, [ref])
        if ref.cid not in touched:
            return [ref]
        out: list[ChildRef] = []
        for child in self.ts.index(ref.cid).children:
            out += self._splice(child, rewritten, touched)
        return self.pack(self.fix_underfull(out), ref.height)

    def replace_leaves(
        self,
        data: ChildRef,
        rewritten: dict[CID, list[ChildRef]],
        *,
        fresh: Sequence[ChildRef] | None = None,
    ) -> ChildRef | None:
        """Splice tablets rewritten elsewhere (e.g. by Spark tasks) back into the tree.

        ``fresh`` limits the underfull check to those tablets (default: every
        tablet in ``rewritten``).
        """
        made = fresh if fresh is not None else [r for refs in rewritten.values() for r in refs]
        self._fresh = {new.cid.bytes: new.count for new in made}
        touched: set[CID] = set()
        self._mark(data, rewritten, touched)
        return self.finish(self._splice(data, rewritten, touched))

    def _mark(self, ref: ChildRef, rewritten: dict[CID, list[ChildRef]], touched: set[CID]) -> bool:
        """Whether ``ref``'s subtree holds a rewritten tablet; index nodes that do go to
        ``touched``. (A method, not a nested function: a closure that calls itself is a
        reference cycle, which would keep the connection's caches alive until the next
        garbage collection.)"""
        if ref.height == 0:
            return ref.cid in rewritten
        children = self.ts.index(ref.cid).children
        hit = any([self._mark(child, rewritten, touched) for child in children])
        if hit:
            touched.add(ref.cid)
        return hit

    # -- walking -----------------------------------------------------------------

    def leaves(self, data: ChildRef | None) -> Iterator[ChildRef]:
        """Every tablet in key order."""
        if data is None:
            return
        if data.height == 0:
            yield data
            return
        for child in self.ts.index(data.cid).children:
            yield from self.leaves(child)

    def plan(
        self, data: ChildRef | None, overlay: Overlay, start: int, stop: int
    ) -> list[LeafSlice]:
        """The leaves (and row ranges in them) that hold effective rows ``[start, stop)``."""
        out: list[LeafSlice] = []
        if stop <= start:
            return out
        if data is None:
            out.append(LeafSlice(None, None, None, start, min(stop, overlay.delta())))
            return out

        self._visit(data, None, None, 0, _Window(overlay, start, stop, out))
        return out

    def _visit(
        self, ref: ChildRef, lo: bytes | None, hi: bytes | None, base: int, window: _Window
    ) -> None:
        """:meth:`plan` of the subtree ``ref`` (keys ``[lo, hi)``) whose first effective
        row is row ``base``; a method, not a closure that calls itself (see :meth:`_mark`)."""
        overlay, start, stop = window.overlay, window.start, window.stop
        size = ref.count + overlay.delta(lo, hi)
        if base >= stop or base + size <= start:
            return
        if ref.height == 0:
            window.out.append(LeafSlice(ref, lo, hi, max(start - base, 0), min(stop - base, size)))
            return
        children = self.ts.index(ref.cid).children
        for i, child in enumerate(children):
            clo = lo if i == 0 else child.first_key
            chi = hi if i == len(children) - 1 else children[i + 1].first_key
            self._visit(child, clo, chi, base, window)
            base += child.count + overlay.delta(clo, chi)
            if base >= stop:
                return

    def materialize(
        self, leaf: LeafSlice, overlay: Overlay, fields: Sequence[str] | None
    ) -> pa.Table:
        """The effective rows ``[start, stop)`` of one leaf, projected to ``fields``."""
        upserts, deletes = overlay.changes(leaf.lo, leaf.hi)
        if fields is not None:
            upserts = SortedRows(
                project(upserts.table, fields, key_field=self.spec.key_field), upserts.keys
            )
        if leaf.ref is None:
            table = upserts.table
        elif not len(upserts) and not len(deletes):
            # No pending change: only the pages that hold the rows are read.
            return self.leaves_io.slice(leaf.ref.cid, leaf.start, leaf.stop, fields)
        else:
            base = self.read_rows(leaf.ref.cid, fields)
            table = merge_changes(base, upserts, deletes, self.spec.key_field).table
        return table.slice(leaf.start, leaf.stop - leaf.start)

    def merged_rank(self, data: ChildRef | None, key: bytes, *, inclusive: bool) -> int:
        """How many merged-area rows have keys ``< key`` (``<=`` with ``inclusive``)."""
        rank = 0
        ref = data
        while ref is not None:
            if ref.height == 0:
                return rank + self.leaves_io.rank(ref.cid, key, inclusive=inclusive)
            node = self.ts.index(ref.cid)
            i = bisect.bisect_right(node.keys, key)
            rank += sum(node.counts()[:i])
            ref = node.child(i)
        return rank

    def leaf_bounds(self, data: ChildRef | None, key: bytes) -> tuple[bytes | None, bytes | None]:
        """The key range ``[lo, hi)`` of the merged-area leaf whose range holds ``key``
        (None: unbounded on that side), found by walking down the separators."""
        lo: bytes | None = None
        hi: bytes | None = None
        ref = data
        while ref is not None and ref.height > 0:
            node = self.ts.index(ref.cid)
            i = bisect.bisect_right(node.keys, key)
            if i > 0:
                lo = node.keys[i - 1]
            if i < len(node.keys):
                hi = node.keys[i]
            ref = node.child(i)
        return lo, hi

    def locate(self, data: ChildRef | None, keys: Sequence[bytes]) -> dict[CID, list[bytes]]:
        """Group sorted encoded keys by the tablet whose range holds them."""
        groups: dict[CID, list[bytes]] = {}
        if data is not None and keys:
            self._descend(data, keys, groups)
        return groups

    def _descend(
        self, ref: ChildRef, part: Sequence[bytes], groups: dict[CID, list[bytes]]
    ) -> None:
        """:meth:`locate` in the subtree ``ref``; a method, not a closure that calls
        itself (see :meth:`_mark`)."""
        if not part:
            return
        if ref.height == 0:
            groups[ref.cid] = list(part)
            return
        node = self.ts.index(ref.cid)
        seps = node.keys
        if len(part) * 8 < len(seps):
            # Few keys (a point read): bisect each key, not each of the children.
            routed: dict[int, list[bytes]] = {}
            for key in part:
                routed.setdefault(bisect.bisect_right(seps, key), []).append(key)
            for i, routed_keys in routed.items():
                self._descend(node.child(i), routed_keys, groups)
            return
        cuts = [0] + [bisect.bisect_left(part, s) for s in seps] + [len(part)]
        for i, child in enumerate(node.children):
            self._descend(child, part[cuts[i] : cuts[i + 1]], groups)

    def exists(self, data: ChildRef | None, keys: Sequence[bytes]) -> list[bool]:
        """Whether each encoded key is in the merged area (keys sorted and unique)."""
        found: set[bytes] = set()
        groups = self.locate(data, keys)
        leaves = self.leaves_io
        # Every key block needed, from every tablet, fetched at once.
        self.ts.prefetch_nodes(list(groups))
        with self.ts.holding(
            [block for cid, part in groups.items() for block in leaves.key_blocks(cid, part)]
        ):
            for cid, part in groups.items():
                rows = leaves.find(cid, part)
                found.update(k for k, r in zip(part, rows, strict=True) if r >= 0)
        return [k in found for k in keys]
