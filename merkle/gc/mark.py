"""Mark: everything reachable from a set of roots, by following tag-42 links.

The walk is generic (any DAG-CBOR node, whatever its type) and breadth-first
so each level's nodes are fetched concurrently. Raw blocks are leaves: they
are marked by their CID and never fetched, so marking costs the number of
nodes, not the bytes of data. A subtree already marked is skipped, so
marking many versions that share most of their blocks costs the nodes that
differ between them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from merkle.blocks.cid import CID, DAG_CBOR
from merkle.blocks.store import BlockStore
from merkle.blocks.walk import walk_levels
from merkle.errors import IntegrityError, NotFoundError

__all__ = ["Marker", "ReachabilityError"]


class ReachabilityError(IntegrityError):
    """A block that a kept version reaches is missing or corrupt: GC must not sweep."""


@dataclass
class Marker:
    """A growing set of marked blocks and the walks that grow it."""

    blocks: BlockStore
    marked: set[bytes] = field(default_factory=set)
    nodes_read: int = 0

    def __contains__(self, cid: CID) -> bool:
        return cid.bytes in self.marked

    def mark(self, roots: Iterable[CID], where: str) -> int:
        """Mark ``roots`` and all they reach; how many blocks were newly marked.

        ``where`` names what the roots are (e.g. ``database 'shop' version
        3``) for the error raised when a reachable block is missing.
        """
        before = len(self.marked)
        try:
            for level in walk_levels(self.blocks, roots, self.marked):
                self.nodes_read += sum(1 for cid in level if cid.codec == DAG_CBOR)
        except (NotFoundError, IntegrityError) as exc:
            raise ReachabilityError(
                f"{exc} (reachable from {where}); garbage collection stopped before "
                "deleting anything: run `merkle verify` and restore the block"
            ) from exc
        return len(self.marked) - before
