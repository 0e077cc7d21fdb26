"""Pending batches: write them, merge them Spine-style, and read them as one overlay.

A commit's changes to a table become one batch at the head of the table's
pending list. Batches are merged by size tier (:mod:`merkle.tablets.tiers`),
so a table holds O(log n) batches and each pending record is rewritten
O(log n) times.

The :class:`Overlay` is all pending batches folded into one sorted view,
newest change per key winning; reads lay it over the merged area. Each entry
carries ``in_merged`` (did the key exist in the merged area when the batch
was written?), which gives exact counts and ranks for any key range without
reading a tablet: an upsert of a new key adds a row, a delete of a merged
key removes one, everything else replaces or removes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.errors import IntegrityError
from merkle.lazy import compute as pc
from merkle.tablets.keyindex import KeyIndex, array_bytes, combine
from merkle.tablets.keys import KeyCodec
from merkle.tablets.nodes import BatchNode
from merkle.tablets.patches import Patches, apply_patches, compose, no_patches
from merkle.tablets.rows import SortedRows, empty_keys
from merkle.tablets.segment import concat_segments
from merkle.tablets.store import TableStore, table_weight

__all__ = [
    "BatchContent",
    "Overlay",
    "bound_rank",
    "delete_keys",
    "fold",
    "load_batch",
    "load_batch_range",
    "lookup_pending",
    "upsert_keys",
    "write_batch",
]


def _pack_bits(flags: np.ndarray) -> bytes:
    return np.packbits(flags.astype(bool)).tobytes()


def _unpack_bits(data: bytes, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(data, dtype=np.uint8), count=n).astype(bool)


@dataclass(frozen=True, slots=True)
class BatchContent:
    """The decoded contents of one batch (or of several folded together)."""

    upserts: SortedRows
    upserts_in_merged: np.ndarray
    deletes: pa.Array  # encoded keys, sorted, unique, disjoint from the upsert keys
    deletes_in_merged: np.ndarray
    patches: Patches | None = None  # keys disjoint from both; None or non-empty

    @property
    def count(self) -> int:
        return len(self.upserts) + len(self.deletes) + self.patch_count

    @property
    def patch_count(self) -> int:
        return len(self.patches) if self.patches is not None else 0

    def without_patches(self) -> BatchContent:
        return BatchContent(
            self.upserts, self.upserts_in_merged, self.deletes, self.deletes_in_merged
        )


def _segment_keys(ts: TableStore, segment: CID | None, key_field: str, codec: KeyCodec) -> KeyIndex:
    """The sorted encoded keys of a batch's segment (cached by segment); empty if none."""
    if segment is None:
        return KeyIndex(empty_keys(codec))
    return ts.key_index(
        segment,
        lambda: combine(codec.encode_array(ts.segment(segment).column(key_field))),
        encoding=codec.spec,
    )


def upsert_keys(ts: TableStore, node: BatchNode, key_field: str, codec: KeyCodec) -> KeyIndex:
    """The sorted encoded keys of a batch's upserts (cached by segment); empty if none."""
    return _segment_keys(ts, node.upserts, key_field, codec)


def patch_keys(ts: TableStore, node: BatchNode, key_field: str, codec: KeyCodec) -> KeyIndex:
    """The sorted encoded keys a batch patches (cached by segment); empty if none."""
    return _segment_keys(ts, node.patches, key_field, codec)


def load_patches(ts: TableStore, node: BatchNode, key_field: str, codec: KeyCodec) -> Patches:
    """A batch's patches (empty if none)."""
    if node.patches is None:
        return no_patches(key_field, codec)
    keys = patch_keys(ts, node, key_field, codec).keys
    masks = {name: _unpack_bits(bits, node.patch_count) for name, bits in node.patched}
    return Patches(SortedRows(ts.segment(node.patches), keys), masks)


def delete_keys(ts: TableStore, cid: CID, node: BatchNode) -> KeyIndex:
    """The sorted encoded keys a batch deletes (cached by batch)."""
    return ts.key_index(  # stored encoded: the batch's CID fixes them
        cid, lambda: pa.array(list(node.deletes), type=pa.binary()), encoding="", part="deletes"
    )


