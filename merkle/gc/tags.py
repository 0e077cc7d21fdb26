"""Tags in garbage collection: every tag is a root, and its version is never trimmed.

The hook the collector calls (``merkle.gc.collect``): read every tag of the
lake, mark each tag's root like a kept version's, and tell the trim which
versions of each journal to keep below its retention point. Tags are read
again after the collector has waited for writers, just before trimming: a
tag is created under a writer lease, so every tag made before the GC lock
is seen then, and later ones wait for the collection to end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from merkle.blocks.cid import CID
from merkle.gc.mark import Marker
from merkle.refs import Tag

if TYPE_CHECKING:
    from merkle.db.connection import Connection

__all__ = ["TagRoots"]


class TagRoots:
    """The lake's tags as garbage-collection roots (read with :meth:`refresh`)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.tags: list[Tag] = []

    def refresh(self) -> None:
        self.tags = self.conn.tag_refs.all()

    def keep(self, db: str) -> set[int]:
        """The versions of ``db`` that tags keep in the journal."""
        return {tag.version for tag in self.tags if tag.db == db}

    def mark(self, marker: Marker) -> int:
        """Mark every tag's root; how many blocks were newly marked."""
        reached = 0
        for tag in self.tags:
            where = f"tag {tag.name!r} of database {tag.db!r} (version {tag.version})"
            reached += marker.mark([CID.parse(tag.root)], where)
        return reached

    def listing(self) -> list[dict[str, object]]:
        """What tags keep, for the report."""
        return [
            {"db": t.db, "tag": t.name, "version": t.version, "root": t.root}
            for t in sorted(self.tags, key=lambda t: (t.db, t.name))
        ]
