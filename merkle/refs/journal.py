"""The ref manager: each database's version journal, the lake's consensus.

A commit is one ``put_if_absent`` of the next journal slot, so exactly one of
any number of racing writers (threads, processes, machines) wins each
version, on every backend. The reads (head, history, time travel) live in
:mod:`merkle.refs.reader`; here are the writes: commit, drop, clone, the
fence garbage collection appends, and trimming. The protocol and its
reasoning are in ``doc/refs.md``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from merkle.blocks.cid import CID
from merkle.errors import ConflictError, IntegrityError, NotFoundError, StorageError, UsageError
from merkle.refs.entry import (
    JournalEntry,
    TrimmedEntry,
    as_utc,
    decode_slot,
    encode_entry,
    entry_digest,
    entry_key,
    head_key,
    journal_prefix,
    parse_entry_key,
    trimmed_key,
)
from merkle.refs.errors import (
    JournalConflictError,
    JournalEntryDamagedError,
    JournalGapError,
    JournalIndeterminateError,
)
from merkle.refs.names import check_db_name
from merkle.refs.reader import JournalReader, check_count, check_version
from merkle.storage.base import ObjectStore

__all__ = ["DEFAULT_HINT_EVERY", "JournalEntry", "RefManager"]

#: Attempts of an unconditional drop (or a fence) before giving up on a busy database.
_DROP_ATTEMPTS = 100
#: Commits rewrite the HEAD hint when their version is a multiple of this: a
#: cold reader then probes at most 3 slots past it, and 3 commits in 4 cost one
#: durable write instead of two (see doc/refs.md and bench/refs.py).
DEFAULT_HINT_EVERY = 4


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _check_text(value: object, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{what} must be a string or None, got {type(value).__name__}")
    return value


def _check_root(root: object) -> str | None:
    if root is None:
        return None
    if not isinstance(root, (str, CID)):
        raise UsageError(f"a root must be a CID string, got {type(root).__name__}")
    return str(CID.parse(root))


def _check_fork(forked_from: object, what: str = "forked_from") -> dict[str, Any] | None:
    if forked_from is None:
        return None
    if (
        not isinstance(forked_from, dict)
        or set(forked_from) != {"db", "version"}
        or not isinstance(forked_from["db"], str)
    ):
        raise UsageError(f"{what} must be {{'db': name, 'version': n}}, got {forked_from!r}")
    check_db_name(forked_from["db"])
    check_version(forked_from["version"], f"{what}['version']")
    return dict(forked_from)


class RefManager(JournalReader):
    """Commit to, read and maintain the version journals of every database in a lake.

    Safe to share between threads; any number of processes may use the same
    lake at once. ``now`` supplies commit times (tests inject a fixed clock).
    ``probe_fanout`` is how many journal slots a search reads concurrently
    per round (on the store's I/O pool) when finding a head past a stale
    hint or an entry by time: 1 (the default) reads one at a time, the fewest
    requests; more cuts round trips on a high-latency store that serves
    requests in parallel (``bench/refs.py`` measures both). ``hint_every``:
    the ``HEAD`` hint is rewritten by commits whose version is a multiple of
    it (and by drops); 1 rewrites it on every commit, which doubles the
    writes of a commit for a cold reader's saving of a probe or two.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        now: Callable[[], datetime] = _utcnow,
        probe_fanout: int = 1,
        hint_every: int = DEFAULT_HINT_EVERY,
    ) -> None:
        super().__init__(store, probe_fanout=probe_fanout)
        self._now = now
        self._hint_every = check_count(hint_every, "hint_every")

    # -- slots ---------------------------------------------------------------------

    def commit(
        self,
        db: str,
        expected_version: int | None,
        root: str | None,
        *,
        author: str | None = None,
        message: str | None = None,
        meta: dict[str, Any] | None = None,
        forked_from: dict[str, Any] | None = None,
        merged_from: dict[str, Any] | None = None,
        before: Sequence[tuple[str, bytes]] = (),
    ) -> JournalEntry:
        """Append version ``expected_version + 1`` of ``db`` holding ``root``; return its entry.

        ``merged_from`` (``{"db", "version"}``) records the second parent of a
        merge commit. ``before`` lists objects (the blocks ``root`` reaches
        that the lake lacks) to write durably before the entry: the store
        writes them in one round with it, the entry last
        (``ObjectStore.put_if_absent_after``); they may be written even when
        the entry is not.

        ``expected_version=None`` creates ``db`` (version 0), or creates it
        again after a drop (the journal continues at head + 1). ``root=None``
        with an expected version drops the database. Raises
        :class:`JournalConflictError` (a ``ConflictError``) when the journal is
        not where the caller expected (including an expected version that
        retention has trimmed), and :class:`JournalIndeterminateError` (a
        ``CommitIndeterminateError``) when the store cannot say whether the
        entry was written. Returns once the entry is durable.
        """
        db = check_db_name(db)
        root = _check_root(root)
        author = _check_text(author, "author")
        message = _check_text(message, "message")
        if meta is not None and not isinstance(meta, dict):
            raise UsageError(f"meta must be a dict, got {type(meta).__name__}")
        forked_from = _check_fork(forked_from)
        merged_from = _check_fork(merged_from, "merged_from")
        if expected_version is None:
            if root is None:
                raise UsageError(
                    f"cannot create database {db!r} without a root: pass the root CID, "
                    "or use drop() to drop it"
                )
            parent = self._parent_for_create(db)
        else:
            parent = self._parent_for_commit(db, check_version(expected_version, "version"))
            if parent.dropped:
                head = self.head(db)
                if head is not None and head.version != parent.version:
                    raise JournalConflictError(db, expected_version, head.version)
                raise NotFoundError(
                    f"database {db!r} was dropped at version {parent.version}; "
                    "create it again with expected_version=None"
                )
        return self._append(
            db,
            expected_version,
            parent,
            root,
            author,
            message,
            dict(meta or {}),
            forked_from,
            merged_from=merged_from,
            before=before,
        )

    def _append(
        self,
        db: str,
        expected: int | None,
        parent: JournalEntry | None,
        root: str | None,
        author: str | None,
        message: str | None,
        meta: dict[str, Any],
        forked_from: dict[str, Any] | None,
        *,
        merged_from: dict[str, Any] | None = None,
        before: Sequence[tuple[str, bytes]] = (),
    ) -> JournalEntry:
        """Create the slot after ``parent`` (slot 0 if None), refusing a trimmed parent."""
        version = 0 if parent is None else parent.version + 1
        floor = self.floor(db)
        if parent is not None and parent.version < floor:
            # The slot after a trimmed entry may have been freed: creating it again
            # would fork the journal below the floor, where no reader looks.
            raise JournalConflictError(
                db, expected, None, f"version {parent.version} was removed by retention"
            )
        self._refuse_gap(db, expected, version)
        now = as_utc(self._now())
        entry = JournalEntry(
            db=db,
            version=version,
            root=root,
            parent=None if parent is None else parent.version,
            # Times never run backwards along the journal, whatever the clocks say,
            # so a binary search by time is exact.
            time=now if parent is None else max(now, parent.time),
            author=author,
            message=message,
            meta=meta,
            forked_from=forked_from,
            merged_from=merged_from,
            prev=None if parent is None or version == 0 else parent.digest,
            created=version if expected is None or parent is None else parent.created,
        )
        data = encode_entry(entry)
        key = entry_key(db, entry.version)
        committed = decode_slot(data, key, db, entry.version)
        assert isinstance(committed, JournalEntry)
        if not self._create(db, entry.version, root, key, data, before):
            found = self.head(db)
            raise JournalConflictError(db, expected, None if found is None else found.version)
        self._remember(committed)
        if committed.version % self._hint_every == 0 or committed.dropped:
            self._write_hint(db, data)
        return committed

    def _refuse_gap(self, db: str, expected: int | None, version: int) -> None:
        """Refuse to put slot ``version`` when the slot after it already holds an entry.

        One read. An entry at ``version + 1`` was built on one at ``version``,
        so the put would lose anyway, unless that entry was deleted from
        outside: then ``put_if_absent`` would succeed and write a version no
        reader who finds the real head ever sees. Racing writers are not
        affected: the slot after the head is empty until one of them wins it.
        """
        if self._fetch_many(db, [version + 1])[0] is None:
            return
        if self._fetch_many(db, [version])[0] is None:
            raise JournalGapError(db, version, entry_key(db, version))
        found = self.head(db)
        raise JournalConflictError(db, expected, None if found is None else found.version)

    def fence(self, db: str, generation: int, *, attempts: int = _DROP_ATTEMPTS) -> JournalEntry:
        """Append a copy of ``db``'s head (same root) so no writer's older view can commit.

        Garbage collection calls this, holding the GC lock, before it deletes
        anything while a writer lease it could not wait for may still be in
        use: a writer whose view predates the fence loses its compare-and-set
        and replays on the new head (see doc/refs.md, "Fencing").
        """
        for _ in range(attempts):
            head = self.head(db)
            if head is None:
                raise NotFoundError(f"database {db!r} does not exist")
            try:
                return self._append(
                    db,
                    head.version,
                    head,
                    head.root,
                    "merkle gc",
                    "gc fence",
                    {"merkle": {"fence": generation}},
                    None,
                )
            except JournalConflictError:
                continue  # a stalled writer landed first: fence after it
        raise ConflictError(
            f"could not fence database {db!r}: writers committed before each of {attempts} attempts"
        )

    def _parent_for_create(self, db: str) -> JournalEntry | None:
        head = self.head(db)
        if head is not None and not head.dropped:
            raise JournalConflictError(db, None, head.version, "the database exists")
        return head

    def _parent_for_commit(self, db: str, expected: int) -> JournalEntry:
        with self._lock:
            known = self._known.get(db)
        if known is not None and known.version == expected:
            return known
        slot = self._read(db, expected)
        if isinstance(slot, JournalEntry):
            return slot
        head = self.head(db)
        if head is None:
            raise NotFoundError(
                f"database {db!r} does not exist; create it with expected_version=None"
            )
        trimmed = slot is not None or expected < self._floor_hint(db)
        detail = "that version was removed by retention" if trimmed else ""
        raise JournalConflictError(db, expected, head.version, detail)

    def _create(
        self,
        db: str,
        version: int,
        root: str | None,
        key: str,
        data: bytes,
        before: Sequence[tuple[str, bytes]] = (),
    ) -> bool:
        """Create the entry; True if this call wrote it (durably), False if another writer had."""
        try:
            if before:
                return self.store.put_if_absent_after(before, key, data)
            return self.store.put_if_absent(key, data)
        except StorageError as exc:
            if exc.definite:
                raise
            cause: BaseException = exc
        # The outcome is unknown. If the slot now holds our exact bytes, we won, but
        # it may not be durable yet (a file store whose directory flush failed): flush
        # it now. If it holds other bytes, we lost for good (ours can never land on an
        # occupied slot). If it is empty, our request may still arrive.
        try:
            ours = self.store.get(key) == data
            if ours:
                self.store.make_durable([key])
            return ours
        except (NotFoundError, StorageError):
            raise JournalIndeterminateError(db, version, root, cause) from cause

    def _write_hint(self, db: str, data: bytes) -> None:
        # The commit stands even if this fails: readers probe past a stale HEAD.
        with contextlib.suppress(StorageError):
            self.store.put_hint(head_key(db), data)

    # -- reads ---------------------------------------------------------------------

    def drop(
        self,
        db: str,
        expected_version: int | None = None,
        *,
        author: str | None = None,
        message: str | None = None,
    ) -> JournalEntry:
        """Drop ``db`` (an entry with a null root); history stays until trimmed.

        With ``expected_version`` this is a compare-and-set like ``commit``;
        without, it drops whatever version is current. :class:`NotFoundError`
        if ``db`` does not exist or is already dropped. Without an expected
        version, a head entry that is damaged (:class:`JournalEntryDamagedError`)
        is dropped too, the drop written above it: the way to give such a
        database up (see :meth:`_drop_damaged`).
        """
        if expected_version is not None:
            return self.commit(db, expected_version, None, author=author, message=message)
        for _ in range(_DROP_ATTEMPTS):
            try:
                head = self.head(db)
            except JournalEntryDamagedError as damaged:
                try:
                    return self._drop_damaged(damaged, author, message)
                except JournalConflictError:
                    continue
            if head is None or head.dropped:
                state = "does not exist" if head is None else "is already dropped"
                raise NotFoundError(f"database {db!r} {state}")
            try:
                return self.commit(db, head.version, None, author=author, message=message)
            except JournalConflictError:
                continue
        raise ConflictError(
            f"could not drop database {db!r}: other writers committed before each of "
            f"{_DROP_ATTEMPTS} attempts; retry when it is quieter"
        )

    def _drop_damaged(
        self, damaged: JournalEntryDamagedError, author: str | None, message: str | None
    ) -> JournalEntry:
        """Drop a database whose head is ``damaged``: the drop entry goes above it.

        Nothing can be committed on an entry that does not decode, and trimming
        never removes a head, so this is how such a database is given up: then
        ``trim(db, version + 1)`` removes the damaged entry, and collections run
        again. The drop chains to the damaged bytes (``prev``), and its time is
        not earlier than the readable entry below (times never run backwards).
        """
        db, version = damaged.db, damaged.version
        if version is None:  # a head search decodes journal entries only, never the hint
            raise damaged
        try:
            data = self.store.get(entry_key(db, version))
        except NotFoundError:
            raise JournalConflictError(db, version, None, "the entry went meanwhile") from None
        below: JournalEntry | TrimmedEntry | None = None
        with contextlib.suppress(IntegrityError):
            below = self._read(db, version - 1) if version > 0 else None
        stand_in = JournalEntry(  # never stored: what _append needs of a parent
            db=db,
            version=version,
            root=None,
            parent=None,
            time=below.time if isinstance(below, JournalEntry) else datetime.fromtimestamp(0, UTC),
            digest=entry_digest(data),
        )
        return self._append(db, version, stand_in, None, author, message, {}, None)

    def clone(
        self,
        source: str,
        target: str,
        version: int | None = None,
        *,
        author: str | None = None,
        message: str | None = None,
        entry: JournalEntry | None = None,
    ) -> JournalEntry:
        """Create ``target`` at the root of ``source`` (its head, or ``version``): O(1).

        The new entry records ``forked_from = {"db": source, "version": n}``.
        ``target`` must not exist or must be dropped (the journal continues).
        ``entry``: the source version's entry when the caller holds it already,
        e.g. a tag's copy of a version retention trimmed from the journal (the
        caller checks, under its writer lease, that the version is still kept).
        """
        if entry is not None:
            if entry.db != source or (version is not None and entry.version != version):
                raise UsageError(
                    f"clone of {source!r} version {version} was given the entry of "
                    f"{entry.db!r} version {entry.version}"
                )
            src: JournalEntry | None = entry
        else:
            src = self.head(source) if version is None else self.get(source, version)
        if src is None:
            raise NotFoundError(f"cannot clone database {source!r}: it does not exist")
        if src.dropped:
            raise NotFoundError(
                f"cannot clone database {source!r}: version {src.version} is a drop; "
                "pick an earlier version"
            )
        return self.commit(
            target,
            None,
            src.root,
            author=author,
            message=message,
            forked_from={"db": src.db, "version": src.version},
        )

    def trim(self, db: str, before_version: int) -> int:
        """Remove the entries of ``db`` older than ``before_version``, never the head.

        The retention floor is raised first (durably), then every journal
        object below it is deleted (entries, tombstones of older merkle-db
        versions, and entries of stalled writers that landed below the floor):
        journal storage stays proportional to the versions kept. No slot
        below the floor can be committed to again: a commit refuses a parent
        below the floor, and a writer whose lease garbage collection had to
        pass checks after its put (see doc/refs.md, "Trimming and stalled
        writers"). Returns how many versions this call removed; repeating it
        is harmless.
        """
        db = check_db_name(db)
        before_version = check_version(before_version, "before_version")
        found: JournalEntry | TrimmedEntry | None = None
        try:
            found = self.head(db)
            top = None if found is None else found.version
        except (JournalGapError, JournalEntryDamagedError):
            # Giving up the versions below a gap, or up to a damaged entry, is the way
            # out of either: the newest slot the journal holds (undecoded: it may be the
            # damaged one) stands in for the head the search refuses.
            top = self._newest_slot(db)
        if top is None:
            raise NotFoundError(f"database {db!r} does not exist")
        floor = self._floor_hint(db)
        stop = max(floor, min(before_version, top))
        if stop > floor:
            self.store.put(trimmed_key(db), str(stop).encode("ascii"))
        if stop > floor and isinstance(found, JournalEntry):
            # The HEAD hint may name a version about to be deleted (commits rewrite it
            # every few versions). This merkle-db probes from the floor, but merkle-db
            # of before the floor took a hint whose next slot is empty for the head:
            # it read an old version and committed below the floor, unseen. The hint
            # names the head, durably, before anything is deleted (trims are rare).
            with contextlib.suppress(StorageError):
                self.store.put(head_key(db), encode_entry(found))
        doomed = []
        for info in self.store.list(journal_prefix(db)):
            version = parse_entry_key(db, info.key)
            if version is not None and version < stop:
                doomed.append(info.key)
        self.store.delete_many(doomed)
        return max(0, stop - floor)
