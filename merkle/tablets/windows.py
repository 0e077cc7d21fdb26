"""Key windows over the pending area: how a scan folds it a part at a time.

A scan bounded by keys folds the pending changes of its range
(:meth:`merkle.tablets.batch.Overlay.load_range`). With a limit, or with no
upper bound at all, that range may hold most of the pending area (which may
be half the table) while the scan returns ten rows: keyset pagination
(``from_pk=last, limit=1000``) folded every pending change from its start
to the end of the table on every page. So a scan folds its range in
*windows*: key ranges each holding at most a budget of each pending batch's
keys, found by binary search in the batches' cached key indexes, the budget
doubling from one window to the next (up to :data:`_MOST`) until the limit
is filled or the range ends. A limited scan folds about what it returns, and
a scan without a limit holds one window's fold at a time, never the fold of
the whole pending area.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from merkle.blocks.cid import CID
from merkle.tablets.batch import bound_rank, delete_keys, patch_keys, upsert_keys
from merkle.tablets.keyindex import KeyIndex
from merkle.tablets.keys import KeyCodec
from merkle.tablets.store import TableStore

__all__ = ["first_budget", "next_budget", "pending_segments", "window_edge"]

#: The fewest keys of each pending batch (its upserts, its deletes, its patches) a
#: scan's first window may hold.
_FIRST = 1024
#: The most keys of each pending batch one window may hold: a scan without a limit
#: folds at most this many per batch part at once.
_MOST = 1 << 16


def first_budget(wanted: int | None) -> int:
    """The keys per batch part of a scan's first window, for a scan that reads
    ``wanted`` rows (offset and limit; None: all of them, in windows of the most
    keys: each window boundary may cut a tablet, read once for each side)."""
    if wanted is None:
        return _MOST
    return max(_FIRST, min(wanted, _MOST))


def next_budget(budget: int) -> int:
    """The budget of the window after one of ``budget``: twice as many, up to :data:`_MOST`."""
    return max(1, min(2 * budget, _MOST))


def window_edge(
    ts: TableStore,
    pending: Sequence[CID],
    key_field: str,
    codec: KeyCodec,
    edge: bytes | None,
    budget: int,
    *,
    reverse: bool,
) -> bytes | None:
    """The far end of the window that starts at ``edge`` (None: the table's start, or its
    end with ``reverse``) and holds at most ``budget`` keys of each batch part.

    Forward, the window is ``[edge, far)``: ``far`` is the least of the keys that
    come ``budget`` places after ``edge`` in each part, so it is above ``edge``.
    With ``reverse`` the window is ``[far, edge)`` and ``far`` the greatest of the
    keys ``budget`` places below ``edge``. None when every part holds at most
    ``budget`` keys beyond ``edge``: the window reaches the end of the table.
    """
    found: bytes | None = None
    for index in _indexes(ts, pending, key_field, codec):
        if reverse:
            j = len(index) if edge is None else bound_rank(index, edge)
            if j > budget:
                key = index.key_at(j - budget)
                found = key if found is None else max(found, key)
        else:
            i = 0 if edge is None else bound_rank(index, edge)
            if i + budget < len(index):
                key = index.key_at(i + budget)
                found = key if found is None else min(found, key)
    return found


def pending_segments(ts: TableStore, pending: Sequence[CID]) -> list[CID]:
    """The segments (upserts, patches) of the pending batches: what every window reads
    slices of, held by a scan of several windows so that each is decoded once."""
    out: list[CID] = []
    for cid in pending:
        node = ts.batch(cid)
        out += [seg for seg in (node.upserts, node.patches) if seg is not None]
    return out


def _indexes(
    ts: TableStore, pending: Sequence[CID], key_field: str, codec: KeyCodec
) -> Iterator[KeyIndex]:
    """The cached key indexes of every part of every pending batch that has keys."""
    for cid in pending:
        node = ts.batch(cid)
        if node.upserts is not None:
            yield upsert_keys(ts, node, key_field, codec)
        if node.deletes:
            yield delete_keys(ts, cid, node)
        if node.patches is not None:
            yield patch_keys(ts, node, key_field, codec)
