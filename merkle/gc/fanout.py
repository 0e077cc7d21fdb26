"""Where a collection's bulk work runs: marking subtrees, listing and deleting ``blocks/``.

:func:`merkle.gc.collect.gc` is one protocol (audit, retention, leases, the
GC lock, fencing, trimming, the re-mark, the grace cutoff, the per-batch
lock check and timestamp re-check before a delete); it hands the three
steps whose cost grows with the lake to a :class:`Fanout`. The default runs
them in this process (on the store's thread pool); ``merkle.spark`` gives a
Fanout that runs them as Spark tasks. Both keep and free exactly the same
blocks, because everything that decides *what* is kept or freed stays in
the protocol: a Fanout only decides *where* the reads, listings and deletes
run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from merkle.blocks.cid import CID
from merkle.errors import NotFoundError
from merkle.gc.mark import Marker
from merkle.refs import GCLock, LeaseExpiredError
from merkle.refs.gclock import newest_generation, read_generation
from merkle.refs.timing import Timing
from merkle.storage.base import ObjectInfo, ObjectStore

if TYPE_CHECKING:
    from merkle.db.connection import Connection

__all__ = [
    "DELETE_BATCH",
    "Fanout",
    "Roots",
    "check_generation_held",
    "still_garbage",
    "sweep_batch",
]

#: Candidates deleted between two checks that the lock is still held.
DELETE_BATCH = 1000
#: Roots to mark and what they are (for the error that names a missing block).
Roots = Sequence[tuple[CID, str]]
Candidates = Sequence[tuple[CID, int]]
#: ``progress(phase, done, total)``: called as work advances (total None if unknown).
Progress = Callable[[str, int, int | None], None]


def still_garbage(conn: Connection, batch: Candidates, cutoff: float) -> list[tuple[CID, int]]:
    """The candidates of ``batch`` still stored with a timestamp older than ``cutoff``.

    A writer that reuses an unreferenced block refreshes its timestamp; the
    listing was taken before the lock, so it is read again just before the
    delete (a writer that raced even this is fenced off, see merkle.refs.writer).
    """

    def old(item: tuple[CID, int]) -> bool:
        try:
            return conn.blocks.stat(item[0]).mtime < cutoff
        except NotFoundError:
            return False

    keep = conn.store.map_bulk(old, list(batch))
    return [item for item, ok in zip(batch, keep, strict=True) if ok]


def sweep_batch(
    conn: Connection,
    batch: Candidates,
    cutoff: float,
    ensure_held: Callable[[], None],
    recheck: bool = True,
) -> list[tuple[CID, int]]:
    """Delete one batch of candidates under the lock; the ones deleted.

    Checks the lock is still held, then deletes what is still garbage: a file
    store reads each timestamp again as part of its delete; other stores have
    the batch's timestamps re-read (unless the collection re-listed them under
    the lock already: ``recheck=False``) and the lock checked again before the
    delete. Every Fanout deletes through this, batch by batch.
    """
    ensure_held()
    # A file store checks each timestamp where no writer can refresh it any more: a
    # collector paused past its lock between this check and its delete (a stopped
    # process) then spares what a writer relied on meanwhile.
    removed = conn.blocks.delete_many_if_older(batch, cutoff)
    if removed is not None:
        return removed
    doomed = still_garbage(conn, batch, cutoff) if recheck else list(batch)
    ensure_held()  # again after the re-read: the window left is this line to the next
    conn.blocks.delete_many(cid for cid, _ in doomed)
    return doomed


def check_generation_held(store: ObjectStore, timing: Timing, generation: int) -> None:
    """Raise :class:`LeaseExpiredError` unless lock ``generation`` is held and the newest.

    What :meth:`GCLock.ensure_held` checks, read from the store, for workers
    in other processes that delete on the holder's behalf.
    """
    state = read_generation(store, generation)
    if state is None or state.released or state.damaged:
        raise LeaseExpiredError(f"GC lock generation {generation} is no longer held")
    if not timing.holder_valid(state.expires):
        raise LeaseExpiredError(
            f"GC lock generation {generation} expired (with the {timing.margin:g}s skew "
            "margin); stop: the collector lost the lock"
        )
    if newest_generation(store) > generation:
        raise LeaseExpiredError(
            f"GC lock generation {generation} was taken over; stop: another collector holds it"
        )


class Fanout:
    """Marks, lists and deletes in this process (the default; see the module doc)."""

    #: Shown in the report's notes when not the default.
    description = ""

    def mark(self, marker: Marker, roots: Roots) -> int:
        """Mark everything ``roots`` reach into ``marker``; how many blocks were new."""
        return sum(marker.mark([cid], where) for cid, where in roots)

    def list_blocks(self, conn: Connection) -> list[tuple[CID, ObjectInfo]]:
        """Every stored block with its size and timestamp."""
        return list(conn.blocks.list())

    def sweep(
        self,
        conn: Connection,
        candidates: Candidates,
        cutoff: float,
        lock: GCLock,
        progress: Progress,
        recheck: bool = True,
    ) -> list[tuple[CID, int]]:
        """Delete the candidates still garbage, a batch at a time under the lock
        (``recheck``: see :func:`sweep_batch`)."""
        freed: list[tuple[CID, int]] = []
        for i in range(0, len(candidates), DELETE_BATCH):
            batch = candidates[i : i + DELETE_BATCH]
            freed += sweep_batch(conn, batch, cutoff, lock.ensure_held, recheck)
            progress("sweep", min(i + DELETE_BATCH, len(candidates)), len(candidates))
        return freed
