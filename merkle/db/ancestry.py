"""Lineage of database versions, read from the journals: parents and merge bases.

A version's parents are the previous entry of its journal (unless that is a
drop: a database created again starts a new line), the source version of a
clone (``forked_from``) and the second parent of a merge (``merged_from``).
The merge base of two versions is found as git finds it: walk both
ancestries newest first (entry times never decrease along a journal, and a
clone is younger than its source), paint each version with the side that
reaches it, and stop once every version still queued lies below a version
both sides reach. Entries are read in runs of a journal, concurrently.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import TYPE_CHECKING

from merkle.errors import NotFoundError
from merkle.refs import JournalEntry

if TYPE_CHECKING:
    from merkle.db.connection import Connection

__all__ = ["Lineage", "VersionId"]

VersionId = tuple[str, int]

_RUN = 32  # entries of one journal read at once when walking back along it
_OURS, _THEIRS, _STALE = 1, 2, 4


class Lineage:
    """Reads journal entries (cached) and answers parent and merge-base questions."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._entries: dict[VersionId, JournalEntry | None] = {}

    def entry(self, db: str, version: int) -> JournalEntry | None:
        """Entry ``version`` of ``db``; None when it was trimmed or never existed."""
        key = (db, version)
        if key not in self._entries:
            low = max(0, version - _RUN + 1)
            wanted = [v for v in range(low, version + 1) if (db, v) not in self._entries]
            found = self.conn.store.map_bulk(lambda v: self._read(db, v), wanted)
            for v, entry in zip(wanted, found, strict=True):
                self._entries[(db, v)] = entry
        return self._entries[key]

    def _read(self, db: str, version: int) -> JournalEntry | None:
        try:
            return self.conn.refs.get(db, version)
        except NotFoundError:
            return None

    def parents(self, entry: JournalEntry) -> Iterator[JournalEntry]:
        """The entries ``entry`` was made from (trimmed ones are left out)."""
        links: list[VersionId] = []
        if entry.forked_from is not None:
            links.append((entry.forked_from["db"], entry.forked_from["version"]))
        elif entry.parent is not None:
            links.append((entry.db, entry.parent))
        if entry.merged_from is not None:
            links.append((entry.merged_from["db"], entry.merged_from["version"]))
        for db, version in links:
            parent = self.entry(db, version)
            if parent is not None and not parent.dropped:
                yield parent

    def merge_base(self, ours: JournalEntry, theirs: JournalEntry) -> JournalEntry | None:
        """The newest version both descend from (None when the journals show none)."""
        flags: dict[VersionId, int] = {}
        queue: list[tuple[float, int, VersionId, JournalEntry]] = []
        counter = 0

        def push(entry: JournalEntry, flag: int) -> None:
            nonlocal counter
            key = (entry.db, entry.version)
            old = flags.get(key, 0)
            if old | flag == old:
                return
            flags[key] = old | flag
            counter += 1
            heapq.heappush(queue, (-entry.time.timestamp(), counter, key, entry))

        push(ours, _OURS)
        push(theirs, _THEIRS)
        found: list[JournalEntry] = []
        while queue and any(not flags[key] & _STALE for _, _, key, _ in queue):
            _, _, key, entry = heapq.heappop(queue)
            flag = flags[key]
            if flag & (_OURS | _THEIRS) == _OURS | _THEIRS and not flag & _STALE:
                found.append(entry)
                flag |= _STALE
                flags[key] = flag
            for parent in self.parents(entry):
                push(parent, flag)
        # Of several candidates (criss-cross merges), the first found is the newest.
        return found[0] if found else None
