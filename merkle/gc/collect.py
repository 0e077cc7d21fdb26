"""Mark and sweep: delete the blocks no kept version, reader or writer still needs.

1. Plan retention: for every journal (dropped databases too), the versions
   its retention keeps (the head always).
2. Mark from those roots and from every live reader lease.
3. List the blocks.
4. Take the GC lock (new writers now wait), wait for the writer leases that
   started before it, then re-mark from heads that moved (every version from
   the planned trim point on, since those entries stay readable) and new
   reader leases. Shared subtrees are already marked, so this costs the new
   nodes.
   Trimming journals past retention happens here, before that last look at
   reader leases: a reader writes its lease and then checks that its version
   is still in the journal, so it is either seen, or finds its version
   trimmed and backs off.
5. Candidates: listed, unmarked, and older than the cutoff (``now - grace``,
   and never newer than the start of a writer lease still live).
6. Delete the candidates, checking the lock is still ours before each batch.
7. Save the report under ``gc/``.

A dry run does steps 1-5 without the lock (counting live writer leases in the
cutoff instead of waiting for them) and deletes and trims nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from merkle.blocks.cid import CID
from merkle.errors import NotFoundError
from merkle.gc.mark import Marker
from merkle.gc.policy import Policy, Retention, load_policy, parse_duration
from merkle.gc.report import DatabaseReport, GCReport
from merkle.gc.tags import TagRoots
from merkle.refs import GCLock, JournalEntry, WritersBusyError

if TYPE_CHECKING:
    from merkle.db.connection import Connection

__all__ = ["Progress", "gc", "journal_names"]

#: ``progress(phase, done, total)``: called as work advances (total None if unknown).
Progress = Callable[[str, int, int | None], None]

#: Journals live at ``refs/<db>/`` (see merkle.refs.entry.journal_prefix).
REFS_PREFIX = "refs/"
_DELETE_BATCH = 1000
LOCK_TTL = 300.0
#: Long enough for a crashed writer's lease (120 s) plus the skew margin to run out.
WRITER_WAIT = 180.0


def journal_names(conn: Connection) -> list[str]:
    """Every database with a journal in the lake, live or dropped."""
    return conn.store.list_prefixes(REFS_PREFIX)


def _kept_entries(
    conn: Connection, name: str, retention: Retention, now: datetime, floor: int | None = None
) -> tuple[JournalEntry | None, list[JournalEntry], int | None]:
    """(head, kept entries newest first, oldest kept version) under ``retention``.

    ``floor``: keep at least every version from it on (versions a trim has
    already spared stay readable, so they must stay whole).
    """
    refs = conn.refs
    head = refs.head(name)
    if head is None:
        return None, [], None
    oldest = refs.oldest_version(name)
    oldest = 0 if oldest is None else oldest
    if retention.keeps_everything:
        first = oldest
    else:
        firsts = []
        if retention.keep_versions is not None:
            firsts.append(head.version - retention.keep_versions + 1)
        if retention.keep_within is not None:
            try:
                firsts.append(refs.at(name, now - retention.keep_within).version)
            except NotFoundError:
                firsts.append(oldest)  # everything is younger than the window
        first = max(oldest, min(firsts))
    if floor is not None:
        first = max(oldest, min(first, floor))
    kept = refs.history(name, limit=head.version - first + 1)
    return head, kept, first


@contextlib.contextmanager
def _held(lock: GCLock, ttl: float) -> Iterator[GCLock]:
    """Keep renewing ``lock`` in the background; release it at the end."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl / 3):
            with contextlib.suppress(Exception):
                lock.renew(ttl)

    thread = threading.Thread(target=renew, name="merkle-gc-lock", daemon=True)
    thread.start()
    try:
        yield lock
    finally:
        stop.set()
        thread.join()
        lock.release()


