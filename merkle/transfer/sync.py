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
journal holds (the same root at or before the version sent): anything else
diverged and is refused with :class:`SyncDivergedError`. A sync killed at
any point leaves at most unreferenced blocks and a destination head at a
complete version; running it again sends only what is still missing, and
looks up (never copies again) what arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from merkle.blocks.cid import CID
from merkle.db.landing import land
from merkle.errors import ConflictError, NotFoundError, UsageError
from merkle.refs import JournalConflictError, JournalEntry, WriterTicket, check_db_name
from merkle.transfer.blockcopy import CopyStats, copy_dag

if TYPE_CHECKING:
    from merkle.db.connection import Connection

__all__ = ["SyncDivergedError", "SyncReport", "sync"]

_ATTEMPTS = 8


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
            src.refs.get(db, version)  # raises the precise error (trimmed, never existed)
    line: list[JournalEntry] = []
    for entry in entries:  # newest first; stop at the drop that ended an earlier life
        if entry.dropped:
            if not line:
                raise NotFoundError(
                    f"database {db!r} is dropped at version {entry.version} in {src.uri}; "
                    "pass the version to send"
                )
            break
        line.append(entry)
    line.reverse()
    return line


def _to_send(
    line: list[JournalEntry], head: JournalEntry | None, history: bool, target: str, src_uri: str
) -> list[JournalEntry]:
    """The source entries to commit at the destination, oldest first."""
    last = line[-1]
    if head is None or head.dropped:
        return line if history else [last]
    if head.root == last.root:
        return []
    shared = [i for i, e in enumerate(line) if e.root == head.root]
    if not shared:
        raise SyncDivergedError(
            f"destination database {target!r} is at version {head.version} (root "
            f"{head.root}), which {src_uri} never had before version {last.version}: it "
            "diverged. Pull it and merge, or send under another name (as_name=, --as)"
        )
    rest = line[shared[-1] + 1 :]
    return rest if history else [last]


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
    check_db_name(db)
    target = check_db_name(as_name if as_name is not None else db)
    same_lake = src.store is dst.store or (src.uri == dst.uri and not src.uri.endswith("://"))
    if same_lake and target == db:
        raise UsageError(f"source and destination are the same database {db!r} of {src.uri}")
    send_history = version is None if history is None else history
    report = SyncReport(db, target)
    for _ in range(_ATTEMPTS):
        line = _lineage(src, db, version)
        head = dst.refs.head(target)
        todo = _to_send(line, head, send_history, target, src.uri)
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
    raise ConflictError(f"gave up sending {db!r}: {target!r} kept changing at {dst.uri}")


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
    meta["synced_from"] = {
        "lake": src.uri,
        "db": entry.db,
        "version": entry.version,
        "root": entry.root,
    }
    live = planned is not None and not planned.dropped
    with src.open_db(entry.db, version=entry.version, lease=True):

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


def _key(entry: JournalEntry | None) -> tuple[int, str | None] | None:
    return None if entry is None else (entry.version, entry.root)
