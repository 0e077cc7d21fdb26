"""``merkle.sync``: push or pull a database between two lakes.

For each source version to send, oldest first:

1. a reader lease on the source version (a collection there keeps its
   blocks), taken before its entry is checked and any block is read;
2. under the connection's writer lease on the destination (a collection
   there neither deletes what the copy relies on nor sweeps under it), the
   blocks the destination lacks are copied, children before parents
   (:func:`merkle.transfer.blockcopy.copy_dag`);
3. the destination journal advances with compare-and-set, the entry
   keeping the source's author and message and recording where it came
   from in ``meta["synced_from"]`` (``{lake, db, version, root}``).

The destination must be absent, dropped, or at a version the source's
journal holds (the same root at or before the version sent, or in the
history a merge at or before it brought in: pull, merge, push), or at one a
sync from this source wrote that retention has since trimmed at the source
(its entry, past any collection fences, records ``synced_from`` this lake,
database and root, in the current life of the database there): anything
else diverged and is refused with :class:`SyncDivergedError`. The plan is made
again (a bounded number of times) when the destination moves, and when a
collection at the source trims a planned version before its lease is taken:
the result is what a sync started after that collection sends. A sync killed at
any point leaves at most unreferenced blocks and a destination head at a
complete version; running it again sends only what is still missing, and
looks up (never copies again) what arrived.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from merkle.blocks.cid import CID
from merkle.db.ancestry import Lineage, held_before, kept_entry, still_kept
from merkle.db.inputs import check_flag
from merkle.db.landing import land
from merkle.errors import ConflictError, NotFoundError, UsageError
from merkle.refs import JournalConflictError, JournalEntry, WriterTicket, check_db_name
from merkle.refs.reader import check_version
from merkle.transfer.blockcopy import CopyStats, copy_dag

if TYPE_CHECKING:
    from merkle.db.connection import Connection
    from merkle.db.database import Database

__all__ = ["SyncDivergedError", "SyncReport", "sync"]

_ATTEMPTS = 8
#: GC fence entries looked through above the entry a sync wrote at the destination.
_FENCES = 16


class SyncDivergedError(ConflictError):
    """The destination database holds a version the source never had."""


@dataclass
class SyncReport:
    """What a sync did: versions committed at the destination, and the copy's counts."""

    db: str
    target: str
    versions: list[int] = field(default_factory=list)  # destination versions committed
    source_versions: list[int] = field(default_factory=list)
    copy: CopyStats = field(default_factory=CopyStats)

    @property
    def up_to_date(self) -> bool:
        return not self.versions

    def summary(self) -> str:
        if self.up_to_date:
            return f"{self.target!r} is up to date; nothing copied"
        c = self.copy
        return (
            f"sent {len(self.versions)} version(s) of {self.db!r} as {self.target!r} "
            f"(now at version {self.versions[-1]}): {c.blocks_copied:,} blocks "
            f"({c.bytes_copied:,} bytes) copied, {c.blocks_present:,} already there, "
            f"{c.blocks_skipped:,} skipped as shared"
        )


def _lineage(src: Connection, db: str, version: int | None) -> list[JournalEntry]:
    """The source entries of the current life of ``db`` up to ``version``, oldest first."""
    entries = src.refs.history(db)
    if not entries:
        raise NotFoundError(f"there is no database {db!r} in {src.uri}")
    if version is not None:
        entries = [e for e in entries if e.version <= version]
        if not entries or entries[0].version != version:
            # Trimmed by retention: a tag may keep it (then it is sent alone: its reader
            # lease in _send checks, before any block is read, that it is still kept).
            return [kept_entry(src, db, version)]  # else the journal's precise error
    line: list[JournalEntry] = []
    for entry in entries:  # newest first; stop at the drop that ended an earlier life
        if entry.dropped:
            if not line:
                raise _dropped(src, entry, version)
            break
        line.append(entry)
    line.reverse()
    return line


def _dropped(src: Connection, drop: JournalEntry, version: int | None) -> NotFoundError:
    """The error for a sync whose version to send is the drop entry ``drop``: the head
    (``version=None``) or the version named. It names the version before the drop
    when retention still keeps it."""
    before = held_before(src, drop)
    hint = f", e.g. version {before} (the last before the drop)" if before is not None else ""
    if version is None:
        return NotFoundError(
            f"database {drop.db!r} is dropped at version {drop.version} in {src.uri}: "
            f"pass the version to send (version=, --version){hint}"
        )
    return NotFoundError(
        f"version {version} of database {drop.db!r} in {src.uri} is a drop: it holds no "
        f"data to send. Pass a version that holds data{hint}"
    )


def _to_send(
    src: Connection,
    dst: Connection,
    db: str,
    line: list[JournalEntry],
    head: JournalEntry | None,
    history: bool,
    target: str,
) -> list[JournalEntry]:
    """The source entries to commit at the destination, oldest first."""
    last = line[-1]
    if head is None or head.dropped:
        return line if history else [last]
    if head.root == last.root:
        return []
    shared = [i for i, e in enumerate(line) if e.root == head.root]
    if shared:
        rest = line[shared[-1] + 1 :]
        return rest if history else [last]
    if _pushed_before_retained(src, dst, db, line, head, target):
        return line if history else [last]
    merged = _merged_head(src, line, head)  # walks merged histories: the last resort
    if merged is not None:
        return line[merged:] if history else [last]
    raise _diverged(src, db, line, head, target, _synced_from(dst, target, head))