def lookup_pending(
    ts: TableStore, pending: Sequence[CID], keys: Sequence[bytes], key_field: str, codec: KeyCodec
) -> tuple[list[pa.Table], list[bytes], Patches | None]:
    """Point lookups in the pending batches: the rows found, the keys no batch decides, and
    the patches to lay over those keys' rows in the merged area (None if none).

    Batches are searched newest first through their cached key indexes (a key
    the newest batch holding it upserts is found there; one it deletes is
    gone; one it patches is looked for further, the patch kept to lay over
    what is found): no overlay of every pending batch is folded, so a read
    right after a commit costs a few binary searches, not a fold of the
    pending changes.
    """
    found: list[pa.Table] = []
    undecided = list(keys)
    newer: list[Patches] = []  # patches met so far, newest first
    for cid in pending:
        if not undecided:
            break
        node = ts.batch(cid)
        decided = np.zeros(len(undecided), dtype=bool)
        if node.upserts is not None:
            rows = np.array(upsert_keys(ts, node, key_field, codec).find(undecided))
            hit = rows >= 0
            if hit.any():
                taken = ts.segment(node.upserts).take(pa.array(rows[hit]))
                if newer:
                    hit_keys = pa.array([k for k, h in zip(undecided, hit, strict=True) if h])
                    patch = compose(newer, key_field)
                    taken = apply_patches(SortedRows(taken, hit_keys), patch, key_field).table
                found.append(taken)
            decided |= hit
        if node.deletes:
            decided |= np.array(delete_keys(ts, cid, node).find(undecided)) >= 0
        if node.patches is not None:
            at = np.array(patch_keys(ts, node, key_field, codec).find(undecided))
            if (at >= 0).any():
                mine = load_patches(ts, node, key_field, codec)
                newer.append(mine.select(np.isin(np.arange(len(mine)), at[at >= 0])))
        undecided = [key for key, done in zip(undecided, decided, strict=True) if not done]
    return found, undecided, compose(newer, key_field) if newer else None


def load_batch(ts: TableStore, cid: CID, key_field: str, codec: KeyCodec) -> BatchContent:
    """Read a batch node and its upserts segment."""
    node = ts.batch(cid)
    key_type = empty_keys(codec).type
    keys = upsert_keys(ts, node, key_field, codec).keys
    if node.upserts is None:
        table = pa.table({key_field: pa.array([], type=codec.arrow_type)})
    else:
        table = ts.segment(node.upserts)
    upserts = SortedRows(table, keys)
    deletes = pa.array(list(node.deletes), type=key_type)
    return BatchContent(
        upserts,
        _unpack_bits(node.upserts_in_merged, node.upsert_count),
        deletes,
        _unpack_bits(node.deletes_in_merged, len(node.deletes)),
        load_patches(ts, node, key_field, codec) if node.patches is not None else None,
    )


def load_batch_range(
    ts: TableStore, cid: CID, key_field: str, codec: KeyCodec, lo: bytes | None, hi: bytes | None
) -> BatchContent:
    """The part of a batch with keys in ``[lo, hi)`` (None: unbounded), as :func:`load_batch`
    would give it sliced: each part's keys are sorted, so a binary search in its cached key
    index finds the slice, and only that slice is ever folded (the decoded segment is the
    block cache's, shared by every range read of the batch)."""
    node = ts.batch(cid)
    index = upsert_keys(ts, node, key_field, codec)
    i, j = _key_span(index, lo, hi)
    if node.upserts is None:
        table = pa.table({key_field: pa.array([], type=codec.arrow_type)})
    else:
        table = ts.segment(node.upserts).slice(i, j - i)
    upserts = SortedRows(table, index.keys.slice(i, j - i))
    up_merged = _unpack_bits(node.upserts_in_merged, node.upsert_count)[i:j]
    deletes, del_merged = empty_keys(codec), np.zeros(0, dtype=bool)
    if node.deletes:
        dindex = delete_keys(ts, cid, node)
        di, dj = _key_span(dindex, lo, hi)
        deletes = dindex.keys.slice(di, dj - di)
        del_merged = _unpack_bits(node.deletes_in_merged, len(node.deletes))[di:dj]
    patches = None
    if node.patches is not None:
        pi, pj = _key_span(patch_keys(ts, node, key_field, codec), lo, hi)
        if pj > pi:
            patches = load_patches(ts, node, key_field, codec).slice(pi, pj)
    return BatchContent(upserts, up_merged, deletes, del_merged, patches)


