"""Audit a journal before anything is deleted on its word.

Garbage collection and ``verify`` must not trust a hint, a marker or the
first gap they meet: a journal copied while a writer ran, or damaged from
outside, would otherwise make GC treat live versions as garbage. The audit
lists the journal and reads every entry from the retention floor to the
newest slot, and reports what does not fit:

* **problems** (damage; GC deletes nothing while any journal has one): an
  unreadable retention marker, a marker above the newest entry, a slot
  missing or holding a tombstone between the oldest entry and the head, an
  entry that does not decode, an entry whose ``prev`` digest does not match
  the entry below it (journal objects mixed from different copies);
* **notes** (harmless, reported by ``verify``): a ``HEAD`` hint naming a
  version the journal does not hold, journal objects below the floor that
  the next trim removes.

A collection may trim the journal while it is audited (``verify`` runs beside
``merkle gc``; a second collector audits before it takes the GC lock): slots
listed a moment ago are gone, and the marker may name a version above the
newest one listed. So damage counts only when a pass saw the journal hold
still: the retention floor read before its listing is the floor read after
its entries (a trim raises the floor before it deletes anything, and the
floor never goes down). A pass that saw damage while the floor moved is
done again from a fresh listing, at most :data:`AUDIT_PASSES` times.

The floor is also what a collection trims to when retention keeps every
version the audit saw, so one wrong read of it (a ``TRIMMED`` of ``3`` read
as ``5``, on the way from a store that checks nothing) made a collection
delete versions 3 and 4 for good. A pass that found journal objects below
its floor (the ones a trim to it deletes) counts only if the floor read
again after it is the same; otherwise the journal is audited again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from merkle.errors import IntegrityError, MerkleError, NotFoundError
from merkle.refs.entry import (
    JournalEntry,
    TrimmedEntry,
    decode_slot,
    entry_key,
    head_key,
    journal_prefix,
    parse_entry_key,
)
from merkle.refs.reader import JournalReader
from merkle.storage.base import ObjectStore

__all__ = ["JournalAudit", "JournalDamagedError", "audit_journal"]


class JournalDamagedError(IntegrityError):
    """One or more journals are damaged, so garbage collection deleted nothing."""

    def __init__(self, audits: list[JournalAudit]) -> None:
        details = "; ".join(f"{a.db!r}: {', '.join(a.problems)}" for a in audits)
        names = ", ".join(repr(a.db) for a in audits)
        super().__init__(
            f"the journal of database(s) {names} is damaged ({details}); garbage collection "
            "deleted and trimmed nothing, because it cannot tell which blocks the damaged "
            "versions need: restore the journal objects from a backup, or, to give up the "
            "versions below a gap, trim them with conn.refs.trim(db, first_version_to_keep)"
        )
        self.audits = audits


@dataclass
class JournalAudit:
    """What a journal holds and what is wrong with it (see the module doc)."""

    db: str
    floor: int = 0
    head: JournalEntry | None = None
    entries: list[JournalEntry] = field(default_factory=list)  # kept, oldest first
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    below_floor: int = 0  # journal objects below ``floor`` (a trim to it deletes them)

    @property
    def damaged(self) -> bool:
        return bool(self.problems)

    @property
    def exists(self) -> bool:
        return self.head is not None


def _ranges(versions: list[int]) -> str:
    """``[1, 2, 3, 7]`` as ``"1-3, 7"``."""
    runs: list[list[int]] = []
    for v in versions:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


#: Passes an audit makes at most while collections keep trimming the journal under it.
AUDIT_PASSES = 8

#: What :func:`_floor_or_damaged` gives for an unreadable marker: the same on every read,
#: so a pass that met one counts as having seen the journal hold still.
_DAMAGED_MARKER = -1


def audit_journal(refs: JournalReader, db: str) -> JournalAudit:
    """Audit ``db``'s journal (see the module doc); never raises for damage it can name.

    A healthy journal costs one pass. Damage is reported only as a pass saw
    it during which the retention floor held still (read before its listing
    and again after its reads): damage seen while a trim raised the floor
    may be the trim's doing, so the journal is listed and read again.
    """
    # The floor before the first listing is not read: only a damaged-looking journal
    # needs it, and the pass after one starts from the floor read at its end.
    before: int | None = None
    for _ in range(AUDIT_PASSES):
        audit = _audit_once(refs, db)
        after = None if not (audit.damaged or audit.below_floor) else _floor_or_damaged(refs, db)
        if not audit.damaged:
            if not audit.below_floor or after == audit.floor:
                return audit
            before = after  # the floor read wrong or moved: what it names is not confirmed
            continue
        if before == after:
            return audit  # the journal held still: the damage is real
        before = after
    audit.problems.insert(
        0,
        f"the retention floor moved during each of {AUDIT_PASSES} audits in a row "
        "(collections trimming the journal meanwhile?), so the problems below may be no "
        "damage: run the audit again once the collections are done",
    )
    return audit


def _audit_once(refs: JournalReader, db: str) -> JournalAudit:
    """One pass: list the journal, read its floor and its entries from the floor up."""
    audit = JournalAudit(db)
    store = refs.store
    present: list[int] = []
    has_hint = False
    for info in store.list(journal_prefix(db)):
        version = parse_entry_key(db, info.key)
        if version is not None:
            present.append(version)
        elif info.key == head_key(db):
            has_hint = True
    try:
        audit.floor = refs.floor(db)
    except IntegrityError as exc:
        audit.problems.append(str(exc))
        audit.floor = 0
    if not present:
        if has_hint:
            audit.problems.append("a HEAD hint exists but no journal entry does")
        return audit
    present.sort()
    top = present[-1]
    below = [v for v in present if v < audit.floor]
    audit.below_floor = len(below)
    if below:
        audit.notes.append(
            f"{len(below)} journal object(s) below the retention floor {audit.floor} "
            "(the next trim removes them)"
        )
    if audit.floor > top:
        audit.problems.append(
            f"the retention marker names version {audit.floor}, above the newest entry ({top})"
        )
        return audit
    versions = list(range(audit.floor, top + 1))
    slots = store.map_bulk(lambda v: _read(store, db, v), versions)
    missing = [v for v, s in zip(versions, slots, strict=True) if s is None]
    if missing:
        # A trim (without the GC lock: a concurrent verify) may have raised the floor.
        floor_now = _floor_now(refs, db, audit.floor)
        missing = [v for v in missing if v >= floor_now]
        if missing:
            what = (
                f"entry {missing[0]} is" if len(missing) == 1 else f"entries {_ranges(missing)} are"
            )
            audit.problems.append(
                f"{what} missing between the retention floor ({audit.floor}) and the head ({top})"
            )
    previous: JournalEntry | None = None
    legacy = True  # tombstones of an old, interrupted trim may lead the run
    for version, slot in zip(versions, slots, strict=True):
        if isinstance(slot, MerkleError):
            audit.problems.append(str(slot))
            previous, legacy = None, False
        elif isinstance(slot, TrimmedEntry):
            if not legacy:
                audit.problems.append(f"entry {version} is a tombstone above kept entries")
            previous = None
        elif isinstance(slot, JournalEntry):
            legacy = False
            if (
                previous is not None
                and slot.prev is not None
                and previous.version == version - 1
                and slot.prev != previous.digest
            ):
                audit.problems.append(
                    f"entry {version} was not built on the entry {version - 1} stored "
                    "below it (journal objects mixed from different copies?)"
                )
            audit.entries.append(slot)
            previous = slot
        else:
            previous = None
    last = slots[-1]
    if isinstance(last, JournalEntry):
        audit.head = last
    elif not audit.problems:
        audit.problems.append(f"the newest slot ({top}) holds no readable entry")
    hint = _hint_version(store, db)
    if hint is not None and hint > top:
        audit.notes.append(
            f"the HEAD hint names version {hint}, but the journal ends at {top} (a lake "
            "copied while a writer ran?); the hint is ignored"
        )
    return audit


def _read(
    store: ObjectStore, db: str, version: int
) -> JournalEntry | TrimmedEntry | MerkleError | None:
    key = entry_key(db, version)
    try:
        return decode_slot(store.get(key), key, db, version)
    except NotFoundError:
        return None
    except IntegrityError as exc:
        return exc


def _floor_or_damaged(refs: JournalReader, db: str) -> int:
    return _floor_now(refs, db, _DAMAGED_MARKER)


def _floor_now(refs: JournalReader, db: str, fallback: int) -> int:
    try:
        return refs.floor(db)
    except IntegrityError:
        return fallback


def _hint_version(store: ObjectStore, db: str) -> int | None:
    key = head_key(db)
    try:
        slot = decode_slot(store.get(key), key, db, None)
    except (NotFoundError, IntegrityError):
        return None
    return slot.version