class _Run:
    """The state of one collection (see the module doc for the phases)."""

    def __init__(
        self, conn: Connection, policy: Policy, dry_run: bool, progress: Progress | None
    ) -> None:
        self.conn = conn
        self.policy = policy
        self.dry_run = dry_run
        self.progress = progress or (lambda phase, done, total: None)
        self.marker = Marker(conn.blocks)
        self.report = GCReport(dry_run=dry_run, started_at=datetime.now(UTC))
        self.heads: dict[str, int] = {}
        self.trim_before: dict[str, int] = {}
        self.readers: set[str] = set()
        self.tags = TagRoots(conn)
        self._clock = time.perf_counter()

    def phase(self, name: str) -> None:
        now = time.perf_counter()
        self.report.phases[name] = self.report.phases.get(name, 0.0) + now - self._clock
        self._clock = now

    def mark_databases(self, names: list[str], floors: dict[str, int] | None = None) -> None:
        """Mark what retention keeps of each database (at least from ``floors[name]`` on)."""
        now = datetime.now(UTC)
        for i, name in enumerate(names):
            retention = self.policy.for_db(name)
            floor = None if floors is None else floors.get(name, 0)
            head, kept, first = _kept_entries(self.conn, name, retention, now, floor)
            if head is None:
                continue
            reached = 0
            for entry in kept:
                if entry.root is not None:
                    where = f"database {name!r} version {entry.version}"
                    reached += self.marker.mark([CID.parse(entry.root)], where)
            previous = self.report.databases.get(name)
            oldest = self.conn.refs.oldest_version(name)
            self.report.databases[name] = DatabaseReport(
                head=head.version,
                dropped=head.dropped,
                versions_kept=len(kept),
                versions_trimmed=max(0, (first or 0) - (oldest or 0)),
                oldest_kept=first,
                blocks_reached=reached + (previous.blocks_reached if previous else 0),
            )
            self.heads[name] = head.version
            if first is not None:
                self.trim_before[name] = first
            self.progress("mark", i + 1, len(names))

    def mark_readers(self) -> None:
        for lease in self.conn.leases.live("reader"):
            if lease.id in self.readers or lease.root is None:
                continue
            self.readers.add(lease.id)
            where = f"reader lease {lease.id} on {lease.db!r} version {lease.version}"
            self.marker.mark([CID.parse(lease.root)], where)
        self.report.reader_leases = len(self.readers)

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
        self.mark_readers()
        self.mark_tags()


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
) -> GCReport:
    """Delete every block that no kept version, reader lease or writer lease needs.

    ``keep_versions`` / ``keep_within`` replace the lake's default retention
    for this run (per-database overrides stored with ``set_retention`` still
    apply); with neither, the stored policy decides (by default: keep every
    version). ``grace`` (default one hour) spares unreachable blocks younger
    than it. ``dry_run`` deletes nothing and reports exactly what would go.
    The report is returned and saved under ``gc/reports/`` in the lake.
    """
    policy = load_policy(conn.store)
    if keep_versions is not None or keep_within is not None:
        within = parse_duration(keep_within) if keep_within is not None else None
        policy = policy.with_default(Retention(keep_versions, within))
    if grace is not None:
        policy = Policy(policy.default, policy.databases, parse_duration(grace))
    conn._writer.release_idle()  # this connection's own idle lease is not a running writer
    run = _Run(conn, policy, dry_run, progress)
    report = run.report
    report.retention = policy.default.describe() + (
        f"; overrides for {sorted(policy.databases)}" if policy.databases else ""
    )
    report.grace_seconds = policy.grace.total_seconds()
    leases, timing = conn.leases, conn.leases.timing

    run.mark_databases(journal_names(conn))
    run.mark_readers()
    run.mark_tags()
    run.phase("mark")

    listed = list(conn.blocks.list())
    report.blocks_listed = len(listed)
    report.bytes_listed = sum(info.size for _, info in listed)
    run.phase("list")

    def collect(lock: GCLock | None) -> None:
        cutoff = timing.now() - policy.grace.total_seconds()
        if lock is not None:
            # Writers still live after the wait are spared by the cutoff below.
            with contextlib.suppress(WritersBusyError):
                lock.wait_for_writers(writer_wait)
        writers = leases.live("writer")
        report.writer_leases_waited = len(writers)
        for lease in writers:
            cutoff = min(cutoff, lease.start - timing.margin)
        run.phase("wait")
        if lock is not None and writers:
            # A writer that outlived the wait may still refresh (touch) an old block it
            # reuses; the listing's timestamps cannot show that, so nothing is safe to
            # delete now. Report what would be freed, delete and trim nothing.
            report.sweep_skipped = (
                f"{len(writers)} writer lease(s) still live after {writer_wait:g}s "
                f"(first: {writers[0].id} of {writers[0].holder}); run gc again later"
            )
            lock = None
        if lock is not None:
            # Trim before the last look at reader leases: a reader leases first and
            # then checks its version's entry, so it either is seen below or finds
            # its version trimmed and backs off.
            lock.ensure_held()
            run.tags.refresh()  # every tag made before the lock is written by now
            for name, first in run.trim_before.items():
                tagged = run.tags.keep(name)
                if tagged:
                    conn.refs.trim(name, first, keep=tagged)
                else:
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
                candidates.append(cid)
                report.blocks_freed += 1
                report.bytes_freed += info.size
        report.freed = [str(cid) for cid in candidates]
        report.nodes_read = run.marker.nodes_read
        if report.sweep_skipped:
            report.sweep_skipped += (
                f"; it would free {report.blocks_freed:,} blocks ({report.bytes_freed:,} bytes)"
            )
            report.blocks_freed = report.bytes_freed = 0
            report.freed = []
        if lock is None:
            return
        for i in range(0, len(candidates), _DELETE_BATCH):
            lock.ensure_held()
            conn.blocks.delete_many(candidates[i : i + _DELETE_BATCH])
            run.progress("sweep", min(i + _DELETE_BATCH, len(candidates)), len(candidates))
        run.phase("sweep")
        leases.reap_expired()

    if dry_run:
        collect(None)
    else:
        with _held(leases.acquire_gc_lock(lock_ttl, wait_timeout=writer_wait), lock_ttl) as lock:
            run.phase("lock")
            collect(lock)
    report.finished_at = datetime.now(UTC)
    report.save(conn.store)
    return report
