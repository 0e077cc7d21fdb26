"""Lineage of database versions, read from the journals: parents and merge bases.

A version's parents are the previous entry of its journal (unless that is a
drop: a database created again starts a new line), the source version of a
clone (``forked_from``) and the second parent of a merge (``merged_from``).
A version retention trimmed from its journal still counts when a tag keeps
it (the tag holds a copy of its entry).

Two entries that a sync copied from one version (their
``meta["synced_from"]`` names the same lake, database, version and root,
or the same ``synced_origin``: the lake that committed it, kept along a
chain of syncs) are the same version: a database pulled again under another name
shares its history with the copy pulled before, and with the local versions
it was pushed from, so the two merge without ``base=``.

The merge bases of two versions are found as git finds them: walk both
ancestries newest first (entry times never decrease along a journal, and a
clone is younger than its source), paint each version with the side that
reaches it, and stop once every version still queued lies below a version
both sides reach; of the versions both reach, those that are ancestors of
another one are dropped. Several bases remain after a criss-cross merge
(each side merged the other): :mod:`merkle.db.merge` then merges them into
a virtual base. Entries are read in runs of a journal, concurrently.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterator, Sequence
from typing import TYPE_CHECKING

from merkle.errors import IntegrityError, NotFoundError, UsageError
from merkle.refs import JournalEntry

if TYPE_CHECKING:
    from datetime import datetime

    from merkle.db.connection import Connection
    from merkle.refs import RefManager, TagManager

__all__ = [
    "Lineage",
    "VersionId",
    "drop_below",
    "held_before",
    "kept_entry",
    "last_change",
    "still_kept",
    "tagged_entry",
]

VersionId = tuple[str, int]

_RUN = 32  # entries of one journal read at once when walking back along it
_OURS, _THEIRS, _STALE = 1, 2, 4


def kept_entry(conn: Connection, db: str, version: int) -> JournalEntry:
    """The entry of ``db`` at ``version`` from its journal, or from the tag that keeps
    it once retention trimmed the journal's slot; NotFoundError (the journal's, which
    says why) when neither holds it."""
    try:
        return conn.refs.get(db, version)
    except NotFoundError:
        tag = conn.tag_refs.keeping(db, version)
        if tag is None or tag.entry is None:
            raise
        return tag.entry


def tagged_entry(
    conn: Connection, name: str, tag: str, version: int | None = None, at: datetime | None = None
) -> JournalEntry:
    """The entry ``open_db(name, tag=tag)`` opens: the journal's, or the tag's copy once
    retention trimmed the journal's slot. IntegrityError when the two disagree."""
    if version is not None or at is not None:
        raise UsageError("open_db takes one of version=, at= and tag=")
    found = conn.tag_refs.get(name, tag)
    try:
        entry = conn.refs.get(name, found.version)
    except NotFoundError:
        assert found.entry is not None
        return found.entry  # trimmed from the journal: the tag keeps it
    if entry.root != found.root:
        raise IntegrityError(
            f"tag {tag!r} of database {name!r} names version {found.version} with root "
            f"{found.root}, but the journal holds {entry.root}: the tag or the journal "
            "was altered from outside"
        )
    return entry


def still_kept(
    refs: RefManager,
    tags: TagManager,
    db: str,
    version: int,
    root: str,
    *,
    besides: str | None = None,
) -> bool:
    """Whether the journal (or a tag other than ``besides``) still holds ``db`` at
    ``version`` with ``root``.

    ``besides``: a tag being made, which cannot vouch for itself: a collection
    that trimmed the version before the tag was written may have freed its
    blocks already.
    """
    try:
        return refs.get(db, version).root == root
    except NotFoundError:
        return any(
            tag.version == version and tag.root == root and tag.name != besides
            for tag in tags.list(db)
        )


def last_change(conn: Connection, entry: JournalEntry) -> JournalEntry:
    """The newest entry at or below ``entry`` that is not a GC fence.

    A collection that went on without a stalled writer appends a fence entry
    (``gc fence``, ``entry.fence``) repeating the head's root; what the head
    changed is then what this entry changed, against its parent (``merkle diff
    DB`` compares ``entry.parent`` of this with the head). ``entry`` itself when it
    is no fence, or when the entry below a fence is gone (trimmed, no tag).
    """
    while entry.fence and entry.parent is not None:
        try:
            entry = kept_entry(conn, entry.db, entry.parent)
        except NotFoundError:
            break
    return entry


def drop_below(conn: Connection, entry: JournalEntry) -> JournalEntry | None:
    """The drop entry just below ``entry`` when ``entry`` created the database again
    after it (a create or a clone onto the dropped name), else None.

    Such an entry starts a new line: its journal ``parent`` is the drop, which
    holds no data, so it has no parent to diff against (``merkle diff DB``, a
    ``db.diff(db.version - 1)``) as version 0 has none.
    """
    if entry.dropped or entry.parent is None:
        return None
    if entry.created is not None and entry.created != entry.version:
        return None  # the same life as its parent: no drop between them
    try:
        parent = kept_entry(conn, entry.db, entry.parent)
    except NotFoundError:
        return None  # trimmed: whatever it was, nothing to name
    return parent if parent.dropped else None


