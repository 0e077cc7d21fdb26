"""Tables read and written by many processes at once (Spark): plans, slices, groups, splices.

A bulk engine splits work by key range. Everything here is expressed in
encoded keys and plain values (:class:`TabletInfo` holds a CID *string*), so
plans pickle to other processes; each process opens the lake itself and
calls the functions below on its own :class:`~merkle.tablets.table.Table`.

Reading: :func:`plan_reads` cuts a table into :class:`Slice` objects from its
index alone (no segment is read): one slice per tablet, owning the keys from
its first key up to the next tablet's first key, the first slice from minus
infinity, the last to plus infinity. So every key, whether in a tablet or only
in a pending batch, belongs to exactly one slice: :func:`read_slices` lays
the pending changes of a slice's own range over its tablet, and every
pending insert, update and delete is applied exactly once.

Writing: :func:`plan_groups` cuts the key space into :class:`WriteGroup`
ranges (one per tablet, and the gaps between tablets); a group's rows are
rewritten in one place by :func:`rewrite_group` (its tablet, the pending
changes in its range, and the new rows or deletes), into tablets of pages
exactly as a single-machine flush writes them (only the pages the changes
fall in are rewritten, the others reused by link). :func:`splice` then puts
the new tablets into the tree, reusing every untouched tablet and index
subtree by link, as a single-machine flush does; :func:`plan_merges` and
:func:`merge_leaves` fix tablets left below the fill minimum.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from merkle.blocks.cid import CID
from merkle.errors import IntegrityError, UsageError
from merkle.tablets.keyindex import as_u64, combine
from merkle.tablets.nodes import ChildRef
from merkle.tablets.ranges import KeyRanges, successor
from merkle.tablets.rows import SortedRows, empty_keys, merge_changes, sort_rows
from merkle.tablets.segment import cbor_field, is_cbor_field
from merkle.tablets.table import Table
from merkle.tablets.tree import LeafSlice, Tree

__all__ = [
    "RepeatedKeyError",
    "Slice",
    "TabletInfo",
    "WriteGroup",
    "arrow_schema",
    "encode_keys",
    "key_column",
    "merge_leaves",
    "plan_groups",
    "plan_merges",
    "plan_reads",
    "read_slices",
    "rewrite_group",
    "route",
    "splice",
    "write_run",
]

_PREFETCH = 8  # tablets whose segments a reader fetches at once
_ALL_ROWS = 1 << 62


@dataclass(frozen=True, slots=True)
class TabletInfo:
    """A stored tablet as plain values: its CID string, row count, bytes and key range."""

    cid: str
    count: int
    size: int
    first_key: bytes
    last_key: bytes

    @classmethod
    def of(cls, ref: ChildRef) -> TabletInfo:
        return cls(str(ref.cid), ref.count, ref.size, ref.first_key, ref.last_key)

    def ref(self) -> ChildRef:
        return ChildRef(
            CID.parse(self.cid), 0, self.count, self.size, self.first_key, self.last_key
        )


@dataclass(frozen=True, slots=True)
class Slice:
    """The keys ``[lo, hi)`` of a table that one tablet (or, with no tablets, none) serves."""

    tablet: TabletInfo | None
    lo: bytes | None
    hi: bytes | None


@dataclass(frozen=True, slots=True)
class WriteGroup:
    """A key range ``[lo, hi)`` whose rows a bulk write rebuilds in one place.

    ``tablet`` is the stored tablet whose rows all lie in the range (None for
    a gap between tablets, or a table with no tablets).
    """

    index: int
    lo: bytes | None
    hi: bytes | None
    tablet: TabletInfo | None


# -- reading ----------------------------------------------------------------------


def _owned(leaves: Sequence[ChildRef]) -> list[tuple[bytes | None, bytes | None]]:
    """The key range each leaf serves: from its first key to the next leaf's first key."""
    n = len(leaves)
    return [
        (None if i == 0 else leaf.first_key, None if i == n - 1 else leaves[i + 1].first_key)
        for i, leaf in enumerate(leaves)
    ]


