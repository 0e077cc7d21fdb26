"""Mark and sweep: delete the blocks no kept version, reader or writer still needs.

1. Audit every journal (dropped databases too; ``merkle.refs.audit``): a
   damaged one (a gap, a marker above the head, entries mixed from copies)
   stops the collection before anything is deleted or trimmed. Plan
   retention from the audited entries: the versions each journal keeps (the
   head always; ``keep_within`` counts back from now by the storage's
   clock, see step 6).
2. Mark from those roots and from every live reader lease (but one of a
   version already trimmed and freed, see :mod:`merkle.gc.readers`).
3. List the blocks.
4. Take the GC lock (new writers now wait), and wait (up to ``writer_wait``)
   for the writer leases that started before it. If a live (renewed) one
   outlasts the wait, nothing is deleted or trimmed this time (a writer at
   work may reuse any old block). Expired ones that are still there belong
   to writers that stalled or were killed: they are *passed*: recorded in
   the lock, and every journal gets a fence entry, so a passed writer cannot
   commit on a view older than this sweep: it loses its compare-and-set and
   replays, or, if its put landed before the fence, finds its lease in the
   lock's record and checks its commit (``merkle.refs.writer``).
5. Trim journals past retention (the floor first, then the entries below
   it), then re-mark from heads that moved (every version from the planned
   trim point on, since those entries stay readable) and new reader leases.
   Trimming comes before that last look at reader leases: a reader writes
   its lease and then checks that its version is still in the journal, so
   it is either seen, or finds its version trimmed and backs off.
6. Candidates: listed, unmarked, and older than the cutoff (``now - grace``,
   now by the storage's clock, which set the blocks' timestamps, read once
   before step 1; and never newer than the start of a writer lease still
   live).
7. Delete the candidates in batches; before each batch check that the lock
   is still ours and re-read each candidate's timestamp (one that is gone,
   or was refreshed by a writer reusing it, is spared). Where the store
   lists a page of objects per request (S3) and there are more candidates
   than pages, one listing taken now re-reads them all instead.
8. Remove expired leases and crash leftovers (temporary files older than the
   grace period and than :data:`~merkle.gc.clock.TEMPORARY_MIN_AGE`, by the
   storage's clock, :mod:`merkle.gc.clock`);
   save the report under ``gc/``.

A dry run does steps 1-3 and 6 without the lock (counting live writer
leases in the cutoff instead of waiting for them) and deletes and trims
nothing.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from merkle.blocks.cid import CID
from merkle.db.closed import closed_error
from merkle.db.inputs import check_flag
from merkle.errors import NotFoundError, StorageError, UsageError
from merkle.gc.clock import remove_temporaries, storage_clock
from merkle.gc.fanout import Fanout, Progress
from merkle.gc.locking import held_gc_lock, take_gc_lock
from merkle.gc.mark import Marker
from merkle.gc.policy import Policy, Retention, load_policy, parse_duration
from merkle.gc.readers import ReaderRoots
from merkle.gc.report import DatabaseReport, GCReport
from merkle.gc.tags import TagRoots
from merkle.refs import (
    GCLock,
    JournalAudit,
    JournalDamagedError,
    JournalEntry,
    Lease,
    WritersBusyError,
    audit_journal,
)
from merkle.refs.entry import CONFIG_KEY
from merkle.refs.reader import lake_gone_error
from merkle.storage.base import ObjectInfo

if TYPE_CHECKING:
    from merkle.db.connection import Connection

__all__ = ["Notify", "Progress", "gc", "journal_names"]

#: ``notify(message)``: told why the collection waits, and for how long.
Notify = Callable[[str], None]

#: Journals live at ``refs/<db>/`` (see merkle.refs.entry.journal_prefix).
REFS_PREFIX = "refs/"
#: The GC lock lasts this long and is renewed every third of it: a killed
#: collector holds writers up for this plus the skew margin.
LOCK_TTL = 30.0
#: How long a collection waits for live writer leases before it goes on
#: without them (fencing them off); a killed writer's lease runs out sooner.
WRITER_WAIT = 60.0


def journal_names(conn: Connection) -> list[str]:
    """Every database with a journal in the lake, live or dropped."""
    return conn.store.list_prefixes(REFS_PREFIX)


def _any_entry(conn: Connection) -> bool:
    """Whether any journal holds an entry (a file lake keeps emptied journals' folders)."""
    return any(
        next(iter(conn.store.list(f"{REFS_PREFIX}{name}/")), None) for name in journal_names(conn)
    )


def _kept_entries(
    audit: JournalAudit, retention: Retention, now: datetime, floor: int | None = None
) -> tuple[list[JournalEntry], int]:
    """(kept entries newest first, oldest kept version) of an audited journal.

    ``floor``: keep at least every version from it on (versions a trim has
    already spared stay readable, so they must stay whole).
    """
    entries, head = audit.entries, audit.head
    assert head is not None
    assert entries
    oldest = entries[0].version
    if retention.keeps_everything:
        first = oldest
    else:
        firsts = []
        if retention.keep_versions is not None:
            firsts.append(_nth_committed(entries, retention.keep_versions))
        if retention.keep_within is not None:
            start = now - retention.keep_within
            before = [e.version for e in entries if e.time <= start]
            firsts.append(before[-1] if before else oldest)  # the version current at `start`
        first = max(oldest, min(firsts))
    if floor is not None:
        first = max(oldest, min(first, floor))
    return [e for e in reversed(entries) if e.version >= first], first


def _nth_committed(entries: Sequence[JournalEntry], count: int) -> int:
    """The version of the ``count``-th newest entry that is not a GC fence (else the oldest).

    ``keep_versions`` counts the states users committed: a fence repeats the
    root below it, so counting it would keep one state fewer than asked (and
    a collection that fenced would trim a version a user still expects).
    Fences above that entry are kept with it.
    """
    seen = 0
    for entry in reversed(entries):
        if not entry.fence:
            seen += 1
            if seen == count:
                return entry.version
    return entries[0].version


class _Run:
    """The state of one collection (see the module doc for the phases)."""

    def __init__(
        self,
        conn: Connection,
        policy: Policy,
        dry_run: bool,
        progress: Progress | None,
        fanout: Fanout,
        storage_clock: float,
    ) -> None:
        self.conn = conn
        self.policy = policy
        self.dry_run = dry_run
        self.fanout = fanout
        self.progress = progress or (lambda phase, done, total: None)
        self.marker = Marker(conn.blocks)
        self.report = GCReport(dry_run=dry_run, started_at=datetime.now(UTC))
        self.heads: dict[str, int] = {}
        self.trim_before: dict[str, int] = {}
        self.damaged: dict[str, JournalAudit] = {}
        self.readers = ReaderRoots(conn)
        self.tags = TagRoots(conn)
        #: Now by the storage's clock, read first (:func:`~merkle.gc.clock.storage_clock`): the one
        #: now of this collection, for retention (``keep_within``) and the grace period.
        self.storage_clock = storage_clock
        self._clock = time.perf_counter()

    def phase(self, name: str) -> None:
        now = time.perf_counter()
        self.report.phases[name] = self.report.phases.get(name, 0.0) + now - self._clock
        self._clock = now

    def mark_databases(self, names: list[str], floors: dict[str, int] | None = None) -> None:
        """Mark what retention keeps of each database (at least from ``floors[name]`` on).

        Every journal is audited first; a damaged one is set aside in
        ``self.damaged`` (the caller stops before deleting anything).
        ``keep_within`` counts back from the storage's clock, as the grace period
        does: a collector whose own clock runs ahead must not trim versions
        committed moments ago (nor one that runs behind keep older ones).
        """
        now = datetime.fromtimestamp(self.storage_clock, UTC)
        for i, name in enumerate(names):
            audit = audit_journal(self.conn.refs, name)
            for note in audit.notes:
                self.report.notes.append(f"{name!r}: {note}")
            if audit.damaged:
                self.damaged[name] = audit
                continue
            if audit.head is None:
                continue
            retention = self.policy.for_db(name)
            floor = None if floors is None else floors.get(name, 0)
            kept, first = _kept_entries(audit, retention, now, floor)
            roots = [
                (CID.parse(entry.root), f"database {name!r} version {entry.version}")
                for entry in kept
                if entry.root is not None
            ]
            reached = self.fanout.mark(self.marker, roots)
            previous = self.report.databases.get(name)
            self.report.databases[name] = DatabaseReport(
                head=audit.head.version,
                dropped=audit.head.dropped,
                versions_kept=len(kept),
                versions_trimmed=max(0, first - audit.entries[0].version),
                oldest_kept=first,
                blocks_reached=reached + (previous.blocks_reached if previous else 0),
            )
            self.heads[name] = audit.head.version
            self.trim_before[name] = first
            self.progress("mark", i + 1, len(names))

    def stop_if_damaged(self) -> None:
        """Raise :class:`JournalDamagedError` if any journal audited so far is damaged."""
        if self.damaged:
            raise JournalDamagedError(list(self.damaged.values()))

    def mark_readers(self) -> None:
        """Mark from the live reader leases not seen yet (see :mod:`merkle.gc.readers`)."""
        self.readers.mark(self.marker, self.fanout)
        self.report.reader_leases = self.readers.marked
        self.report.reader_leases_stale = list(self.readers.stale)

    def mark_tags(self) -> None:
        """Tags: read them (again) and mark their roots; the report lists them."""
        self.tags.refresh()
        self.tags.mark(self.marker)
        self.report.tags = self.tags.listing()

    def remark_moved(self) -> None:
        """Mark what commits made since the first mark (new heads, new databases).

        Every version from the trim point of the first mark on stays in the
        journal, so all of them are marked: a version committed during the
        collection and already outside retention by now is still readable
        (and a reader may lease it after the last look at leases).
        """
        moved = []
        for name in journal_names(self.conn):
            head = self.conn.refs.head(name)
            if head is not None and self.heads.get(name) != head.version:
                moved.append(name)
        self.mark_databases(moved, floors=dict(self.trim_before))
        self.stop_if_damaged()
        self.mark_readers()
        self.mark_tags()


def _seconds(value: object, what: str, *, zero: bool) -> float:
    """A time in seconds: a finite number, positive (or, with ``zero``, at least 0). A
    lock that lasts nan or 0 seconds would lapse at once, a negative wait end at once."""
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > 0 or (zero and value == 0))
    ):
        return float(value)
    least = "at least 0" if zero else "more than 0"
    raise UsageError(f"{what} must be a number of seconds {least}, got {value!r}")