def _key_span(index: KeyIndex, lo: bytes | None, hi: bytes | None) -> tuple[int, int]:
    """The positions ``[i, j)`` of the keys of ``index`` in ``[lo, hi)`` (None: unbounded)."""
    i = 0 if lo is None else bound_rank(index, lo)
    j = len(index) if hi is None else bound_rank(index, hi)
    return i, max(i, j)


def bound_rank(index: KeyIndex, key: bytes) -> int:
    """How many keys of ``index`` are ``< key``.

    A scan's upper bound is the successor of its last key (that key and a zero
    byte), and no key lies strictly between a key and its successor: the keys
    ``< k + b"\\0"`` are the keys ``<= k``. Asked so, the successor of an 8-byte
    key is searched in the index's numpy words, not in a list of every key of
    the batch made for one search (a batch may hold millions).
    """
    if len(key) == 9 and key[-1] == 0:
        return index.rank(key[:-1], inclusive=True)
    return index.rank(key)


def write_batch(ts: TableStore, content: BatchContent, lower: int, upper: int) -> CID:
    """Store a batch: its upserts as one Arrow segment, its deletes inline in the node."""
    upserts_cid: CID | None = None
    size = sum(len(k) for k in content.deletes.to_pylist())
    tables = [content.upserts.table] if len(content.upserts) else []
    patches = content.patches if content.patch_count else None
    if patches is not None:
        tables.append(patches.rows.table)
    stored = ts.put_segments(tables) if tables else []
    size += sum(nbytes for _, nbytes in stored)
    if len(content.upserts):
        upserts_cid = stored[0][0]
    node = BatchNode(
        lower=lower,
        upper=upper,
        upserts=upserts_cid,
        upsert_count=len(content.upserts),
        upserts_in_merged=_pack_bits(content.upserts_in_merged),
        deletes=tuple(content.deletes.to_pylist()),
        deletes_in_merged=_pack_bits(content.deletes_in_merged),
        size=size,
        patches=stored[-1][0] if patches is not None else None,
        patch_count=len(patches) if patches is not None else 0,
        patched=tuple((n, _pack_bits(b)) for n, b in patches.masks.items()) if patches else (),
    )
    return ts.put_node(node.to_node())


def fold(contents: Sequence[BatchContent], key_field: str, codec: KeyCodec) -> BatchContent:
    """Fold batches given newest first into one, the newest change of each key winning.

    Patches newer than a key's upsert are laid over it; patches older than
    its newest upsert or delete are dropped; patches of a key no batch
    upserts or deletes stay patches (composed, newest field value winning).
    """
    contents = [c for c in contents if c.count]
    if len(contents) == 1:
        return contents[0]
    if not any(c.patch_count for c in contents):
        return _fold_whole(contents, key_field, codec)[0]
    whole, rank_of = _fold_whole([c.without_patches() for c in contents], key_field, codec)
    newer: list[Patches] = []
    for rank, content in enumerate(contents):
        if content.patches is not None:
            # A patch counts only over what is older than it.
            older = np.asarray(rank_of(content.patches.keys)) > rank
            newer.append(content.patches.select(older))
    patches = compose(newer, key_field)
    if not len(patches):
        return whole
    upserts = apply_patches(whole.upserts, patches, key_field)
    decided = pa.concat_arrays([whole.upserts.keys, whole.deletes.cast(whole.upserts.keys.type)])
    alone = pc.invert(pc.is_in(patches.keys, value_set=decided)).to_numpy(zero_copy_only=False)
    left = patches.select(alone)
    return BatchContent(
        upserts,
        whole.upserts_in_merged,
        whole.deletes,
        whole.deletes_in_merged,
        left if len(left) else None,
    )