def plan_reads(
    table: Table, *, target_bytes: int, keys: KeyRanges | None = None
) -> list[list[Slice]]:
    """Groups of slices to read in parallel, from the table's index alone.

    One slice per tablet whose range meets ``keys`` (None: every key);
    adjacent slices are grouped while their tablets' bytes stay within
    ``target_bytes`` (a slice bigger than that is a group of its own). A table
    with pending batches but no tablets is one slice holding every key.
    """
    keys = KeyRanges.everything() if keys is None else keys
    if keys.is_empty or not table.root.key_codec:
        return []
    leaves = table.tablets()
    if not leaves:
        return [[Slice(None, None, None)]] if table.root.pending else []
    groups: list[list[Slice]] = []
    size = 0
    previous = -2
    for i, (leaf, (lo, hi)) in enumerate(zip(leaves, _owned(leaves), strict=True)):
        if not keys.overlaps(lo, hi):
            continue
        piece = Slice(TabletInfo.of(leaf), lo, hi)
        if groups and previous == i - 1 and size + leaf.size <= target_bytes:
            groups[-1].append(piece)
            size += leaf.size
        else:
            groups.append([piece])
            size = leaf.size
        previous = i
    return groups


def read_slices(
    table: Table,
    slices: Sequence[Slice],
    *,
    fields: Sequence[str] | None = None,
    keys: KeyRanges | None = None,
) -> Iterator[pa.Table]:
    """The rows of each slice in key order (pending changes applied), within ``keys``.

    Segments are fetched (and verified) a few tablets at a time, concurrently;
    only the families and columns ``fields`` needs are read. Each slice
    yields one table (possibly empty) holding the key and the wanted fields,
    as the user's table (:meth:`Table.present`: a typed table's schema order
    and exact types).
    """
    keys = KeyRanges.everything() if keys is None else keys
    spec = table.spec
    tree = Tree(table.ts, spec)
    overlay = table.overlay()
    for i in range(0, len(slices), _PREFETCH):
        chunk = slices[i : i + _PREFETCH]
        with table.prefetch(
            [CID.parse(p.tablet.cid) for p in chunk if p.tablet is not None], fields
        ):
            for piece in chunk:
                ref = piece.tablet.ref() if piece.tablet is not None else None
                rows = tree.materialize(
                    LeafSlice(ref, piece.lo, piece.hi, 0, _ALL_ROWS), overlay, fields
                )
                if not keys.covers(piece.lo, piece.hi) and rows.num_rows:
                    chosen = keys.select(spec.codec.encode_array(rows.column(spec.key_field)))
                    if chosen is not None:
                        rows = rows.take(chosen)
                yield table.present(rows, fields)


def arrow_schema(table: Table) -> pa.Schema:
    """The Arrow schema of the rows :func:`read_slices` gives.

    A typed table's own schema. A table written before schemas is
    schema-free, so each segment (every page's family block, a version 1
    tablet's segments, every pending batch's) may type a field differently:
    its schema is the key, then each field by name, with the one Arrow type
    it is stored with everywhere, or as a CBOR field
    (:func:`~merkle.tablets.segment.cbor_field`) where it is stored with
    several (or as CBOR anywhere). That reads each segment's schema (a few
    hundred bytes each), never its data.
    """
    codec = table.codec
    if codec is None:
        raise UsageError("the table has no key type yet: write a record first")
    if table.root.typed and table.schema is not None:
        return table.schema
    ts = table.ts
    cids: list[CID] = []
    for ref in table.tablets():
        tablet = ts.tablet(ref.cid)
        cids += tablet.segments.values()  # a version 1 tablet's; a paged one's below
        cids += [cid for page in tablet.pages for cid in page.families.values() if cid is not None]
    for batch_cid in table.root.pending:
        upserts = ts.batch(batch_cid).upserts
        if upserts is not None:
            cids.append(upserts)
    key_field = table.root.key_field
    kinds: dict[str, dict[tuple[str, bool], pa.Field]] = {}
    for schema in ts.segment_schemas(cids):
        for field in schema:
            if field.name == key_field or pa.types.is_null(field.type):
                continue
            kinds.setdefault(field.name, {})[(str(field.type), is_cbor_field(field))] = field
    fields = [pa.field(key_field, codec.arrow_type, nullable=False)]
    for name in sorted(kinds):
        found = list(kinds[name].values())
        fields.append(found[0] if len(found) == 1 else cbor_field(name))
    return pa.schema(fields)