def gc(
    conn: Connection,
    dry_run: bool = False,
    keep_versions: int | None = None,
    keep_within: timedelta | str | None = None,
    grace: timedelta | str | None = None,
    *,
    writer_wait: float = WRITER_WAIT,
    lock_ttl: float = LOCK_TTL,
    progress: Progress | None = None,
    notify: Notify | None = None,
    fanout: Fanout | None = None,
) -> GCReport:
    """Delete every block that no kept version, reader lease or writer lease needs.

    ``keep_versions`` / ``keep_within`` replace the lake's default retention
    for this run (per-database overrides stored with ``set_retention`` still
    apply); with neither, the stored policy decides (by default: keep every
    version). ``grace`` (default one hour) spares unreachable blocks younger
    than it. ``dry_run`` deletes nothing and reports exactly what would go.
    ``notify`` is told, in plain words, what the collection waits for. The
    report is returned and saved under ``gc/reports/`` in the lake. A damaged
    journal stops the collection before anything is deleted
    (:class:`~merkle.refs.JournalDamagedError`, naming it). ``fanout`` runs
    the marking, listing and deleting elsewhere (e.g. on Spark, see
    :mod:`merkle.gc.fanout`); the protocol and its outcome are the same.
    """
    if conn.closed:
        raise closed_error(conn.uri)
    dry_run = check_flag(dry_run, "gc(dry_run=)")
    writer_wait = _seconds(writer_wait, "gc(writer_wait=)", zero=True)
    lock_ttl = _seconds(lock_ttl, "gc(lock_ttl=)", zero=False)
    stored = policy = load_policy(conn.store)
    if keep_versions is not None or keep_within is not None:
        within = parse_duration(keep_within, "keep_within") if keep_within is not None else None
        policy = policy.with_default(Retention(keep_versions, within))
    if grace is not None:
        policy = Policy(policy.default, policy.databases, parse_duration(grace, "grace"))
    conn._writer.release_idle()  # this connection's own idle lease is not a running writer
    if not conn.store.exists(CONFIG_KEY) and not _any_entry(conn):
        # Every lake has its settings from its first connection on: an S3 prefix (or a
        # directory) emptied while in use is a lake deleted, not an empty one to start
        # writing a clock, a lock and a report into.
        raise lake_gone_error(conn.store)
    fanout = fanout or Fanout()
    # Read first, before the lock is taken: a storage that cannot take this write (a
    # full disk) stops the collection before it holds writers up; and retention is
    # judged by it as well as the grace period.
    run = _Run(conn, policy, dry_run, progress, fanout, storage_clock(conn, dry_run))
    report = run.report
    if fanout.description:
        report.notes.append(fanout.description)
    report.retention = policy.default.describe() + (
        f"; overrides for {sorted(policy.databases)}" if policy.databases else ""
    )
    report.grace_seconds = policy.grace.total_seconds()
    tell = notify or (lambda message: None)

    run.mark_databases(journal_names(conn))
    run.stop_if_damaged()
    run.mark_readers()
    run.mark_tags()
    run.phase("mark")

    listed = fanout.list_blocks(conn)
    report.blocks_listed = len(listed)
    report.bytes_listed = sum(info.size for _, info in listed)
    run.phase("list")

    if dry_run:
        _collect(run, listed, None, writer_wait, tell)
    else:
        lock = take_gc_lock(conn, lock_ttl, writer_wait, tell)  # says a wait for another
        if lock.replaced is not None:
            old = lock.replaced
            timing = conn.leases.timing
            report.notes.append(
                f"took the GC lock over from generation {old.generation} of {old.holder}, "
                f"which names {timing.describe(old.expires)} as its expiry: "
                + (
                    timing.skew_note(old.start, old.expires)
                    or "it stayed unchanged for longer than its stated duration"
                )
            )
        with held_gc_lock(lock, lock_ttl, conn.leases.timing):
            run.phase("lock")
            if load_policy(conn.store) != stored:
                # set_retention (which takes this lock) changed the policy after the
                # marking read it: versions it now keeps may be unmarked. Count only.
                report.sweep_skipped = (
                    "the retention policy changed (set_retention) while this collection "
                    "marked; nothing was trimmed or deleted: run gc again"
                )
                _collect(run, listed, None, writer_wait, tell)
            else:
                _collect(run, listed, lock, writer_wait, tell)
    report.finished_at = datetime.now(UTC)
    try:
        report.save(conn.store)
    except StorageError as exc:
        if dry_run:
            # A dry run changes nothing else, so it runs on a lake it may not write to.
            report.notes.append(f"this dry run's report was not saved in the lake: {exc}")
        elif report.report_key is None:  # stopped before the sweep: nothing was changed
            raise
        else:
            raise StorageError(
                f"the collection finished (freed {report.blocks_freed:,} blocks, "
                f"{report.bytes_freed:,} bytes) but its final report could not be saved "
                f"({exc}); {report.report_key} holds the report written before the sweep"
            ) from None
    return report