def _fold_whole(
    contents: Sequence[BatchContent], key_field: str, codec: KeyCodec
) -> tuple[BatchContent, Callable[[pa.Array], np.ndarray]]:
    """:func:`fold` of batches without patches, and a function giving, for encoded keys,
    the rank (position in ``contents``) of the batch whose upsert or delete won (one
    past the oldest if none)."""
    key_type = empty_keys(codec).type
    if not any(c.count for c in contents):
        empty = pa.array([], type=key_type)
        table = pa.table({key_field: pa.array([], type=codec.arrow_type)})
        none = np.zeros(0, bool)
        content = BatchContent(SortedRows(table, empty), none, empty, none)
        return content, lambda keys: np.full(len(keys), len(contents), dtype=np.int64)
    if len(contents) == 1:
        only = contents[0]
        decided = pa.concat_arrays([only.upserts.keys, only.deletes.cast(key_type)])
        return only, lambda keys: np.where(
            pc.is_in(keys, value_set=decided).to_numpy(zero_copy_only=False), 0, 1
        )
    keys, ranks, kinds, rows, flags = [], [], [], [], []
    row_base = 0
    for rank, content in enumerate(contents):
        nu, nd = len(content.upserts), len(content.deletes)
        keys += [content.upserts.keys, content.deletes.cast(key_type)]
        ranks.append(np.full(nu + nd, rank, dtype=np.int32))
        kinds.append(np.concatenate([np.zeros(nu, np.int8), np.ones(nd, np.int8)]))
        rows.append(np.concatenate([np.arange(row_base, row_base + nu), np.full(nd, -1)]))
        flags.append(np.concatenate([content.upserts_in_merged, content.deletes_in_merged]))
        row_base += nu
    entries = pa.table(
        {
            "k": pa.concat_arrays(keys),
            "rank": np.concatenate(ranks),
            "kind": np.concatenate(kinds),
            "row": np.concatenate(rows),
            "in_merged": np.concatenate(flags),
        }
    )
    entries = entries.take(pc.sort_indices(entries, [("k", "ascending"), ("rank", "ascending")]))
    k = entries.column("k").combine_chunks()
    n = len(k)
    first = pa.concat_arrays([pa.array([True]), pc.not_equal(k.slice(1), k.slice(0, n - 1))])
    entries = entries.filter(first)
    kind = entries.column("kind").to_numpy()
    in_merged = entries.column("in_merged").to_numpy(zero_copy_only=False)
    row = entries.column("row").to_numpy()
    keys_sorted = entries.column("k").combine_chunks()
    winner = entries.column("rank").to_numpy()
    is_upsert = kind == 0
    all_rows = concat_segments([c.upserts.table for c in contents], key_field=key_field)
    upserts = SortedRows(all_rows.take(pa.array(row[is_upsert])), keys_sorted.filter(is_upsert))
    deletes = keys_sorted.filter(pa.array(~is_upsert))
    content = BatchContent(upserts, in_merged[is_upsert], deletes, in_merged[~is_upsert])

    def rank_of(wanted: pa.Array) -> np.ndarray:
        at = pc.index_in(wanted, value_set=keys_sorted)
        found = at.is_valid().to_numpy(zero_copy_only=False)
        out = np.full(len(wanted), len(contents), dtype=np.int64)
        out[found] = winner[at.filter(at.is_valid()).to_numpy()]
        return out

    return content, rank_of


#: What an overlay keeps besides its key indexes and buffers: the overlay, its content and
#: rows objects, its numpy arrays' headers (measured, RSS: ~0.9 KB for one row, its key
#: indexes included).
_OVERLAY_OVERHEAD = 512
#: A numpy array's header (a patch mask).
_NUMPY_OVERHEAD = 112
#: What the cache's key of an overlay holds per pending batch: a tuple slot (the CID bytes
#: it points to are those of the table's pending list).
_PENDING_KEY = 8