# -- writing ----------------------------------------------------------------------


def plan_groups(table: Table) -> list[WriteGroup]:
    """The key space cut into write groups, from the index alone: tablets and the gaps between.

    Tablet ``i``'s group holds the keys from its first to its last; the gaps
    (before the first tablet, between two, after the last) are groups without
    a tablet, so rows beyond the stored keys never make a tablet grow without
    bound and can be spread over many writers (:meth:`split`).
    """
    leaves = table.tablets() if table.root.key_codec else []
    ranges: list[tuple[bytes | None, bytes | None, TabletInfo | None]] = []
    lo: bytes | None = None
    for leaf in leaves:
        if lo is None or lo < leaf.first_key:
            ranges.append((lo, leaf.first_key, None))
        end = successor(leaf.last_key)
        ranges.append((leaf.first_key, end, TabletInfo.of(leaf)))
        lo = end
    ranges.append((lo, None, None))
    return [WriteGroup(i, a, b, t) for i, (a, b, t) in enumerate(ranges)]


def key_column(table: Table, rows: pa.Table) -> pa.Array | pa.ChunkedArray:
    """The key values of user rows in the key codec's Arrow type (a struct for a composite key)."""
    if not table.key.composite:
        return rows.column(table.key.column)
    keys = rows.select(list(table.key.fields))
    _, conformed = table.prepare_rows(keys)
    return conformed.column(table.key.column)


def encode_keys(table: Table, rows: pa.Table) -> pa.Array:
    """The encoded keys of user rows (in their order)."""
    return table.spec.codec.encode_array(key_column(table, rows))


def route(keys: pa.Array | pa.ChunkedArray, starts: Sequence[bytes]) -> np.ndarray:
    """For each encoded key, the index of the range it falls in.

    Range ``i`` runs from ``starts[i - 1]`` (minus infinity for ``i = 0``) up
    to ``starts[i]``; ``starts`` must be sorted. Vectorised for 8-byte keys.
    """
    keys = combine(keys)
    n = len(keys)
    if not starts or not n:
        return np.zeros(n, dtype=np.int64)
    words = as_u64(keys)
    bounds = _u64_bounds(starts) if words is not None else None
    if words is not None and bounds is not None:
        return np.searchsorted(bounds, words, side="right").astype(np.int64)
    order = np.asarray(pc.sort_indices(keys))
    ordered = keys.take(pa.array(order))
    cuts = [0, *(_rank(ordered, start) for start in starts), n]
    sorted_ids = np.repeat(np.arange(len(cuts) - 1, dtype=np.int64), np.diff(cuts))
    ids = np.empty(n, dtype=np.int64)
    ids[order] = sorted_ids
    return ids


def _u64_bounds(starts: Sequence[bytes]) -> np.ndarray | None:
    """Range starts as thresholds on 8-byte keys read as integers (None if impossible)."""
    out = []
    for start in starts:
        if len(start) == 8:
            out.append(int.from_bytes(start, "big"))
        elif len(start) == 9 and start[8] == 0 and int.from_bytes(start[:8], "big") < (1 << 64) - 1:
            out.append(int.from_bytes(start[:8], "big") + 1)  # the successor of an 8-byte key
        else:
            return None
    return np.array(out, dtype=np.uint64)


def _rank(ordered: pa.Array, key: bytes) -> int:
    """How many of the sorted keys are below ``key`` (binary search on Arrow scalars)."""
    lo, hi = 0, len(ordered)
    while lo < hi:
        mid = (lo + hi) // 2
        if ordered[mid].as_py() < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _sorted(table: Table, rows: pa.Table | None) -> SortedRows:
    spec = table.spec
    if rows is None or not rows.num_rows:
        empty = pa.table({spec.key_field: pa.array([], type=spec.codec.arrow_type)})
        return SortedRows(empty, empty_keys(spec.codec))
    _, prepared = table.prepare_rows(rows)
    return sort_rows(prepared, spec.key_field, spec.codec)


