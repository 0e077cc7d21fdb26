"""``connect`` and the ``Connection``: a long-lived handle on one lake.

A connection owns the lake's object store, its block store and table caches,
the ref manager (journals) and the lease manager. It lists, creates, opens,
clones and drops databases; everything else happens on the immutable
:class:`~merkle.db.database.Database` values it hands out.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from merkle.blocks.cid import CID
from merkle.blocks.store import BlockStore
from merkle.blocks.walk import missing_below
from merkle.db.ancestry import kept_entry, still_kept, tagged_entry
from merkle.db.closed import closed_error
from merkle.db.database import Database
from merkle.db.dbroot import DbRoot
from merkle.db.forked import unusable
from merkle.db.inputs import check_count, check_flag, check_metadata
from merkle.db.lakeconfig import lake_config, lake_sizes
from merkle.db.unleased import head_staging, unleased_staging
from merkle.errors import ConflictError, NotFoundError, UsageError
from merkle.lazy import OnFirstUse
from merkle.refs import JournalConflictError, JournalEntry, JournalEntryDamagedError, RefManager
from merkle.storage import owner
from merkle.storage.base import ObjectStore, open_store
from merkle.tablets.store import DEFAULT_WORKERS, TableStore

if TYPE_CHECKING:
    from merkle.db.merge import Resolver
    from merkle.db.readers import ReaderLease, ReaderLeaseKeeper
    from merkle.refs import LeaseManager, Tag, TagManager, WriterSession, WriterTicket

__all__ = ["Connection", "connect"]

#: Attempts of a create that a collection's fence of a dropped journal got ahead of.
_CREATE_ATTEMPTS = 8


class Connection:
    """A handle on one lake: databases by name, and the stores beneath them."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        hash: str | None = None,
        cache_bytes: int = 256 << 20,
        workers: int = DEFAULT_WORKERS,
        create: bool = True,
    ) -> None:
        cache_bytes, workers = lake_sizes(cache_bytes, workers)
        self.store = store
        config = lake_config(store, hash, create)
        self.hash: str = config["hash"]
        self.blocks = BlockStore(store, hash=self.hash, cache_bytes=max(1 << 20, cache_bytes // 4))
        self.tables = TableStore(self.blocks, cache_bytes=cache_bytes, workers=workers)
        self._refs = RefManager(store)
        self._closed = False
        self._pid = owner.pid  # a forked child may not use it (merkle.db.forked)

    @property
    def refs(self) -> RefManager:
        """The journals (``merkle.refs``): every use of the lake's history goes through
        here, so a closed connection refuses them all (see :meth:`close`)."""
        if self._closed or self._pid != owner.pid:
            raise unusable(self)
        return self._refs

    @refs.setter
    def refs(self, refs: RefManager) -> None:
        self._refs = refs

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (the connection then refuses every use)."""
        return self._closed

    # The parts a process that only reads never uses (no lease, no tag) are made, and
    # their modules imported, on first use: ``merkle get`` starts faster without them.

    def _make_tag_refs(self) -> TagManager:
        """The lake's tags (``merkle.refs.tags``)."""
        from merkle.refs.tags import TagManager

        return TagManager(self.store)

    def _make_leases(self) -> LeaseManager:
        """The lake's reader and writer leases and GC lock (``merkle.refs.leases``)."""
        from merkle.refs.leases import LeaseManager

        return LeaseManager(self.store)

    def _make_writer(self) -> WriterSession:
        """This connection's writer lease, shared by its commits (``merkle.refs.writer``)."""
        from merkle.refs.writer import WriterSession

        return WriterSession(self.leases)

    def _make_readers(self) -> ReaderLeaseKeeper:
        """The reader leases of this connection's leased values (``merkle.db.readers``)."""
        from merkle.db.readers import ReaderLeaseKeeper
        from merkle.refs.tags import TagManager

        # A function of the refs and tags, not a method of this connection: the keeper
        # is the connection's, and the method would make a reference cycle that kept a
        # closed connection's caches alive (tests/db/test_no_cycles.py).
        kept = functools.partial(still_kept, self._refs, TagManager(self.store))
        return ReaderLeaseKeeper(self.leases, still_kept=kept)

    tag_refs = OnFirstUse(_make_tag_refs)
    leases = OnFirstUse(_make_leases)
    _writer = OnFirstUse(_make_writer)
    _readers = OnFirstUse(_make_readers)

    @property
    def uri(self) -> str:
        return self.store.uri

    def same_lake(self, other: Connection) -> bool:
        """Whether ``other`` opens this lake (the same objects, not just an equal URI:
        an S3 bucket of the same name on another endpoint is another lake)."""
        return other is self or other.store.location == self.store.location

    def __repr__(self) -> str:
        return f"<merkle.Connection {self.uri}>"

    # -- life cycle ----------------------------------------------------------------

    def close(self) -> None:
        """Release the leases, stop the threads, close the store. Every later use of the
        lake through this connection raises UsageError (:mod:`merkle.db.closed`)."""
        if not self._closed:
            self._closed = True
            if self._pid != owner.pid:
                return  # a fork's copy: the leases, threads and store are the parent's
            if Connection._writer.made(self):
                self._writer.close()
            if Connection._readers.made(self):
                self._readers.close()
            self.tables.close()
            self.store.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- leases ----------------------------------------------------------------------

    def _still_kept(self, db: str, version: int, root: str, *, besides: str | None = None) -> bool:
        """Whether the journal (or a tag other than ``besides``) still holds ``db`` at
        ``version`` with ``root``."""
        return still_kept(self.refs, self.tag_refs, db, version, root, besides=besides)

    def writer_lease(
        self, db: str | None = None
    ) -> contextlib.AbstractContextManager[WriterTicket]:
        """Hold the connection's writer lease (shared, renewed, GC-aware) for one commit."""
        if self._closed or self._pid != owner.pid:  # every commit comes here: refused
            raise unusable(self)  # before any block is written
        return self._writer.hold(db)

    def _settle(self, ticket: WriterTicket, entry: JournalEntry) -> bool:
        """After a journal put: False if no collection raced it; else settle it (True).

        A collection that went on without ``ticket``'s lease may have trimmed
        the slot the entry landed on or removed blocks it reaches: the entry
        is checked (``CommitIndeterminateError`` if it cannot be proven) and
        the caller must then write its blocks again (missing ones only).
        """
        if not self._writer.passed(ticket):
            return False
        from merkle.refs import writer

        writer.settle_passed_commit(self.refs, self.leases, entry)
        return True

    # -- databases -------------------------------------------------------------------

    def list_dbs(self) -> list[str]:
        """The names of the live databases, sorted."""
        return self.refs.list_dbs()

    def history(self, name: str, limit: int | None = None) -> list[JournalEntry]:
        """Committed versions of a database, newest first (``.version .root .time ...``).

        Versions that retention trimmed from the journal but a tag keeps are
        listed too (from the tag's copy of their entry), below the journal's.
        """
        if limit is not None:  # None lists every version
            limit = check_count(limit, "limit", 1)
        entries = self.refs.history(name, limit)
        if not entries:
            raise NotFoundError(f"there is no database {name!r} in {self.uri}")
        if limit is not None and len(entries) >= limit:
            return entries
        oldest = entries[-1].version
        kept = {
            tag.version: tag.entry
            for tag in self.tag_refs.list(name)
            if tag.entry is not None and tag.version < oldest
        }
        tagged = [kept[v] for v in sorted(kept, reverse=True)]
        entries += tagged if limit is None else tagged[: limit - len(entries)]
        return entries

    def _database(
        self, entry: JournalEntry, reader: ReaderLease | None = None, *, past: bool = False
    ) -> Database:
        """The value of ``entry``; with ``reader``, one that reads under that lease; ``past``:
        a version asked for by number, time or tag, whose missing blocks say why."""
        if entry.root is None:
            raise NotFoundError(
                f"database {entry.db!r} was dropped at version {entry.version}; open an "
                "earlier version, or create it again"
            )
        cid = CID.parse(entry.root)
        if reader is None:
            unleased = unleased_staging if past else head_staging  # a block gone: say why
            staging = unleased(self.blocks, self.refs, entry)
            root = DbRoot.from_node(staging.get_node(cid), cid)
            return Database(self, entry, root, staging=staging)
        from merkle.db.readers import leased_staging

        staging = leased_staging(self.blocks, reader)  # a block gone: did the lease lapse?
        db = Database(self, entry, DbRoot.from_node(staging.get_node(cid), cid), staging=staging)
        db._reader = reader
        return db

    def _head(self, name: str, *, purpose: str = "open it") -> Database:
        entry = self.refs.head(name)
        if entry is None:
            raise NotFoundError(f"there is no database {name!r} in {self.uri}")
        if entry.root is None:
            raise NotFoundError(
                f"database {name!r} was dropped at version {entry.version}, so cannot {purpose}"
            )
        return self._database(entry)

    def _head_for_replay(self, db: Database) -> Database:
        """The head a transaction based on ``db`` may replay onto; ConflictError if none."""
        head = self.refs.head(db.name)
        if head is None or head.dropped:
            raise ConflictError(
                f"database {db.name!r} was dropped by a concurrent commit (version "
                f"{head.version if head else '?'}) while this transaction ran on version "
                f"{db.version}; its changes were not committed"
            )
        if head.created is not None and db.entry.created is not None:
            recreated = head.created != db.entry.created
        else:  # entries written before incarnations were recorded: read the history between
            newer = self.refs.history(db.name, limit=max(0, head.version - db.version))
            recreated = len(newer) < head.version - db.version or any(e.dropped for e in newer)
        if recreated:
            raise ConflictError(
                f"database {db.name!r} was dropped and created again by concurrent commits "
                f"(now at version {head.version}) while this transaction ran on version "
                f"{db.version}; its changes were not committed"
            )
        return self._database(head)

    def open_db(
        self,
        name: str,
        version: int | None = None,
        at: datetime | None = None,
        *,
        tag: str | None = None,
        lease: bool = False,
    ) -> Database:
        """The head of a database, or a past version (``version=n``, ``at=datetime``, ``tag=``).

        With ``lease=True`` the value holds a reader lease: garbage collection
        keeps every block of this version until ``release()`` (or the end of a
        ``with`` block), even if retention drops the version meanwhile.
        """
        entry = (
            self._resolve(name, version, at)
            if tag is None
            else tagged_entry(self, name, tag, version, at)
        )
        if not check_flag(lease, "open_db(lease=)") or entry.root is None:
            return self._database(entry, past=(version, at, tag) != (None, None, None))
        # Lease first, then check the entry is still in the journal, and only then read
        # any block: a collection that trimmed the version either saw the lease or made
        # the check fail (see merkle.gc.collect).
        handle = self._readers.hold(entry.db, entry.version, entry.root)
        try:
            if not self._still_kept(entry.db, entry.version, entry.root):
                self.refs.get(entry.db, entry.version)  # raises why (trimmed, damaged)
            return self._database(entry, handle)
        except BaseException:
            handle.release()
            raise

    def _resolve(self, name: str, version: int | None, at: datetime | None) -> JournalEntry:
        """The journal entry ``open_db`` means (no block is read)."""
        if version is not None and at is not None:
            raise UsageError("open_db takes version= or at=, not both")
        if version is not None:
            if isinstance(version, bool) or not isinstance(version, int) or version < 0:
                raise UsageError(f"version must be a non-negative integer, got {version!r}")
            with contextlib.suppress(JournalEntryDamagedError):  # a damaged head: it exists
                if self.refs.head(name) is None:
                    raise NotFoundError(f"there is no database {name!r} in {self.uri}")
            return kept_entry(self, name, version)  # trimmed, a tag may still keep it
        if at is not None:
            if not isinstance(at, datetime):
                raise UsageError(f"at must be a datetime, got {type(at).__name__}")
            if self.refs.head(name) is None:
                raise NotFoundError(f"there is no database {name!r} in {self.uri}")
            return self.refs.at(name, at)
        entry = self.refs.head(name)
        if entry is None:
            raise NotFoundError(f"there is no database {name!r} in {self.uri}")
        if entry.root is None:
            raise NotFoundError(
                f"database {name!r} was dropped at version {entry.version}; open an earlier "
                "version, or create it again"
            )
        return entry

    def create_db(
        self,
        name: str,
        metadata: Any = None,
        root: Database | str | None = None,
        *,
        message: str | None = None,
        author: str | None = None,
    ) -> Database:
        """Create a database at version 0: empty, or a copy-on-write clone of ``root``.

        ``root`` is a Database (its committed root is cloned, O(1) whatever
        its size) or a root CID string. UsageError if the database exists.
        """
        head = self.refs.head(name)
        if head is not None and head.root is not None:
            raise UsageError(
                f"database {name!r} already exists in {self.uri} (version {head.version}); "
                "open it, drop it first, or choose another name"
            )
        if root is not None:
            if metadata is not None:
                raise UsageError(
                    "a clone keeps its source's metadata: pass metadata or root, not both"
                )
            return self._clone(name, root, message, author)
        metadata = check_metadata(metadata, f"metadata of database {name!r}")  # a copy
        node = DbRoot({}, metadata).to_node()
        from merkle.db.landing import after_the_entry, before_the_entry  # writes only

        with after_the_entry(name) as put:
            with self.writer_lease(name) as ticket:
                with before_the_entry(name):
                    cid = self.blocks.put_node(node, refresh_before=ticket.lease.start)
                entry = self._create_entry(
                    name,
                    lambda: self.refs.commit(name, None, str(cid), message=message, author=author),
                )
                put.append(entry)
                raced = self._settle(ticket, entry)
            if raced:
                with self.writer_lease(name) as again:
                    self.blocks.put_node(node, refresh_before=again.lease.start)
        return self._database(entry)

    def _create_entry(self, name: str, create: Callable[[], JournalEntry]) -> JournalEntry:
        """Run ``create`` (entry 0, or the entry after a drop); UsageError if another won.

        A garbage collection may fence a dropped database's journal (an entry
        that drops it again) in between: that is no creation, so try again.
        """
        for _ in range(_CREATE_ATTEMPTS):
            try:
                return create()
            except JournalConflictError:
                head = self.refs.head(name)
                if head is None or not head.dropped or not head.fence:
                    break
        raise UsageError(f"database {name!r} was created by another writer just now")

    def _clone(
        self, name: str, root: Database | str, message: str | None, author: str | None
    ) -> Database:
        """Commit entry 0 of ``name`` at ``root``'s blocks, safe against a concurrent GC.

        The writer lease makes a collection either wait for this clone (and then
        mark from it) or finish first; so the source is checked only once the
        lease is held: its entry must still be kept, by the journal or a tag (a
        trimmed version may have lost blocks), and a bare root CID must still
        reach every block.
        """
        if isinstance(root, Database):
            if not self.same_lake(root._conn):
                raise UsageError("a clone must be made from a database of the same lake")
        elif not isinstance(root, str):
            raise UsageError(
                f"root must be a Database or a root CID string, got {type(root).__name__}"
            )
        else:  # reject a bad root before any lease is written
            from merkle.db.cloneroot import clone_root

            cid = clone_root(self.blocks, root)
        from merkle.db.landing import after_the_entry  # writes only: not for a read's start

        with after_the_entry(name) as put:
            with self.writer_lease(name) as ticket:
                if isinstance(root, Database):
                    source = self._clone_source(root)
                    entry = self._create_entry(
                        name,
                        lambda: self.refs.clone(
                            source.db,
                            name,
                            source.version,
                            entry=source,
                            message=message,
                            author=author,
                        ),
                    )
                else:
                    self._check_whole(cid)
                    entry = self._create_entry(
                        name,
                        lambda: self.refs.commit(
                            name,
                            None,
                            str(cid),
                            meta={"cloned_root": str(cid)},
                            message=message,
                            author=author,
                        ),
                    )
                put.append(entry)
                raced = self._settle(ticket, entry)
            if raced:
                assert entry.root is not None
                try:
                    self._check_whole(CID.parse(entry.root))
                except NotFoundError:
                    # A collection went on without this (stalled) writer and removed the
                    # source's blocks after they were checked: take the clone back.
                    self.refs.drop(name, entry.version, message="clone rolled back: blocks gone")
                    raise
        return self._database(entry)

    def _check_whole(self, root: CID) -> None:
        """NotFoundError unless every block ``root`` reaches is stored."""
        lost = missing_below(self.blocks, [root])
        if lost is not None:
            raise NotFoundError(
                f"cannot clone root {root}: block {lost} it reaches is missing (garbage-collected?)"
            )

    def _clone_source(self, root: Database) -> JournalEntry:
        """The entry a clone of ``root`` copies, under the clone's writer lease: the journal's
        or a tag's, or, for a version retention trimmed since, the value's own while its
        reader lease still keeps its blocks (each checked present: the lease may have
        lapsed unseen before the writer lease stopped collections)."""
        try:
            return kept_entry(self, root.name, root.version)  # journal or a tag
        except NotFoundError:
            if not root.leased or root.entry.root is None:
                raise
        self._check_whole(CID.parse(root.entry.root))
        return root.entry

    # -- versions as data ------------------------------------------------------------

    def tag(
        self,
        db: str,
        name: str,
        version: int | None = None,
        *,
        message: str | None = None,
        author: str | None = None,
    ) -> Tag:
        """Name ``version`` of ``db`` (default: its head) ``name``: kept whatever the retention.

        Written under a writer lease and checked against the journal after,
        so a collection either sees the tag or the tag is refused.
        """
        entry = self._resolve(db, version, None)
        if entry.root is None:
            raise NotFoundError(f"version {entry.version} of {db!r} is a drop; it cannot be tagged")
        with self.writer_lease(db):
            # Checked before the tag is written too, or a collection marking tags could
            # meet one of a version trimmed before this lease, blocks gone, and stop as if
            # the lake were damaged; the check after: a collection that passed this lease.
            gone = NotFoundError(
                f"version {entry.version} of {db!r} was removed by retention while it was "
                "being tagged"
            )
            if not self._still_kept(db, entry.version, entry.root, besides=name):
                raise gone
            made = self.tag_refs.create(entry, name, author=author, message=message)
            if not self._still_kept(db, entry.version, entry.root, besides=name):
                self.tag_refs.delete(db, name)  # trimmed (and maybe collected) meanwhile
                raise gone
        return made

    def tags(self, db: str) -> list[Tag]:
        """The tags of ``db``, sorted by name (``.name .version .root .time``).

        NotFoundError for a name no database ever had, so that a mistyped name is not
        taken for a database without tags.
        """
        refs = self.refs  # UsageError on a closed connection
        found = self.tag_refs.list(db)
        if not found:
            refs.history(db, 1)  # NotFoundError for a database that never existed
        return found

    def delete_tag(self, db: str, name: str) -> Tag | None:
        """Remove a tag; the tag removed (None when its object was damaged: it is removed
        all the same). A version retention no longer keeps and only the tag kept cannot
        be opened any more, and the next collection frees it."""
        if self._closed:
            raise closed_error(self.uri)
        return self.tag_refs.delete(db, name)

    def merge(
        self,
        source: Database | str,
        into: str,
        base: Database | int | None = None,
        resolve: Resolver = "fail",
        *,
        message: str | None = None,
        author: str | None = None,
    ) -> Database:
        """Merge ``source`` into the head of ``into`` from their common ancestor, and commit.

        See :mod:`merkle.db.merge` for the rules; ``resolve`` is ``"fail"``
        (MergeConflictError), ``"ours"``, ``"theirs"`` or a function of one
        conflict. Returns the new head of ``into``.
        """
        from merkle.db.merge import merge  # three-way merges: imported when one runs

        return merge(self, source, into, base=base, resolve=resolve, message=message, author=author)

    def drop_db(
        self, name: str, *, message: str | None = None, author: str | None = None
    ) -> JournalEntry:
        """Drop a database: its history and blocks stay until garbage collection (one whose
        head entry is damaged too: the drop goes above it, the way to give it up)."""
        with contextlib.suppress(JournalEntryDamagedError):  # see RefManager.drop
            head = self.refs.head(name)
            if head is None or head.root is None:
                raise NotFoundError(f"there is no live database {name!r} in {self.uri} to drop")
        from merkle.db.landing import after_the_entry  # writes only: not for a read's start

        with after_the_entry(name) as put, self.writer_lease(name) as ticket:
            entry = self.refs.drop(name, message=message, author=author)
            put.append(entry)
            self._settle(ticket, entry)
        return entry


def connect(
    uri: str | os.PathLike[str],
    *,
    hash: str | None = None,
    cache_bytes: int = 256 << 20,
    workers: int = DEFAULT_WORKERS,
    create: bool = True,
    **options: Any,
) -> Connection:
    """Open the lake at ``uri`` (``file://``, a path, ``s3://bucket/prefix``, ``memory://``).

    ``options`` go to the object store (for S3: ``endpoint_url``,
    ``region_name``, credentials). ``hash`` chooses BLAKE3 (default) or
    ``"sha2-256"`` for a new lake. ``cache_bytes`` bounds decoded caches.
    With ``create=False`` a location that holds no lake is a NotFoundError
    instead of becoming a new, empty lake.
    """
    lake_sizes(cache_bytes, workers)  # before the store is opened
    store = open_store(uri, **options)
    try:
        return Connection(store, hash=hash, cache_bytes=cache_bytes, workers=workers, create=create)
    except BaseException:
        store.close()
        raise
