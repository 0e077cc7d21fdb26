"""Landing a version made outside ``Database.commit`` (a merge, a sync, an import).

The same protocol as ``Database.commit`` (see ``merkle.refs.writer``): under
the connection's writer lease, write the blocks (refreshing the ones that
exist), check the lease, put the journal entry; if a garbage collection went
on without this writer's lease meanwhile, settle the entry and write the
blocks again (only missing ones are written).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from merkle.refs import JournalEntry, WriterTicket

if TYPE_CHECKING:
    from merkle.db.connection import Connection

__all__ = ["BlockItems", "land"]

#: Objects (key, bytes) that must be durable before a journal entry is put.
BlockItems = Sequence[tuple[str, bytes]]


def land(
    conn: Connection,
    db: str,
    write_blocks: Callable[[WriterTicket, bool], BlockItems | None],
    put_entry: Callable[..., JournalEntry],
    *,
    ticket: WriterTicket | None = None,
) -> JournalEntry:
    """Write the blocks, then the entry, under a writer lease; the entry put.

    ``write_blocks(ticket, first)`` stores every block the entry will reach
    (``first`` is False on the re-write after a raced collection, which must
    not trust anything it saw before), or returns the ones still to write:
    then ``put_entry(items)`` writes them with the entry, in one round, the
    entry last (``RefManager.commit(before=items)``); otherwise ``put_entry()``
    is called. ``put_entry`` raises ``JournalConflictError`` when the journal
    moved; nothing is retried here. ``ticket``: a writer lease the caller
    already holds (a bulk job's, under which its tasks wrote blocks the entry
    names), used instead of the connection's own.
    """
    held = nullcontext(ticket) if ticket is not None else conn.writer_lease(db)
    with held as using:
        items = write_blocks(using, True)
        conn.leases.ensure_valid(using.lease)
        entry = put_entry() if items is None else put_entry(items)
        raced = conn._settle(using, entry)
    if raced:  # a collection may have removed blocks it could not see we need
        with conn.writer_lease(db) as again:
            _write(conn, write_blocks(again, False))
    return entry


def _write(conn: Connection, items: Any) -> None:
    if items:
        conn.blocks.store.put_many(items)