def _merged_head(src: Connection, line: list[JournalEntry], head: JournalEntry) -> int | None:
    """Where in ``line`` the destination's head state was merged in: the index of the
    oldest entry whose merge parents (``merged_from``, followed back through every
    parent) reach a version at the head's root, or None.

    That is the "pull, merge, push" recovery: the other lake's head pulled under
    another name and merged into the database is in the history of every version
    from the merge on, so sending those is a fast-forward (the versions before the
    merge are not sent: the destination never had them, and went on without them).
    """
    lineage = Lineage(src)
    searched: set[Hashable] = set()
    for i, entry in enumerate(line):
        if entry.merged_from is None:
            continue
        parent = lineage.entry(entry.merged_from["db"], entry.merged_from["version"])
        if parent is not None and lineage.holding_root(parent, str(head.root), searched):
            return i
    return None


def _synced_from(dst: Connection, target: str, head: JournalEntry) -> dict[str, Any] | None:
    """The ``synced_from`` record of the destination's head state, or None if it has none.

    A collection at the destination may have appended fence entries (same
    root, no ``synced_from``) above the entry a sync wrote; they are looked
    through. Any other entry without the record was committed at the
    destination itself.
    """
    entry = head
    for _ in range(_FENCES):
        record = entry.meta.get("synced_from")
        if isinstance(record, dict):
            return record
        if not entry.fence or entry.parent is None:
            return None
        try:
            below = dst.refs.get(target, entry.parent)
        except NotFoundError:
            return None  # trimmed: the evidence is gone
        if below.root != entry.root:
            return None
        entry = below
    return None


def _pushed_before_retained(
    src: Connection,
    dst: Connection,
    db: str,
    line: list[JournalEntry],
    head: JournalEntry,
    target: str,
) -> bool:
    """Whether the destination is at a source version older than the source still keeps.

    Retention at the source may have trimmed the version the destination
    is at, so its root is no longer in the source's journal. The
    destination's own entry proves it did not diverge: a sync from this
    source wrote it (``synced_from`` names this lake and database and the
    head's root) and nothing but collection fences was committed on it
    since. The source's journal is one line per life of a database, so a
    version older than what it keeps, in the same life (at or after the
    ``created`` entry), is an ancestor of every version kept.
    """
    record = _synced_from(dst, target, head)
    if record is None or src.uri.endswith("://"):  # an in-memory lake has no identity
        return False
    version = record.get("version")
    if (
        record.get("lake") != src.uri
        or record.get("db") != db
        or record.get("root") != head.root
        or not isinstance(version, int)
        or isinstance(version, bool)
    ):
        return False
    created = line[-1].created
    return version < line[0].version and created is not None and version >= created


def _diverged(
    src: Connection,
    db: str,
    line: list[JournalEntry],
    head: JournalEntry,
    target: str,
    record: dict[str, Any] | None,
) -> SyncDivergedError:
    """The error for a destination head the source's retained journal does not show.

    ``record`` is the head state's ``synced_from`` (None if it has none).
    """
    last = line[-1]
    where = f"destination database {target!r} is at version {head.version} (root {head.root})"
    advice = (
        f"Pull it under another name (e.g. {target + '-origin'!r}), merge that into "
        f"{db!r} and push again (a merge of the destination's head is a fast-forward), "
        "or send under another name (as_name=, --as)"
    )
    if (
        record is not None
        and record.get("lake") == src.uri
        and record.get("db") == db
        and isinstance(record.get("version"), int)
        and record["version"] > last.version
    ):
        return SyncDivergedError(
            f"{where}, which came from version {record['version']} of {db!r} in {src.uri}, "
            f"newer than version {last.version} sent: sending it would go back. Send it "
            "under another name (as_name=, --as)"
        )
    oldest = src.refs.oldest_version(db)
    trimmed = line[0].parent is not None and oldest is not None and oldest >= line[0].version
    if trimmed:
        return SyncDivergedError(
            f"{where}, which is not among the versions of {db!r} that {src.uri} still keeps "
            f"(retention trimmed those before version {line[0].version}), and its entry does "
            "not record that a push from there wrote it: it may be an older version of the "
            f"source or it diverged, and the evidence was trimmed. {advice}; or, if nobody "
            "committed on it, drop it at the destination and push again"
        )
    return SyncDivergedError(
        f"{where}, which {src.uri} never had before version {last.version}: it diverged. {advice}"
    )


