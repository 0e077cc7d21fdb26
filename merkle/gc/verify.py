"""Verify: re-read and re-hash everything that kept versions reach.

Unlike marking, verification fetches raw blocks too: every byte reachable
from a journal entry is read and hashed against its CID. Missing and corrupt
blocks are reported with the version that reaches them; with no database
named, blocks no version reaches are counted (GC frees them). Every journal
is audited first (``merkle.refs.audit``): a gap, a retention marker above
the head or entries mixed from different copies are damage, reported with
the blocks; harmless oddities (a HEAD hint ahead of the journal) are notes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from merkle.errors import IntegrityError, MerkleError, NotFoundError

if TYPE_CHECKING:
    from merkle.blocks.cid import CID
    from merkle.db.connection import Connection
    from merkle.gc.collect import Progress
    from merkle.gc.report import VerifyReport

__all__ = ["verify"]

_BATCH = 64


def verify(
    conn: Connection, db: str | None = None, *, progress: Progress | None = None
) -> VerifyReport:
    """Check every block reachable from every kept version (of ``db``, or of all databases)."""
    # Imported here: ``import merkle`` imports this module (see merkle.gc's doc).
    from merkle.blocks.cid import CID, DAG_CBOR
    from merkle.blocks.codec import decode_node, iter_links
    from merkle.gc.collect import journal_names
    from merkle.gc.report import VerifyReport
    from merkle.refs import audit_journal
    from merkle.refs.entry import CONFIG_KEY
    from merkle.refs.reader import lake_gone_error

    # UsageError on a closed connection (or another process's) before anything is read:
    # an empty lake, which has no journal to read through it, is no exception.
    refs = conn.refs
    report = VerifyReport()
    names = [db] if db is not None else journal_names(conn)
    if db is not None and refs.head(db) is None:
        raise NotFoundError(f"there is no database {db!r} in {conn.uri} to verify")
    seen: set[bytes] = set()
    frontier: list[tuple[CID, _Origin]] = []
    entries = 0
    for name in names:
        audit = audit_journal(refs, name)
        entries += len(audit.entries) + len(audit.problems)
        report.journals_damaged.extend((name, problem) for problem in audit.problems)
        report.notes.extend(f"{name!r}: {note}" for note in audit.notes)
        for entry in reversed(audit.entries):
            report.versions_checked += 1
            if entry.root is not None:
                cid = CID.parse(entry.root)
                if cid.bytes not in seen:
                    seen.add(cid.bytes)
                    frontier.append((cid, _Origin(name, entry.version, entry.root)))
    if not entries and not conn.store.exists(CONFIG_KEY):
        # Every lake has its settings from its first connection on: with them and every
        # journal entry missing, it was deleted in use (a file lake's directory, when
        # gone, says so as it is listed), not an empty, healthy lake.
        raise lake_gone_error(conn.store)
    # Tagged versions are kept whatever the retention (merkle.gc.tags): check them too.
    tags, damaged = conn.tag_refs.audit(db)
    report.journals_damaged.extend(damaged)  # a tag is a ref, as journal entries are
    for tag in tags:
        cid = CID.parse(tag.root)
        if cid.bytes not in seen:
            seen.add(cid.bytes)
            frontier.append((cid, _Origin(tag.db, tag.version, tag.root, tag.name)))
    while frontier:
        batch, frontier = frontier[:_BATCH], frontier[_BATCH:]
        fetched = conn.store.map_bulk(_fetch(conn), batch)
        for (cid, origin), data in zip(batch, fetched, strict=True):
            where = origin.where
            if isinstance(data, NotFoundError):
                if origin.kept(conn):
                    report.missing.append((str(cid), where))
                else:  # trimmed (and swept) while this walk went on: not damage
                    report.trimmed_meanwhile += 1
                continue
            if isinstance(data, IntegrityError):
                report.corrupt.append((str(cid), where))
                continue
            report.blocks_checked += 1
            report.bytes_checked += len(data)
            if cid.codec == DAG_CBOR:
                try:
                    links = list(iter_links(decode_node(data)))
                except IntegrityError:
                    report.corrupt.append((str(cid), where))
                    continue
                for link in links:
                    if link.bytes not in seen:
                        seen.add(link.bytes)
                        frontier.append((link, origin))
        if progress is not None:
            progress("verify", report.blocks_checked, None)
    if db is None:
        unreachable = [info for cid, info in conn.blocks.list() if cid.bytes not in seen]
        report.unreachable_blocks = len(unreachable)
        report.unreachable_bytes = sum(info.size for info in unreachable)
    return report


@dataclass(frozen=True)
class _Origin:
    """The kept version (of a journal, or a tag's) a block was first reached from."""

    db: str
    version: int
    root: str
    tag: str | None = None

    @property
    def where(self) -> str:
        if self.tag is not None:
            return f"tag {self.tag!r} of database {self.db!r}"
        return f"database {self.db!r} version {self.version}"

    def kept(self, conn: Connection) -> bool:
        """Whether the version is still kept: a collection running beside the walk may
        have trimmed it and freed its blocks since it was listed (a tag, deleted). A
        block another kept version shares is then not reported missing by this walk
        (it was reached from this origin only); the next verify or collection sees it."""
        if self.tag is None:
            return conn._still_kept(self.db, self.version, self.root)
        return any(t.name == self.tag and t.root == self.root for t in conn.tag_refs.list(self.db))


def _fetch(conn: Connection) -> Callable[[tuple[CID, _Origin]], bytes | MerkleError]:
    """Read and hash one block, returning the error instead of raising it."""

    def fetch(item: tuple[CID, _Origin]) -> bytes | MerkleError:
        cid = item[0]
        try:
            return conn.blocks.get(cid)
        except (NotFoundError, IntegrityError) as exc:
            return exc

    return fetch
