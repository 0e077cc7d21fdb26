"""Reading a database's version journal: the head, versions by number and time, history.

The journal is a run of slots ``refs/<db>/<n>`` from the retention floor to
the head, every one holding an entry; slots below the floor were trimmed.
Nothing here trusts a hint: ``HEAD`` only names a version to start probing
from, and the head returned is always an entry read from its own slot. A slot
missing between the floor and the head is outside damage and raises
:class:`IntegrityError`, never a shorter history. :class:`RefManager` (in
``merkle.refs.journal``) adds the writes.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from merkle.errors import IntegrityError, MerkleError, NotFoundError, StorageError, UsageError
from merkle.refs.entry import (
    CONFIG_KEY,
    JournalEntry,
    TrimmedEntry,
    as_utc,
    decode_slot,
    entry_key,
    head_key,
    journal_prefix,
    parse_entry_key,
    trimmed_key,
)
from merkle.refs.errors import JournalEntryDamagedError, JournalGapError
from merkle.refs.names import check_db_name
from merkle.refs.search import gallop, last_true
from merkle.storage.base import ObjectStore

__all__ = ["JournalReader", "check_count", "check_version", "lake_gone_error"]

Slot = JournalEntry | TrimmedEntry | None

#: Entries read per round of concurrent requests.
_CHUNK = 64
#: Heads :meth:`JournalReader.history` starts from at most while collections trim them.
_HISTORY_ATTEMPTS = 8


def check_version(value: object, what: str) -> int:
    """``value`` if it is a version number (an int >= 0), else a UsageError naming ``what``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise UsageError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def check_count(value: object, what: str) -> int:
    """``value`` if it is an int >= 1, else a UsageError naming ``what``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{what} must be an integer >= 1, got {value!r}")
    return value


class JournalReader:
    """Find heads and read entries of every journal in a lake (see the module doc).

    ``probe_fanout`` is how many journal slots a search reads concurrently
    per round (on the store's I/O pool) when finding a head past a stale
    hint or an entry by time: 1 (the default) reads one at a time, the fewest
    requests; more cuts round trips on a high-latency store that serves
    requests in parallel (``bench/refs.py`` measures both).
    """

    def __init__(self, store: ObjectStore, *, probe_fanout: int = 1) -> None:
        self.store = store
        self._fanout = check_count(probe_fanout, "probe_fanout")
        self._lock = threading.Lock()
        # The newest entry this reader has seen per database, read from its slot:
        # a starting point for probing (the head only moves up, so it can be old
        # but never wrong).
        self._known: dict[str, JournalEntry] = {}

    def _read(self, db: str, version: int) -> Slot:
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
                self._known[entry.db] = entry.detached()  # its own: the caller has entry

    def floor(self, db: str) -> int:
        """The retention floor of ``db``: every version below it was trimmed (0 if none).

        It is raised (durably) before any entry below it is deleted and never
        lowered, so a slot at or above it has never been freed. A marker that
        does not hold a number is an :class:`IntegrityError`: without it no
        one can tell a trimmed slot from a lost one.
        """
        key = trimmed_key(db)
        try:
            text = self.store.get(key)
        except NotFoundError:
            return 0
        if text.isascii() and text.isdigit() and len(text) <= 20:
            return int(text)
        raise IntegrityError(
            f"retention marker {key!r} is damaged (it holds {text[:40]!r}, not a version "
            "number); write the oldest version kept there, or restore it from a backup"
        )

    def _floor_hint(self, db: str) -> int:
        """The floor where only a starting point for a search is needed (0 if unreadable)."""
        try:
            return self.floor(db)
        except IntegrityError:
            return 0

    # -- the head ------------------------------------------------------------------

    def head(self, db: str) -> JournalEntry | None:
        """The newest entry of ``db`` (root None if dropped); None if ``db`` never existed.

        A manager that has seen the head before reads the two slots past it
        and the floor (three reads when nothing changed); otherwise it starts
        from the ``HEAD`` hint (else from the floor) and probes past that:
        four reads when the hint is current, O(log d) probes when it is d
        versions behind. The second slot past the head is the gap check:
        :class:`JournalGapError` when an entry lies past an empty slot.
        """
        return self._head(check_db_name(db), self._fanout)

    def _head(self, db: str, fanout: int) -> JournalEntry | None:
        with self._lock:
            known = self._known.get(db)
        if known is not None:
            following = self._fetch_many(db, [known.version + 1])[0]
            if following is None:
                # The slot after the cached head is empty: the head, unless a newer
                # entry sits above the empty slot (see _beyond_gap).
                beyond = self._beyond_gap(db, known.version)
                following = None if beyond is False else beyond
            if following is None:
                # Slots floor..head all exist, and a slot is freed only after the floor
                # passed it, so read after this miss, a floor at or below the cached
                # head proves it is still the head; a higher one means it was trimmed.
                if known.version >= self._floor_hint(db):
                    return known.detached()  # a copy: the cache is this reader's own
                with self._lock:
                    if self._known.get(db) is known:
                        del self._known[db]
                return self._head(db, fanout)
            # Others have committed since: the hint is likely closer than our cache.
            hint = self._hint_version(db)
            jumped = None
            if hint is not None and hint > known.version + 1:
                jumped = self._probe_past(db, hint, None, fanout)
            entry = jumped or self._probe_past(db, known.version + 1, following, fanout)
            if entry is None:  # the whole journal vanished meanwhile (outside damage)
                with self._lock:
                    if self._known.get(db) is known:
                        del self._known[db]
                return self._head(db, fanout)
        else:
            cold = self._probe_cold(db, fanout)
            if cold is None:
                return None
            entry = cold
        self._remember(entry)
        return entry

    def _probe_cold(self, db: str, fanout: int) -> JournalEntry | None:
        """The head found without a cached one: from the HEAD hint's slot, else the floor's.

        The hint names a version only; its copy of an entry is never returned.
        A hint ahead of the journal (a lake copied while a writer ran) or
        below the floor names an empty slot, so probing starts at the floor
        instead, the oldest slot that must exist.
        """
        hint = self._hint_version(db)
        if hint is not None:
            entry = self._probe_past(db, hint, None, fanout)
            if entry is not None:
                return entry
        return self._probe_from_floor(db, fanout)

    def _probe_from_floor(self, db: str, fanout: int) -> JournalEntry | None:
        """The head found from the retention floor's slot, else from a listing."""
        floor = self._floor_hint(db)
        data = self._fetch_many(db, [floor])[0]
        if data is not None:
            # Slots floor..head all exist: gallop up from the floor (O(log head) reads).
            return self._probe_past(db, floor, data, fanout)
        top = self._scan(db)  # no slot at the floor: an unknown db, or outside damage
        if top is None:
            return None
        return self._probe_past(db, top.version, top, fanout)

    def _hint_version(self, db: str) -> int | None:
        """The version the HEAD hint names, or None when it is absent or unreadable."""
        key = head_key(db)
        try:
            slot = decode_slot(self.store.get(key), key, db, None)
        except (NotFoundError, IntegrityError):
            return None  # a hint only: fall back to the floor
        return slot.version if isinstance(slot, JournalEntry) else None

    def _scan(self, db: str) -> Slot:
        """The highest slot a listing of the journal shows, or None for an unknown db.

        Only needed when the slot at the retention floor is missing, which a
        journal written by merkle never is: it tells an unknown database (an
        empty listing) from one whose entries were deleted from outside.
        """
        top = self._newest_slot(db)
        if top is None:
            return None
        slot = self._read(db, top)
        if slot is None:
            raise IntegrityError(
                f"journal entry {entry_key(db, top)!r} was listed but cannot be read; "
                "check the store for damage"
            )
        return slot

    def _newest_slot(self, db: str) -> int | None:
        """The highest version a listing of the journal shows (None: no entry), undecoded."""
        listed = (parse_entry_key(db, info.key) for info in self.store.list(journal_prefix(db)))
        return max((v for v in listed if v is not None), default=None)

    def _read_many(self, db: str, versions: Sequence[int]) -> list[Slot]:
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

    def _beyond_gap(self, db: str, top: int) -> bytes | Literal[False] | None:
        """Check that ``top`` is the head, having just seen slot ``top + 1`` empty.

        One more read, of slot ``top + 2``: empty (the usual answer) means
        ``top`` is the head, and None is returned. A writer builds slot ``n + 1``
        only on an entry it read at slot ``n``, so an entry at ``top + 2`` means
        slot ``top + 1`` was written before it: read again, it is either there
        now (racing writers filled both meanwhile: its bytes are returned and
        probing goes on) or it was deleted. Below the retention floor that was a
        trim (False is returned); at or above it, only outside
        damage deletes an entry, and serving ``top`` would show a shorter history
        and let a commit fill the gap unseen: :class:`JournalGapError`.
        """
        if self._fetch_many(db, [top + 2])[0] is None:
            return None
        following = self._fetch_many(db, [top + 1])[0]
        if following is not None:
            return following
        if top + 1 < self._floor_hint(db):
            return False
        raise JournalGapError(db, top + 1, entry_key(db, top + 1))

    def _probe_past(
        self, db: str, start: int, found: JournalEntry | TrimmedEntry | bytes | None, fanout: int
    ) -> JournalEntry | None:
        """The head, found by probing the slots after ``start``, which holds ``found``.

        ``found=None`` when ``start`` comes from a hint: the slot is read only
        if the head turns out to be ``start`` itself, and None is returned if
        it is empty (the hint named a version the journal does not hold).
        Probes only ask whether a slot exists; just the head found is decoded,
        so a damaged old entry does not stop anyone from finding the head.
        """
        seen: dict[int, JournalEntry | TrimmedEntry | bytes] = {}
        if found is not None:
            seen[start] = found

        def present(versions: Sequence[int]) -> list[bool]:
            fetched = self._fetch_many(db, versions)
            for version, data in zip(versions, fetched, strict=True):
                if data is not None:
                    seen[version] = data
            return [data is not None for data in fetched]

        top = start
        if present([top + 1])[0]:  # the common case, a current start, costs one read
            top = gallop(present, top + 1, fanout)
        elif top not in seen and not present([top])[0]:
            return None
        while True:  # slot top + 1 was seen empty: the head, unless entries lie past it
            following = self._beyond_gap(db, top)
            if following is None:
                break
            if following is False:
                # The probe ran below the retention floor (a hint or a cached head that
                # retention trimmed meanwhile): only slots from the floor up count.
                return self._probe_from_floor(db, fanout)
            seen[top + 1] = following
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

    def get(self, db: str, version: int) -> JournalEntry:
        """Entry ``version`` of ``db``; :class:`NotFoundError` if absent or trimmed."""
        db = check_db_name(db)
        version = check_version(version, "version")
        slot = self._read(db, version)
        if isinstance(slot, JournalEntry):
            return slot
        if isinstance(slot, TrimmedEntry) or version < self._floor_hint(db):
            raise self._trimmed_error(db, version)
        head = self.head(db)
        if head is None:
            raise NotFoundError(f"database {db!r} does not exist")
        if version > head.version:
            raise NotFoundError(
                f"database {db!r} has no version {version}; its newest is {head.version}"
            )
        if version < self._floor_hint(db):  # trimmed while we looked
            raise self._trimmed_error(db, version)
        raise self._altered(
            entry_key(db, head.version),
            f"journal entry {entry_key(db, version)!r} is missing below the head "
            f"({head.version}); the journal was altered from outside: restore the entry "
            "from a backup (`merkle verify` lists what is missing)",
        )

    def _altered(self, head_key: str, message: str) -> MerkleError:
        """The error for a journal that lacks entries it must hold below the head this
        process knows (``head_key``): an IntegrityError (``message``), unless the whole
        lake is gone, the head and the lake's settings too (deleted or moved while this
        process used it), which is said as such: restoring single entries would not
        help then."""
        try:
            gone = not self.store.exists(head_key) and not self.store.exists(CONFIG_KEY)
        except StorageError:
            gone = False  # the store cannot tell: report what was found
        return lake_gone_error(self.store) if gone else IntegrityError(message)

    def _trimmed_error(self, db: str, version: int) -> NotFoundError:
        try:
            oldest = f"; the oldest version kept is {self.oldest_version(db)}"
        except (JournalEntryDamagedError, JournalGapError):
            # The head search refuses a damaged head or a gap; the version is trimmed all
            # the same, and a tag that keeps it must still open it (to clone it first).
            oldest = ""
        return NotFoundError(
            f"version {version} of database {db!r} was removed by retention{oldest}"
        )

    def at(self, db: str, when: datetime) -> JournalEntry:
        """The newest entry of ``db`` committed at or before ``when`` (naive = UTC).

        A drop entry is returned like any other (its root is None). Raises
        :class:`NotFoundError` when ``when`` is before the first entry, or
        when the entry it names was removed by retention; an entry missing at or
        above the retention floor (outside damage) is an :class:`IntegrityError`,
        as :meth:`get` says it.
        """
        db = check_db_name(db)
        when = as_utc(when)
        head = self.head(db)
        if head is None:
            raise NotFoundError(f"database {db!r} does not exist")
        if head.time <= when:
            return head
        seen: dict[int, Slot] = {head.version: head}

        def at_or_before(versions: Sequence[int]) -> list[bool]:
            # Tombstones and freed slots lie below every kept entry.
            slots = self._read_many(db, versions)
            seen.update(zip(versions, slots, strict=True))
            return [not isinstance(s, JournalEntry) or s.time <= when for s in slots]

        low = min(self._floor_hint(db), head.version)
        if not at_or_before([low])[0]:
            first = seen[low]
            assert isinstance(first, JournalEntry)
            removed = f"; versions before {low} were removed by retention" if low else ""
            raise NotFoundError(
                f"database {db!r} has no version at or before {when.isoformat()}: version "
                f"{low} was committed at {first.time.isoformat()}{removed}"
            )
        version = last_true(at_or_before, low, head.version - 1, self._fanout)
        found = seen[version]
        if isinstance(found, JournalEntry):
            return found
        if isinstance(found, TrimmedEntry) or version < self._floor_hint(db):
            raise NotFoundError(
                f"the version of database {db!r} at {when.isoformat()} was removed by retention"
            )
        # An empty slot at or above the floor: only outside damage deletes an entry there,
        # and the time it held is lost with it. Said as get() says it, never as a trim.
        raise self._altered(
            entry_key(db, head.version),
            f"journal entry {entry_key(db, version)!r} is missing below the head "
            f"({head.version}), so the version at {when.isoformat()} cannot be told: the "
            "journal was altered from outside; restore the entry from a backup (`merkle "
            "verify` lists what is missing)",
        )

    def history(self, db: str, limit: int | None = None) -> list[JournalEntry]:
        """Entries of ``db``, newest first, at most ``limit``; trimmed ones are absent.

        A slot missing between the retention floor and the head is outside
        damage, never a reason to stop early: it is an :class:`IntegrityError`.
        A collection may trim the head found before its slot is read (others
        committed meanwhile, ``keep_versions=1``): the history is then read
        again from a fresh head, at most :data:`_HISTORY_ATTEMPTS` times.
        """
        db = check_db_name(db)
        if limit is not None:
            check_version(limit, "limit")
        for _ in range(_HISTORY_ATTEMPTS):
            found = self.head(db)
            if found is None:
                raise NotFoundError(f"database {db!r} does not exist")
            head = found
            entries = self._history_below(db, head, limit)
            if entries is not None:
                return entries
        # Trimmed under every attempt: the last head found was the head when it was read,
        # an answer as true as any (a newer head may come while this one is returned).
        return [head][:limit]

    def _history_below(
        self, db: str, head: JournalEntry, limit: int | None
    ) -> list[JournalEntry] | None:
        """:meth:`history` read down from ``head``; None if ``head``'s slot was trimmed."""
        low = min(self._floor_hint(db), head.version)
        if limit is not None:
            low = max(low, head.version - limit + 1)
        entries: list[JournalEntry] = []
        for top in range(head.version, low - 1, -_CHUNK):
            versions = range(top, max(low, top - _CHUNK + 1) - 1, -1)
            slots = self.store.map_bulk(lambda v: self._read(db, v), versions)
            for version, slot in zip(versions, slots, strict=True):
                if isinstance(slot, JournalEntry):
                    entries.append(slot)
                elif isinstance(slot, TrimmedEntry) or version < self._floor_hint(db):
                    # Trimmed from here down (by an old trim, or just now); the head is
                    # never trimmed while it is the head: trimmed, it was not any more.
                    return entries if entries else None
                else:
                    raise self._altered(
                        entry_key(db, head.version),
                        f"journal entry {entry_key(db, version)!r} is missing between the "
                        f"retention floor and the head ({head.version}): the journal was "
                        "altered from outside; restore the entry from a backup",
                    )
        return entries

    def list_dbs(self) -> list[str]:
        """Names of the live databases (dropped ones excluded), sorted."""
        names = [name for name in self.store.list_prefixes("refs/") if _valid_name(name)]
        # Sequential probes inside the pool's threads: a nested map_bulk could deadlock.

        def live(name: str) -> bool:
            try:
                return _live(self._head(name, 1))
            except (JournalGapError, JournalEntryDamagedError):
                # It exists (a damaged head may have been a drop: that cannot be told);
                # opening it says what is wrong and what to do.
                return True

        alive = self.store.map_bulk(live, names)
        return sorted(name for name, ok in zip(names, alive, strict=True) if ok)

    def oldest_version(self, db: str) -> int | None:
        """The oldest version of ``db`` still kept (not trimmed); None if ``db`` never existed."""
        db = check_db_name(db)
        head = self.head(db)
        if head is None:
            return None
        low = min(self._floor_hint(db), head.version)

        def trimmed(versions: Sequence[int]) -> list[bool]:
            return [not isinstance(s, JournalEntry) for s in self._read_many(db, versions)]

        if not trimmed([low])[0]:
            return low
        # Tombstones above the floor: a trim by an older merkle-db that stopped early.
        return last_true(trimmed, low, head.version - 1, self._fanout) + 1

    # -- drop, clone, trim -----------------------------------------------------------


def lake_gone_error(store: ObjectStore) -> NotFoundError:
    """The error for a lake whose settings (``config``, which every lake has from its first
    connection on) are missing: it was deleted or moved while in use. Said as such, never
    as damage of one object, nor as an empty, healthy lake."""
    return NotFoundError(
        f"the lake at {store.uri} is gone: its settings ({CONFIG_KEY!r}) and "
        "journal entries are missing, so it was deleted or moved while in use; "
        "nothing was changed. Open the lake where it is now, or restore it from a backup"
    )


def _valid_name(name: str) -> bool:
    try:
        check_db_name(name)
    except UsageError:
        return False
    return True


def _live(head: JournalEntry | None) -> bool:
    return head is not None and not head.dropped