class RepeatedKeyError(UsageError):
    """Rows given to :func:`rewrite_group` with ``unique`` hold ``key`` more than once."""

    def __init__(self, key: object) -> None:
        super().__init__(f"the rows hold key {key!r} more than once")
        self.key = key


def _repeated_key(table: Table, rows: pa.Table) -> object:
    """The first key value that ``rows`` hold twice (keys equal once encoded are one)."""
    values = key_column(table, rows)
    seen: set[bytes] = set()
    for position, key in enumerate(table.spec.codec.encode_array(values).to_pylist()):
        if key in seen:
            return values[position].as_py()
        seen.add(key)
    raise AssertionError("no key is repeated")


def rewrite_group(
    table: Table,
    group: WriteGroup,
    *,
    upserts: pa.Table | None = None,
    deletes: pa.Array | None = None,
    replace: bool = False,
    unique: bool = False,
) -> list[TabletInfo] | None:
    """Rebuild one group's tablets; None when nothing in it changes.

    The group's rows are its stored tablet's rows with the table's pending
    changes in the group's range laid over them, then ``upserts`` (Arrow rows,
    any order; for a key given twice the later row wins) and ``deletes`` (key
    values). With ``replace`` the stored rows and pending changes are ignored:
    the group holds ``upserts`` alone. Every row given must lie in the group.
    With ``unique``, ``upserts`` holding a key twice is a :class:`RepeatedKeyError`
    instead (found by the sort, which drops the earlier rows).
    A stored tablet is rewritten as a flush rewrites it: the pages no change
    falls in are kept as they are.
    """
    spec = table.spec
    tree = Tree(table.ts, spec)
    new = _sorted(table, upserts)
    if unique and upserts is not None and len(new) < upserts.num_rows:
        raise RepeatedKeyError(_repeated_key(table, upserts))
    gone = empty_keys(spec.codec)
    if deletes is not None and len(deletes):
        gone = spec.codec.encode_array(deletes)
        gone = gone.take(pc.sort_indices(gone)).unique()
    _check_inside(new.keys, group)
    _check_inside(gone, group)
    if replace:
        return [TabletInfo.of(r) for r in tree.write_tablets(new)]
    pending_up, pending_del = (
        table.overlay().changes(group.lo, group.hi)
        if table.root.pending
        else (_sorted(table, None), empty_keys(spec.codec))
    )
    if not (len(new) or len(gone) or len(pending_up) or len(pending_del)):
        return None
    # The pending changes, then the new ones, as one set of changes: a row upserted
    # and also deleted is upserted (merge_changes removes both, then adds the upserts).
    upserts_all = merge_changes(pending_up, new, gone, spec.key_field)
    deletes_all = _union_keys(pending_del, gone)
    if group.tablet is None:
        rows = merge_changes(_sorted(table, None), upserts_all, deletes_all, spec.key_field)
        return [TabletInfo.of(r) for r in tree.write_tablets(rows)]
    # As a single-machine flush does: only the pages the changes fall in are rewritten.
    made = tree.leaves_io.rewrite(group.tablet.ref(), upserts_all, deletes_all)
    return [TabletInfo.of(r) for r in made]


def _union_keys(a: pa.Array, b: pa.Array) -> pa.Array:
    """The sorted, distinct encoded keys of two arrays of them."""
    if not len(b):
        return a
    if not len(a):
        return b
    keys = pa.concat_arrays([a, b.cast(a.type)]).unique()
    return keys.take(pc.sort_indices(keys))


def _check_inside(keys: pa.Array, group: WriteGroup) -> None:
    if not len(keys):
        return
    first, last = keys[0].as_py(), keys[len(keys) - 1].as_py()
    if (group.lo is not None and first < group.lo) or (group.hi is not None and last >= group.hi):
        raise UsageError(f"rows given for write group {group.index} fall outside its key range")


