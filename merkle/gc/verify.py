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

    report = VerifyReport()
    names = [db] if db is not None else journal_names(conn)
    if db is not None and conn.refs.head(db) is None:
        raise NotFoundError(f"there is no database {db!r} in {conn.uri} to verify")
    seen: set[bytes] = set()
    frontier: list[tuple[CID, str]] = []
    for name in names:
        audit = audit_journal(conn.refs, name)
        report.journals_damaged.extend((name, problem) for problem in audit.problems)
        report.notes.extend(f"{name!r}: {note}" for note in audit.notes)
        for entry in reversed(audit.entries):
            report.versions_checked += 1
            if entry.root is not None:
                cid = CID.parse(entry.root)
                if cid.bytes not in seen:
                    seen.add(cid.bytes)
                    frontier.append((cid, f"database {name!r} version {entry.version}"))
    # Tagged versions are kept whatever the retention (merkle.gc.tags): check them too.
    tags, damaged = conn.tag_refs.audit(db)
    report.journals_damaged.extend(damaged)  # a tag is a ref, as journal entries are
    for tag in tags:
        cid = CID.parse(tag.root)
        if cid.bytes not in seen:
            seen.add(cid.bytes)
            frontier.append((cid, f"tag {tag.name!r} of database {tag.db!r}"))
    while frontier:
        batch, frontier = frontier[:_BATCH], frontier[_BATCH:]
        for (cid, where), data in zip(batch, conn.store.map_bulk(_fetch(conn), batch), strict=True):
            if isinstance(data, NotFoundError):
                report.missing.append((str(cid), where))
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
                        frontier.append((link, where))
        if progress is not None:
            progress("verify", report.blocks_checked, None)
    if db is None:
        unreachable = [info for cid, info in conn.blocks.list() if cid.bytes not in seen]
        report.unreachable_blocks = len(unreachable)
        report.unreachable_bytes = sum(info.size for info in unreachable)
    return report


def _fetch(conn: Connection) -> Callable[[tuple[CID, str]], bytes | MerkleError]:
    """Read and hash one block, returning the error instead of raising it."""

    def fetch(item: tuple[CID, str]) -> bytes | MerkleError:
        cid = item[0]
        try:
            return conn.blocks.get(cid)
        except (NotFoundError, IntegrityError) as exc:
            return exc

    return fetch
