"""Landing a version: ``Database.commit`` (:func:`land_commit`), a merge, a sync, an import.

One protocol (see ``merkle.refs.writer``): under the connection's writer
lease, write the blocks (refreshing the ones that exist), check the lease,
put the journal entry; if a garbage collection went on without this
writer's lease meanwhile, settle the entry and write the blocks again (only
missing ones are written; :func:`rewrite_after_race` says why a commit's
blocks written early never need to be).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from merkle.blocks.cid import CID
from merkle.errors import CommitIndeterminateError, IntegrityError, StorageError
from merkle.refs import JournalEntry, WriterTicket

if TYPE_CHECKING:
    from merkle.db.connection import Connection
    from merkle.db.database import Database
    from merkle.db.staging import StagedBlocks

__all__ = [
    "BlockItems",
    "after_the_entry",
    "before_the_entry",
    "land",
    "land_commit",
    "rewrite_after_race",
]

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

    A :class:`StorageError` before ``put_entry`` is called is definite as to
    the commit (:func:`before_the_entry`), whatever it says of the block or
    lease it names.
    """
    held = nullcontext(ticket) if ticket is not None else conn.writer_lease(db)
    with after_the_entry(db) as put:
        with held as using:
            with before_the_entry(db):
                items = write_blocks(using, True)
                conn.leases.ensure_valid(using.current())  # as last renewed
            entry = put_entry() if items is None else put_entry(items)
            put.append(entry)
            raced = conn._settle(using, entry)
        if raced:  # a collection may have removed blocks it could not see we need
            with conn.writer_lease(db) as again:
                _write(conn, write_blocks(again, False))
    return entry


@contextmanager
def before_the_entry(db: str) -> Iterator[None]:
    """Around what a landing does before its journal entry: an indefinite
    :class:`StorageError` becomes a definite one, saying nothing was committed.

    A block put whose answer was lost, or a failed refresh (touch) of a block
    the version reuses, may or may not have changed that block; but no entry
    was sent, so the version surely was not committed and trying again is safe.
    Passed on as it was (``definite=False``), it read as "the commit may have
    happened" and invited a caller to re-read instead of simply retrying.
    """
    try:
        yield
    except StorageError as exc:
        if exc.definite:
            raise
        raise StorageError(
            f"nothing was committed to database {db!r}: {exc}. That came before its journal "
            "entry was written, so trying again is safe; the blocks written so far may or may "
            "not be stored, which is harmless (no version refers to them, and `merkle gc` "
            "removes them if none comes to)",
            definite=True,
        ) from exc


@contextmanager
def after_the_entry(db: str) -> Iterator[list[JournalEntry]]:
    """Around a journal put and the checks after it: once the caller has appended the
    entry it put, a :class:`StorageError` becomes a :class:`CommitIndeterminateError`.

    The entry is in the journal then, so the failure must not read as "nothing
    happened" (a ``StorageError`` with ``definite=True`` would invite applying
    the changes twice); but whether a garbage collection that may have run
    meanwhile left the version whole was not checked.
    """
    put: list[JournalEntry] = []
    try:
        yield put
    except StorageError as exc:
        if not put:
            raise  # nothing was put: the store's own error says whether to try again
        entry = put[-1]
        raise CommitIndeterminateError(
            f"version {entry.version} of database {db!r} was put in the journal, but "
            f"checking it against a garbage collection that may have run meanwhile failed "
            f"({exc}); read the database's history (`merkle db log {db}`) to see whether the "
            "version stands, and run `merkle verify`; do not apply its changes again "
            "unless it is missing"
        ) from exc


def land_commit(
    db: Database, author: str | None, message: str | None, ticket: WriterTicket | None = None
) -> JournalEntry:
    """Write a transaction's blocks and its journal entry (``Database.commit``'s one try).

    The root is built under the writer lease (``ticket``, or the
    connection's): a bulk write's pages go to the lake as they are made
    (:meth:`StagedBlocks.writing_early`), overlapping encoding and writing;
    the other blocks are written with the entry, in one round of flushes.
    ``JournalConflictError`` if the journal moved.
    """
    conn, staging = db._conn, db._staging
    root = CID.of(b"")  # set under the lease, below

    def write_blocks(held: WriterTicket, first: bool) -> BlockItems:
        nonlocal root
        start = held.lease.start
        if not first:  # the entry stands, but a collection raced it
            return rewrite_after_race(conn, staging, db.name, db.version + 1, root, start)
        with staging.writing_early(start):
            root = db._save_root()
        return staging.unwritten([root], refresh_before=start)[1]

    def put_entry(blocks: BlockItems) -> JournalEntry:
        return conn.refs.commit(
            db.name, db.version, str(root), author=author, message=message, before=blocks
        )

    return land(conn, db.name, write_blocks, put_entry, ticket=ticket)


def _write(conn: Connection, items: Any) -> None:
    if items:
        conn.blocks.store.put_many(items)


def rewrite_after_race(
    conn: Connection, staging: StagedBlocks, db: str, version: int, root: CID, refresh_before: float
) -> BlockItems:
    """What a commit (version ``version`` of ``db``, at ``root``) that a collection raced
    and that stands must write again: the staged blocks the lake lacks.

    The blocks it cannot write again never need it: those written early
    (:meth:`StagedBlocks.writing_early`; their bytes left memory) and the
    foreign ones (another version's tablets, a bulk job's). The entry stands
    (``Connection._settle``), so it was put before the racing collection's
    fence; the collection marks every kept version again after fencing
    (``merkle.gc.collect``, step 5), and every block the entry reaches was
    durable before the entry: none of them was swept. A later collection
    removes them only once retention has trimmed the version (the floor is
    raised before anything below it goes): the commit landed all the same,
    and its value is that of a version since retired, so that is no error.

    A block the version needs missing while the version is still kept would
    break that protocol: an :class:`IntegrityError`, never a success for a
    version that cannot be read.
    """
    lost = staging.lost([root])
    if lost and version >= conn.refs.floor(db):
        raise IntegrityError(
            f"version {version} of database {db!r} was committed, but block {lost[0]} "
            f"(one of {len(lost)} stored before its entry) is missing from {conn.uri} "
            "although retention keeps the version: a garbage collection removed a block a "
            "kept version needs; run `merkle verify` and restore the lake from a copy"
        )
    return staging.unwritten([root], refresh_before=refresh_before, prove_foreign=False)[1]