#: The note of a report saved before the trim and sweep: the complete report replaces it
#: when the collection ends, so a stored report with it is of one that stopped part way.
UNFINISHED = (
    "saved before the trim and sweep: this collection did not finish (it stopped, was "
    "interrupted or lost its lock part way): what it trimmed and deleted is not counted "
    "here; run gc again"
)


def _collect(
    run: _Run,
    listed: list[tuple[CID, ObjectInfo]],
    lock: GCLock | None,
    writer_wait: float,
    tell: Notify,
) -> None:
    """Steps 4-8 of the module doc (without ``lock``: the dry run's count)."""
    conn, report = run.conn, run.report
    leases, timing = conn.leases, conn.leases.timing
    cutoff = run.storage_clock - run.policy.grace.total_seconds()
    if lock is not None:
        _pass_writers(run, lock, writer_wait, tell)
    live = leases.live("writer")
    report.writer_leases_waited = len(live)
    for lease in live:  # a live writer's blocks written so far are spared
        cutoff = min(cutoff, lease.start - timing.margin)
    run.phase("wait")
    if lock is not None and live:
        # A writer at work may refresh (reuse) any old block; the listing's timestamps
        # cannot show that, so nothing is safe to delete now: count, delete nothing.
        report.sweep_skipped = (
            f"{len(live)} writer lease(s) still live after {writer_wait:g}s "
            f"(first: {live[0].id} of {live[0].holder}); run gc again later"
        )
        lock = None
    if lock is not None:
        lock.ensure_held()
        # The report is written before anything is trimmed or deleted (and again, whole,
        # at the end): a lake that cannot take it (a full disk) stops the collection
        # here, having changed nothing, as operations.md says. Until then it says so.
        report.notes.append(UNFINISHED)
        report.save(conn.store)
        report.notes.remove(UNFINISHED)
        for name, first in run.trim_before.items():
            conn.refs.trim(name, first)
        run.phase("trim")
    run.remark_moved()
    run.phase("remark")
    report.cutoff = cutoff
    candidates = []
    for cid, info in listed:
        if cid.bytes in run.marker.marked:
            report.blocks_kept += 1
            report.bytes_kept += info.size
        elif info.mtime >= cutoff:
            report.blocks_spared_recent += 1
            report.bytes_spared_recent += info.size
        else:
            candidates.append((cid, info.size))
    report.nodes_read = run.marker.nodes_read
    if lock is None:
        freed, size = len(candidates), sum(size for _, size in candidates)
        if report.sweep_skipped:
            trimmed = _nothing_trimmed(report)
            report.sweep_skipped += (
                f"; it would trim {trimmed:,} versions and free {freed:,} blocks ({size:,} bytes)"
            )
        else:
            report.blocks_freed, report.bytes_freed = freed, size
            report.freed = [str(cid) for cid, _ in candidates]
        return
    relist = len(candidates) > 2 * -(-len(listed) // conn.store.list_page_size)
    found = len(candidates)
    if relist:
        candidates = _still_old(run, candidates, cutoff)
    deleted = run.fanout.sweep(conn, candidates, cutoff, lock, run.progress, recheck=not relist)
    report.blocks_rechecked_spared += found - len(deleted)
    report.blocks_freed += len(deleted)
    report.bytes_freed += sum(size for _, size in deleted)
    report.freed.extend(str(cid) for cid, _ in deleted)
    run.phase("sweep")
    leases.reap_expired()
    lock.ensure_held()
    report.temporaries_removed, report.temporary_bytes_removed = remove_temporaries(
        conn.store, run.storage_clock, run.policy.grace.total_seconds()
    )
    run.phase("cleanup")


def _nothing_trimmed(report: GCReport) -> int:
    """Make each database's report say no version was trimmed (a skipped sweep trims
    nothing: every entry stays kept); the number of versions it planned to trim."""
    planned = 0
    for db in report.databases.values():
        planned += db.versions_trimmed
        if db.versions_trimmed and db.oldest_kept is not None:
            db.oldest_kept -= db.versions_trimmed
        db.versions_kept += db.versions_trimmed
        db.versions_trimmed = 0
    return planned


def _still_old(
    run: _Run, candidates: list[tuple[CID, int]], cutoff: float
) -> list[tuple[CID, int]]:
    """The candidates a listing taken now still shows older than ``cutoff``.

    The first listing came before the lock, and a writer at work then may
    have refreshed a block it reused since, so every candidate's timestamp is
    read again before it is deleted. Here that is one listing instead of one
    ``stat`` per candidate, where the store lists a page of objects per
    request (S3: 1,000) and there are more candidates than pages. A listing
    taken now is as good as a ``stat`` just before each delete: the lock is
    held and the writers that began before it have ended or been fenced
    (step 4), and a new writer waits for the lock.
    """
    now = {cid.bytes: info.mtime for cid, info in run.fanout.list_blocks(run.conn)}
    return [(cid, size) for cid, size in candidates if now.get(cid.bytes, cutoff) < cutoff]


def _pass_writers(run: _Run, lock: GCLock, writer_wait: float, tell: Notify) -> None:
    """Wait for the writers that started before the lock; fence off those that expired."""
    conn, report = run.conn, run.report
    timing = conn.leases.timing

    def waiting(writers: Sequence[Lease]) -> None:
        first = min(writers, key=lambda lease: lease.expires)
        tell(
            f"waiting for {len(writers)} writer lease(s) to end (at most {writer_wait:g}s): "
            f"{first.id} of {first.holder} expires {timing.describe(first.expires)}"
        )

    with contextlib.suppress(WritersBusyError):
        lock.wait_for_writers(writer_wait, notify=waiting)
    passed = [
        lease for lease in conn.leases.lease_holders("writer") if not conn.leases.respected(lease)
    ]
    if not passed:
        return
    for lease in passed:
        if timing.observer_live(lease.expires):  # over by what this collector saw, not its times
            skew = timing.skew_note(lease.start, lease.expires)
            report.notes.append(
                f"writer lease {lease.id} of {lease.holder} counted as ended although it "
                f"names {timing.describe(lease.expires)} as its expiry: "
                + (skew or "it stayed unchanged for longer than its stated duration")
                + "; its writer is fenced off like a stalled one"
            )
    tell(
        f"going on without {len(passed)} writer lease(s) ({passed[0].id} of "
        f"{passed[0].holder}); fencing every journal so they cannot commit on this sweep"
    )
    lock.record_passed([lease.id for lease in passed])
    report.writer_leases_passed = [f"{lease.id} ({lease.holder})" for lease in passed]
    for name in journal_names(conn):
        lock.ensure_held()
        try:
            conn.refs.fence(name, lock.generation)
        except NotFoundError:
            # A journal without an entry: a creation (create_db, a clone, an import)
            # killed before its first entry landed left its folder. There is no view to
            # fence; a creation still under way finds its lease passed when it lands.
            continue
        report.fences += 1