class Overlay:
    """All pending batches as one sorted view over the merged area (numpy-searched).

    Patches left after the fold have their records in the merged area; a
    reader's overlay is given ``resolve`` (a function laying patches over
    those records, making them upserts) and resolves only the patches of the
    key ranges it is asked for: a range scan reads the pages of its range,
    not those of every patched record. Without a resolver (a :meth:`resolving`
    view gives one) the patches stay aside: enough for counts and ranks, which
    patches never change.
    """

    def __init__(self, content: BatchContent) -> None:
        self._raw = content
        self._resolve: Callable[[BatchContent], BatchContent] | None = None
        self._full: BatchContent | None = content if content.patches is None else None
        up, de = content.upserts, content.deletes
        keys = pa.concat_arrays([up.keys, de.cast(up.keys.type)]) if len(de) else up.keys
        order = pc.sort_indices(keys) if len(de) and len(up) else None
        self._keys = KeyIndex(keys.take(order) if order is not None else keys)
        delta = np.concatenate(
            [np.where(content.upserts_in_merged, 0, 1), np.where(content.deletes_in_merged, -1, 0)]
        ).astype(np.int64)
        if order is not None:
            delta = delta[order.to_numpy()]
        self._prefix = np.concatenate([[0], np.cumsum(delta)])
        self._upserts = KeyIndex(up.keys)
        self._deletes = KeyIndex(de)
        patches = content.patches
        self._patches = KeyIndex(patches.keys) if patches is not None else None
        self.nbytes = self._weigh(content)

    def _weigh(self, content: BatchContent) -> int:
        """The bytes this overlay keeps alive (its weight in the cache): its objects, its
        key indexes (each counting its keys array and words), and the whole buffers of
        its rows and flags (``Table.nbytes`` counts only the bytes a slice references)."""
        indexes = [self._keys, self._upserts, self._deletes, self._patches]
        size = _OVERLAY_OVERHEAD + sum(index.nbytes for index in indexes if index is not None)
        if not len(content.deletes):  # the merged index's keys are the upserts' own array
            size -= array_bytes(content.upserts.keys)
        size += table_weight(content.upserts.table) + int(self._prefix.nbytes)
        size += int(content.upserts_in_merged.nbytes) + int(content.deletes_in_merged.nbytes)
        patches = content.patches
        if patches is not None:
            size += table_weight(patches.rows.table)
            size += sum(_NUMPY_OVERHEAD + int(bits.nbytes) for bits in patches.masks.values())
        return size

    @classmethod
    def load(
        cls, ts: TableStore, pending: Sequence[CID], key_field: str, codec: KeyCodec
    ) -> Overlay:
        """The overlay of ``pending``, without a resolver (folded once, then cached by the
        pending list: a reader takes a :meth:`resolving` view of it)."""

        def build() -> Overlay:
            contents = [load_batch(ts, cid, key_field, codec) for cid in pending]
            return cls(fold(contents, key_field, codec))

        key: tuple[object, ...] = ("overlay", key_field, codec.spec, *(c.bytes for c in pending))
        return ts.cached(key, build, lambda overlay: overlay.nbytes + _PENDING_KEY * len(key))

    @classmethod
    def load_range(
        cls,
        ts: TableStore,
        pending: Sequence[CID],
        key_field: str,
        codec: KeyCodec,
        lo: bytes | None,
        hi: bytes | None,
    ) -> Overlay:
        """The overlay of ``pending`` restricted to keys ``[lo, hi)``, without a resolver.

        Only each batch's slice in the range is folded (a fold is per key, so this
        is the whole overlay's slice): a read bounded by keys costs its range, not
        the pending area. Counts and ranks it gives are exact inside the range and
        count no pending change outside it; rank-based reads (offsets, indexes,
        ``len``) take :meth:`load`. Not cached: it costs a few binary searches per
        batch and a fold of the range's changes.
        """
        if lo is None and hi is None:
            return cls.load(ts, pending, key_field, codec)
        parts = [load_batch_range(ts, cid, key_field, codec, lo, hi) for cid in pending]
        return cls(fold(parts, key_field, codec))

    def resolving(self, resolve: Callable[[BatchContent], BatchContent]) -> Overlay:
        """A view of this overlay (sharing its indexes) whose patches ``resolve`` lays
        over their records.

        The overlay in the store's cache never holds a resolver: a resolver reads
        through the store, so the cache would hold itself, and such a cycle kept
        a closed connection's caches (and every decoded block in them) alive until
        the next garbage collection, which then freed them inside some later
        read. Take a view per operation and do not keep it on a long-lived value.
        """
        view = copy.copy(self)
        view._resolve = resolve
        return view

    @property
    def has_patches(self) -> bool:
        """Whether patches are pending (laid over their records as they are read)."""
        return self._patches is not None

    @property
    def content(self) -> BatchContent:
        """Every pending change, patches resolved into upserts (all their records read)."""
        if self._full is None:
            self._full = self._resolver()(self._raw)
        return self._full

    def _resolver(self) -> Callable[[BatchContent], BatchContent]:
        if self._resolve is None:
            raise IntegrityError(
                "an overlay without the merged area was asked for patched records (a bug)"
            )
        return self._resolve

    def __len__(self) -> int:
        return len(self._keys)

    def _span(self, lo: bytes | None, hi: bytes | None) -> tuple[int, int]:
        i = 0 if lo is None else self._keys.rank(lo)
        j = len(self._keys) if hi is None else self._keys.rank(hi)
        return i, max(i, j)

    def has_entries(self, lo: bytes | None, hi: bytes | None) -> bool:
        """Whether any pending change falls in ``[lo, hi)`` (None: unbounded)."""
        i, j = self._span(lo, hi)
        return j > i or bool(self._patch_span(lo, hi))

    def _patch_span(self, lo: bytes | None, hi: bytes | None) -> tuple[int, int] | None:
        """The patches in ``[lo, hi)`` as a slice, or None if there are none."""
        index = self._patches
        if index is None:
            return None
        i = 0 if lo is None else index.rank(lo)
        j = len(index) if hi is None else index.rank(hi)
        return (i, j) if j > i else None

    def delta(self, lo: bytes | None = None, hi: bytes | None = None) -> int:
        """Rows added minus rows removed by pending changes in ``[lo, hi)``."""
        i, j = self._span(lo, hi)
        return int(self._prefix[j] - self._prefix[i])

    def delta_before(self, key: bytes, *, inclusive: bool) -> int:
        """Rows added minus rows removed by pending changes to keys ``< key`` (or ``<=``)."""
        return int(self._prefix[self._keys.rank(key, inclusive=inclusive)])

    def changes(self, lo: bytes | None, hi: bytes | None) -> tuple[SortedRows, pa.Array]:
        """The upserts (patched records among them) and deleted keys in ``[lo, hi)``."""
        up, deletes = self._raw.upserts, self._raw.deletes
        ui = 0 if lo is None else self._upserts.rank(lo)
        uj = len(up) if hi is None else self._upserts.rank(hi)
        if len(deletes):
            di = 0 if lo is None else self._deletes.rank(lo)
            dj = len(deletes) if hi is None else self._deletes.rank(hi)
            deletes = deletes.slice(di, max(0, dj - di))
        upserts = up.slice(ui, max(ui, uj))
        span = self._patch_span(lo, hi)
        if span is None:
            return upserts, deletes
        assert self._raw.patches is not None
        part = self._raw.patches.slice(*span)
        nothing = np.zeros(0, dtype=bool)
        patched = self._resolver()(
            BatchContent(upserts.slice(0, 0), nothing, deletes.slice(0, 0), nothing, part)
        ).upserts
        if not len(upserts):
            return patched, deletes
        table = concat_segments([upserts.table, patched.table], key_field=up.table.column_names[0])
        keys = pa.concat_arrays([upserts.keys, patched.keys])
        order = pc.sort_indices(keys)
        return SortedRows(table.take(order), keys.take(order)), deletes
