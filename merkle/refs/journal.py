"""The ref manager: each database's version journal, the lake's consensus.

A commit is one ``put_if_absent`` of the next journal slot, so exactly one of
any number of racing writers (threads, processes, machines) wins each
version, on every backend. Everything else here is reading that journal
well: finding the head without reading the history (probing past a hint),
looking versions up by number and by time, listing, dropping, cloning and
trimming. The protocol and its reasoning are in ``doc/refs.md``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Sequence
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
    encode_trimmed,
    entry_key,
    head_key,
    journal_prefix,
    parse_entry_key,
    trimmed_key,
)
from merkle.refs.errors import JournalConflictError, JournalIndeterminateError
from merkle.refs.names import check_db_name
from merkle.refs.search import gallop, last_true
from merkle.storage.base import ObjectStore

__all__ = ["DEFAULT_HINT_EVERY", "JournalEntry", "RefManager"]

_Slot = JournalEntry | TrimmedEntry | None

#: Entries read or trimmed per round of concurrent requests.
_CHUNK = 64
#: Attempts of an unconditional drop before giving up on a busy database.
_DROP_ATTEMPTS = 100
#: Commits rewrite the HEAD hint when their version is a multiple of this: a
#: cold reader then probes at most 3 slots past it, and 3 commits in 4 cost one
#: durable write instead of two (see doc/refs.md and bench/refs.py).
DEFAULT_HINT_EVERY = 4


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _check_version(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise UsageError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _check_count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{what} must be an integer >= 1, got {value!r}")
    return value


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
    _check_version(forked_from["version"], f"{what}['version']")
    return dict(forked_from)


class RefManager:
    """Commit, read and maintain the version journals of every database in a lake.

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
        self.store = store
        self._now = now
        self._fanout = _check_count(probe_fanout, "probe_fanout")
        self._hint_every = _check_count(hint_every, "hint_every")
        self._lock = threading.Lock()
        # The newest entry this manager has seen per database: a starting point
        # for probing (entries are immutable and slots never freed, so it can
        # be old but never wrong).
        self._known: dict[str, JournalEntry] = {}

    # -- slots ---------------------------------------------------------------------

    def _read(self, db: str, version: int) -> _Slot:
        key = entry_key(db, version)
        try:
            data = self.store.get(key)
        except NotFoundError:
            return None
        return decode_slot(data, key, db, version)

    def _remember(self, entry: JournalEntry) -> None:
        with self._lock:
            known = self._known.get(entry.db)
            if known is None or known.version < entry.version:
                self._known[entry.db] = entry

    def _marker(self, db: str) -> int:
        """The retention marker: every slot below it is a tombstone (0 if none or unreadable)."""
        try:
            text = self.store.get(trimmed_key(db))
        except NotFoundError:
            return 0
        return int(text) if text.isascii() and text.isdigit() else 0

    # -- the head ------------------------------------------------------------------

    def head(self, db: str) -> JournalEntry | None:
        """The newest entry of ``db`` (root None if dropped); None if ``db`` never existed.

        A manager that has seen the head before reads one slot past it (one
        read when nothing changed); otherwise it starts from the ``HEAD`` hint
        (else from slot 0) and probes past that: two reads when the hint is
        current, O(log d) probes when it is d versions behind.
        """
        return self._head(check_db_name(db), self._fanout)

    def _head(self, db: str, fanout: int) -> JournalEntry | None:
        with self._lock:
            known = self._known.get(db)
        if known is not None:
            following = self._fetch_many(db, [known.version + 1])[0]
            if following is None:
                return known
            # Others have committed since: the hint is likely closer than our cache.
            hint = self._hint(db)
            if hint is not None and hint.version > known.version + 1:
                entry = self._probe_past(db, hint.version, hint, fanout)
            else:
                entry = self._probe_past(db, known.version + 1, following, fanout)
        else:
            start = self._hint(db)
            first = None if start is not None else self._fetch_many(db, [0])[0]
            if start is not None:
                entry = self._probe_past(db, start.version, start, fanout)
            elif first is not None:
                # No hint: slot 0 is never freed, so gallop from it (O(log head) reads).
                entry = self._probe_past(db, 0, first, fanout)
            else:
                top = self._scan(db)  # no slot 0: unknown db, or outside damage
                if top is None:
                    return None
                entry = self._probe_past(db, top.version, top, fanout)
        self._remember(entry)
        return entry

    def _hint(self, db: str) -> JournalEntry | None:
        """The entry copied into HEAD, or None when HEAD is absent or unreadable."""
        key = head_key(db)
        try:
            slot = decode_slot(self.store.get(key), key, db, None)
        except (NotFoundError, IntegrityError):
            return None  # a hint only: fall back to listing
        return slot if isinstance(slot, JournalEntry) else None

    def _scan(self, db: str) -> _Slot:
        """The highest slot a listing of the journal shows, or None for an unknown db.

        Only needed when slot 0 is missing, which a journal written by merkle
        never is: it tells an unknown database (an empty listing) from one
        whose first entries were deleted from outside.
        """
        prefix = journal_prefix(db)
        top = None
        for info in self.store.list(prefix):
            version = parse_entry_key(db, info.key)
            if version is not None and (top is None or version > top):
                top = version
        if top is None:
            return None
        slot = self._read(db, top)
        if slot is None:
            raise IntegrityError(
                f"journal entry {entry_key(db, top)!r} was listed but cannot be read; "
                "check the store for damage"
            )
        return slot

    def _read_many(self, db: str, versions: Sequence[int]) -> list[_Slot]:
        if len(versions) == 1:
            return [self._read(db, versions[0])]
        return self.store.map_bulk(lambda v: self._read(db, v), versions)

    def _fetch_many(self, db: str, versions: Sequence[int]) -> list[bytes | None]:
        """The raw bytes of several slots (None where empty), concurrently if many."""

        def fetch(version: int) -> bytes | None:
            try:
                return self.store.get(entry_key(db, version))
            except NotFoundError:
                return None

        if len(versions) == 1:
            return [fetch(versions[0])]
        return self.store.map_bulk(fetch, versions)

    def _probe_past(
        self, db: str, start: int, found: JournalEntry | TrimmedEntry | bytes, fanout: int
    ) -> JournalEntry:
        """The head, found by probing the slots after ``start``, which holds ``found``.

        Probes only ask whether a slot exists; just the head found is decoded,
        so a damaged old entry does not stop anyone from finding the head.
        """
        seen: dict[int, JournalEntry | TrimmedEntry | bytes] = {start: found}

        def present(versions: Sequence[int]) -> list[bool]:
            fetched = self._fetch_many(db, versions)
            for version, data in zip(versions, fetched, strict=True):
                if data is not None:
                    seen[version] = data
            return [data is not None for data in fetched]

        top = start
        if present([top + 1])[0]:  # the common case, a current start, costs one read
            top = gallop(present, top + 1, fanout)
        head = seen[top]
        if isinstance(head, bytes):
            head = decode_slot(head, entry_key(db, top), db, top)
        if not isinstance(head, JournalEntry):
            raise IntegrityError(
                f"journal head {entry_key(db, head.version)!r} is a trimmed tombstone; "
                "retention never trims a head, so the journal was altered from outside"
            )
        return head

    # -- commit --------------------------------------------------------------------

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
    ) -> JournalEntry:
        """Append version ``expected_version + 1`` of ``db`` holding ``root``; return its entry.

        ``expected_version=None`` creates ``db`` (version 0), or creates it
        again after a drop (the journal continues at head + 1). ``root=None``
        with an expected version drops the database. Raises
        :class:`JournalConflictError` (a ``ConflictError``) when the journal is
        not where the caller expected, and :class:`JournalIndeterminateError`
        (a ``CommitIndeterminateError``) when the store cannot say whether the
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
            parent = self._parent_for_commit(db, _check_version(expected_version, "version"))
            if parent.dropped:
                head = self.head(db)
                if head is not None and head.version != parent.version:
                    raise JournalConflictError(db, expected_version, head.version)
                raise NotFoundError(
                    f"database {db!r} was dropped at version {parent.version}; "
                    "create it again with expected_version=None"
                )
        now = as_utc(self._now())
        entry = JournalEntry(
            db=db,
            version=0 if parent is None else parent.version + 1,
            root=root,
            parent=None if parent is None else parent.version,
            # Times never run backwards along the journal, whatever the clocks say,
            # so a binary search by time is exact.
            time=now if parent is None else max(now, parent.time),
            author=author,
            message=message,
            meta=dict(meta or {}),
            forked_from=forked_from,
            merged_from=merged_from,
        )
        data = encode_entry(entry)
        key = entry_key(db, entry.version)
        committed = decode_slot(data, key, db, entry.version)
        assert isinstance(committed, JournalEntry)
        if not self._create(db, entry.version, root, key, data):
            found = self.head(db)
            found_version = None if found is None else found.version
            raise JournalConflictError(db, expected_version, found_version)
        self._remember(committed)
        if committed.version % self._hint_every == 0 or committed.dropped:
            self._write_hint(db, data)
        return committed

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
        detail = "that version was removed by retention" if slot is not None else ""
        raise JournalConflictError(db, expected, head.version, detail)

    def _create(self, db: str, version: int, root: str | None, key: str, data: bytes) -> bool:
        """Create the entry; True if this call wrote it, False if another writer had."""
        try:
            return self.store.put_if_absent(key, data)
        except StorageError as exc:
            if exc.definite:
                raise
            cause: BaseException = exc
        # The outcome is unknown. If the slot now holds our exact bytes, we won;
        # if it holds other bytes, we lost for good (ours can never land on an
        # occupied slot). If it is empty, our request may still arrive.
        try:
            return self.store.get(key) == data
        except (NotFoundError, StorageError):
            raise JournalIndeterminateError(db, version, root, cause) from cause

    def _write_hint(self, db: str, data: bytes) -> None:
        # The commit stands even if this fails: readers probe past a stale HEAD.
        with contextlib.suppress(StorageError):
            self.store.put_hint(head_key(db), data)

    # -- reads ---------------------------------------------------------------------

    def get(self, db: str, version: int) -> JournalEntry:
        """Entry ``version`` of ``db``; :class:`NotFoundError` if absent or trimmed."""
        db = check_db_name(db)
        version = _check_version(version, "version")
        slot = self._read(db, version)
        if isinstance(slot, JournalEntry):
            return slot
        if isinstance(slot, TrimmedEntry):
            raise self._trimmed_error(db, version)
        head = self.head(db)
        if head is None:
            raise NotFoundError(f"database {db!r} does not exist")
        if version > head.version:
            raise NotFoundError(
                f"database {db!r} has no version {version}; its newest is {head.version}"
            )
        if version < self._marker(db):
            raise self._trimmed_error(db, version)
        raise IntegrityError(
            f"journal entry {entry_key(db, version)!r} is missing below the head "
            f"({head.version}); the journal was altered from outside"
        )

    def _trimmed_error(self, db: str, version: int) -> NotFoundError:
        oldest = self.oldest_version(db)
        return NotFoundError(
            f"version {version} of database {db!r} was removed by retention; the oldest "
            f"version kept is {oldest}"
        )

    def at(self, db: str, when: datetime) -> JournalEntry:
        """The newest entry of ``db`` committed at or before ``when`` (naive = UTC).

        A drop entry is returned like any other (its root is None). Raises
        :class:`NotFoundError` when ``when`` is before the first entry, or
        when the entry it names was removed by retention.
        """
        db = check_db_name(db)
        when = as_utc(when)
        head = self.head(db)
        if head is None:
            raise NotFoundError(f"database {db!r} does not exist")
        if head.time <= when:
            return head
        seen: dict[int, _Slot] = {head.version: head}

        def at_or_before(versions: Sequence[int]) -> list[bool]:
            # Tombstones (and slots gone missing) lie below every kept entry.
            slots = self._read_many(db, versions)
            seen.update(zip(versions, slots, strict=True))
            return [not isinstance(s, JournalEntry) or s.time <= when for s in slots]

        low = min(self._marker(db), head.version)
        if not at_or_before([low])[0]:
            first = seen[low]
            assert isinstance(first, JournalEntry)
            removed = f"; versions before {low} were removed by retention" if low else ""
            raise NotFoundError(
                f"database {db!r} has no version at or before {when.isoformat()}: version "
                f"{low} was committed at {first.time.isoformat()}{removed}"
            )
        found = seen[last_true(at_or_before, low, head.version - 1, self._fanout)]
        if not isinstance(found, JournalEntry):
            raise NotFoundError(
                f"the version of database {db!r} at {when.isoformat()} was removed by retention"
            )
        return found

    def history(self, db: str, limit: int | None = None) -> list[JournalEntry]:
        """Entries of ``db``, newest first, at most ``limit``; trimmed ones are absent."""
        db = check_db_name(db)
        if limit is not None:
            _check_version(limit, "limit")
        head = self.head(db)
        if head is None:
            raise NotFoundError(f"database {db!r} does not exist")
        low = min(self._marker(db), head.version)
        if limit is not None:
            low = max(low, head.version - limit + 1)
        entries: list[JournalEntry] = []
        for top in range(head.version, low - 1, -_CHUNK):
            versions = range(top, max(low, top - _CHUNK + 1) - 1, -1)
            for slot in self.store.map_bulk(lambda v: self._read(db, v), versions):
                if not isinstance(slot, JournalEntry):
                    return entries  # trimmed from here down
                entries.append(slot)
        return entries

    def list_dbs(self) -> list[str]:
        """Names of the live databases (dropped ones excluded), sorted."""
        names = [name for name in self.store.list_prefixes("refs/") if _valid_name(name)]
        # Sequential probes inside the pool's threads: a nested map_bulk could deadlock.
        heads = self.store.map_bulk(lambda name: self._head(name, 1), names)
        return sorted(name for name, head in zip(names, heads, strict=True) if _live(head))

    def oldest_version(self, db: str) -> int | None:
        """The oldest version of ``db`` still kept (not trimmed); None if ``db`` never existed."""
        db = check_db_name(db)
        head = self.head(db)
        if head is None:
            return None
        low = min(self._marker(db), head.version)

        def trimmed(versions: Sequence[int]) -> list[bool]:
            return [not isinstance(s, JournalEntry) for s in self._read_many(db, versions)]

        if not trimmed([low])[0]:
            return low
        return last_true(trimmed, low, head.version - 1, self._fanout) + 1

    # -- drop, clone, trim -----------------------------------------------------------

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
        if ``db`` does not exist or is already dropped.
        """
        if expected_version is not None:
            return self.commit(db, expected_version, None, author=author, message=message)
        for _ in range(_DROP_ATTEMPTS):
            head = self.head(db)
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

    def clone(
        self,
        source: str,
        target: str,
        version: int | None = None,
        *,
        author: str | None = None,
        message: str | None = None,
    ) -> JournalEntry:
        """Create ``target`` at the root of ``source`` (its head, or ``version``): O(1).

        The new entry records ``forked_from = {"db": source, "version": n}``.
        ``target`` must not exist or must be dropped (the journal continues).
        """
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

    def trim(self, db: str, before_version: int, *, keep: Collection[int] = ()) -> int:
        """Remove the entries of ``db`` older than ``before_version``, never the head.

        Each removed entry is replaced by a small tombstone (its slot must
        never be created again), then the retention marker moves up. Entries
        in ``keep`` (tagged versions) stay below the marker: reading them by
        version works as before. Returns how many entries were removed by
        this call; repeating it is harmless.
        """
        db = check_db_name(db)
        before_version = _check_version(before_version, "before_version")
        head = self.head(db)
        if head is None:
            raise NotFoundError(f"database {db!r} does not exist")
        stop = min(before_version, head.version)
        start = self._marker(db)
        removed = 0
        for low in range(start, stop, _CHUNK):
            versions = range(low, min(low + _CHUNK, stop))
            slots = self.store.map_bulk(lambda v: self._read(db, v), versions)
            tombstones = [
                (entry_key(db, slot.version), encode_trimmed(slot))
                for slot in slots
                if isinstance(slot, JournalEntry) and slot.version not in keep
            ]
            self.store.put_many(tombstones)
            removed += len(tombstones)
        if stop > start:
            self.store.put(trimmed_key(db), str(stop).encode("ascii"))
        return removed

    def trim_kept(self, db: str, version: int) -> bool:
        """Trim one entry that a tag kept below the retention marker; whether it was."""
        db = check_db_name(db)
        head = self.head(db)
        if head is None or version >= min(self._marker(db), head.version):
            return False
        slot = self._read(db, version)
        if not isinstance(slot, JournalEntry):
            return False
        self.store.put(entry_key(db, version), encode_trimmed(slot))
        return True


def _valid_name(name: str) -> bool:
    try:
        check_db_name(name)
    except UsageError:
        return False
    return True


def _live(head: JournalEntry | None) -> bool:
    return head is not None and not head.dropped