def held_before(conn: Connection, drop: JournalEntry) -> int | None:
    """The version just below the drop ``drop``, the last of the life it ended, when it
    is still kept (by the journal or a tag) and holds data; None otherwise. Errors
    about a drop name it as the version to use instead."""
    if drop.parent is None:
        return None
    try:
        below = kept_entry(conn, drop.db, drop.parent)
    except NotFoundError:
        return None
    return None if below.dropped else below.version


class Lineage:
    """Reads journal entries (cached) and answers parent and merge-base questions."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._entries: dict[VersionId, JournalEntry | None] = {}
        self._tagged: dict[str, dict[int, JournalEntry]] = {}

    def entry(self, db: str, version: int) -> JournalEntry | None:
        """Entry ``version`` of ``db``; None when it was trimmed (and no tag keeps it) or
        never existed."""
        key = (db, version)
        if key not in self._entries:
            low = max(0, version - _RUN + 1)
            wanted = [v for v in range(low, version + 1) if (db, v) not in self._entries]
            found = self.conn.store.map_bulk(lambda v: self._read(db, v), wanted)
            for v, entry in zip(wanted, found, strict=True):
                self._entries[(db, v)] = entry if entry is not None else self._tags(db).get(v)
        return self._entries[key]

    def _read(self, db: str, version: int) -> JournalEntry | None:
        try:
            return self.conn.refs.get(db, version)
        except NotFoundError:
            return None

    def _tags(self, db: str) -> dict[int, JournalEntry]:
        """The entries tags of ``db`` keep, by version (read once; a damaged tag, which
        ``merkle verify`` reports, keeps nothing here)."""
        if db not in self._tagged:
            tags, _damaged = self.conn.tag_refs.audit(db)
            self._tagged[db] = {t.version: t.entry for t in tags if t.entry is not None}
        return self._tagged[db]

    def identity(self, entry: JournalEntry) -> Hashable:
        """What makes two entries one version: the lake, database, number and root of the
        version it is. For an entry a sync wrote, that is the version of the lake it was
        committed in (``synced_origin`` after more than one sync, else ``synced_from``),
        so a version pushed and pulled back is the local version it came from; an
        in-memory lake has no identity to name, and is not followed."""
        meta = entry.meta if isinstance(entry.meta, dict) else {}
        origin = meta.get("synced_origin", meta.get("synced_from"))
        if isinstance(origin, dict):
            lake, db, version = (origin.get(k) for k in ("lake", "db", "version"))
            if (
                isinstance(lake, str)
                and not lake.endswith("://")
                and isinstance(db, str)
                and isinstance(version, int)
                and origin.get("root") == entry.root
            ):
                return (lake, db, version, entry.root)
        return (self.conn.uri, entry.db, entry.version, entry.root)

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
        """The newest best merge base (None when the journals show none); see
        :meth:`merge_bases` for all of them."""
        found = self.merge_bases([ours], [theirs])
        return found[0] if found else None

    def merge_bases(
        self, ours: Sequence[JournalEntry], theirs: Sequence[JournalEntry]
    ) -> list[JournalEntry]:
        """The best common ancestors of the versions ``ours`` and ``theirs`` (each a set
        of versions, e.g. the parents of a virtual merge), newest first: versions both
        sides descend from that are no ancestor of another such version. Empty when the
        journals show none; several after a criss-cross merge."""
        flags: dict[Hashable, int] = {}
        queue: list[tuple[float, int, Hashable, JournalEntry]] = []
        counter = 0

        def push(entry: JournalEntry, flag: int) -> None:
            nonlocal counter
            key = self.identity(entry)
            old = flags.get(key, 0)
            if old | flag == old:
                return
            flags[key] = old | flag
            counter += 1
            heapq.heappush(queue, (-entry.time.timestamp(), counter, key, entry))

        for entry in ours:
            push(entry, _OURS)
        for entry in theirs:
            push(entry, _THEIRS)
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
        # A candidate reached before a newer candidate marked it stale may be an
        # ancestor of another: only the best ones are bases (git's remove_redundant).
        return [
            c
            for c in found
            if not any(other is not c and self._reaches(other, c) for other in found)
        ]

    def _reaches(self, start: JournalEntry, target: JournalEntry) -> bool:
        """Whether ``target`` is an ancestor of ``start``; versions older than ``target``
        are not walked past (entry times never decrease from parent to child)."""
        want, floor = self.identity(target), target.time
        seen: set[Hashable] = {self.identity(start)}
        stack = list(self.parents(start))
        while stack:
            entry = stack.pop()
            key = self.identity(entry)
            if key == want:
                return True
            if key in seen or entry.time < floor:
                continue
            seen.add(key)
            stack.extend(self.parents(entry))
        return False

    def holding_root(self, start: JournalEntry, root: str, searched: set[Hashable]) -> bool:
        """Whether ``start`` or one of its ancestors is at ``root``. ``searched``: versions
        already walked without finding it (shared between calls, and grown)."""
        stack = [start]
        while stack:
            entry = stack.pop()
            key = self.identity(entry)
            if key in searched:
                continue
            if entry.root == root:
                return True
            searched.add(key)
            stack.extend(self.parents(entry))
        return False