def write_run(table: Table, rows: pa.Table) -> list[TabletInfo]:
    """Sort rows by key (the later of two rows with one key wins) and store them as tablets."""
    return [
        TabletInfo.of(r) for r in Tree(table.ts, table.spec).write_tablets(_sorted(table, rows))
    ]


def plan_merges(
    table: Table, leaves: Sequence[TabletInfo], fresh: set[str]
) -> list[tuple[int, int]]:
    """Spans ``[i, j)`` of ``leaves`` to merge so that no tablet stays underfull.

    A tablet made by this write (``fresh`` CID strings), or the table's old
    sole tablet (which could be small while it was alone), holding fewer than
    a quarter of the tablet limit is merged with the tablets after it (the
    last one: before it) until the span holds enough rows. A table of one
    tablet may be underfull.
    """
    least = table.spec.limits.min_tablet
    old = table.tablets()
    sole = str(old[0].cid) if len(old) == 1 else None
    small = [
        i
        for i, leaf in enumerate(leaves)
        if leaf.count < least and (leaf.cid in fresh or leaf.cid == sole)
    ]
    if len(leaves) <= 1 or not small:
        return []
    spans: list[tuple[int, int]] = []
    for i in small:
        if spans and i < spans[-1][1]:
            continue
        j, rows = i, 0
        while j < len(leaves) and rows < least:
            rows += leaves[j].count
            j += 1
        start = i
        while rows < least and start > 0:
            start -= 1
            rows += leaves[start].count
        if spans and start < spans[-1][1]:
            start = spans.pop()[0]
        spans.append((start, j))
    return spans


def merge_leaves(table: Table, leaves: Sequence[TabletInfo]) -> list[TabletInfo]:
    """Adjacent tablets rewritten as evenly filled ones (their rows, in order), cut at
    page boundaries where that fills them (their pages reused), as a flush merges."""
    leaves_io = Tree(table.ts, table.spec).leaves_io
    return [TabletInfo.of(r) for r in leaves_io.merge([leaf.ref() for leaf in leaves])]


def splice(
    table: Table,
    leaves: Sequence[TabletInfo],
    *,
    fresh: set[str] | None = None,
    replace: bool = False,
) -> Table:
    """``table`` whose merged area holds exactly ``leaves`` (in key order), nothing pending.

    Leaves that are the table's own tablets are reused by link, and so is
    every index subtree none of whose tablets changed; the index nodes above
    changed tablets are rebuilt, as a single-machine flush does. ``fresh``
    names the leaves this write made: any still underfull is merged with a
    neighbour here (reading both; :func:`plan_merges` does it elsewhere
    first). With ``replace`` the old tablets are dropped, not reused. The
    leaves must already hold the pending changes (write groups apply them).
    """
    refs = [leaf.ref() for leaf in leaves]
    for before, after in itertools.pairwise(refs):
        if after.first_key <= before.last_key:
            raise IntegrityError(
                f"tablets {before.cid} and {after.cid} overlap or are out of key order"
            )
    tree = Tree(table.ts, table.spec)
    made = [ref for ref in refs if fresh is not None and str(ref.cid) in fresh]
    data = table.data_ref()
    old = table.tablets()
    if replace or data is None or not old:
        tree.mark_fresh(made)
        return table.with_merged(tree.finish(refs))
    starts = [leaf.first_key for leaf in old]
    kept = {ref.cid for ref in refs}
    # Each new leaf goes where the old tablet that owned its first key was.
    owners = [old[max(0, bisect.bisect_right(starts, ref.first_key) - 1)].cid for ref in refs]
    replaced: dict[CID, list[ChildRef]] = {leaf.cid: [] for leaf in old if leaf.cid not in kept}
    for ref, owner in zip(refs, owners, strict=True):
        if ref.cid != owner:
            replaced.setdefault(owner, [])
    for ref, owner in zip(refs, owners, strict=True):
        if owner in replaced:
            replaced[owner].append(ref)
    if not replaced:
        return table.with_merged(data)
    return table.with_merged(tree.replace_leaves(data, replaced, fresh=made))