def sync(
    src: Connection,
    dst: Connection,
    db: str,
    version: int | None = None,
    as_name: str | None = None,
    *,
    history: bool | None = None,
    progress: Callable[[int], None] | None = None,
) -> SyncReport:
    """Copy database ``db`` from ``src`` to ``dst`` (named ``as_name`` there).

    ``version=None`` sends the whole retained history of the database's
    current life (each version not yet at the destination becomes a version
    there); ``version=n`` sends just that version. ``history`` overrides
    that choice. Blocks the destination holds are not sent again. Raises
    SyncDivergedError if the destination has versions the source lacks.
    """
    _check_connection(src, "src")
    _check_connection(dst, "dst")
    check_db_name(db)
    target = check_db_name(as_name if as_name is not None else db)
    if version is not None:  # True is no version 1, nor "1" a version
        version = check_version(version, "sync(version=)")
    if history is not None:
        history = check_flag(history, "sync(history=)")
    if src.same_lake(dst) and target == db:
        raise UsageError(f"source and destination are the same database {db!r} of {src.uri}")
    send_history = version is None if history is None else history
    report = SyncReport(db, target)
    for _ in range(_ATTEMPTS):
        line = _lineage(src, db, version)
        head = dst.refs.head(target)
        todo = _to_send(src, dst, db, line, head, send_history, target)
        if not todo:
            return report
        try:
            for entry in todo:
                head = _send(src, dst, entry, target, head, report, progress)
                report.versions.append(head.version)
                report.source_versions.append(entry.version)
            return report
        except JournalConflictError:
            continue  # the destination moved meanwhile: plan again from its new head
        except _SourceTrimmedError:
            # Retention at the source trimmed a version planned (a collection there ran
            # meanwhile): plan again from what it keeps now, as a sync started after the
            # collection would. A version the caller named and lost fails in _lineage.
            continue
    raise ConflictError(
        f"gave up sending {db!r}: {target!r} at {dst.uri} or the versions {src.uri} keeps "
        "kept changing; run the sync again"
    )


def _check_connection(conn: object, what: str) -> None:
    """UsageError unless ``conn`` is a Connection: a lake URI string (the natural slip)
    is told to be opened first, with :func:`merkle.connect`."""
    from merkle.db.connection import Connection  # not at import: connection imports much

    if isinstance(conn, Connection):
        return
    shown = f"{type(conn).__name__} {conn!r}"
    advice = (
        f"open the lake first: merkle.connect({conn!r})"
        if isinstance(conn, str)
        else "open the lake with merkle.connect(uri)"
    )
    raise UsageError(f"sync({what}=) takes a Connection, got {shown}: {advice}")


def _send(
    src: Connection,
    dst: Connection,
    entry: JournalEntry,
    target: str,
    planned: JournalEntry | None,
    report: SyncReport,
    progress: Callable[[int], None] | None,
) -> JournalEntry:
    """Copy one source version and commit it on ``planned`` at the destination (CAS)."""
    assert entry.root is not None
    root = CID.parse(entry.root)
    meta: dict[str, Any] = dict(entry.meta)
    record: dict[str, Any] = {
        "lake": src.uri,
        "db": entry.db,
        "version": entry.version,
        "root": entry.root,
    }
    # Where a version synced more than once was committed (``synced_origin``, kept along
    # the chain): pushed and pulled back, it is the local version it came from (see
    # merkle.db.ancestry, Lineage.identity). A first sync's synced_from says it already.
    before = entry.meta.get("synced_origin", entry.meta.get("synced_from"))
    if isinstance(before, dict):
        meta["synced_origin"] = before
    meta["synced_from"] = record
    live = planned is not None and not planned.dropped
    with _source_version(src, entry):

        def write(ticket: WriterTicket, first: bool) -> None:
            trusted: list[CID] = []
            if first:
                # Under the lease, the head is what was planned or the plan is void; being
                # the head, it is kept by any collection, so its blocks can be trusted.
                head = dst.refs.head(target)
                if _key(head) != _key(planned):
                    raise JournalConflictError(
                        target,
                        planned.version if planned else None,
                        head.version if head else None,
                    )
                if live and planned is not None and planned.root is not None:
                    trusted = [CID.parse(planned.root)]
            report.copy += copy_dag(
                src.blocks,
                dst.blocks,
                [root],
                trusted,
                refresh_before=ticket.lease.start,
                on_write=progress,
            )

        def put() -> JournalEntry:
            return dst.refs.commit(
                target,
                planned.version if live and planned is not None else None,
                entry.root,
                author=entry.author,
                message=entry.message,
                meta=meta,
            )

        return land(dst, target, write, put)


def _source_version(src: Connection, entry: JournalEntry) -> Database:
    """Source version ``entry`` under a reader lease; :class:`_SourceTrimmedError` when
    retention no longer keeps it (trimmed since the plan: the plan is void)."""
    assert entry.root is not None
    try:
        return src.open_db(entry.db, version=entry.version, lease=True)
    except NotFoundError:
        if still_kept(src.refs, src.tag_refs, entry.db, entry.version, entry.root):
            raise  # kept, yet not found: not a trim; the error says what
        raise _SourceTrimmedError(entry.db, entry.version) from None


class _SourceTrimmedError(Exception):
    """A version a sync planned to send was trimmed at the source before it was leased."""


def _key(entry: JournalEntry | None) -> tuple[int, str | None] | None:
    return None if entry is None else (entry.version, entry.root)
